"""The record of the nodes that caused faults (core/detection/offender_record) and what the controller's events charge
to a node (status/offender_watch)."""
import json
import re
import time

import pytest

from mindio_adaptor.cli import main as cli_main
from mindio_adaptor.core.detection.offender_record import (FILE_ENV, TIMES_ENV, WINDOW_ENV, Incident, OffenderRecord,
                                                 OffenderSettingError)
from mindio_adaptor.status.offender_watch import OffenderWatch, charged_faults

HOUR = 3600.0


def record(tmp_path, times=3, window_s=24 * HOUR):
    return OffenderRecord(tmp_path / "state" / "offenders.json", times, window_s)


def test_a_node_becomes_a_repeat_offender_at_the_third_incident_within_the_window(tmp_path):
    r = record(tmp_path)
    assert r.note(Incident(1000.0, "node-a", 1, "node fault")) is None
    assert r.note(Incident(2000.0, "node-b", 2, "memory fault")) is None
    assert r.note(Incident(3000.0, "node-a", 1, "memory fault")) is None
    third = r.note(Incident(4000.0, "node-a", 0, "sub-health MINDIO-SDC"))
    assert [i.what for i in third] == ["node fault", "memory fault", "sub-health MINDIO-SDC"]
    assert r.note(Incident(5000.0, "node-a", 0, "node fault")) is None  # said once, at the third
    assert list(r.offenders(now=5000.0)) == ["node-a"]
    assert r.offenders(now=1000.0 + 24 * HOUR + 1) == {"node-a": r.offenders(now=5000.0)["node-a"][1:]}


def test_incidents_older_than_the_window_are_dropped_when_one_is_noted(tmp_path):
    r = record(tmp_path, window_s=HOUR)
    r.note(Incident(0.0, "node-a", 1, "node fault"))
    r.note(Incident(10.0, "node-a", 1, "node fault"))
    assert r.note(Incident(HOUR + 5.0, "node-a", 1, "node fault")) is None  # the first left the window
    assert [i.time for i in r.incidents()] == [10.0, HOUR + 5.0]


def test_the_record_survives_a_new_reader_and_forgets_a_node(tmp_path):
    record(tmp_path).note(Incident(1.0, "node-a", 1, "node fault"))
    record(tmp_path).note(Incident(2.0, "node-b", 1, "node fault"))
    again = record(tmp_path)
    assert [i.node for i in again.incidents()] == ["node-a", "node-b"]
    assert again.forget("node-a") == 1 and [i.node for i in again.incidents()] == ["node-b"]
    assert not list(again.path.parent.glob(".*.tmp"))  # written whole, renamed into place


@pytest.mark.parametrize("text", ["{not json", json.dumps({"format": 7, "incidents": []}),
                                  json.dumps({"format": 1, "incidents": [{"time": "x"}]}), "[]"])
def test_an_unreadable_record_is_set_aside_and_a_new_one_starts(tmp_path, text, caplog):
    r = record(tmp_path)
    r.path.parent.mkdir(parents=True)
    r.path.write_text(text)
    assert r.incidents() == []
    aside = list(r.path.parent.glob("offenders.json.unreadable-*"))
    assert len(aside) == 1 and aside[0].read_text() == text  # nothing deleted
    assert "is unreadable" in caplog.text and "set aside" in caplog.text
    assert r.note(Incident(1.0, "node-a", 1, "node fault")) is None and len(r.incidents()) == 1


def test_settings_from_the_environment(tmp_path):
    env = {FILE_ENV: str(tmp_path / "o.json"), TIMES_ENV: "2", WINDOW_ENV: "600"}
    r = OffenderRecord.from_env(env)
    assert (r.path, r.times, r.window_s) == (tmp_path / "o.json", 2, 600.0)
    assert OffenderRecord.from_env({"XDG_STATE_HOME": str(tmp_path)}).path == tmp_path / "mindio_adaptor" / "offenders.json"
    with pytest.raises(OffenderSettingError, match=r"MINDIO_OFFENDER_TIMES='0': expected a whole number"):
        OffenderRecord.from_env({TIMES_ENV: "0"})
    with pytest.raises(OffenderSettingError, match=r"MINDIO_OFFENDER_WINDOW_S='5'"):
        OffenderRecord.from_env({WINDOW_ENV: "5"})


@pytest.mark.parametrize("kind, detail, world, charged", [
    ("decision", "retry: faults 1:memory repair_step=4 repair_set=[1]", 4, [(1, "memory fault")]),
    ("decision", "recover: faults 0:comm 2:node 3:comm repair_step=4", 4, [(2, "node fault")]),
    # silent data corruption raises on every rank: one check failing names no node
    ("decision", "retry: faults 0:memory 1:memory 2:memory 3:memory repair_step=6 reload_step=3", 4, []),
    ("decision", "retry: faults 0:memory 1:memory repair_step=6", 4, [(0, "memory fault"), (1, "memory fault")]),
    ("decision", "exit: faults 1:unknown repair_step=2", 4, []),
    ("sub_health", "rank 3 (node vm-7): MINDIO-SDC", 4, [(3, "sub-health MINDIO-SDC")]),
    ("sub_health", "rank 3: MINDIO-SDC", 4, [(3, "sub-health MINDIO-SDC")]),
    ("slow_rank", "rank 2: steps 3-4: compute 636 ms, median 44 ms", 4, [(2, "slow rank")]),
    ("slow_rank_well", "rank 2: steps 13-14: compute 40 ms", 4, []),
    ("fault", "rank 1 memory: reported state 2", 4, []),  # counted once, from its decision
])
def test_what_an_event_charges_to_a_node(kind, detail, world, charged):
    assert charged_faults(kind, detail, world) == charged


def test_the_watch_notes_each_new_event_once_and_says_a_repeat_offender(tmp_path):
    events, said, offending = [], [], []
    ranks = [{"domain": "vm-0"}, {"domain": "vm-1"}, {"domain": ""}, {"domain": "vm-1"}]
    r = record(tmp_path, times=2)
    watch = OffenderWatch(r, lambda: list(events), lambda: ranks, say=said.append, clock=lambda: 100.0,
                          on_offender=offending.append)
    events.append((1.0, "decision", "retry: faults 1:memory repair_step=4"))
    watch.poll()
    watch.poll()  # nothing new
    events.append((2.0, "sub_health", "rank 2: MINDIO-SDC"))
    events.append((3.0, "decision", "recover: faults 3:node repair_step=5"))
    watch.poll()
    assert [(i.node, i.rank, i.what) for i in r.incidents()] == [
        ("vm-1", 1, "memory fault"), ("rank 2", 2, "sub-health MINDIO-SDC"), ("vm-1", 3, "node fault")]
    assert len(said) == 1 and said[0].startswith("node vm-1 is a repeat offender: 2 incidents within 24 h (")
    assert offending == [3]  # rank 3's incident made its node one (status/sub_health_responder acts on it)
    watch.say_remembered()
    assert said[1].startswith("remembered from earlier runs: node vm-1 is a repeat offender")
    ranks[1] = {"domain": ""}  # a replacement not yet reported: the rank's last known node is kept
    events.append((4.0, "decision", "recover: faults 1:node repair_step=6"))
    watch.poll()
    assert (r.incidents()[-1].node, r.incidents()[-1].rank) == ("vm-1", 1)


def test_a_record_that_cannot_be_written_is_said_and_the_watch_goes_on(tmp_path):
    blocker = tmp_path / "state"
    blocker.write_text("a file where the record's directory should be")
    said = []
    watch = OffenderWatch(record(tmp_path), lambda: [(1.0, "decision", "retry: faults 1:memory")],
                          lambda: [{"domain": "vm-0"}] * 2, say=said.append)
    watch.poll()
    assert len(said) == 1 and "cannot be written" in said[0] and "memory fault of rank 1 on node vm-0" in said[0]


def test_the_offenders_command_lists_and_forgets(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(TIMES_ENV, "2")
    path = tmp_path / "o.json"
    r = OffenderRecord(path, 2)
    now = time.time()
    for t in (now - 20, now - 10):
        r.note(Incident(t, "vm-1", 1, "node fault"))
    r.note(Incident(now - 5, "vm-2", 5, "memory fault"))
    assert cli_main(["offenders", "--file", str(path)]) == 0
    out = capsys.readouterr().out
    assert "3 incident(s); a repeat offender has 2 within 24 h" in out
    assert re.search(r"vm-1 +2  REPEAT OFFENDER", out) and re.search(r"vm-2 +1 *\n", out)
    assert "rank 5  memory fault" in out
    assert cli_main(["offenders", "--file", str(path), "--forget", "vm-1"]) == 0
    assert "forgot 2 incident(s) of node vm-1" in capsys.readouterr().out
    assert [i.node for i in OffenderRecord(path).incidents()] == ["vm-2"]
