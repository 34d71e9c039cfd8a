"""A standby on a host of its own (a network namespace, tests/netns_hosts.py) cannot listen at node 0's address:
when node 0 is lost it waits for a new node 0 there as the nodes do, watches the nodes in its store, and takes
node 1's place when node 1 is lost later. (On a host that can listen there, it takes node 0's place itself:
test_launch_node0_loss.py.) Shell workers (shell_launchers.py)."""
import os
import signal
import time

import psutil
import pytest

from test_vanished_launcher import LOST_AFTER_S, HostedLaunchers, available, hosts  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.integration, pytest.mark.skipif(bool(available()), reason=available() or "-")]


def lose(launcher):
    """SIGKILL a launcher and every worker it started (each leads its own process group)."""
    workers = psutil.Process(launcher.pid).children()
    launcher.send_signal(signal.SIGKILL)
    for worker in workers:
        os.killpg(worker.pid, signal.SIGKILL)
    launcher.wait(timeout=10)


def test_a_standby_on_another_host_follows_the_new_node_0_and_still_takes_a_lost_node(hosts, tmp_path):
    cluster = HostedLaunchers(hosts, tmp_path)
    node0, node1 = cluster.start(0, "--node-rank", "0"), cluster.start(1, "--node-rank", "1")
    standby = cluster.start(2, "--standby")
    cluster.wait_starts(4)
    deadline = time.monotonic() + 60
    while "standby: watching nodes [1]" not in cluster.log(standby):
        assert time.monotonic() < deadline, cluster.all_logs()
        time.sleep(0.2)
    lose(node0)
    time.sleep(3 * LOST_AFTER_S)  # the standby has seen the loss by now, and waits
    assert standby.poll() is None
    new_node0 = cluster.start(0, "--node-rank", "0")
    cluster.wait_starts(6)
    lose(node1)
    after = cluster.wait_starts(8)[6:]
    assert sorted((rank, restarted) for rank, restarted, _ in after) == [(2, "1"), (3, "1")]
    (tmp_path / "finish").touch()
    assert (cluster.wait_exit(new_node0), cluster.wait_exit(standby)) == (0, 0), cluster.all_logs()
    taker = cluster.log(standby)
    address = f"{hosts.address(0)}:29555"
    assert f"standby: lost the launchers' store at {address} (node 0's launcher) at " in taker, taker
    assert "takes node 0's place" not in taker
    assert "standby: joined the launchers' store of a new node 0 after" in taker
    assert "node 1 was lost: this launcher takes its place in the running job (incarnation 2)" in taker
