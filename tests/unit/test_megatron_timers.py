"""megatron/timers on Megatron's own Timers: after a rollback the timers run as before the interrupted step (the
interval timer that a fault stopped inside a loss line's reading runs on from its last start), and a line printed
outside the loop reads the agreed time without the timer's barriers, leaving the timer as the loop needs it."""
import time

import pytest
import torch

from mindio_adaptor.megatron import timers


@pytest.fixture
def megatron_timers(monkeypatch):
    from mindio_adaptor.patches.cpu_support import prepare_python_for_megatron

    prepare_python_for_megatron()
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)  # as on the CPU path (core/process/cpu_torch)
    from megatron.core.timers import Timers
    from megatron.training import global_vars

    kept = global_vars._GLOBAL_TIMERS
    global_vars._GLOBAL_TIMERS = Timers(0, "minmax")
    yield global_vars._GLOBAL_TIMERS
    global_vars._GLOBAL_TIMERS = kept


def test_a_timer_a_fault_stopped_mid_reading_runs_on_from_its_last_start(megatron_timers):
    interval = megatron_timers(timers.INTERVAL, log_level=0)
    interval.start()
    started = interval._start_time
    interval.stop()
    interval.reset()  # the reading's stop and reset done, its restart's barrier failed
    step_timer = megatron_timers("forward-backward", log_level=0)
    step_timer.start()  # started by the interrupted step, never stopped by it
    timers.set_running_timers(frozenset({timers.INTERVAL}))
    assert timers.running_timers() == {timers.INTERVAL}
    assert interval._start_time == started and timers.interval_seconds() >= time.time() - started - 1e-3


def test_the_agreed_reading_replaces_the_timer_s_and_the_loop_s_timer_runs_on_from_now(megatron_timers):
    interval = megatron_timers(timers.INTERVAL, log_level=0)
    interval.start()
    with timers.interval_reading(2.5):
        assert megatron_timers(timers.INTERVAL).elapsed(barrier=True) == 2.5  # stopped: no barrier to pair
    assert interval._started and interval._elapsed == 0.0 and timers.interval_seconds() < 1.0


def test_a_replacement_s_timer_is_made_for_the_reading_and_left_for_its_loop_to_start(megatron_timers):
    assert timers.interval_seconds() == 0.0  # its loop has not begun
    with timers.interval_reading(2.5):
        assert megatron_timers(timers.INTERVAL).elapsed(barrier=True) == 2.5
    megatron_timers(timers.INTERVAL, log_level=0).start()  # the loop's own start finds it stopped
