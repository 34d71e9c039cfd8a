"""A parked rank waits once (core/job/processor_link.await_decision with `wake`, core/process/training_thread):
its training thread blocks on its job queue, the decision is awaited on a thread of its own that wakes it,
so neither a posted stage nor the decision waits out a slice of the other wait. The native processor is
replaced by a stand-in that decides when told: the wait's logic is what is tested here; every e2e recovery
runs it on the real one."""
import threading
import time

import pytest

from mindio_adaptor.core.detection.enums import Action
from mindio_adaptor.core.job.processor_link import ControllerUnreachable, ProcessorLink
from mindio_adaptor.core.process.training_thread import TrainingThread


class DecidingNative:
    """Answers wait_next_action as the native processor does: -1 until decided, then the decision."""

    def __init__(self):
        self.decided = threading.Event()
        self.code = Action.EXIT
        self.waits = 0

    def wait_next_action(self, timeout_s):
        self.waits += 1
        return self.code if self.decided.wait(timeout_s) else -1

    def repair_type(self):
        return "hot_switch"

    def repair_step(self):
        return 5

    def exit_ranks(self):
        return [2, 3]

    def cut_off(self):
        return ""

    def controller_closed(self):
        return "controller destroyed"


def parked_link(rank=2):
    link = ProcessorLink.__new__(ProcessorLink)  # no native processor, no controller: the stand-in instead
    link.rank, link.native = rank, DecidingNative()
    link.between_waits = link.wake_waits = None
    return link


def decide_after(native, seconds):
    threading.Timer(seconds, native.decided.set).start()


def test_the_decision_ends_the_parked_threads_wait_at_once():
    link, thread = parked_link(), TrainingThread()
    decide_after(link.native, 0.3)
    started = time.monotonic()
    decision = link.await_decision(60, between=lambda: thread.run_jobs(30.0), wake=thread.wake)
    assert time.monotonic() - started < 5.0  # not the 30 s the queue's wait would take without the wake
    assert (decision.go_on, decision.strategy, decision.repair_step, decision.ranks) == (False, "hot_switch", 5, (2, 3))


def test_a_posted_stage_runs_on_the_waiting_thread_while_the_decision_is_awaited():
    link, thread = parked_link(), TrainingThread()
    thread.parked.set()
    ran_on = []
    poster = threading.Thread(target=lambda: ran_on.append(thread.run_parked(threading.get_ident, 10, 10)))
    poster.start()
    decide_after(link.native, 1.0)
    link.await_decision(60, between=lambda: thread.run_jobs(30.0), wake=thread.wake)
    poster.join(10)
    assert ran_on == [threading.get_ident()]


def test_no_decision_by_the_deadline_raises_and_a_lost_link_says_why():
    link, thread = parked_link(), TrainingThread()
    with pytest.raises(TimeoutError, match="rank 2: no decision from the controller within 0 s"):
        link.await_decision(0.3, between=lambda: thread.run_jobs(30.0), wake=thread.wake)
    link.native.code = -2
    link.native.decided.set()
    with pytest.raises(ControllerUnreachable, match="rank 2: the controller closed \\(controller destroyed\\)"):
        link.await_decision(60, between=lambda: thread.run_jobs(30.0), wake=thread.wake)


def test_a_parked_thread_that_gives_up_stops_the_watcher():
    link, thread = parked_link(), TrainingThread()

    def leave():
        thread.run_jobs(0.05)
        raise RuntimeError("leaving the job")

    with pytest.raises(RuntimeError, match="leaving the job"):
        link.await_decision(None, between=leave, wake=thread.wake)
    deadline = time.monotonic() + 10.0  # within one of the watcher's 0.5 s slices, however busy the machine
    while watchers("mindio-decision-2") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not watchers("mindio-decision-2")


def test_without_a_parked_thread_the_native_wait_runs_on_the_caller():
    link = parked_link(rank=7)  # a name no other test's watcher has
    decide_after(link.native, 0.2)
    assert link.await_decision(10).ranks == (2, 3)
    assert not watchers("mindio-decision-7")


def watchers(name):
    return [t for t in threading.enumerate() if t.name == name]
