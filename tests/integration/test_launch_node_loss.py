"""A lost node's place taken by a new launcher, under `mindio-adaptor launch` with real processes: every
process of node 1 (its launcher and its workers) is SIGKILLed; a launcher started again with node rank 1,
or a standby already waiting, takes its place in the running job and starts its workers as replacements
(MINDIO_RESTARTED=1, the same workers' store); node 0's workers keep their processes. A launcher cannot
take the rank of a node that is alive, and node 0 does not wait for a lost node at the end.
The workers are shell loops (tests/integration/shell_launchers.py)."""
import os
import signal
import time

import pytest

from mindio_adaptor.launch.unreplaced_nodes import CHECK_PERIOD_S
from shell_launchers import LOST_AFTER_S, TIMEOUT_S

pytestmark = pytest.mark.integration


def test_a_new_launcher_takes_a_lost_nodes_place_and_only_its_workers_change(cluster):
    node0, node1 = cluster.start("--node-rank", "0"), cluster.start("--node-rank", "1")
    first = cluster.wait_starts(4, node0, node1)
    twin = cluster.start("--node-rank", "1")  # node 1 is alive: its rank cannot be taken
    code, err = twin.wait(timeout=TIMEOUT_S), twin.stderr.read()
    assert code == 1 and "node rank 1 is held by a running launcher (its beat moved within 1 s)" in err, err
    cluster.lose_node(node1)
    replacement = cluster.start("--node-rank", "1")
    after = cluster.wait_starts(6, node0, replacement)[4:]
    assert sorted(rank for rank, *_ in after) == [2, 3]
    assert {(restarted, port) for _, restarted, port, _ in after} == {("1", first[0][2])}  # same workers' store
    (code0, err0), (code1, err1) = cluster.finish(node0, replacement)
    assert (code0, code1) == (0, 0), (err0, err1)
    assert "node 1 was lost: this launcher takes its place in the running job (incarnation 2)" in err1
    assert "to replace the lost node's" in err1
    assert "summary: 2 local workers exited 0" in err0  # node 0's two original workers, never restarted
    assert [row for row in cluster.starts() if row[0] in (0, 1)] == [row for row in first if row[0] in (0, 1)]


def test_a_standby_takes_the_lost_nodes_place_and_a_second_one_is_not_needed(cluster):
    node0, node1 = cluster.start("--node-rank", "0"), cluster.start("--node-rank", "1")
    cluster.wait_starts(4, node0, node1)
    standbys = [cluster.start("--standby"), cluster.start("--standby")]
    time.sleep(2 * LOST_AFTER_S)  # the standbys watch live nodes and take nothing
    assert len(cluster.starts()) == 4
    cluster.lose_node(node1)
    after = cluster.wait_starts(6, node0, *standbys)[4:]
    assert sorted((rank, restarted) for rank, restarted, *_ in after) == [(2, "1"), (3, "1")]
    results = cluster.finish(node0, *standbys)
    assert [code for code, _ in results] == [0, 0, 0], results
    assert "will not be replaced" not in results[0][1]  # a standby waited: node 0 told no controller otherwise
    logs = [err for _, err in results[1:]]
    took = [log for log in logs if "node 1 was lost: this launcher takes its place" in log]
    idle = [log for log in logs if "this standby was not needed; exit code 0" in log]
    assert len(took) == 1 and len(idle) == 1, logs


def test_node_0_tells_the_controllers_when_nothing_takes_a_lost_nodes_place(cluster):
    """Node 1 lost with no standby: node 0's launcher, which holds a connection to every node's lifeline,
    proves node 1's launcher gone and tells the controller it hosts that nothing will replace
    ranks 2 and 3 (launch/unreplaced_nodes; with elastic training the job then scales in at once). With a
    standby waiting it tells them nothing (below)."""
    hosted = ("--controllers", "1")  # node 0's launcher hosts the job's controller
    node0, node1 = cluster.start("--node-rank", "0", *hosted, logged=True), cluster.start("--node-rank", "1", *hosted)
    cluster.wait_starts(4, node0, node1)
    time.sleep(3 * CHECK_PERIOD_S)  # node 0 holds node 1's lifeline by then
    cluster.lose_node(node1)
    cluster.wait_for_line(node0, "told the recovery controller that ranks [2, 3] will not be replaced: noted: ranks "
                                 "[2,3] will not be replaced: node 1 is lost (its launcher's process is gone: its "
                                 "lifeline closed and its port refuses connections) and no standby waits to take "
                                 "its place")
    [(code, err)] = cluster.finish(node0)
    assert code == 0, err
    assert err.count("will not be replaced: noted") == 1, err


def test_node_0_tells_the_controllers_of_a_silent_node_once(cluster):
    """A node whose beat is silent for --node-lost-after (so a host that vanished looks; here its launcher is
    stopped) is reported the same way, once. Its workers live on, and the controller forgets the report when
    it hears from them (tests/integration/test_controller_arf.py); the launcher, woken, finishes its part."""
    hosted = ("--controllers", "1")
    node0, node1 = cluster.start("--node-rank", "0", *hosted, logged=True), cluster.start("--node-rank", "1", *hosted)
    cluster.wait_starts(4, node0, node1)
    node1.send_signal(signal.SIGSTOP)
    try:
        cluster.wait_for_line(node0, f"told the recovery controller that ranks [2, 3] will not be replaced: noted: "
                                     f"ranks [2,3] will not be replaced: node 1 is lost (its beat was silent for "
                                     f"{LOST_AFTER_S:g} s) and no standby waits to take its place")
        time.sleep(4 * CHECK_PERIOD_S)  # still silent: not told again
    finally:
        node1.send_signal(signal.SIGCONT)
    (code0, err0), (code1, err1) = cluster.finish(node0, node1)
    assert (code0, code1) == (0, 0), (err0, err1)
    assert err0.count("will not be replaced: noted") == 1, err0


def test_node_0_does_not_wait_for_a_lost_node_at_the_end(cluster):
    node0, node1 = cluster.start("--node-rank", "0"), cluster.start("--node-rank", "1")
    cluster.wait_starts(4, node0, node1)
    cluster.lose_node(node1)
    began = time.monotonic()
    [(code, err)] = cluster.finish(node0)
    assert code == 0, err
    assert time.monotonic() - began < 15, err  # not the 300 s exit barrier


def test_a_killed_node_is_taken_at_once_and_a_stalled_one_never(cluster):
    """--node-lost-after 60: only the lost launcher's lifeline can make a standby act within seconds. A
    launcher stopped for 5 s (a stalled host) keeps its lifeline and is not taken over."""
    cluster.common[cluster.common.index("--node-lost-after") + 1] = "60"
    node0, node1 = cluster.start("--node-rank", "0"), cluster.start("--node-rank", "1")
    cluster.wait_starts(4, node0, node1)
    standby = cluster.start("--standby", logged=True)
    cluster.wait_for_line(standby, "standby: watching nodes [1]")
    os.kill(node1.pid, signal.SIGSTOP)
    time.sleep(5)
    os.kill(node1.pid, signal.SIGCONT)
    assert len(cluster.starts()) == 4 and "takes its place" not in cluster.log_of(standby)
    began = time.monotonic()
    cluster.lose_node(node1)
    after = cluster.wait_starts(6, node0, standby)[4:]
    taken_s = time.monotonic() - began
    assert sorted((rank, restarted) for rank, restarted, *_ in after) == [(2, "1"), (3, "1")]
    assert taken_s < 20, taken_s  # not the 60 s of silence
    (code0, err0), (code_s, err_s) = cluster.finish(node0, standby)
    assert (code0, code_s) == (0, 0), (err0, err_s)
    assert "node 1 was lost: this launcher takes its place in the running job (incarnation 2); its workers start " \
           "as replacements (the node counted as lost because its launcher's process is gone: its lifeline " \
           "closed and its port refuses connections)" in err_s
