"""core/process/process_ending: a process whose work is done ends promptly, whatever threads it left, after its exit
handlers in a normal exit's order; a signal during the ending ends it; an exit that is held is named and ended."""
import os
import signal
import subprocess
import sys
import textwrap
import time

SCRIPT = textwrap.dedent("""
    import atexit, concurrent.futures, sys, threading, time
    from mindio_adaptor.core.process.process_ending import end_process

    stop = threading.Event()
    threading.Thread(target=stop.wait, name="users-idle-thread").start()  # non-daemon, never set
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="unshut-pool")
    pool.submit(lambda: None).result()  # its worker now idles, the pool never shut down
    finished = []
    threading.Thread(target=lambda: (time.sleep(0.5), finished.append(1)), name="short-worker").start()
    atexit.register(lambda: print("exit handler 1, the short worker finished:", bool(finished), flush=True))
    atexit.register(lambda: print("exit handler 2", flush=True))
    {extra}
    print("done", flush=True)
    end_process({code}, who="test process", threads_limit_s={threads_limit_s}, hard_limit_s={hard_limit_s})
""")


def start(extra: str = "", code: int = 0, threads_limit_s: float = 2.0, hard_limit_s: float = 30.0):
    source = SCRIPT.format(extra=extra, code=code, threads_limit_s=threads_limit_s, hard_limit_s=hard_limit_s)
    return subprocess.Popen([sys.executable, "-c", source], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def ended(proc, timeout: float = 30.0):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def test_threads_left_behind_do_not_hold_the_end_and_the_exit_handlers_run_in_order():
    began = time.monotonic()
    code, out, err = ended(start())
    took = time.monotonic() - began
    assert code == 0, err
    # the threads that end are waited for before the exit handlers, which run last-registered first, as in a
    # normal exit
    assert out.splitlines() == ["done", "exit handler 2", "exit handler 1, the short worker finished: True"]
    assert "ends without waiting longer for threads (its limit passed); still running:" in err
    assert "thread 'users-idle-thread' (non-daemon)" in err and "in wait" in err
    assert "unshut-pool" not in err  # threading's exit hook told the pool's idle worker to stop
    assert took < 10, took


def test_nothing_left_ends_at_once_and_keeps_the_code():
    code, out, err = ended(start(extra="stop.set()", code=3, threads_limit_s=20.0))
    assert code == 3 and out.splitlines()[-1] == "exit handler 1, the short worker finished: True"
    assert "ends without waiting" not in err


def test_a_sigterm_while_threads_are_waited_for_ends_the_process():
    proc = start(threads_limit_s=300.0)
    assert proc.stdout.readline() == "done\n"
    time.sleep(0.5)
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code, out, err = ended(proc)
    assert time.monotonic() - signalled < 5
    assert code == 0 and "exit handler 2" in out, err
    assert "SIGTERM while ending" in err and "(a signal came)" in err


def test_an_exit_handler_that_never_returns_is_named_and_the_process_ends_with_1():
    hung = "atexit.register(lambda: threading.Event().wait())  # runs first: registered last"
    began = time.monotonic()
    code, out, err = ended(start(extra=hung, threads_limit_s=1.0, hard_limit_s=4.0))
    assert code == 1, (out, err)
    assert 4 <= time.monotonic() - began < 15
    assert "still alive past its ending's limit; what held it:" in err
    assert "thread 'MainThread' (non-daemon)" in err and "_run_exitfuncs" in err
    assert "exit handler 2" not in out


def test_a_sigint_while_an_exit_handler_hangs_ends_it_within_the_hurry():
    hung = "atexit.register(lambda: threading.Event().wait())"
    proc = start(extra=hung + "; stop.set()", threads_limit_s=1.0, hard_limit_s=300.0)
    assert proc.stdout.readline() == "done\n"
    time.sleep(2.0)
    signalled = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    code, _, err = ended(proc)
    assert code == 1 and "SIGINT while ending" in err
    assert time.monotonic() - signalled < 15


NORMAL_EXIT = textwrap.dedent("""
    import threading
    from mindio_adaptor.core.process.process_ending import bound_the_exit

    bound_the_exit("test launcher", limit_s=2.0)
    if {leave_a_thread}:
        threading.Thread(target=threading.Event().wait, name="never-ending").start()
    print("returning", flush=True)
""")


def test_a_normal_exit_held_by_a_thread_is_named_and_ended_at_the_bound():
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", NORMAL_EXIT.format(leave_a_thread=True)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and 2 <= time.monotonic() - began < 15
    assert "[mindio" in done.stderr and "test launcher] still alive past its ending's limit" in done.stderr
    assert "thread 'never-ending' (non-daemon)" in done.stderr


def test_a_bounded_normal_exit_with_nothing_left_is_unchanged():
    done = subprocess.run([sys.executable, "-c", NORMAL_EXIT.format(leave_a_thread=False)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "returning\n" and done.stderr == ""


def test_a_child_forked_after_the_watchdog_started_has_its_own():
    script = textwrap.dedent("""
        import os, threading
        from mindio_adaptor.core.process.process_ending import bound_the_exit, end_process

        bound_the_exit("parent")
        pid = os.fork()
        if pid == 0:
            atexit_hung = threading.Event()
            import atexit
            atexit.register(atexit_hung.wait)
            end_process(0, who="forked child", threads_limit_s=1.0, hard_limit_s=2.0)
        _, status = os.waitpid(pid, 0)
        print("child exit", os.waitstatus_to_exitcode(status), flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout == "child exit 1\n", done.stderr
    assert "forked child] still alive past its ending's limit" in done.stderr
