"""core/process/child_reaper: a process's exit does not wait without end for a daemonic child that ignores SIGTERM
(as a DataLoader worker deadlocked inside fork does)."""
import os
import subprocess
import sys
import time

SCRIPT = r"""
import multiprocessing, signal, sys, time
from mindio_adaptor.core.process import child_reaper

def deaf():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(600)

child_reaper.install()
p = multiprocessing.get_context("fork").Process(target=deaf, daemon=True)
p.start()
time.sleep(0.5)
print(p.pid, flush=True)
sys.exit(3)
"""


def test_exit_kills_a_daemonic_child_deaf_to_sigterm_after_the_grace():
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    took = time.monotonic() - started
    assert done.returncode == 3, done.stderr
    child = int(done.stdout.split()[0])
    assert 4.5 < took < 30, took  # the grace (5 s), then SIGKILL: no unbounded join
    assert "did not end within 5 s of SIGTERM; killed them" in done.stderr
    try:
        os.kill(child, 0)
        alive = open(f"/proc/{child}/stat").read().split(") ")[-1][0] != "Z"
    except ProcessLookupError:
        alive = False
    assert not alive


def test_a_child_that_ends_on_sigterm_is_not_killed():
    script = SCRIPT.replace("signal.signal(signal.SIGTERM, signal.SIG_IGN)", "pass")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3 and time.monotonic() - started < 20
    assert "killed them" not in done.stderr
