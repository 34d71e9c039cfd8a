"""A launcher that lost node 0 (launch/node0_loss, its rejoin_entries among them): the wait's deadline,
what it writes into a new node 0's store and in which order, and, on a real TCPStore, that the owners it
writes back keep fencing and let the new node 0 take node 0's place."""
import socket

import pytest
from torch.distributed import TCPStore

from mindio_adaptor.core.job.controller_address import ENV_CONTROLLER, ENV_TOKEN
from mindio_adaptor.core.job.paired_store import ENV_STORES
from mindio_adaptor.core.job.sealed_values import SealedStore
from mindio_adaptor.launch import node_liveness
from mindio_adaptor.launch.config import LaunchConfig
from mindio_adaptor.launch.controllers import controllers_keys
from mindio_adaptor.launch.node0_loss import Node0Outage, can_host, rejoin_entries
from mindio_adaptor.launch.node_liveness import store_listening
from mindio_adaptor.launch.node_store import NodeStore
from mindio_adaptor.launch.store_keys import CONTROLLER_END, GENERATION, JOB_RUNNING, stores_keys


def test_the_wait_ends_at_its_deadline():
    outage = Node0Outage(5.0, since=100.0, since_wall=0.0)
    assert outage.remaining(now=102.0) == 3.0 and not outage.over(now=102.0)
    assert outage.remaining(now=106.0) == 0.0 and outage.over(now=105.0)
    assert outage.started_at() == "1970-01-01 00:00:00 UTC"


def test_a_wait_of_no_time_is_refused():
    with pytest.raises(ValueError, match="must be > 0 s, got 0"):
        Node0Outage(0)


def test_a_store_listening_is_told_from_a_closed_port():
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    assert store_listening("127.0.0.1", store.port, timeout=1.0)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, not listening: nothing accepts there
        assert not store_listening("127.0.0.1", sock.getsockname()[1], timeout=1.0)


def test_a_standby_can_host_node_0s_address_only_when_it_is_its_own_and_free():
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    assert not can_host("127.0.0.1", store.port)  # a live node 0 listens there
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        free = sock.getsockname()[1]
    assert can_host("127.0.0.1", free)
    # TEST-NET-1 (RFC 5737) is no address of this host: only bound, never sent to
    assert not can_host("192.0.2.1", free)


def test_the_controllers_keys_come_back_in_node_order_without_the_token():
    env = {ENV_CONTROLLER: "10.0.0.1:7000,10.0.0.2:7001", ENV_TOKEN: "t0k"}
    assert controllers_keys(env, 2) == {"generation/2/controller/0": "10.0.0.1:7000",
                                     "generation/2/controller/1": "10.0.0.2:7001"}
    assert controllers_keys({}, 0) == {}


def entries(**overrides):
    given = dict(node=1, members='{"nnodes": 2}', owner_value="1:abc", generation=3, node0_owner=2,
                 controller_ended=False, controllers={})
    return rejoin_entries(**{**given, **overrides})


def test_the_running_job_is_said_first_and_the_config_last():
    written = entries()
    assert written[0] == (JOB_RUNNING, "1", True)
    assert written[-1] == ("node/1/config", '{"nnodes": 2}', False)  # the new node 0 waits for it
    assert (GENERATION, "3", True) in written


def test_the_owners_come_back_and_node_0s_is_marked_lost():
    written = entries()
    assert ("node/1/owner", "1:abc", True) in written
    assert ("node/0/owner", "2:lost", True) in written
    assert ("node/1", "1", True) in written  # a second launcher of node 1 is not taken for the first


def test_a_controller_end_and_the_controllers_come_back():
    env = {ENV_CONTROLLER: "h:1,h:2", ENV_TOKEN: "t"}
    written = entries(controller_ended=True, controllers=env)
    assert (CONTROLLER_END, "1", False) in written
    assert {("generation/3/controller/0", "h:1", True), ("generation/3/controller/1", "h:2", False)} <= set(written)
    assert not any("token" in key or value == "t" for key, value, _ in written)  # never in a store
    assert not any(key == CONTROLLER_END for key, *_ in entries())


def write(store, written):
    for key, value, keep_existing in written:
        if keep_existing:
            store.compare_set(key, "", value)
        else:
            store.set(key, value)


def test_on_a_fresh_store_the_new_node_0_takes_over_and_fencing_holds():
    store = _node_store(TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False), 0).store
    write(store, entries(node=1, owner_value="1:abc", node0_owner=1))
    write(store, entries(node=2, owner_value="2:def", node0_owner=1))
    assert node_liveness.owner(store, 1) == 1 and node_liveness.owner(store, 2) == 2
    assert node_liveness.take_over(store, 0, node_liveness.owner(store, 0)) == 2  # the new node 0
    write(store, entries(node=3, owner_value="1:ghi", node0_owner=1))  # a late one changes nothing owned
    assert node_liveness.owner(store, 0) == 2 and store.get(GENERATION) == b"3"
    store.set(node_liveness.owner_key(1), "2:xyz")  # node 1 was taken over meanwhile
    write(store, entries(node=1, owner_value="1:abc"))
    assert node_liveness.owner(store, 1) == 2  # so the old launcher of node 1 finds itself fenced


def test_the_workers_stores_come_back_under_the_generation():
    env = {ENV_STORES: "10.0.0.1:5000,10.0.0.2:5001"}
    assert stores_keys(4, env) == {"generation/4/store/0": "10.0.0.1:5000", "generation/4/store/1": "10.0.0.2:5001"}
    assert stores_keys(4, {}) == {}
    written = entries(stores=env)
    # Node 1's own slot is written over whatever another launcher wrote back first: only node 1 knows where its
    # store is now (a replaced node 1 hosts a new one).
    assert {("generation/3/store/0", "10.0.0.1:5000", True), ("generation/3/store/1", "10.0.0.2:5001", False)} \
        <= set(written)
    assert written[-1][0] == "node/1/config"


def _node_store(store, node, controllers=2):
    config = LaunchConfig(nnodes=2, nproc_per_node=2, node_rank=node, master_addr="127.0.0.1", master_port=0,
                          run_id="r", max_restarts=3, worker_reboot=True, worker_reboot_reason="", monitor_interval=0.1,
                          shutdown_timeout=5, rdzv_timeout=10, role="default", controllers=controllers)
    node_store = NodeStore(config, "test-token")
    node_store.store = store if isinstance(store, SealedStore) else node_store.sealed(store)
    return node_store


def test_each_controller_node_hosts_a_workers_store_and_a_new_node_0_keeps_the_survivors_list():
    store = _node_store(TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False), 0).store
    node_0, node_1 = _node_store(store, 0), _node_store(store, 1)
    master_port = node_0.open_generation(0)
    assert node_1.open_generation(0) == master_port  # its workers still start on node 0's store
    listed = node_1.worker_stores(0)[ENV_STORES].split(",")
    assert listed[0] == f"127.0.0.1:{master_port}"
    own = int(listed[1].rsplit(":", 1)[1])
    assert own != master_port and store_listening("127.0.0.1", own, timeout=1.0)  # node 1 hosts it

    fresh = _node_store(TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False), 0).store  # a new node 0's
    write(fresh, entries(generation=0, stores=node_1.worker_stores(0)))
    new_node_0 = _node_store(fresh, 0)
    assert new_node_0.open_generation(0) != master_port  # a fresh store of its own at MASTER_PORT...
    assert new_node_0.worker_stores(0)[ENV_STORES].split(",") == listed  # ...but the survivors' list
    assert _node_store(store, 1, controllers=1).worker_stores(0)[ENV_STORES] == listed[0]


def test_a_store_that_resets_connections_is_given_up_in_seconds_not_the_rendezvous_timeout():
    """Node 0's store seen listening by the probe as it died: torch's client retries a reset connection until
    its timeout, which held a standby (and node 1's rejoin) for the whole --rdzv timeout, so the standby never
    went back to hosting node 0's store itself. The client now gets node0_loss.CONNECT_S to connect."""
    import threading
    import time

    from mindio_adaptor.launch import node0_loss

    dying = socket.socket()
    dying.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    dying.bind(("127.0.0.1", 0))
    dying.listen(16)
    stop = threading.Event()

    def reset_every_connection():  # accepts, then closes with RST, as a store torn down by SIGKILL does
        dying.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = dying.accept()
            except OSError:
                continue
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            conn.close()

    thread = threading.Thread(target=reset_every_connection, daemon=True)
    thread.start()
    try:
        store = _node_store(TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False), 1)
        store.config.rdzv_timeout = 600
        store.port = dying.getsockname()[1]
        started = time.monotonic()
        assert store.node0.rejoin(0, False, {}) is False
        assert time.monotonic() - started < node0_loss.CONNECT_S + 10
    finally:
        stop.set()
        thread.join(5)
        dying.close()
