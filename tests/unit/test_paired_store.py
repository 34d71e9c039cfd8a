"""core/job/paired_store and core/job/job_store over several real TCPStores: the store a rank uses is the one
paired with its controller, else the first that answers; a fact is published to every store that
answers, and a dead one is skipped within the probe's bound and named when nothing answers."""
import socket
import time

import pytest

from mindio_adaptor.core.job import job_store, paired_store
from mindio_adaptor.core.communication.comm import host_store

TOKEN = "t0k"  # the job's: the facts are sealed with it


def _dead_address():
    """A port nothing listens on (bound, then closed): a connection there is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return "127.0.0.1", sock.getsockname()[1]


@pytest.fixture
def stores(monkeypatch):
    """Two live stores, listed after a dead slot 0, as the survivors of node 0's loss have them."""
    live = [host_store(0, "127.0.0.1") for _ in range(2)]
    addresses = [_dead_address(), *(("127.0.0.1", s.port) for s in live)]
    monkeypatch.setenv(paired_store.ENV_STORES, ",".join(f"{h}:{p}" for h, p in addresses))
    monkeypatch.setenv("MINDIO_CONTROLLER_ADDR", "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003")
    monkeypatch.setenv("MINDIO_TOKEN", TOKEN)
    monkeypatch.setattr(paired_store, "registered_controller", lambda: "")
    job_store.forget_connections()
    yield addresses, live
    job_store.forget_connections()


def test_the_list_comes_from_the_env_else_master_addr_port():
    assert paired_store.store_addresses({paired_store.ENV_STORES: "a:1, b:2"}) == [("a", 1), ("b", 2)]
    assert paired_store.store_addresses({"MASTER_ADDR": "h", "MASTER_PORT": "5"}) == [("h", 5)]
    assert paired_store.store_addresses({}) == []
    with pytest.raises(ValueError, match="MINDIO_STORE_ADDRS='a:1,b': .*got 'b'"):
        paired_store.store_addresses({paired_store.ENV_STORES: "a:1,b"})


def test_the_pairing_is_the_registered_controllers_position():
    controllers = [("10.0.0.1", 7001), ("10.0.0.2", 7001)]
    assert paired_store.paired_index(controllers, "10.0.0.2:7001") == 1
    assert paired_store.paired_index(controllers, "10.0.0.1:7001") == 0
    assert paired_store.paired_index(controllers, "10.0.0.3:7001") is None
    assert paired_store.paired_index(controllers, "") is None  # not registered yet
    assert paired_store.paired_index(None, "10.0.0.1:7001") is None  # the in-job controller: no list
    assert paired_store.paired_index([("localhost", 7001)], "127.0.0.1:7001") == 0  # names resolved


def test_a_registered_rank_uses_the_store_beside_its_controller(stores):
    addresses, _ = stores
    assert paired_store.choose(registered="127.0.0.1:7003") == addresses[2]
    assert paired_store.choose(registered="127.0.0.1:7002") == addresses[1]


def test_before_registration_or_with_a_dead_pair_the_first_that_answers(stores):
    addresses, _ = stores
    start = time.monotonic()
    assert paired_store.choose(registered="") == addresses[1]  # slot 0 is dead
    assert paired_store.choose(registered="127.0.0.1:7001") == addresses[1]  # paired with the dead one
    assert time.monotonic() - start < 2 * paired_store.PROBE_S


def test_no_store_answering_names_every_one(monkeypatch):
    dead = [_dead_address(), _dead_address()]
    with pytest.raises(paired_store.NoStoreAnswers) as err:
        paired_store.choose(stores=dead, controllers=None, registered="")
    for host, port in dead:
        assert f"{host}:{port}" in str(err.value)


def test_publish_reaches_every_live_store_and_skips_the_dead_one_quickly(stores):
    addresses, live = stores
    start = time.monotonic()
    job_store.publish("comm/last_epoch", 7)
    assert time.monotonic() - start < paired_store.PROBE_S + 1
    for store in live:  # read straight from each, as the other nodes' workers would
        assert job_store.read_at("127.0.0.1", store.port, "comm/last_epoch", TOKEN, timeout_s=30) == 7


def test_reads_follow_the_pairing(stores, monkeypatch):
    addresses, live = stores
    job_store.sealed(live[0], TOKEN).set(job_store.PREFIX + "x", b"\x80\x04K\x01.")  # 1, in the first live store only
    job_store.sealed(live[1], TOKEN).set(job_store.PREFIX + "x", b"\x80\x04K\x02.")  # 2, beside controller 3
    assert job_store.read("x", timeout_s=5) == 1  # not registered: the first store that answers
    monkeypatch.setattr(paired_store, "registered_controller", lambda: "127.0.0.1:7003")
    assert job_store.read("x", timeout_s=5) == 2
    assert job_store.read_or("missing", "default") == "default"


def test_publish_with_no_store_answering_names_them(monkeypatch):
    dead = _dead_address()
    monkeypatch.setenv(paired_store.ENV_STORES, f"{dead[0]}:{dead[1]}")
    monkeypatch.setenv("MINDIO_TOKEN", TOKEN)
    job_store.forget_connections()
    with pytest.raises(job_store.JobStoreError, match=f"no store of the job answered \\({dead[0]}:{dead[1]}\\)"):
        job_store.publish("x", 1)
    with pytest.raises(job_store.JobStoreError, match=f"{dead[0]}:{dead[1]}"):
        job_store.read("x", timeout_s=1)


def test_a_silent_store_is_skipped_within_the_probe_bound(monkeypatch):
    """A host that accepts nothing and refuses nothing (a listening socket whose backlog is full stands in
    for a dead host's silence) costs at most the probe's bound, not a TCPStore's whole timeout."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(0)
    fillers = []
    try:
        for _ in range(8):  # fill the accept queue: later connects hang (SYNs dropped)
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(silent.getsockname())
            fillers.append(s)
        live = host_store(0, "127.0.0.1")
        start = time.monotonic()
        assert not paired_store.answers(silent.getsockname(), 0.5)
        assert 0.4 < time.monotonic() - start < 2  # it waited the bound: silence, not a refusal
        start = time.monotonic()
        chosen = paired_store.choose(stores=[silent.getsockname(), ("127.0.0.1", live.port)], controllers=None,
                                     registered="", probe_s=0.5)
        assert chosen == ("127.0.0.1", live.port)
        assert time.monotonic() - start < 3
    finally:
        for s in fillers:
            s.close()
        silent.close()
