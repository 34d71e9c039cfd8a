"""Time from a fault to the controller's decision, with default settings, and the false alarms of a
stalled rank; next to what stock Megatron does with the same hang.

Times are arrival times of output lines in this process (one clock), from the line that says the
fault fired to the controller's decision line:
  kill   rank 2 SIGKILLed in step F's forward (goal <= 3 s)
  raise  RuntimeError on rank 1 in step F (goal <= 1 s)
  hang   rank 3's training thread sleeps forever in step F, no timeout variable set (goal <= 15 s)
  stock  the same hang in a plain job (no high availability): Megatron waits for its collective
         timeout (--distributed-timeout-minutes, 10 min by default); watched for --stock-wait s
Then N runs in which one rank is SIGSTOPped for 2-3 heartbeat periods (4-6 s) during a step: each
run that logs a fault, a hang or a decision counts as a false alarm (goal: 0).

    python bench/detection.py [--fault-step 5] [--stall-runs 3] [--stock-wait 60]
"""
import argparse
import os
import random
import re
import signal
import sys
import tempfile
import threading
import time

from mindio_adaptor.tiny.job import run_training

HA = ["--enable-high-availability"]
DECISION = r"\[controller rank 0\] decision "
_PID = re.compile(r"rank (\d+) pid (\d+) starting")


def first_arrivals(marks):
    seen = {}

    def on_line(line):
        now = time.monotonic()
        for name, pattern in marks.items():
            if name not in seen and re.search(pattern, line):
                seen[name] = now
    return seen, on_line


def fault_to_decision(kind, spec, fired, step, tmp):
    seen, on_line = first_arrivals({"fired": fired, "decision": DECISION})
    env = {"MINDIO_FAULT_INJECT": spec, "MINDIO_FAULT_STATE_DIR": os.path.join(tmp, kind)}
    run = run_training([*HA, "--save", os.path.join(tmp, f"ckpt_{kind}"), "--save-interval", "1000"],
                       env=env, on_line=on_line, timeout=600)
    if "fired" not in seen or "decision" not in seen:
        sys.exit(f"detection: {kind}: fault or decision not seen (exit {run.returncode}):\n{run.output[-3000:]}")
    return seen["decision"] - seen["fired"]


def stock_hang(step, tmp, wait_s):
    """A plain job with the same hang: how long until anything reacts, watched for wait_s."""
    seen, on_line = first_arrivals({"fired": "fault injection: firing hang"})
    env = {"MINDIO_FAULT_INJECT": f"hang:rank=3,step={step}", "MINDIO_FAULT_STATE_DIR": os.path.join(tmp, "stock")}
    started = time.monotonic()
    try:
        run = run_training([], env=env, on_line=on_line, timeout=wait_s + 60)
        return f"ended after {time.monotonic() - seen.get('fired', started):.1f} s (exit {run.returncode})"
    except AssertionError:
        return f"still waiting {wait_s + 60:.0f} s after the start (its collective timeout is 600 s); killed"


def stalled_run(tmp, index):
    """One rank stopped 4-6 s during a step; returns whether anything took it for a fault."""
    pids, stopped = {}, []
    rank, stall_s = random.Random(index).choice([1, 2, 3]), random.Random(index).uniform(4.0, 6.0)

    def on_line(line):
        m = _PID.search(line)
        if m:
            pids[int(m.group(1))] = int(m.group(2))
        if not stopped and re.search(r"iteration\s+3/", line) and rank in pids:
            stopped.append(stall_s)
            os.kill(pids[rank], signal.SIGSTOP)
            threading.Timer(stall_s, os.kill, (pids[rank], signal.SIGCONT)).start()

    run = run_training([*HA], on_line=on_line, timeout=600)
    alarm = run.returncode != 0 or any(s in run.output for s in ("fault on rank", "hang:", "] decision "))
    print(f"  stall run {index}: rank {rank} stopped {stall_s:.1f} s, exit {run.returncode}, "
          f"{'FALSE ALARM' if alarm else 'no alarm'}", flush=True)
    return bool(stopped) and alarm


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fault-step", type=int, default=5)
    parser.add_argument("--stall-runs", type=int, default=3)
    parser.add_argument("--stock-wait", type=float, default=60.0)
    a = parser.parse_args()
    for name in ("MINDIO_STEP_TIMEOUT_S", "MINDIO_HANG_FLOOR_S", "MINDIO_STOP_TIMEOUT_S"):
        if name in os.environ:
            sys.exit(f"detection: unset {name}: this measures the default settings")
    f = a.fault_step
    with tempfile.TemporaryDirectory() as tmp:
        times = {
            "kill": fault_to_decision("kill", f"kill:rank=2,step={f}", "firing kill", f, tmp),
            "raise": fault_to_decision("raise", f"raise:rank=1,step={f}", "firing raise", f, tmp),
            "hang": fault_to_decision("hang", f"hang:rank=3,step={f}", "firing hang", f, tmp),
        }
        goals = {"kill": 3.0, "raise": 1.0, "hang": 15.0}
        for kind, seconds in times.items():
            print(f"{kind:6s} fault -> decision {seconds:6.2f} s (goal <= {goals[kind]:g} s)", flush=True)
        print(f"stock  same hang: {stock_hang(f, tmp, a.stock_wait)}", flush=True)
        alarms = sum(stalled_run(tmp, i) for i in range(a.stall_runs))
        print(f"false alarms: {alarms} of {a.stall_runs} runs with a rank stalled 4-6 s (goal 0)")


if __name__ == "__main__":
    main()
