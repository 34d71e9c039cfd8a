"""A Manager spawned inside entry_script_not_rerun() (the checkpoint writer's helper) serves without running the
parent's script again, and still ends when its parent is killed (core/process/script_free_spawn), with real
processes."""
import psutil

from killed_parents import kill_and_expect_ended, parent_running

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
    with parent_running(PARENT, tmp_path, str(tmp_path)) as parent:
        line = parent.stdout.readline()
        assert line, f"the parent ended before its manager served (exit {parent.wait(timeout=60)})"
        helper = psutil.Process(int(line))
        assert sorted(p.name for p in tmp_path.glob("ran-*")) == [f"ran-{parent.pid}"]
        assert helper.is_running() and helper.status() != psutil.STATUS_ZOMBIE
        kill_and_expect_ended(parent, [helper])


def test_inside_the_context_a_child_takes_this_module_as_main_and_after_it_the_script_again():
    from multiprocessing import spawn

    from mindio_adaptor.core.process.script_free_spawn import entry_script_not_rerun

    original = spawn.get_preparation_data
    with entry_script_not_rerun():
        assert spawn.get_preparation_data("x")["init_main_from_name"] == "mindio_adaptor.core.process.script_free_spawn"
        assert "init_main_from_path" not in spawn.get_preparation_data("x")
    assert spawn.get_preparation_data is original
