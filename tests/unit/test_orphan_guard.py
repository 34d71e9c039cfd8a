"""A process spawned by a rank ends when the rank is gone (core/process/orphan_guard), with real processes."""
import time

import psutil

from killed_parents import kill_and_expect_ended, parent_running

PARENT = """
import multiprocessing, sys, time
sys.path.insert(0, {repo!r})
from mindio_adaptor.core.process import orphan_guard
armed = orphan_guard.arm(0.1)


def helper(ready):
    assert armed, "the spawned helper did not arm the guard"
    open(ready, "w").close()
    time.sleep(60)


if __name__ == "__main__":
    child = multiprocessing.get_context("spawn").Process(target=helper, args=(sys.argv[1],))
    child.start()
    print(child.pid, flush=True)
    time.sleep(60)
"""


def test_a_spawned_helper_ends_when_its_parent_is_killed(tmp_path):
    ready = tmp_path / "armed"
    with parent_running(PARENT, tmp_path, str(ready)) as parent:
        child = psutil.Process(int(parent.stdout.readline()))
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:  # armed: a loaded host may take seconds
            time.sleep(0.05)
        assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE
        kill_and_expect_ended(parent, [child])


def test_a_process_that_was_not_spawned_is_not_guarded():
    from mindio_adaptor.core.process import orphan_guard

    assert not orphan_guard.is_spawned_child()
    assert not orphan_guard.arm()


FORKING_PARENT = """
import multiprocessing, sys, time
sys.path.insert(0, {repo!r})
from mindio_adaptor.core.process import orphan_guard
orphan_guard.install_for_children()


def helper():
    time.sleep(60)


if __name__ == "__main__":
    forked = multiprocessing.get_context("fork").Process(target=helper)
    served = multiprocessing.get_context("forkserver").Process(target=helper)
    forked.start()
    served.start()
    print(forked.pid, served.pid, flush=True)
    time.sleep(60)
"""


def test_forked_and_forkserver_helpers_end_when_their_parent_is_killed(tmp_path):
    with parent_running(FORKING_PARENT, tmp_path) as parent:
        helpers = [psutil.Process(int(pid)) for pid in parent.stdout.readline().split()]
        forkserver = helpers[1].parent()
        assert "multiprocessing.forkserver" in " ".join(forkserver.cmdline())
        time.sleep(1.0)
        kill_and_expect_ended(parent, [*helpers, forkserver])
