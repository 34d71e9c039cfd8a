"""Megatron's timers, as a recovery finds them and must leave them. The interval timer runs across the steps of
Megatron's train loop (started once before the loop, read and restarted by each loss line), and its reading and
restart hold barriers: a fault between them leaves it stopped, and a line printed outside the loop must not pair
those barriers with ranks whose timer never ran (a replacement process, created before its loop began)."""
import time
from contextlib import contextmanager

INTERVAL = "interval-time"


def _timers():
    from megatron.training.global_vars import get_timers

    return get_timers()


def running_timers() -> set:
    return {name for name, timer in _timers()._timers.items() if timer._started}


def set_running_timers(names: frozenset = frozenset()) -> None:
    """The timers in `names` running, every other one stopped (the interrupted step started it and never stops
    it). A timer in `names` that a fault stopped runs on from its last start: the reading the fault interrupted
    (stop, reset, then the restart's barrier) kept none of its time."""
    for name, timer in _timers()._timers.items():
        timer._started = name in names


def interval_seconds() -> float:
    """Seconds the interval timer holds since the last loss line; 0 where it does not exist yet."""
    timer = _timers()._timers.get(INTERVAL)
    if timer is None:
        return 0.0
    return timer._elapsed + (time.time() - timer._start_time if timer._started else 0.0)


@contextmanager
def interval_reading(seconds: float):
    """Inside: the interval timer stopped and holding `seconds` on every rank, so that training_log reads the same
    time everywhere without its barriers. After: running from now where it ran before (the loop goes on), else
    stopped at zero for the loop that starts it (a replacement's)."""
    timer = _timers()(INTERVAL, log_level=0)
    was_running = timer._started
    timer._started, timer._elapsed = False, seconds
    try:
        yield
    finally:
        timer.reset()
        if was_running:
            timer.start(barrier=False)
