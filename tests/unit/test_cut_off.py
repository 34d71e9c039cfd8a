"""A rank cut off from the job leaves it (core/detection/cut_off): one line naming why, exit code 88 (JOB_UNREACHABLE);
the watcher waits in bounded slices and ends with its processor. A fake native processor, no sockets."""
import logging
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from mindio_adaptor.core.detection import cut_off
from mindio_adaptor.core.detection.exit_codes import JOB_UNREACHABLE, describe


class FakeNative:
    """wait_cut_off as the native processor's: the reason, '' when the slice ran out, None once stopped."""

    def __init__(self):
        self.reason, self.stopped = "", False
        self.changed = threading.Condition()
        self.slices = []

    def wait_cut_off(self, timeout_s):
        self.slices.append(timeout_s)
        with self.changed:
            self.changed.wait_for(lambda: self.reason or self.stopped, timeout_s)
            return None if self.stopped and not self.reason else self.reason

    def set(self, **kwargs):
        with self.changed:
            for key, value in kwargs.items():
                setattr(self, key, value)
            self.changed.notify_all()


class FakeLink:
    def __init__(self):
        self.native = FakeNative()


def test_a_cut_off_rank_logs_why_and_exits_88(caplog):
    link, codes = FakeLink(), []
    with caplog.at_level(logging.ERROR):
        watcher = cut_off.leave_when_cut_off(link, "rank 3", end=codes.append, slice_s=0.05)
        link.native.set(reason="lost the controller of term 1 with no proof that its process is gone")
        watcher.join(10)
    assert not watcher.is_alive() and codes == [JOB_UNREACHABLE] == [88]
    assert ("rank 3 is cut off from the job: lost the controller of term 1 with no proof that its process is gone. "
            "It leaves the job without a checkpoint and without another training step; exiting with code 88 "
            "(JOB_UNREACHABLE)") in caplog.text
    assert describe(JOB_UNREACHABLE) == "exit code 88 (JOB_UNREACHABLE)"


def test_the_watcher_waits_in_bounded_slices_and_ends_with_its_processor():
    link, codes = FakeLink(), []
    watcher = cut_off.leave_when_cut_off(link, "rank 0", end=codes.append, slice_s=0.05)
    threading.Event().wait(0.3)
    assert watcher.is_alive() and len(link.native.slices) >= 2 and set(link.native.slices) == {0.05}
    link.native.set(stopped=True)
    watcher.join(10)
    assert not watcher.is_alive() and codes == []



def test_the_process_exit_waits_for_the_watcher_so_no_native_wait_returns_into_a_finalising_interpreter():
    """A daemon thread returning from a native call while the interpreter finalises aborts the process (-6)."""
    script = textwrap.dedent("""
        import atexit, time
        from mindio_adaptor.core.detection import cut_off
        class Native:  # a processor never stopped: the watcher would wait on, slice after slice
            def wait_cut_off(self, timeout_s):
                time.sleep(timeout_s)
                return ""
        class Link:
            native = Native()
        seen = {}
        atexit.register(lambda: print("watcher alive after the exit handlers:", seen["w"].is_alive(), flush=True))
        seen["w"] = cut_off.leave_when_cut_off(Link(), "rank 0", slice_s=0.2)
        time.sleep(0.3)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    assert "watcher alive after the exit handlers: False" in out.stdout
