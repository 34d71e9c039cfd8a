"""Pause and continue at a step boundary (csrc/controller/pause.h) with the real controller and four native
processors in this process, each stepped by a thread; a barrier before each update plays the step's
gradient collectives, which keep real ranks within one step of each other. Asked through the reference API
and through the status server's commands (mindio-adaptor pause / continue)."""
import threading
import time

import pytest

from controller_harness import end_in_process_job, in_process_job, wait_until
from mindio_adaptor.cli import main as cli_main
from mindio_adaptor.status.controller_source import start_if_asked
from mindio_adaptor.ttp import controller as ctl

pytestmark = pytest.mark.integration
N = 4
TOKEN = "pause-test-token-0123456789abcdef"


class SteppingRanks:
    """Each rank's training thread: the step's collectives (a barrier), then the update bracket."""

    def __init__(self, processors, step_s=0.03):
        self.processors, self.step_s = processors, step_s
        self.steps = [0] * len(processors)
        self.errors = {}
        self._stop = threading.Event()
        self._collective = threading.Barrier(len(processors), timeout=60)
        self._threads = [threading.Thread(target=self._train, args=(rank,), daemon=True)
                         for rank in range(len(processors))]

    def start(self):
        for t in self._threads:
            t.start()
        return self

    def _train(self, rank):
        p = self.processors[rank]
        try:
            while not self._stop.is_set():
                self._collective.wait()
                p.start_updating(self.steps[rank])  # holds here while paused
                self.steps[rank] += 1
                p.end_updating(self.steps[rank])
                time.sleep(self.step_s)
        except (RuntimeError, threading.BrokenBarrierError) as err:
            self.errors[rank] = str(err)
            self._collective.abort()

    def stop(self):
        self._stop.set()
        self._collective.abort()
        for t in self._threads:
            t.join(10)


@pytest.fixture
def job(job_env):
    procs = in_process_job(N)
    ranks = SteppingRanks(procs).start()
    wait_until(lambda: min(ranks.steps) >= 3, 20, "three steps")
    yield ranks
    ranks.stop()
    end_in_process_job(procs)


def every_rank_holds():
    ranks = ctl.controller_ranks()
    return ctl.controller_state() == "PAUSE" and all("paused" in r["flags"] for r in ranks)


def events(kind):
    return [detail for _, k, detail in ctl.controller_events() if k == kind]


def test_every_rank_holds_after_the_same_step_until_continue(job):
    ctl.tft_notify_controller_stop_train({}, stop_type="pause")
    wait_until(every_rank_holds, 20, "every rank holding")
    held = list(job.steps)
    assert len(set(held)) == 1, held  # the same step on every rank
    assert events("paused") == [f"after step {held[0]}"]
    time.sleep(1.0)
    assert job.steps == held and not job.errors  # nothing moved while held
    # a client driving its own loop holds in tft_pause_train (the processor's hold_if_paused)
    assert job.processors[0].hold_if_paused(0.2) is False
    time.sleep(0.2)
    assert every_rank_holds()  # its training thread still holds: rank 0 is still seen holding
    assert ctl.tft_notify_controller_change_strategy("continue") == 0
    assert job.processors[0].hold_if_paused(5.0) is True
    wait_until(lambda: min(job.steps) > held[0] + 2, 20, "training going on")
    assert ctl.controller_state() == "NORMAL" and not job.errors
    assert events("continue") == ["continue was asked for"]
    assert not events("fault") and not events("savers")  # no recovery of any kind


def test_a_pause_after_a_step_already_passed_is_refused_naming_the_rank(job):
    done = max(job.steps)
    with pytest.raises(ValueError, match=r"pause refused: rank \d already completed step \d+: a pause after step 1 "
                                         r"cannot be kept"):
        ctl.pause_training(after_step=1)
    assert ctl.controller_state() == "NORMAL" and max(job.steps) >= done
    with pytest.raises(ValueError, match="pause refused: a pause holds from 1 s to 24 h, not 500 ms"):
        ctl.pause_training(hold_s=0.5)


def test_a_pause_after_a_later_step_holds_there_and_ends_at_its_limit(job):
    target = max(job.steps) + 5
    ctl.pause_training(after_step=target, hold_s=1.5)
    wait_until(every_rank_holds, 30, "every rank holding")
    assert job.steps == [target] * N
    wait_until(lambda: ctl.controller_state() == "NORMAL", 10, "the pause ending at its limit")
    assert events("continue") == ["its hold limit was reached"]
    wait_until(lambda: min(job.steps) > target, 10, "training going on")


def test_a_fault_during_a_pause_is_recovered_as_in_training_and_ends_the_pause(job):
    ctl.pause_training()
    wait_until(every_rank_holds, 20, "every rank holding")
    ctl.tft_notify_controller_stop_train({2: 1})  # rank 2's node, as a cluster manager reports it
    wait_until(lambda: len(job.errors) == N, 20, "the held ranks released by the recovery")
    assert all("FORCE STOP" in e for e in job.errors.values()), job.errors
    wait_until(lambda: events("savers"), 20, "the recovery's dump")


def test_the_status_servers_commands_pause_and_continue_with_the_token_only(job, monkeypatch, capsys):
    monkeypatch.setenv("MINDIO_TOKEN", TOKEN)
    server = start_if_asked(port=0)
    address = "%s:%d" % server.address
    try:
        assert cli_main(["pause", "--controller", address, "--token", TOKEN, "--wait", "20"]) == 0
        assert "paused: every rank holds" in capsys.readouterr().out
        held = list(job.steps)
        with pytest.raises(SystemExit, match="401 a command needs the job's token"):
            cli_main(["continue", "--controller", address, "--token", "wrong"])
        with pytest.raises(SystemExit, match=r"409 pause refused: a pause is already asked for|409 pause refused: "
                                             r"the job is in state PAUSE"):
            cli_main(["pause", "--controller", address, "--token", TOKEN])
        assert job.steps == held
        assert cli_main(["continue", "--controller", address, "--token", TOKEN]) == 0
        wait_until(lambda: min(job.steps) > held[0], 10, "training going on")
        with pytest.raises(SystemExit, match=r"409 the job is not paused \(state NORMAL\)"):
            cli_main(["continue", "--controller", address, "--token", TOKEN])
        with pytest.raises(SystemExit, match=r"400 after_step 'x': expected a step number"):
            from mindio_adaptor.cli.status_client import request_json
            request_json(address, TOKEN, "/pause", {"after_step": "x"})
        with pytest.raises(SystemExit, match=r"400 unknown fields \['force'\]"):
            request_json(address, TOKEN, "/continue", {"force": True})
    finally:
        server.stop()
