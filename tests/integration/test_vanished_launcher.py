"""A node that vanishes, not dies: each launcher on a host of its own (a network namespace, tests/netns_hosts.py),
and node 1's link taken down at the bridge. Its launcher and workers keep running, and nobody hears a FIN or a
RST from them, as after a power or NIC loss. A standby on a third host takes node 1's place on the beat's
evidence alone (no lifeline proof can exist), within --node-lost-after plus a beat; when node 1's link comes
back, its old launcher learns its rank was taken, stops its workers and exits 1; node 0 and the standby finish 0.
The workers are shell loops (shell_launchers.py)."""
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from shell_launchers import LAUNCH, WORKER

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from netns_hosts import NetnsHosts, available  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.skipif(bool(available()), reason=available() or "-")]
LOST_AFTER_S = 3
WAIT_S = 120  # a launcher's start on a loaded two-core host took up to 33 s


class HostedLaunchers:
    def __init__(self, hosts, out: Path):
        self.hosts, self.out, self.logs = hosts, out, {}
        self.env = dict(os.environ, **hosts.environment(0), OUT=str(out), PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(
            p for p in [str(Path(__file__).resolve().parent.parent.parent), os.environ.get("PYTHONPATH", "")] if p))
        self.common = ["--nnodes", "2", "--nproc-per-node", "2", "--rdzv-endpoint", f"{hosts.address(0)}:29555",
                       "--rdzv-id", "vanish", "--worker-reboot", "--node-lost-after", str(LOST_AFTER_S)]

    def start(self, host, *flags):
        path = self.out / f"host{host}-{len(self.logs)}.log"
        with path.open("w") as log:
            proc = self.hosts.popen(host, [*LAUNCH, *self.common, *flags, *WORKER], env=self.env, stdout=log,
                                    stderr=subprocess.STDOUT)
        self.logs[proc] = path
        return proc

    def log(self, proc):
        return self.logs[proc].read_text()

    def starts(self):
        path = self.out / "starts"
        rows = [line.split() for line in path.read_text().splitlines()] if path.exists() else []
        return [(int(rank), restarted, int(pid)) for rank, restarted, _, pid in rows]

    def wait_starts(self, count):
        deadline = time.monotonic() + WAIT_S
        while len(self.starts()) < count:
            assert time.monotonic() < deadline, f"only {self.starts()} started:\n{self.all_logs()}"
            time.sleep(0.2)
        return self.starts()

    def wait_exit(self, proc):
        try:
            return proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"launcher {proc.pid} still running:\n{self.all_logs()}") from None

    def all_logs(self):
        return "\n".join(f"== {path.name}\n{path.read_text()[-3000:]}" for path in self.logs.values())


@pytest.fixture
def hosts():
    with NetnsHosts(3) as made:
        yield made


def test_a_vanished_node_is_taken_on_the_beat_and_its_old_launcher_stands_down(hosts, tmp_path):
    cluster = HostedLaunchers(hosts, tmp_path)
    node0, node1 = cluster.start(0, "--node-rank", "0"), cluster.start(1, "--node-rank", "1")
    standby = cluster.start(2, "--standby")
    first = cluster.wait_starts(4)
    hosts.vanish(1)
    vanished_at = time.monotonic()
    after = cluster.wait_starts(6)[4:]
    taken_s = time.monotonic() - vanished_at
    assert sorted(rank for rank, _, _ in after) == [2, 3] and {r for _, r, _ in after} == {"1"}
    # within the silence allowed plus the standby's poll and a worker start; generous for a loaded host
    assert taken_s < LOST_AFTER_S + 30, taken_s
    old_workers = [pid for rank, _, pid in first if rank in (2, 3)]
    assert all(psutil.pid_exists(pid) for pid in old_workers)  # vanished, not dead: they run on, unheard

    hosts.come_back(1)
    assert cluster.wait_exit(node1) == 1
    old = cluster.log(node1)
    assert "another launcher took node rank 1" in old and "stopping this node's workers" in old, old
    assert not any(psutil.pid_exists(pid) for pid in old_workers)
    taker = cluster.log(standby)
    assert re.search(r"node 1 was lost: this launcher takes its place .* beat was silent for 3 s", taker), taker

    (tmp_path / "finish").touch()
    assert (cluster.wait_exit(node0), cluster.wait_exit(standby)) == (0, 0), cluster.all_logs()
    assert "summary: 2 local workers exited 0" in cluster.log(node0)
    assert [row for row in cluster.starts() if row[0] in (0, 1)] == [row for row in first if row[0] in (0, 1)]


def test_a_launcher_publishes_its_address_on_the_route_to_node_0_not_its_host_names(hosts):
    # This machine's host name resolves to 127.0.0.1 (Debian's /etc/hosts gives 127.0.1.1): published there, a
    # node's lifeline, controller and workers' store would point every other host at its own loopback.
    probe = ("from types import SimpleNamespace as S; from mindio_adaptor.launch.controllers import reachable_host; "
             f"print(reachable_host(S(master_addr='{hosts.address(0)}', master_port=29555)))")
    for host in (0, 1):
        said = subprocess.run(hosts.command(host, [sys.executable, "-c", probe]), capture_output=True, text=True,
                              timeout=60, env=dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2])))
        assert said.stdout.strip() == hosts.address(host), said.stderr
