"""The end of a process whose work is done: prompt, whatever threads are left, after the exit handlers a normal
exit runs, in the same order.

A normal exit runs threading's exit hooks (where an unshut ThreadPoolExecutor's idle workers are told to stop),
then joins every non-daemon thread without a limit, then the atexit handlers, then the interpreter's teardown.
Each of those held a finished rank here: a non-daemon thread that never ends (torch's compile workers, a user's
thread) holds it forever, and the teardown's last garbage collection over the model and gloo's device threads,
joined one by one, take 1.5-3 s per tiny rank and can abort it (SIGABRT after a successful run). So
`end_process` calls the interpreter's own first two steps, `threading._shutdown` and `atexit._run_exitfuncs`,
bounds the first, and skips the teardown with `os._exit`: what must outlive the process (the last checkpoint,
the digest line, the processor's goodbye) was written before it or by an exit handler. Runs on the main thread.

Bounds: threads get THREADS_LIMIT_S, after which the ones still alive are named with their stacks and left behind;
a SIGTERM or SIGINT during the ending stops that wait at once and leaves the exit handlers HURRY_S; a process
still alive HARD_LIMIT_S after its ending began prints every thread's name and stack and ends with code 1 (a
C-level backstop, faulthandler, ends it too where no Python thread can run any more).

`bound_the_exit` gives a process that ends the normal way (a launcher, a controller, the rank of a user's own
script) the last of those bounds: from the moment its exit begins, HARD_LIMIT_S, then its threads are named and
it ends with code 1.
"""
from __future__ import annotations

import atexit
import faulthandler
import os
import signal
import sys
import textwrap
import threading
import time
import traceback
from typing import Callable, NoReturn, Sequence, Union

THREADS_LIMIT_S = 5.0
HURRY_S = 5.0
HARD_LIMIT_S = 30.0
BACKSTOP_S = 5.0  # the C watchdog's margin beyond the Python one
HELD_EXIT_CODE = 1
_POLL_S = 0.05
_watchdog = None


def end_process(code: int = 0, who: str = "", before: Sequence[Callable[[], object]] = (),
                threads_limit_s: float = THREADS_LIMIT_S, hard_limit_s: float = HARD_LIMIT_S) -> NoReturn:
    """Run `before` (e.g. destroying the process groups), wait for the other threads within threads_limit_s, run
    the exit handlers, and end the process with `code`; see the module's docstring for every bound."""
    ending = _Ending(_watchdog_of(who), hard_limit_s)
    for step in before:
        if not ending.hurried:
            step()
    ending.wait_for_threads(threads_limit_s)
    atexit._run_exitfuncs()
    _flush()
    os._exit(code)


def bound_the_exit(who: Union[str, Callable[[], str]] = "", limit_s: float = HARD_LIMIT_S) -> None:
    """From the start of this process's normal exit (threading's exit hooks run first), limit_s before its threads
    are named and it ends with code 1. Idempotent."""
    watchdog = _watchdog_of(who)
    if not watchdog.exit_bound:
        watchdog.exit_bound = True
        threading._register_atexit(lambda: watchdog.arm(limit_s))


def _forget_the_watchdog() -> None:
    global _watchdog
    _watchdog = None  # its thread stayed in the parent: a forked child that ends this way starts its own


os.register_at_fork(after_in_child=_forget_the_watchdog)


def _watchdog_of(who: Union[str, Callable[[], str]]) -> "_Watchdog":
    global _watchdog
    if _watchdog is None:
        _watchdog = _Watchdog(who or f"pid {os.getpid()}")
    elif who:
        _watchdog.who = who
    return _watchdog


class _Watchdog:
    """A daemon thread that ends the process once a deadline passes; started idle, so that arming it never needs a
    new thread (none may start once the interpreter's exit began), and costing nothing until it is armed."""

    def __init__(self, who: Union[str, Callable[[], str]]):
        self.who = who
        self.deadline = None
        self.exit_bound = False
        self._armed = threading.Event()
        threading.Thread(target=self._watch, name="mindio-exit-watchdog", daemon=True).start()

    def arm(self, limit_s: float) -> None:
        """Ends the process limit_s from now, or sooner if it was armed sooner. Not from a signal handler (the
        event's lock); there, tighten an armed watchdog."""
        self.tighten(limit_s)
        self._armed.set()

    def tighten(self, limit_s: float) -> None:
        deadline = time.monotonic() + limit_s
        if self.deadline is None or deadline < self.deadline:
            self.deadline = deadline
            faulthandler.dump_traceback_later(limit_s + BACKSTOP_S, exit=True)

    def _watch(self) -> None:
        self._armed.wait()
        while time.monotonic() < self.deadline:
            time.sleep(_POLL_S)
        say(self.who, f"still alive past its ending's limit; what held it:\n{thread_stacks()}")
        _flush()
        os._exit(HELD_EXIT_CODE)


class _StopWaiting(Exception):
    """Raised by the ending's signal handlers in the main thread to end its wait for the other threads."""


class _Ending:
    def __init__(self, watchdog: _Watchdog, hard_limit_s: float):
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("end_process must run on the main thread (it takes the process's signals)")
        self.watchdog = watchdog
        self.hurried = False
        self.waiting_for_threads = False
        watchdog.arm(hard_limit_s)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, _frame) -> None:
        # No lock here: the main thread may hold the very lock a threading primitive would take.
        if signum != signal.SIGALRM:
            self.hurried = True
            self.watchdog.tighten(HURRY_S)
            say(self.watchdog.who, f"{signal.Signals(signum).name} while ending: the exit handlers get {HURRY_S:.0f} s")
        if self.waiting_for_threads:
            raise _StopWaiting("a signal came" if self.hurried else "its limit passed")

    def wait_for_threads(self, limit_s: float) -> None:
        """The interpreter's own wait (threading._shutdown: its exit hooks, then a join of every non-daemon thread),
        which a signal ends: SIGALRM at the limit, or the job's SIGTERM or SIGINT. The threads still alive then are
        named with their stacks and left behind."""
        if self.hurried:
            return
        signal.setitimer(signal.ITIMER_REAL, limit_s)
        try:
            try:
                self.waiting_for_threads = True
                threading._shutdown()
            finally:
                self.waiting_for_threads = False
        except _StopWaiting as why:
            say(self.watchdog.who, f"ends without waiting longer for threads ({why}); still running:\n"
                f"{thread_stacks(non_daemon_only=True)}")
        signal.setitimer(signal.ITIMER_REAL, 0)


def say(who: Union[str, Callable[[], str]], text: str) -> None:
    """One write to stderr, without logging's locks (a signal handler or the last thread may be writing); `who` may
    be read at the write (a warm worker learns its rank late)."""
    line = f"[mindio {time.strftime('%H:%M:%S')} {who() if callable(who) else who}] {text}".rstrip("\n") + "\n"
    try:
        os.write(2, line.encode(errors="replace"))
    except OSError:
        pass


def thread_stacks(non_daemon_only: bool = False) -> str:
    """Every live thread's name and stack (or only the non-daemon ones'), for a process that did not end."""
    frames = sys._current_frames()
    lines = []
    for thread in threading.enumerate():
        if non_daemon_only and (thread.daemon or thread is threading.main_thread()):
            continue
        kind = "daemon" if thread.daemon else "non-daemon"
        lines.append(f"  thread {thread.name!r} ({kind}):\n")
        frame = frames.get(thread.ident)
        if frame is not None:
            lines.append(textwrap.indent("".join(traceback.format_stack(frame)), "    "))
    return "".join(lines) or "  (none)\n"


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
