"""status/job_status: the operator's view derived from the controller's rank table and event log."""
from mindio_adaptor.status.job_status import job_status, recoveries

RANKS = [{"step": 7, "flags": ["registered", "connected"], "silent_ms": 150, "heartbeat_ms": 2000},
         {"step": 6, "flags": ["registered", "connected", "suspect"], "silent_ms": 7000, "heartbeat_ms": 2000},
         {"step": 5, "flags": ["registered", "dead"], "silent_ms": -1, "heartbeat_ms": 2000},
         {"step": -1, "flags": [], "silent_ms": -1, "heartbeat_ms": 0},
         {"step": 7, "flags": ["registered"], "silent_ms": -1, "heartbeat_ms": 500}]


def test_each_rank_has_one_health_and_its_heartbeat_lag_while_connected():
    events = [(1.0, "suspect", "rank 1 silent for 7000 ms (3 periods)"), (3.0, "state", "INIT->NORMAL")]
    status = job_status("NORMAL", RANKS, events, {"heartbeats": 12})
    assert [(r.rank, r.health, r.step) for r in status.ranks] == \
        [(0, "healthy", 7), (1, "suspect", 6), (2, "dead", 5), (3, "unregistered", -1), (4, "disconnected", 7)]
    assert [(r.heartbeat_lag_s, r.heartbeat_period_s) for r in status.ranks] == \
        [(0.15, 2.0), (7.0, 2.0), (None, 2.0), (None, None), (None, 0.5)]
    assert status.health_counts() == {"healthy": 1, "suspect": 1, "disconnected": 1, "joining": 0, "retired": 0,
                                      "dead": 1, "left": 0, "finished": 0, "unregistered": 1}
    assert status.counters == {"heartbeats": 12} and status.last_event_s == 3.0


def test_a_repaired_fault_and_a_fatal_one_are_two_recoveries():
    events = [(0.5, "state", "INIT->NORMAL"),
              (10.0, "fault", "rank 3 memory: reported state 2"), (10.0, "state", "NORMAL->ABNORMAL"),
              (10.2, "decision", "retry: faults 3:memory repair_step=5"), (10.2, "state", "ABNORMAL->ENV_CLEAR"),
              (11.0, "state", "REPAIR->NORMAL"),
              (20.0, "fault", "rank 1 node: connection lost"), (20.1, "fault", "rank 2 communication: peer gone"),
              (20.3, "state", "NORMAL->ABNORMAL"), (20.5, "decision", "dump: no live holder of shard 1"),
              (25.0, "state", "DUMP->EXIT")]
    status = job_status("EXIT", RANKS, events, {})
    assert [(r.number, r.strategy, r.started_s, r.duration_s, r.outcome, r.faults) for r in status.recoveries] == [
        (1, "retry", 10.0, 1.0, "training goes on", ["rank 3 memory"]),
        (2, "dump", 20.0, 5.0, "job ended", ["rank 1 node", "rank 2 communication"])]
    assert status.faults_by_kind == {"memory": 1, "node": 1, "communication": 1}
    assert status.decisions_by_strategy == {"retry": 1, "dump": 1}
    assert status.to_json()["recoveries"][1]["duration_s"] == 5.0


def test_a_recovery_in_progress_has_no_duration_yet():
    events = [(0.5, "state", "INIT->NORMAL"), (3.0, "state", "NORMAL->ABNORMAL")]
    (recovery,) = recoveries(events)
    assert (recovery.strategy, recovery.duration_s, recovery.outcome) == ("undecided", None, "in progress")


def test_a_fault_after_the_job_finished_starts_no_recovery():
    events = [(0.5, "state", "INIT->NORMAL"), (9.0, "state", "NORMAL->FINAL"), (9.5, "fault", "rank 0 node: lost")]
    assert recoveries(events) == []


def test_the_layout_names_each_shards_holders_and_a_node_holding_several_copies():
    nodes = ["h/node0", "h/node1", "h/node0", "h/node0", ""]
    ranks = [dict(entry, domain=node) for entry, node in zip(RANKS, nodes)]
    # dp4 R=2: shard 0 on ranks 0 and 2 (both node0), shard 1 on ranks 1 and 3 (rank 3 unregistered)
    layout = [{"optimizer_type": 0, "group": 0, "replica_cnt": 2, "ranks": [0, 1, 2, 3]}]
    status = job_status("NORMAL", ranks, [], {}, layout=layout, term=3)
    assert status.term == 3 and [r.domain for r in status.ranks] == nodes
    assert [(s.shard, s.holders, s.live_holders, s.shared_domains) for s in status.shards] == [
        (0, [0, 2], [0], ["h/node0"]), (1, [1, 3], [1], [])]  # rank 2 is dead, rank 3 never registered
    assert status.to_json()["shards"][0]["shared_domains"] == ["h/node0"]


def test_without_a_reported_layout_there_are_no_shards():
    assert job_status("INIT", RANKS, [], {}).shards == []


def test_a_large_layout_lists_only_the_shards_that_need_a_look():
    from mindio_adaptor.status.page import status_page

    ranks = [{"step": 1, "flags": ["registered", "connected"], "silent_ms": 0, "heartbeat_ms": 1000,
              "domain": "node0" if r < 100 or r == 101 else "node1"} for r in range(200)]
    # 100 shards, shard j on ranks j (node0) and j + 100 (node1); rank 101 is on node0: one crowded shard
    layout = [{"optimizer_type": 0, "group": 0, "replica_cnt": 2, "ranks": list(range(200))}]
    page = status_page(job_status("NORMAL", ranks, [], {}, layout=layout))
    assert page.count("node node0 holds several copies") == 1 and "<td>0</td><td>0</td><td>1</td>" in page
    assert "99 more shards: copies on distinct nodes, every copy alive" in page


def test_the_goodput_ledger_reaches_the_page_the_table_and_the_metrics():
    from prometheus_client.parser import text_string_to_metric_families

    from mindio_adaptor.cli.status import status_table
    from mindio_adaptor.status.metrics import metrics_text
    from mindio_adaptor.status.page import status_page

    goodput = {"wall_s": 10.0, "recoveries": [{"number": 1, "phases": {"ABNORMAL": 0.5}, "recomputed_s": 0.2}],
               "uses": {"productive": 6.0, "start_up": 2.0, "saving": 0.0, "stalled": 0.3, "paused": 1.0,
                        "recovering": 0.5, "recomputed": 0.2}}
    status = job_status("NORMAL", RANKS, [], {}, goodput=goodput)
    assert "<tr><td>paused</td><td>1.0 s</td><td>10.0%</td></tr>" in status_page(status)
    assert status_table(status.to_json()).endswith(
        "goodput 0.60 of 10.00 s: productive 6.00 s, start-up 2.00 s, stalled 0.30 s, paused 1.00 s, recovering "
        "0.50 s, recomputed 0.20 s; recovery #1: ABNORMAL 0.50 s, recomputed 0.20 s")
    samples = {(s.name, s.labels.get("use")): s.value for f in text_string_to_metric_families(
        metrics_text(lambda: status).decode()) for s in f.samples}
    assert samples[("mindio_goodput_seconds_total", "stalled")] == 0.3
    assert samples[("mindio_wall_seconds_total", None)] == 10.0
    assert "<p>not accounted yet</p>" in status_page(job_status("INIT", RANKS, [], {}))
