"""Node 0 lost, under `mindio-adaptor launch` with real processes: node 0's launcher (the launchers' store's
host) and its workers are SIGKILLed. Node 1's launcher keeps its workers running and waits (--node0-wait)
for a new launcher with node rank 0 at the same address; that one hosts a fresh store, learns from node 1
that the job runs, and starts its workers as replacements (MINDIO_RESTARTED=1). With no new node 0 within
the wait, node 1 stops its workers and exits 1 naming the lost store. Shell workers
(tests/integration/shell_launchers.py): the workers' own recovery is not what is tested here."""
import os
import signal
import time

import psutil
import pytest

from shell_launchers import LOST_AFTER_S, TIMEOUT_S, WORKER

pytestmark = pytest.mark.integration

NODE0_WAIT_S = 4.0  # when no new node 0 comes
REPLACEMENT_WAIT_S = 3 * TIMEOUT_S  # when one comes: a launcher's start on two loaded cores is slow
MARGIN_S = 30  # two shared cores: the launcher's own stop and exit, with room


def node_pids(rows, node):
    return {pid for rank, _, _, pid in rows if rank // 2 == node}


def node_0_replaced(cluster, flags, worker):
    """Two nodes started, node 0 lost once its workers ran, a new node 0 started and its workers too; returns
    (the new node 0's launcher, node 1's)."""
    node0 = cluster.start("--node-rank", "0", *flags, worker=worker)
    node1 = cluster.start("--node-rank", "1", *flags, worker=worker)
    cluster.wait_starts(4, node0, node1)
    cluster.lose_node(node0)
    new_node0 = cluster.start("--node-rank", "0", *flags, worker=worker)
    cluster.wait_starts(6, new_node0, node1)
    return new_node0, node1


def test_a_new_node_0_joins_the_running_job_and_node_1_keeps_its_workers(cluster):
    wait = ("--node0-wait", str(REPLACEMENT_WAIT_S))
    node0, node1 = cluster.start("--node-rank", "0", *wait), cluster.start("--node-rank", "1", *wait)
    first = cluster.wait_starts(4, node0, node1)
    cluster.lose_node(node0)
    time.sleep(3 * LOST_AFTER_S)  # node 1 has seen the loss by now, and kept its workers
    assert node1.poll() is None
    assert all(psutil.pid_exists(pid) for pid in node_pids(first, 1))
    new_node0 = cluster.start("--node-rank", "0", *wait)
    after = cluster.wait_starts(6, new_node0, node1)[4:]
    assert sorted((rank, restarted) for rank, restarted, *_ in after) == [(0, "1"), (1, "1")]
    (code0, err0), (code1, err1) = cluster.finish(new_node0, node1)
    assert (code0, code1) == (0, 0), (err0, err1)
    assert "node 0 was lost: this launcher takes its place in the running job (incarnation 2)" in err0
    assert f"node 1 lost the launchers' store at 127.0.0.1:{cluster.port} (node 0's launcher) at " in err1
    assert "rejoined the launchers' store of a new node 0 after" in err1
    assert "summary: 2 local workers exited 0" in err1  # node 1's two original workers, never restarted
    assert [row for row in cluster.starts() if row[0] in (2, 3)] == [row for row in first if row[0] in (2, 3)]


def test_the_new_node_0_hosts_slot_0_again_and_learns_the_rest_from_node_1(cluster):
    """With --controllers 2, node 0's launcher hosted the active controller and chose the token; the new
    node 0 hosts slot 0 again (a backup on a new port) and learns the token and slot 1 from node 1."""
    flags = ("--node0-wait", str(REPLACEMENT_WAIT_S), "--controllers", "2")
    # Each start also appends "rank controllers token slot" to OUT/controllers.
    worker = [*WORKER[:-1], 'echo "$RANK $MINDIO_CONTROLLER_ADDR $MINDIO_TOKEN ${MINDIO_REHOSTED_SLOT:--}" '
              '>> "$OUT/controllers"; ' + WORKER[-1]]
    new_node0, node1 = node_0_replaced(cluster, flags, worker)
    (code0, err0), (code1, err1) = cluster.finish(new_node0, node1)
    assert (code0, code1) == (0, 0), (err0, err1)
    rows = [line.split() for line in (cluster.out / "controllers").read_text().splitlines()]
    assert len(rows) == 6, rows
    first, new = rows[:4], rows[4:]  # the first four starts, then the new node 0's two workers
    assert len({(addresses, token, slot) for _, addresses, token, slot in first}) == 1 and first[0][3] == "-", rows
    assert {rank for rank, *_ in new} == {"0", "1"} and all(row[3] == "0" for row in new), rows
    old_list, new_list = first[0][1].split(","), new[0][1].split(",")
    assert new_list[1] == old_list[1] and new_list[0] != old_list[0], rows  # slot 0 on a new port
    assert {token for _, _, token, _ in rows} == {first[0][2]}, rows
    assert "backup controller started as pid" in err0 and "slot 0 of the list hosted again" in err0, err0


def test_a_group_restart_after_node_0_was_replaced_starts_every_rank_in_a_new_generation(cluster):
    """After node 0 was replaced, rank 3 fails twice (--max-restarts 1: started again alone, then the whole
    group): every launcher, the new node 0 included, starts its ranks in generation 1, at a new workers' store,
    with the stores of generation 1 beside the controllers (the new node 0 hosts slot 0's), and the job ends 0."""
    flags = ("--node0-wait", str(REPLACEMENT_WAIT_S), "--controllers", "2", "--max-restarts", "1")
    # Each start also appends "rank stores" to OUT/stores.
    worker = [*WORKER[:-1], 'echo "$RANK $MINDIO_STORE_ADDRS" >> "$OUT/stores"; ' + WORKER[-1]]
    new_node0, node1 = node_0_replaced(cluster, flags, worker)
    for count in (7, 11):  # rank 3 alone, then the group
        rank_3 = [pid for rank, _, _, pid in cluster.starts() if rank == 3][-1]
        os.kill(rank_3, signal.SIGKILL)
        cluster.wait_starts(count, new_node0, node1)
    rows = cluster.starts()
    assert (rows[6][0], rows[6][1]) == (3, "1"), rows  # started again alone
    group = rows[7:]
    assert sorted(rank for rank, *_ in group) == [0, 1, 2, 3] and {r for _, r, _, _ in group} == {"0"}, rows
    assert len({port for _, _, port, _ in group}) == 1 and group[0][2] not in {port for _, _, port, _ in rows[:7]}
    stores = [line.split() for line in (cluster.out / "stores").read_text().splitlines()]
    generation_1 = {addresses for _, addresses in stores[7:]}
    assert len(generation_1) == 1 and generation_1.isdisjoint(addresses for _, addresses in stores[:7]), stores
    assert len(generation_1.pop().split(",")) == 2, stores
    (code0, err0), (code1, err1) = cluster.finish(new_node0, node1)
    assert (code0, code1) == (0, 0), (err0, err1)
    assert "generation 1: started ranks [0, 1]" in err0 and "generation 1: started ranks [2, 3]" in err1, (err0, err1)


def test_without_a_new_node_0_node_1_ends_after_the_wait_and_leaves_nothing_running(cluster):
    wait = ("--node0-wait", str(NODE0_WAIT_S))
    node0, node1 = cluster.start("--node-rank", "0", *wait), cluster.start("--node-rank", "1", *wait)
    first = cluster.wait_starts(4, node0, node1)
    lost_at = time.monotonic()  # before the kill: node 1 cannot see the loss earlier
    cluster.lose_node(node0)
    code, err = node1.wait(timeout=NODE0_WAIT_S + MARGIN_S), node1.stderr.read()
    took = time.monotonic() - lost_at
    assert code == 1, err
    assert (f"lost the launchers' store on node 0 (127.0.0.1:{cluster.port}) and no new node 0 came within "
            f"{NODE0_WAIT_S:g} s (--node0-wait)") in err
    assert NODE0_WAIT_S <= took < NODE0_WAIT_S + MARGIN_S, err
    assert not any(psutil.pid_exists(pid) for pid in node_pids(first, 1)), err


def test_a_signal_during_the_wait_stops_node_1_at_once(cluster):
    wait = ("--node0-wait", str(TIMEOUT_S))
    node0, node1 = cluster.start("--node-rank", "0", *wait), cluster.start("--node-rank", "1", *wait)
    first = cluster.wait_starts(4, node0, node1)
    cluster.lose_node(node0)
    time.sleep(3 * LOST_AFTER_S)  # node 1 waits for a new node 0 by now
    node1.send_signal(signal.SIGTERM)
    code, err = node1.wait(timeout=MARGIN_S), node1.stderr.read()
    assert code == 128 + signal.SIGTERM, err
    assert f"waits up to {TIMEOUT_S:g} s (--node0-wait) for a new node 0" in err and "received SIGTERM" in err
    assert not any(psutil.pid_exists(pid) for pid in node_pids(first, 1)), err


def test_a_node_whose_workers_all_exited_0_finishes_0_when_node_0_ended_first(cluster):
    """Node 1's launcher is stalled (SIGSTOP) while every worker finishes: node 0's end barrier takes it
    for lost and node 0 exits with its store. Woken, node 1 finds the store gone and nothing to keep
    running: it finishes 0 at once rather than wait for a new node 0."""
    node0, node1 = cluster.start("--node-rank", "0"), cluster.start("--node-rank", "1")  # --node0-wait 600 s
    cluster.wait_starts(4, node0, node1)
    node1.send_signal(signal.SIGSTOP)
    try:
        [(code0, err0)] = cluster.finish(node0)
    finally:
        node1.send_signal(signal.SIGCONT)
    assert code0 == 0, err0
    code1, err1 = node1.wait(timeout=MARGIN_S), node1.stderr.read()
    assert code1 == 0, err1
    assert "every local worker exited 0: finishing" in err1 and "summary: 2 local workers exited 0" in err1


def test_a_standby_whose_host_can_listen_at_node_0s_address_takes_node_0s_place(cluster):
    """On node 0's host, or where node 0's floating address moved to it, a standby is the new node 0 itself:
    once node 0's launcher is proven gone (its lifeline refuses) it hosts the launchers' store at that address,
    node 1 rejoins it, and its workers start as the lost ranks' replacements, without waiting for a scheduler.
    A standby on another host follows a new node 0 instead: tests/integration/test_standby_on_another_host.py."""
    wait = ("--node0-wait", str(REPLACEMENT_WAIT_S))
    # The standby first: it watches before node 0 has published its lifeline, which it must read later.
    standby = cluster.start("--standby", *wait, logged=True)
    node0 = cluster.start("--node-rank", "0", *wait, logged=True)
    node1 = cluster.start("--node-rank", "1", *wait, logged=True)
    first = cluster.wait_starts(4, node0, node1, standby)
    cluster.wait_for_line(standby, "standby: watching nodes [1]")
    cluster.lose_node(node0)
    after = cluster.wait_starts(6, node1, standby)[4:]
    assert sorted((rank, restarted) for rank, restarted, *_ in after) == [(0, "1"), (1, "1")]
    (code_s, err_s), (code1, err1) = cluster.finish(standby, node1)
    assert (code_s, code1) == (0, 0), (err_s, err1)
    assert (f"standby: node 0's launcher is gone (its launcher's process is gone: its lifeline closed and its port "
            f"refuses connections) and this host can listen at its address 127.0.0.1:{cluster.port}: this standby "
            f"takes node 0's place, hosting the launchers' store") in err_s, err_s
    assert ("node 0 was lost: this launcher takes its place in the running job (incarnation 2); its workers start "
            "as replacements (the node counted as lost because its launcher's process is gone") in err_s, err_s
    assert "rejoined the launchers' store of a new node 0 after" in err1
    assert "summary: 2 local workers exited 0" in err1  # node 1's two original workers, never restarted
    assert [row for row in cluster.starts() if row[0] in (2, 3)] == [row for row in first if row[0] in (2, 3)]
