"""The dying-gasp checkpoint against periodic checkpoints, measured in one run.

One high-availability run (dp4, R=2 by default) saves a periodic checkpoint every K steps and then
meets a fault (`raise` on one rank, or `kill`) during step F. From its log:
  dump time      fault injected -> dump published (the survivors' whole path: detection, decision,
                 stop, communicator rebuild, save, rename)
  periodic save  Megatron's own save_checkpoint of the last periodic step before the fault, in the
                 same run (its "saving" and "successfully saved" lines); the first save of a process
                 pays one-time costs (about 10 s here), so the fault must come after the second
                 periodic save and that one is compared
  lost work      steps recomputed after a resume from the dump (F - dumped step) vs from the last
                 periodic checkpoint (F - K*floor((F-1)/K)), what a job without the dump loses

    python bench/dump_vs_periodic.py [--fault raise|kill] [--fault-step 8] [--save-interval 3]
                                     [--iters 10] [--rounds 2]
"""
import argparse
import re
import statistics
import sys
import tempfile
from datetime import datetime
from pathlib import Path

from mindio_adaptor.tiny.job import run_training

MEGATRON_TIME = r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)\]"
SAVING = re.compile(MEGATRON_TIME + r" saving checkpoint at iteration\s+(\d+) to (\S+)")
SAVED = re.compile(MEGATRON_TIME + r"? ?\s*successfully saved checkpoint from iteration\s+(\d+) to (\S+)")
OUR_TIME = r"\[mindio (\d\d:\d\d:\d\d\.\d{3}) rank \d+\]"
FIRED = re.compile(OUR_TIME + r" WARNING fault injection: firing")
PUBLISHED = re.compile(OUR_TIME + r" INFO dump of step (\d+) published")
SAVER_TIME = re.compile(r"dump of step \d+: saved my part .*? in ([\d.]+) s")


def _clock(text: str) -> datetime:
    return datetime.strptime(text[-12:], "%H:%M:%S.%f")


def periodic_save_s(output: str, step: int) -> float:
    """Seconds Megatron's save_checkpoint of `step` took (first line of each kind, rank 0 prints them)."""
    start = next(m for m in SAVING.finditer(output) if int(m.group(2)) == step and ".mindio_dump" not in m.group(3))
    end_line = next(line for line in output.splitlines()
                    if "successfully saved checkpoint from iteration" in line and f"iteration {step:>7} " in line
                    and ".mindio_dump" not in line)
    end = re.search(MEGATRON_TIME, end_line)
    fmt = "%Y-%m-%d %H:%M:%S.%f"
    return (datetime.strptime(end.group(1), fmt) - datetime.strptime(start.group(1), fmt)).total_seconds()


def dump_s(output: str):
    """(fault -> published, the slowest saver's own part, dumped step)"""
    fired, published = FIRED.search(output), PUBLISHED.search(output)
    if not fired or not published:
        sys.exit("no dump in this run; its output ends:\n" + output[-3000:])
    saving = max(float(m.group(1)) for m in SAVER_TIME.finditer(output))
    return (_clock(published.group(1)) - _clock(fired.group(1))).total_seconds(), saving, int(published.group(2))


def one_round(args, workdir: Path):
    ckpt = workdir / "ckpt"
    env = {"MINDIO_FAULT_INJECT": f"{args.fault}:rank={args.fault_rank},step={args.fault_step}",
           "MINDIO_FAULT_STATE_DIR": str(workdir / "faults")}
    run = run_training(["--enable-high-availability", "--save", str(ckpt), "--save-interval",
                        str(args.save_interval)], train_iters=args.iters, env=env, timeout=900)
    if run.returncode == 0:
        sys.exit("the faulty run exited 0: the fault did not fire?")
    dump, saving, dumped_step = dump_s(run.output)
    periodic_step = args.save_interval * ((args.fault_step - 1) // args.save_interval)
    if periodic_step < 2 * args.save_interval:
        sys.exit("--fault-step must come after the second periodic save")
    return dump, saving, periodic_save_s(run.output, periodic_step), dumped_step, periodic_step


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fault", choices=("raise", "kill"), default="raise")
    parser.add_argument("--fault-rank", type=int, default=1)
    parser.add_argument("--fault-step", type=int, default=8)
    parser.add_argument("--save-interval", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    dumps, savings, saves = [], [], []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="dump_bench_") as tmp:
            dump, saving, save, dumped_step, periodic_step = one_round(args, Path(tmp))
        dumps.append(dump)
        savings.append(saving)
        saves.append(save)
        print(f"round {r + 1}: fault -> dump of step {dumped_step} on disk {dump:.2f} s (savers' own part "
              f"{saving:.2f} s); periodic save of step {periodic_step} {save:.2f} s", flush=True)
    lost_dump, lost_periodic = args.fault_step - dumped_step, args.fault_step - periodic_step
    print(f"\nfault ({args.fault} on rank {args.fault_rank}) during step {args.fault_step}, periodic "
          f"checkpoint every {args.save_interval} steps, {args.rounds} round(s), medians:")
    print(f"  fault -> complete dump on disk  {statistics.median(dumps):.2f} s")
    print(f"    of which the savers' part     {statistics.median(savings):.2f} s (group rebuild, Megatron "
          f"re-initialisation, save_checkpoint)")
    print(f"  periodic save_checkpoint        {statistics.median(saves):.2f} s")
    print(f"  dump time ratio (dump / periodic save)  {statistics.median(dumps) / statistics.median(saves):.2f}")
    print(f"  steps recomputed after resume: from the dump {lost_dump}, from the periodic checkpoint "
          f"{lost_periodic}")
    print(f"  lost work ratio (dump / periodic)  {lost_dump / lost_periodic:.2f}")
    print(f"  (a fault at a uniformly random step recomputes on average 1 step with the dump and "
          f"{(args.save_interval + 1) / 2:.1f} with a checkpoint every {args.save_interval} steps)")


if __name__ == "__main__":
    main()
