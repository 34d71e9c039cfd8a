"""Notices a training step that runs far too long: a hang nothing else reports.

A rank that hangs keeps its heartbeat (the processor thread is fine), and its peers wait in a
collective for it; neither raises before the collective timeout, and a hang in compute never raises
at all. The watchdog thread compares the running step's age with a limit and calls `on_overrun` once
per step that exceeds it; the caller reports the fault.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Optional


class StepWatchdog:
    def __init__(self, limit_s: float, on_overrun: Callable[[int, float], None], poll_s: float = 0.5):
        if not limit_s > 0:
            raise ValueError(f"step time limit must be positive, got {limit_s!r}")
        self.limit_s, self.poll_s = float(limit_s), poll_s
        self._on_overrun = on_overrun
        self._lock = threading.Lock()
        self._step: Optional[int] = None
        self._started = 0.0
        self._fired_for: Optional[int] = None
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="mindio-step-watchdog", daemon=True)
        self._thread.start()

    def step_started(self, step: int) -> None:
        with self._lock:
            self._step, self._started = step, time.monotonic()

    def step_ended(self) -> None:
        with self._lock:
            self._step = None

    def close(self) -> None:
        self._closed.set()
        self._thread.join(5)

    def _watch(self) -> None:
        while not self._closed.wait(self.poll_s):
            with self._lock:
                step, age = self._step, time.monotonic() - self._started
                overrun = step is not None and age > self.limit_s and self._fired_for != step
                if overrun:
                    self._fired_for = step
            if overrun:
                self._on_overrun(step, age)
