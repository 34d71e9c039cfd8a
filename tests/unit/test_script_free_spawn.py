"""A Manager spawned inside entry_script_not_rerun() (the checkpoint writer's helper) serves without running the
parent's script again, and still ends when its parent is killed (core/process/script_free_spawn), with real
processes."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
PARENT = """
import multiprocessing, os, sys, time
sys.path.insert(0, {repo!r})
# Run again by every child spawned the usual way: the marker names each process that ran this script.
open(os.path.join(sys.argv[1], "ran-%d" % os.getpid()), "w").close()
from mindio_adaptor.core.process.script_free_spawn import entry_script_not_rerun

if __name__ == "__main__":
    with entry_script_not_rerun():
        manager = multiprocessing.get_context("spawn").Manager()
    queue = manager.Queue()
    queue.put(("a write result", 7))
    assert queue.get() == ("a write result", 7)
    helper = multiprocessing.active_children()[0]
    print(helper.pid, flush=True)
    time.sleep(60)
"""


def test_the_helper_serves_without_the_script_and_ends_with_its_parent(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT.format(repo=str(REPO)))
    parent = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        line = parent.stdout.readline()
        assert line, f"the parent ended before its manager served (exit {parent.wait(timeout=60)})"
        helper = psutil.Process(int(line))
        assert sorted(p.name for p in tmp_path.glob("ran-*")) == [f"ran-{parent.pid}"]
        assert helper.is_running() and helper.status() != psutil.STATUS_ZOMBIE
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=5)
        helper.wait(timeout=10)  # raises TimeoutExpired if the helper outlived its parent
    finally:
        if parent.poll() is None:
            parent.kill()


def test_spawning_after_the_context_runs_the_script_again(tmp_path):
    from multiprocessing import spawn

    from mindio_adaptor.core.process.script_free_spawn import entry_script_not_rerun

    original = spawn.get_preparation_data
    with entry_script_not_rerun():
        assert spawn.get_preparation_data("x")["init_main_from_name"] == "mindio_adaptor.core.process.script_free_spawn"
        assert "init_main_from_path" not in spawn.get_preparation_data("x")
    assert spawn.get_preparation_data is original
