"""launch/membership: the environment a launcher gives a process it starts carries the job's controllers and
stores as the launchers' store holds them at that moment, on real TCPStores: after another node was lost and
re-hosted its slot (node 1's launcher rejoined a new node 0's store, issue 30's dead addresses), and after this
launcher re-hosted one itself (MINDIO_REHOSTED_SLOT for its first workers until the members adopted the slot,
not for a later replacement nor a later generation)."""
import logging

import pytest
from torch.distributed import PrefixStore, TCPStore

from mindio_adaptor.core.job import job_store, rehosted_slot
from mindio_adaptor.core.job.controller_address import ENV_CONTROLLER, ENV_TOKEN
from mindio_adaptor.core.job.paired_store import ENV_REHOSTED_SLOT, ENV_STORES
from mindio_adaptor.launch.agent import NodeAgent
from mindio_adaptor.launch.config import LaunchConfig
from mindio_adaptor.launch.controllers import controller_key
from mindio_adaptor.launch.node_store import NodeStore
from mindio_adaptor.launch.warm_pool import WarmPool

RUN = "r"
TOKEN = "t0k"  # the launchers' (launch/job_token): in each worker's environment, never in a store


def config(node):
    return LaunchConfig(nnodes=2, nproc_per_node=2, node_rank=node, master_addr="127.0.0.1", master_port=0,
                        run_id=RUN, max_restarts=3, worker_reboot=True, worker_reboot_reason="", monitor_interval=0.1,
                        shutdown_timeout=5, rdzv_timeout=10, role="default", controllers=2, command=["true"])


def launchers_store():
    master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, multi_tenant=True)
    return master, PrefixStore(RUN, master)


def launcher(store, node, incarnation=1, port=0):
    node_store = NodeStore(config(node), TOKEN)
    node_store.store, node_store.ownership.incarnation = node_store.sealed(store), incarnation
    node_store.port = port or node_store.port
    return NodeAgent(node_store.config, node_store, logging.getLogger("test_worker_membership"),
                     WarmPool(node_store.config, 0))


def publish_controller(agent, address):
    agent.store.store.set(controller_key(agent.config.node_rank, agent.generation), address)


def first_generation(*agents):
    for agent in agents:
        agent.starts.lists.master_port = agent.store.open_generation(0)
    for agent in agents:
        agent.starts.lists.stores = agent.store.worker_stores(0)


def env_of(agent, local_rank=0, restarted=True):
    return agent.starts.env_for(agent.workers[local_rank], agent.generation, restarted)


@pytest.fixture
def job():
    """Node 0 and node 1 running generation 0, each hosting a controller (addresses made up: nothing here
    connects to a controller) and a workers' store."""
    master, store = launchers_store()
    node_0, node_1 = launcher(store, 0), launcher(store, 1)
    publish_controller(node_0, "127.0.0.1:7000")
    publish_controller(node_1, "127.0.0.1:7001")
    first_generation(node_0, node_1)
    return master, node_0, node_1


def test_a_worker_of_the_first_generation_gets_both_nodes_slots(job):
    _, node_0, node_1 = job
    env = env_of(node_1, restarted=False)
    assert env[ENV_CONTROLLER] == "127.0.0.1:7000,127.0.0.1:7001" and env[ENV_TOKEN] == TOKEN
    assert env[ENV_STORES].split(",")[0] == f"127.0.0.1:{node_0.master_port}" == f"127.0.0.1:{env['MASTER_PORT']}"
    assert ENV_REHOSTED_SLOT not in env


def test_after_node_0_was_replaced_a_replacement_on_node_1_gets_the_new_node_0s_slot(job):
    """Node 0 lost: node 1's launcher rejoins the store a new node 0 hosts at the same address, which
    re-hosts slot 0 (controller and workers' store on new ports, a new MASTER_PORT). A rank of node 1 started
    again alone afterwards gets those, not what its launcher read at its start."""
    _, node_0, node_1 = job
    before = env_of(node_1)
    new_master, new_store = launchers_store()
    node_1.store.port = new_master.port  # the same address: here, where the new node 0's store listens
    assert node_1.store.node0.rejoin(0, False, node_1.starts.lists.controllers, node_1.starts.lists.stores)
    new_node_0 = launcher(new_store, 0, incarnation=2)
    publish_controller(new_node_0, "127.0.0.1:7100")
    first_generation(new_node_0)

    env = env_of(node_1)
    assert env[ENV_CONTROLLER] == "127.0.0.1:7100,127.0.0.1:7001"
    stores = env[ENV_STORES].split(",")
    assert stores[0] == f"127.0.0.1:{new_node_0.master_port}" != before[ENV_STORES].split(",")[0]
    assert stores[1] == before[ENV_STORES].split(",")[1]  # node 1's own store did not move
    assert env["MASTER_PORT"] == str(new_node_0.master_port) != before["MASTER_PORT"]
    assert ENV_REHOSTED_SLOT not in env  # node 1 re-hosts nothing
    assert node_1.workers[0].given.env()["MASTER_PORT"] == env["MASTER_PORT"]  # what the launcher compares later


def test_a_launcher_that_re_hosted_a_slot_names_it_until_the_members_adopted_it(job, monkeypatch):
    """Node 1 lost and replaced: the new launcher's first workers announce slot 1 and skip its new store
    before registering; once the survivors adopted the slot (and marked its store), a rank of node 1 started
    again alone gets no slot, so it reads the job's facts wherever they answer; nor does a later generation."""
    master, node_0, old_node_1 = job
    survivors = {ENV_CONTROLLER: env_of(node_0)[ENV_CONTROLLER], ENV_STORES: env_of(node_0)[ENV_STORES]}
    node_1 = launcher(PrefixStore(RUN, master), 1, incarnation=2)  # the replacing launcher
    publish_controller(node_1, "127.0.0.1:7201")
    node_1.starts.lists.master_port = node_1.store.open_generation(0)
    node_1.starts.joined_generation = 0
    first = env_of(node_1)
    assert first[ENV_REHOSTED_SLOT] == "1"
    assert first[ENV_CONTROLLER] == "127.0.0.1:7000,127.0.0.1:7201"
    new_store = first[ENV_STORES].split(",")[1]
    assert new_store != survivors[ENV_STORES].split(",")[1]
    assert env_of(node_1, local_rank=1)[ENV_REHOSTED_SLOT] == "1"  # before the adoption, every start names it

    job_store.forget_connections()
    for key, value in {**first, ENV_REHOSTED_SLOT: "1"}.items():  # a first worker announces the slot
        monkeypatch.setenv(key, value)
    job_store.publish("layout_inputs", ["a fact of the job"])
    assert rehosted_slot.announce() == 1
    monkeypatch.delenv(ENV_REHOSTED_SLOT)
    for key, value in survivors.items():  # a survivor adopts it at the next rebuild
        monkeypatch.setenv(key, value)
    assert rehosted_slot.adopt(facts=("layout_inputs",)) == [1]
    assert node_1.store.rehosted_store_adopted(0)

    later = env_of(node_1)
    assert ENV_REHOSTED_SLOT not in later and later[ENV_STORES].split(",")[1] == new_store
    node_1.generation = 1  # a group restart: every process gets the same new lists
    node_0.store.open_generation(1)
    node_1.store.open_generation(1)
    assert ENV_REHOSTED_SLOT not in env_of(node_1)
    job_store.forget_connections()

