"""A hot switch on the launcher's side (core/job/hand_over, launch/hand_overs), with real processes: the mark a leaving
process leaves, the workers handed over at once or gathered for a drain to a standby, and the old processes
watched until they end."""
import os
import sys
import time

import pytest

from mindio_adaptor.core.job import hand_over
from mindio_adaptor.launch import hand_overs
from mindio_adaptor.launch.hand_overs import HandOvers
from mindio_adaptor.launch.worker import Worker


class Log:
    def __init__(self):
        self.lines = []

    def info(self, text, *args):
        self.lines.append(text % args)


def started(local_rank, seconds="30"):
    worker = Worker(local_rank, 2 + local_rank)
    worker.start([sys.executable, "-c", f"import time; time.sleep({seconds})"], {})
    return worker


def mark(directory, worker, monkeypatch, switched=(2, 3)):
    monkeypatch.setenv(hand_over.ENV_HANDOVER_DIR, directory)
    monkeypatch.setattr(hand_over.os, "getpid", lambda: worker.pid)  # written as that process would
    assert hand_over.mark_handed_over(switched)


@pytest.fixture
def node(monkeypatch):
    log = Log()
    ho = HandOvers(log)
    workers = [started(0), started(1)]
    yield ho, workers, log
    for w in workers:
        w.signal(9)
    ho.close()


def test_without_a_launcher_there_is_no_mark(monkeypatch):
    monkeypatch.delenv(hand_over.ENV_HANDOVER_DIR, raising=False)
    assert hand_over.mark_handed_over([2, 3]) == ""


def test_the_mark_names_the_ranks_of_the_switch_and_is_taken_once(tmp_path, monkeypatch):
    monkeypatch.setenv(hand_over.ENV_HANDOVER_DIR, str(tmp_path))
    path = hand_over.mark_handed_over([3, 2])
    assert os.stat(path).st_mode & 0o077 == 0
    assert hand_over.take_mark(str(tmp_path), os.getpid()) == {2, 3}
    assert hand_over.take_mark(str(tmp_path), os.getpid()) is None
    assert list(tmp_path.iterdir()) == []


def test_a_marked_worker_is_handed_over_at_once_without_a_standby(node, monkeypatch):
    ho, workers, _ = node
    assert ho.ready(workers, lambda: False) == ([], False)
    mark(ho.dir, workers[1], monkeypatch)
    assert ho.ready(workers, lambda: False) == ([workers[1]], False)
    assert ho.ready(workers, lambda: False) == ([], False)  # the mark was taken


def test_with_a_standby_the_marks_are_gathered_and_a_whole_node_drains(node, monkeypatch):
    ho, workers, _ = node
    mark(ho.dir, workers[0], monkeypatch)
    assert ho.ready(workers, lambda: True) == ([], False)  # the other rank's mark may follow
    mark(ho.dir, workers[1], monkeypatch)
    assert ho.ready(workers, lambda: True) == ([workers[0], workers[1]], True)


def test_the_marks_of_a_whole_node_are_gathered_for_seconds_not_only_milliseconds(node, monkeypatch):
    ho, workers, _ = node  # a loaded host stalls one leaving rank for seconds: the drain still happens
    mark(ho.dir, workers[0], monkeypatch)
    time.sleep(1.5)
    assert ho.ready(workers, lambda: True) == ([], False)
    mark(ho.dir, workers[1], monkeypatch)
    assert ho.ready(workers, lambda: True) == ([workers[0], workers[1]], True)


def test_a_lone_mark_of_a_whole_node_switch_is_handed_over_on_the_node_after_the_gathering_time(node, monkeypatch):
    ho, workers, _ = node
    monkeypatch.setattr(hand_overs, "GATHER_S", 0.2)
    mark(ho.dir, workers[0], monkeypatch)
    assert ho.ready(workers, lambda: True) == ([], False)
    time.sleep(0.3)
    assert ho.ready(workers, lambda: True) == ([workers[0]], False)


def test_a_switch_of_some_of_the_nodes_ranks_is_handed_over_at_once_though_a_standby_waits(node, monkeypatch):
    ho, workers, _ = node
    asked = []
    mark(ho.dir, workers[0], monkeypatch, switched=(2, 5))
    assert ho.ready(workers, lambda: asked.append(1) or True) == ([workers[0]], False)
    assert not asked  # a standby is no matter: this node's rank 3 stays


def test_the_old_process_is_watched_until_it_ends_and_killed_past_the_grace(node, monkeypatch):
    ho, workers, log = node
    quick = started(0, seconds="0.1")
    ho.leave(quick)
    old = ho.leave(workers[1])
    quick.proc.wait(30)  # ended before the grace runs out, however long a loaded host takes to start it
    monkeypatch.setattr(hand_overs, "LEAVE_GRACE_S", 0.3)
    ho.wait_for_the_leaving(5.0)
    assert f"rank 2: its old process (pid {quick.pid}) ended after handing its rank over: exit code 0" in log.lines
    assert any(f"its old process (pid {old.pid}) still ran" in line and "killed" in line for line in log.lines)
    assert f"rank 3: its old process (pid {old.pid}) ended after handing its rank over: signal SIGKILL" in log.lines
    assert not ho.leaving


def test_the_reboot_type_is_checked():
    assert hand_over.reboot_type({}) == "arf"
    assert hand_over.reboot_type({hand_over.ENV_REBOOT_TYPE: "hot switch"}) == "hot switch"
    with pytest.raises(ValueError, match="MINDIO_REBOOT_TYPE='cold': expected one of 'arf', 'hot switch'"):
        hand_over.reboot_type({hand_over.ENV_REBOOT_TYPE: "cold"})


def test_the_directory_is_private_and_goes_with_the_launcher():
    ho = HandOvers(Log())
    assert os.stat(ho.dir).st_mode & 0o077 == 0
    ho.close()
    assert not os.path.exists(ho.dir)
