"""stages/end_if_hung: at EXIT a parked training thread ends the process itself; a hung one cannot, so
the process is ended shortly after the reply has gone out."""
import subprocess
import sys
import textwrap
import time

from recovery_fakes import FakeMegatron, action, session_at
from mindio_adaptor.recovery.stages.end_if_hung import END_IF_HUNG, HUNG_EXIT_GRACE_S, end_even_if_hung


def test_a_parked_training_thread_is_left_to_exit_by_itself():
    session = session_at(2)
    session.thread.parked.set()
    assert end_even_if_hung(session, FakeMegatron(), action("exit", strategy="exit")) == 0
    assert not END_IF_HUNG.on_training_thread


def test_a_hung_training_thread_has_its_process_ended_after_the_grace():
    program = textwrap.dedent("""
        import time
        from mindio_adaptor.recovery.session import RecoverySession
        from mindio_adaptor.recovery.stages.end_if_hung import end_even_if_hung
        print("returned", end_even_if_hung(RecoverySession(), None, None), flush=True)
        time.sleep(60)  # the hung training thread: never parks
    """)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    took = time.monotonic() - started
    assert done.stdout.strip() == "returned 0"
    assert done.returncode == 1
    assert "the training thread is hung: ending the process" in done.stderr
    assert HUNG_EXIT_GRACE_S <= took < 30
