"""Pause and continue at a step boundary (docs/controller.md, "Pause and continue") on the real Megatron, against
the same job not paused (the baseline), in one invocation on the same machine.

Both runs: dp4 R=2, 4 gloo processes, the in-job controller with its status server. The paused run asks, once
every rank registered, for a pause after step --after-step held for --hold seconds (mindio-adaptor pause's
request, sent from here). Printed, from the controller's and Megatron's own log lines:
  in force    from the request to every rank holding (the ranks train up to the step meanwhile)
  to resume   from the end of the hold to the next step completed
  lost        the paused run's wall time less the hold, over the baseline's (1.00: the pause cost only its hold)
  steps       whether every loss is equal to the baseline's (0 steps lost or recomputed)
and the paused run's goodput ledger.

    python bench/pause.py [--iters 20] [--after-step 10] [--hold 2] [--hidden-size 64] [--num-layers 2]
"""
import argparse
import re
import sys
import threading
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # run as a script, the checkout's build is the one measured

from mindio_adaptor.cli.status_client import request_json  # noqa: E402
from mindio_adaptor.tiny.job import STATUS_PAGE, controller_said_at, run_training  # noqa: E402

TOKEN = "bench-pause-token-0123456789abcdef"
ITERATION = re.compile(r"^ \[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)\] iteration\s+(\d+)/", re.M)


def stamp(text: str) -> float:
    return datetime.strptime(text[:26], "%Y-%m-%d %H:%M:%S.%f").timestamp()


def controller_time(output: str, says: str) -> float:
    said = controller_said_at(output, says)
    if said is None:
        sys.exit(f"pause: the controller never said {says!r}")
    return said


class Pauser:
    def __init__(self, after_step: int, hold_s: float):
        self.after_step, self.hold_s, self.port, self.sent, self.answer = after_step, hold_s, None, False, None

    def __call__(self, line: str):
        m = STATUS_PAGE.search(line)
        if m:
            self.port = int(m.group(1))
        if not self.sent and self.port and "state INIT -> NORMAL" in line:
            self.sent = True
            threading.Thread(target=self._ask, daemon=True).start()

    def _ask(self):
        self.answer = request_json(f"127.0.0.1:{self.port}", TOKEN, "/pause",
                                   {"after_step": self.after_step, "hold_s": self.hold_s})


def run(args, pauser=None):
    flags = ["--enable-high-availability", "--hidden-size", str(args.hidden_size), "--num-layers",
             str(args.num_layers)]
    env = {"MINDIO_STATUS_PORT": "0", "MINDIO_TOKEN": TOKEN, "PYTHONPATH": str(REPO)}  # the workers import it too
    result = run_training(flags, train_iters=args.iters, env=env, on_line=pauser, timeout=1200).require_success()
    steps = [(stamp(t), int(i)) for t, i in ITERATION.findall(result.output)]
    return result, steps[-1][0] - controller_time(result.output, "listening on"), steps


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--after-step", type=int, default=10)
    parser.add_argument("--hold", type=float, default=2.0)
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=2)
    args = parser.parse_args()

    baseline, baseline_wall, _ = run(args)
    pauser = Pauser(args.after_step, args.hold)
    paused, paused_wall, steps = run(args, pauser)
    asked = controller_time(paused.output, "pause asked for")
    in_force = controller_time(paused.output, r"state NORMAL -> PAUSE: training paused")
    resumed = controller_time(paused.output, r"state PAUSE -> NORMAL: training continues")
    next_step = min(t for t, i in steps if i == args.after_step + 1)
    ledger = re.search(r"controller at exit: (goodput .*)$", paused.output, re.M)
    print(f"pause after step {args.after_step} held {args.hold:g} s, {args.iters} steps, hidden {args.hidden_size}, "
          f"{args.num_layers} layers")
    print(f"  in force   {in_force - asked:.2f} s after the request")
    print(f"  to resume  {next_step - resumed:.2f} s from the end of the hold to step {args.after_step + 1}")
    print(f"  lost       {(paused_wall - args.hold) / baseline_wall:.2f} (paused run's wall less the hold, "
          f"{paused_wall - args.hold:.2f} s, over the baseline's {baseline_wall:.2f} s)")
    print(f"  steps      {'every loss equal to the baseline' if paused.losses == baseline.losses else 'LOSSES DIFFER'}, "
          f"digest {'equal' if paused.digest == baseline.digest else 'DIFFERENT'}")
    print(f"  ledger     {ledger.group(1) if ledger else 'not printed'}")
    return 0 if paused.losses == baseline.losses and paused.digest == baseline.digest else 1


if __name__ == "__main__":
    sys.exit(main())
