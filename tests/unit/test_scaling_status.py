"""status/scaling and its place in job_status, the terminal table, the page and /metrics, fed with the event
logs, rank tables and layouts of the real controller with real processor processes (recorded by
tests/integration/record_scaling_logs.py into scaling_event_logs.json)."""
import json
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mindio_adaptor.cli.status import status_table
from mindio_adaptor.status.job_status import job_status
from mindio_adaptor.status.metrics import metrics_text
from mindio_adaptor.status.page import status_page
from mindio_adaptor.status.scaling import dp_size_of, scale_events

LOGS = json.loads(Path(__file__).with_name("scaling_event_logs.json").read_text())
WAIT_TIMED_OUT = "process replacement timed out after 4000 ms (MINDIO_ARF_WAIT_S)"
DOWNGRADE = "the cluster manager chose the scale-in (downgrade): no replacement is awaited"


def status_of(moment: str, until_kind: str = ""):
    """The status at a recorded moment; until_kind: at the first event of that kind instead (a prefix of
    the log, with the rank table and layout of the moment)."""
    log = LOGS[moment]
    events = [tuple(e) for e in log["events"]]
    if until_kind:
        events = events[:[kind for _, kind, _ in events].index(until_kind) + 1]
    return job_status(log["state"], log["ranks"], events, {}, log["layout"])


def table_of(moment: str) -> str:
    return status_table(json.loads(json.dumps(status_of(moment).to_json())))


def metrics_of(moment: str) -> dict:
    text = metrics_text(lambda: status_of(moment)).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def summary(event):
    return (event.number, event.direction, event.sizes, event.lost, event.left_with_slice, event.returned,
            event.outcome)


def test_a_scale_in_after_the_wait_names_the_sizes_the_lost_ranks_and_why():
    status = status_of("scaled_in")
    [event] = status.scaling
    assert summary(event) == (1, "in", "dp8 -> dp6", [6, 7], [], [], "training goes on")
    assert event.why == f"{WAIT_TIMED_OUT}: no restarted process registered for ranks [6,7]", event.why
    [scale_in] = [(t, d) for t, k, d in LOGS["scaled_in"]["events"] if k == "scale_in"]
    assert event.at_s == scale_in[0] and scale_in[1].startswith(f"ranks [6,7] at step {event.after_step}: ")
    assert status.dp_size == 6 and status.scale_out_note == ""
    recovery = status.recoveries[-1]
    assert (recovery.strategy, recovery.outcome, recovery.resized) == ("recover -> scale_in", "training goes on",
                                                                      "dp8 -> dp6")


def test_a_return_sent_away_is_the_scale_out_note_and_each_scale_out_back_an_event():
    away = status_of("sent_away", until_kind="scale_out_abandoned")
    assert away.scale_out_note.startswith("no scale-out: after ") and "ranks [7] have not returned" in \
        away.scale_out_note and "returned ranks [6] are sent away" in away.scale_out_note, away.scale_out_note
    assert len(away.scaling) == 1 and away.dp_size == 6
    status = status_of("scaled_out")
    assert [summary(e) for e in status.scaling] == [
        (1, "in", "dp8 -> dp6", [6, 7], [], [], "training goes on"),
        (2, "out", "dp6 -> dp7", [], [], [6], "training goes on"),
        (3, "out", "dp7 -> dp8", [], [], [7], "training goes on")]
    assert status.scaling[2].why == "ranks [7] returned after the scale-in and are ready"
    assert status.scaling[2].after_step >= status.scaling[1].after_step >= status.scaling[0].after_step
    assert status.dp_size == 8 and status.scale_out_note == ""
    recovery = status.recoveries[-1]
    assert (recovery.strategy, recovery.faults, recovery.resized) == ("scale_out", [], "dp7 -> dp8")


def test_a_partial_scale_out_names_who_stays_out_and_leaves_the_rest_retired():
    status = status_of("partly_back")
    [_, partial] = status.scaling
    assert summary(partial) == (2, "out", "dp6 -> dp7", [], [], [6], "training goes on")
    assert partial.why == "ranks [6] returned after the scale-in and are ready (partial, without ranks [7])"
    assert status.dp_size == 7 and [r.rank for r in status.ranks if r.health == "retired"] == [7]
    # still scaled in: a later return's word is the note again
    events = [tuple(e) for e in LOGS["scaled_out"]["events"]]
    at = [kind for _, kind, _ in events].index("scale_out")
    later_return = [e for e in events[at + 1:] if e[1] == "returned"][0]
    status = job_status("NORMAL", LOGS["partly_back"]["ranks"], [*events[:at + 1], later_return], {},
                        LOGS["partly_back"]["layout"])
    assert status.scale_out_note == "rank 7 returned after the scale-in", status.scale_out_note


def test_the_cluster_manager_s_downgrade_is_the_reason_of_its_scale_in():
    status = status_of("downgraded")
    [event] = status.scaling
    assert summary(event) == (1, "in", "dp8 -> dp7", [5], [], [], "training goes on")
    assert event.why == DOWNGRADE and status.dp_size == 7
    assert status.recoveries[-1].strategy == "recover -> scale_in"


def test_a_live_rank_leaving_with_its_slice_is_named_and_tp_lists_give_one_size():
    status = status_of("left_with_slice")
    [event] = status.scaling
    assert summary(event) == (1, "in", "dp4 -> dp3", [5], [4], [], "training goes on")
    assert [entry["ranks"] for entry in LOGS["left_with_slice"]["layout"]] == [[0, 2, 6], [1, 3, 7]]
    assert status.dp_size == 3
    assert [r.health for r in status.ranks] == ["healthy"] * 4 + ["retired"] * 2 + ["healthy"] * 2


def test_retired_ranks_are_retired_until_a_scale_out_takes_them_back():
    assert [r.rank for r in status_of("scaled_in").ranks if r.health == "retired"] == [6, 7]
    assert status_of("scaled_in").health_counts()["dead"] == 0
    assert [r.health for r in status_of("scaled_out").ranks] == ["healthy"] * 8
    out = metrics_of("scaled_in")
    assert out[("mindio_ranks", (("health", "retired"),))] == 2 and out[("mindio_ranks", (("health", "dead"),))] == 0


def test_sizes_no_layout_gives_are_unknown_not_guessed():
    """The ranks reported no layout at the new size: neither the start's nor the new size is known."""
    status = status_of("return_lost")
    [event] = status.scaling
    assert summary(event) == (1, "in", "dp? -> dp?", [5], [], [], "training goes on")
    assert (event.dp_before, event.dp_after, status.dp_size) == (None, None, None)
    assert status.scale_out_note == ("rank 5, returned after the scale-in, was lost before the scale-out "
                                     "(connection lost and not re-registered within one heartbeat period)")
    assert status.to_json()["scaling"][0]["dp_after"] is None


def test_a_scale_out_that_failed_ended_the_job_and_leaves_no_note():
    """The returned rank 5 was killed during the scale-out's REBUILD_GROUP: the flow fell back to the exit."""
    status = status_of("scale_out_failed")
    assert [summary(e) for e in status.scaling] == [(1, "in", "dp? -> dp?", [5], [], [], "training goes on"),
                                                    (2, "out", "dp? -> dp?", [], [], [5], "job ended")]
    assert [(r.strategy, r.outcome) for r in status.recoveries] == [("recover -> scale_in", "training goes on"),
                                                                    ("scale_out", "job ended")]
    assert "return_lost" in [kind for _, kind, _ in LOGS["scale_out_failed"]["events"]]
    assert status.scale_out_note == ""  # the loss came within the scale-out: its outcome says how it ended


def test_the_terminal_table_has_a_scaling_section_and_the_size_now():
    table = table_of("scaled_out")
    assert "replica layout: 4 shards, 2 copies each (data-parallel size 8)" in table
    lines = table.splitlines()
    at = lines.index("scaling:")
    assert lines[at + 1].startswith("  #1 in dp8 -> dp6 after step ") and \
        f"ranks [6, 7] lost ({WAIT_TIMED_OUT}" in lines[at + 1] and lines[at + 1].endswith("; training goes on")
    assert lines[at + 2].startswith("  #2 out dp6 -> dp7 after step ") and lines[at + 2].endswith(
        ": ranks [6] returned after the scale-in and are ready (partial, without ranks [7]); training goes on")
    assert lines[at + 3].startswith("  #3 out dp7 -> dp8 after step ") and lines[at + 3].endswith(
        ": ranks [7] returned after the scale-in and are ready; training goes on")
    assert [line for line in lines if "scale_out at +" in line][-1].count(", training goes on, dp7 -> dp8 (") == 1
    assert "ranks [4] left with their slices" in table_of("left_with_slice")
    assert "  scale-out: rank 5, returned after the scale-in, was lost" in table_of("return_lost")
    assert "  #2 out dp? -> dp? after step 10 at +" in table_of("scale_out_failed")


def test_a_job_that_never_scaled_says_so():
    log = LOGS["scaled_in"]
    before = [tuple(e) for e in log["events"] if e[1] not in ("scale_in",)]
    before = before[:[k for _, k, _ in before].index("fault")]  # up to the loss: NORMAL at dp8
    layout = [{"optimizer_type": 0, "group": 0, "replica_cnt": 2, "ranks": list(range(8))}]
    status = job_status("NORMAL", log["ranks"], before, {}, layout)
    assert status.scaling == [] and status.dp_size == 8
    table = status_table(json.loads(json.dumps(status.to_json())))
    assert "\nscaling: none\n" in table and "(data-parallel size 8)" in table
    page = status_page(status)
    assert "<h2>Scaling</h2>\n<p>none</p>" in page and "data-parallel size 8 &middot;" in page


def test_the_page_has_the_same_rows():
    page = status_page(status_of("left_with_slice"))
    assert "data-parallel size 3 &middot;" in page
    assert "<td>1</td><td>in</td><td>dp4 -&gt; dp3</td>" in page
    assert "<td>lost [5], left with their slices [4]</td>" in page
    assert "training goes on, dp4 -&gt; dp3" in page  # the recovery's outcome
    away = status_page(status_of("sent_away", until_kind="scale_out_abandoned"))
    assert "<p>scale-out: no scale-out: after " in away


def test_metrics_give_the_size_now_and_the_scale_events_by_direction():
    out = metrics_of("scaled_out")
    assert out[("mindio_data_parallel_size", ())] == 8
    assert out[("mindio_scale_events_total", (("direction", "in"),))] == 1
    assert out[("mindio_scale_events_total", (("direction", "out"),))] == 2
    assert out[("mindio_recoveries_total", (("outcome", "training goes on"), ("strategy", "scale_out")))] == 2
    unknown = metrics_of("return_lost")
    assert ("mindio_data_parallel_size", ()) not in unknown
    assert unknown[("mindio_scale_events_total", (("direction", "out"),))] == 0


def test_a_layout_s_size_is_one_type_0_list_s_length():
    tp2 = [{"optimizer_type": 0, "ranks": [0, 2, 4, 6]}, {"optimizer_type": 0, "ranks": [1, 3, 5, 7]}]
    assert dp_size_of(tp2) == 4 and dp_size_of([]) is None
    assert dp_size_of([{"optimizer_type": 1, "ranks": [0, 1]}]) is None


def test_a_scale_event_s_detail_in_an_unknown_form_is_an_error_naming_it():
    with pytest.raises(ValueError, match="controller event scale_in 'ranks 5': expected"):
        scale_events([(1.0, "scale_in", "ranks 5")], 8)
