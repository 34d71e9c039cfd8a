"""core/job/rehosted_slot over real TCPStores: a replaced node that hosts its slot again announces the slot's
new controller and store; every member adopts it (its lists, its processor's, the job's facts copied into
the new store); before registering, the replacement never reads the facts from its own new, empty store."""
import os

import pytest

from mindio_adaptor.core.job import job_store, paired_store, rehosted_slot
from mindio_adaptor.core.communication.comm import host_store
from mindio_adaptor.core.job.controller_address import ENV_CONTROLLER

OLD_CONTROLLERS = "127.0.0.1:7001,127.0.0.1:7002"
NEW_CONTROLLER = ("127.0.0.1", 7101)
TOKEN = "t0k"


@pytest.fixture
def job(monkeypatch):
    """Node 1's store (alive, leading) and a new store of a replaced node 0; slot 0 of the survivors'
    list still names the lost node 0's store (a dead port). Every process here is registered with
    node 1's controller."""
    node_1, new_node_0 = host_store(0, "127.0.0.1"), host_store(0, "127.0.0.1")
    lost = host_store(0, "127.0.0.1")
    lost_address = ("127.0.0.1", lost.port)
    del lost  # its port closes: the lost node 0's store
    survivor_env = {ENV_CONTROLLER: OLD_CONTROLLERS,
                    paired_store.ENV_STORES: f"127.0.0.1:{lost_address[1]},127.0.0.1:{node_1.port}"}
    replacement_env = {ENV_CONTROLLER: "%s:%d,127.0.0.1:7002" % NEW_CONTROLLER,
                       paired_store.ENV_STORES: f"127.0.0.1:{new_node_0.port},127.0.0.1:{node_1.port}",
                       paired_store.ENV_REHOSTED_SLOT: "0"}
    monkeypatch.setattr(paired_store, "registered_controller", lambda: "127.0.0.1:7002")
    monkeypatch.setenv("MINDIO_TOKEN", TOKEN)
    job_store.forget_connections()
    yield survivor_env, replacement_env, node_1, new_node_0
    job_store.forget_connections()


def _as_process(monkeypatch, env):
    for key in (ENV_CONTROLLER, paired_store.ENV_STORES, paired_store.ENV_REHOSTED_SLOT):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)


def test_a_survivor_adopts_the_slot_and_the_new_store_gets_the_facts(job, monkeypatch):
    survivor_env, replacement_env, node_1, new_node_0 = job
    _as_process(monkeypatch, survivor_env)
    job_store.publish("comm/last_epoch", 3)  # written while slot 0 was dead: node 1's store only
    job_store.publish("layout_inputs", {"ranks": 4})
    _as_process(monkeypatch, replacement_env)
    assert rehosted_slot.announce() == 0
    _as_process(monkeypatch, survivor_env)
    assert rehosted_slot.adopt(facts=("comm/last_epoch", "layout_inputs", "never/published")) == [0]
    assert os.environ[ENV_CONTROLLER] == replacement_env[ENV_CONTROLLER]
    assert os.environ[paired_store.ENV_STORES] == replacement_env[paired_store.ENV_STORES]
    assert job_store.read_at("127.0.0.1", new_node_0.port, "comm/last_epoch", TOKEN) == 3
    assert job_store.read_at("127.0.0.1", new_node_0.port, "layout_inputs", TOKEN) == {"ranks": 4}
    assert rehosted_slot.adopt(facts=("comm/last_epoch",)) == []  # taken once


def test_nothing_announced_changes_nothing(job, monkeypatch):
    survivor_env = job[0]
    _as_process(monkeypatch, survivor_env)
    assert rehosted_slot.adopt(facts=("comm/last_epoch",)) == []
    assert os.environ[ENV_CONTROLLER] == OLD_CONTROLLERS
    assert rehosted_slot.announce() is None


def test_before_registering_a_replacement_reads_the_facts_elsewhere_than_its_new_store(job, monkeypatch):
    _, replacement_env, node_1, new_node_0 = job
    _as_process(monkeypatch, replacement_env)
    monkeypatch.setattr(paired_store, "registered_controller", lambda: "")
    assert paired_store.choose() == ("127.0.0.1", node_1.port)
    monkeypatch.delenv(paired_store.ENV_REHOSTED_SLOT)
    assert paired_store.choose() == ("127.0.0.1", new_node_0.port)  # the first that answers, otherwise


def test_a_bad_slot_is_named(monkeypatch):
    with pytest.raises(ValueError, match="MINDIO_REHOSTED_SLOT='x'"):
        rehosted_slot.rehosted_slot({paired_store.ENV_REHOSTED_SLOT: "x"})
    env = {paired_store.ENV_REHOSTED_SLOT: "2", ENV_CONTROLLER: OLD_CONTROLLERS, paired_store.ENV_STORES: "h:1,h:2"}
    with pytest.raises(ValueError, match="MINDIO_REHOSTED_SLOT=2: the lists have 2 controllers and 2 stores"):
        rehosted_slot.announce(env)
