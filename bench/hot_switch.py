"""Hot switch (docs/controller.md, "Hot switch") on the real Megatron under `mindio-adaptor launch` with a warm spare,
against the same job not switched (the baseline), in one invocation on the same machine.

Both runs: dp4 R=2, 4 gloo processes, one launcher with --spare-workers 1 and the controller it hosts, with its
status server. The switched run asks, once step 1 completed, for rank --rank to move to a new process after step
--after-step (mindio-adaptor drain's request, sent from here). Printed, from the controller's, the launcher's and
Megatron's own log lines:
  in force    from the request to every rank holding after the step (the ranks train up to it meanwhile)
  paused      from every rank holding to training going on (the hand-over, the new process's join, the repair)
  first step  from the request to the first step completed with the new process
  lost        the switched run's wall time over the baseline's
  steps       whether every loss and the digest equal the baseline's, each step's line once (0 steps lost or
              recomputed)
The SDC check's cost per step is bench/sdc_check.py's (docs/detection.md).

    python bench/hot_switch.py [--iters 20] [--after-step 10] [--rank 1] [--hidden-size 64] [--num-layers 2]
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
from mindio_adaptor.tiny.job import run_training  # noqa: E402

TOKEN = "bench-hot-switch-token-0123456789abcdef"
LAUNCH = ("mindio_adaptor.launch", "--max-restarts", "1", "--spare-workers", "1")
STATUS_PAGE = re.compile(r"status page on http://127\.0\.0\.1:(\d+)/")
ITERATION = re.compile(r"^ \[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)\] iteration\s+(\d+)/", re.M)
CONTROLLER = r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)\] \[mindio \w+\] \[controller rank -?\d+\] "


def stamp(text: str) -> float:
    return datetime.strptime(text[:26], "%Y-%m-%d %H:%M:%S.%f").timestamp()


def said_at(output: str, says: str) -> float:
    m = re.search(CONTROLLER + says, output, re.M)
    if m is None:
        sys.exit(f"hot switch: the controller never said {says!r}")
    return stamp(m.group(1))


class Drainer:
    def __init__(self, rank: int, after_step: int):
        self.rank, self.after_step, self.port, self.sent, self.answer = rank, after_step, None, False, None

    def __call__(self, line: str):
        m = STATUS_PAGE.search(line)
        if m:
            self.port = int(m.group(1))
        if not self.sent and self.port and re.search(r"\] iteration\s+1/", line):
            self.sent = True
            threading.Thread(target=self._ask, daemon=True).start()

    def _ask(self):
        self.answer = request_json(f"127.0.0.1:{self.port}", TOKEN, "/hot_switch",
                                   {"ranks": [self.rank], "after_step": self.after_step})


def run(args, drainer=None):
    flags = ["--enable-high-availability", "--enable-worker-reboot", "--hidden-size", str(args.hidden_size),
             "--num-layers", str(args.num_layers)]
    env = {"MINDIO_STATUS_PORT": "0", "MINDIO_TOKEN": TOKEN, "PYTHONPATH": str(REPO)}  # the workers import it too
    result = run_training(flags, train_iters=args.iters, env=env, on_line=drainer, launcher=LAUNCH,
                          timeout=1200).require_success()
    steps = [(stamp(t), int(i)) for t, i in ITERATION.findall(result.output)]
    return result, steps[-1][0] - said_at(result.output, "listening on"), steps


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--after-step", type=int, default=10)
    parser.add_argument("--rank", type=int, default=1)
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=2)
    args = parser.parse_args()

    baseline, baseline_wall, _ = run(args)
    drainer = Drainer(args.rank, args.after_step)
    switched, switched_wall, steps = run(args, drainer)
    asked = said_at(switched.output, "hot switch asked for")
    held = said_at(switched.output, r"state NORMAL -> PAUSE: training paused after step \d+ for the hot switch")
    resumed = said_at(switched.output, r"state REPAIR -> NORMAL: ranks \[\d+\] switched")
    first = min(t for t, i in steps if i == args.after_step + 1)
    once = sorted(switched.loss_line_steps) == list(range(1, args.iters + 1))
    exact = switched.losses == baseline.losses and switched.digest == baseline.digest
    print(f"hot switch of rank {args.rank} after step {args.after_step}, {args.iters} steps, hidden "
          f"{args.hidden_size}, {args.num_layers} layers, a warm spare")
    print(f"  in force    {held - asked:.2f} s after the request")
    print(f"  paused      {resumed - held:.2f} s (every rank holding -> training goes on)")
    print(f"  first step  {first - asked:.2f} s from the request to step {args.after_step + 1} completed")
    print(f"  lost        {switched_wall / baseline_wall:.2f} (switched run's wall {switched_wall:.2f} s over the "
          f"baseline's {baseline_wall:.2f} s)")
    print(f"  steps       {'every loss and the digest equal to the baseline' if exact else 'DIFFERENT'}; "
          f"{'each step logged once (0 recomputed)' if once else 'STEPS LOGGED TWICE OR MISSING'}")
    return 0 if exact and once else 1


if __name__ == "__main__":
    sys.exit(main())
