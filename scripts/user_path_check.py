"""The README's commands run exactly as a new user runs them, each within a bound: CI's first check after the install.

Every test of the suite runs with settings a user never has (docs/testing.md lists them); this runs the main job
(`bash scripts/train_tiny_gpt.sh`) and `mindio-adaptor demo` with none of them: an empty compile cache, no variable
of the tests, workers started by plain torchrun. A command that does not exit 0 within its bound, or ends without
its digest line, fails the check, with the stacks of every process it left (py-spy) and the end of its output.

A third, `interrupt`, presses Ctrl-C in the middle of the main job: SIGINT to its whole process group, as a terminal
sends it. The job must end within 30 s of it, leaving nothing behind.

    python3 scripts/user_path_check.py [train|demo|interrupt ...]
"""
from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import psutil

from mindio_adaptor.tiny.job import stacks_of

ROOT = Path(__file__).resolve().parents[1]
# What the suite sets and a user does not (docs/testing.md): none of it may reach the user's commands.
TEST_ONLY = re.compile(r"^(MINDIO_|TTP_|PET_|TORCHINDUCTOR_|TORCH_COMPILE_DISABLE$|PYTEST_)")
COMMANDS: Dict[str, dict] = {
    "train": {"argv": ["bash", "scripts/train_tiny_gpt.sh"], "limit_s": 240,
              "must_print": [r"^params digest [0-9a-f]{64}$", *(rf"^rank {r} pid \d+ done$" for r in range(4))]},
    "demo": {"argv": ["mindio-adaptor", "demo"], "limit_s": 420,
             "must_print": [r"params digest equal to the uninterrupted run: yes"]},
    # Ctrl-C in the terminal: SIGINT to every process of the job at once, in the middle of training. The job must
    # end (torchrun exits 1 when a signal stopped it), every process with it, within the bound after the signal.
    "interrupt": {"argv": ["bash", "scripts/train_tiny_gpt.sh"], "limit_s": 240, "env": {"TRAIN_ITERS": "200"},
                  "interrupt_at": r"iteration\s+5/", "after_interrupt_s": 30, "exit_codes": (1, 130),
                  "must_print": [r"got signal: 2"]},
}


def user_environment(cache: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not TEST_ONLY.match(k)}
    env["TORCHINDUCTOR_CACHE_DIR"] = cache  # empty: torch compiles as on a fresh machine
    return env


def become_subreaper() -> None:
    """Processes the command leaves behind come to this process when their parents end (prctl
    PR_SET_CHILD_SUBREAPER): its children are then every process of the command still alive."""
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)


def descendants() -> List[psutil.Process]:
    """Every live process below this one (an adopted process that already ended waits to be reaped as a zombie)."""
    alive = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.NoSuchProcess:
            continue
    return alive


def press_ctrl_c(proc: subprocess.Popen, log_path: str, spec: dict, start: float) -> float:
    """SIGINT to the command's process group once its output shows `interrupt_at`; the seconds left to wait
    for its end (`after_interrupt_s`; 0 when the line never came within the bound, so the command is a hang)."""
    deadline = start + spec["limit_s"]
    while time.monotonic() < deadline and proc.poll() is None:
        if re.search(spec["interrupt_at"], Path(log_path).read_text(errors="replace")):
            os.killpg(proc.pid, signal.SIGINT)
            print(f"user path: Ctrl-C (SIGINT to the process group) {time.monotonic() - start:.0f} s in", flush=True)
            return spec["after_interrupt_s"]
        time.sleep(0.2)
    return max(0.0, deadline - time.monotonic())


def run(name: str) -> bool:
    spec = COMMANDS[name]
    with tempfile.TemporaryDirectory(prefix="user-path-") as scratch:
        cache = os.path.join(scratch, "inductor-cache")
        log_path = os.path.join(scratch, "output.txt")
        start = time.monotonic()
        with open(log_path, "w") as log:
            proc = subprocess.Popen(spec["argv"], cwd=scratch if name == "demo" else ROOT, stdout=log,
                                    stderr=subprocess.STDOUT, env={**user_environment(cache), **spec.get("env", {})},
                                    start_new_session=True)
            limit_s = spec["limit_s"]
            if "interrupt_at" in spec:
                limit_s = press_ctrl_c(proc, log_path, spec, start)
            try:
                code = proc.wait(timeout=limit_s)
                hung = ""
            except subprocess.TimeoutExpired:
                code = None
                hung = stacks_of(descendants())
        time.sleep(1.0)  # what the command's own end is still reaping
        left = [p for p in descendants() if p.pid != proc.pid]
        if left and not hung:
            hung = stacks_of(left)
        left = [p.pid for p in left]
        for pid in [*left, proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
        for child in psutil.Process().children():
            try:
                child.wait(10)  # reap what was adopted
            except psutil.Error:
                pass
        wall = time.monotonic() - start
        output = Path(log_path).read_text(errors="replace")
    missing = [p for p in spec["must_print"] if not re.search(p, output, re.M)]
    ok = code in spec.get("exit_codes", (0,)) and not missing and not left
    verdict = "ok" if ok else "FAILED"
    print(f"user path: {name}: {' '.join(spec['argv'])}: {verdict}: exit {code} after {wall:.0f} s "
          f"(bound {spec['limit_s']} s)" + (f"; processes left: {left}" if left else "")
          + (f"; never printed {missing}" if missing else ""), flush=True)
    if not ok:
        print(f"----- the end of its output\n{output[-8000:]}\n----- stacks of what was still running\n{hung}",
              flush=True)
    return ok


def main(names: List[str]) -> int:
    unknown = [n for n in names if n not in COMMANDS]
    if unknown:
        print(f"user_path_check: unknown command {unknown}; known: {list(COMMANDS)}", file=sys.stderr)
        return 2
    become_subreaper()
    results = [run(name) for name in names or list(COMMANDS)]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
