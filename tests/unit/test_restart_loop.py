"""A restart loop is a fault, not a routine (launch/restart_loop, launch/policy, launch/agent): a rank whose
processes started again alone keep failing the same way soon after their start stops being rebooted; a
replacement that reached nothing of the job (JOB_UNREACHABLE) is started again only with changed lists; a
group restart never starts once a worker exited ENDED_BY_CONTROLLER. Real processes stand in for the workers,
real TCPStores for the launchers' store."""
import logging
import signal
import socket
import sys

import pytest
from torch.distributed import PrefixStore, TCPStore

from mindio_adaptor.core.detection.exit_codes import ENDED_BY_CONTROLLER, JOB_UNREACHABLE
from mindio_adaptor.core.job import unreachable_job
from mindio_adaptor.core.job.controller_address import ENV_CONTROLLER
from mindio_adaptor.core.job.paired_store import ENV_STORES
from mindio_adaptor.launch.agent import NodeAgent
from mindio_adaptor.launch.config import LaunchConfig
from mindio_adaptor.launch.controllers import controller_key
from mindio_adaptor.launch.node_store import NodeStore
from mindio_adaptor.launch.policy import Verdict, on_exit
from mindio_adaptor.launch.restart_loop import LOOP_LENGTH, QUICK_EXIT_S, RestartLoop
from mindio_adaptor.launch.store_keys import GENERATION

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


# --- the loop ------------------------------------------------------------------------------------------------

def test_three_quick_same_failures_of_rebooted_processes_are_a_loop():
    loop = RestartLoop()
    for _ in range(LOOP_LENGTH - 1):
        loop.ended(1, 0.3, alone=True)
        assert not loop.stuck()
    loop.ended(1, 4.2, alone=True)
    assert loop.stuck()
    assert loop.cause() == ("restart loop: its last 3 processes started again alone each ended with exit code 1 "
                            "within 4.2 s of their start")


@pytest.mark.parametrize("breaker", [
    dict(code=-signal.SIGKILL, lived_s=0.3, alone=True),  # killed from outside: a fault, not a loop
    dict(code=-signal.SIGTERM, lived_s=0.3, alone=True),
    dict(code=1, lived_s=QUICK_EXIT_S + 1, alone=True),  # it ran a while: trained, then crashed
    dict(code=1, lived_s=0.3, alone=False),  # a generation's process, not one started again alone
    dict(code=2, lived_s=0.3, alone=True),  # another way to fail starts a new count
])
def test_anything_else_in_between_breaks_the_run(breaker):
    loop = RestartLoop()
    loop.ended(1, 0.3, alone=True)
    loop.ended(1, 0.3, alone=True)
    loop.ended(**breaker)
    loop.ended(1, 0.3, alone=True)
    assert not loop.stuck()


def test_a_crash_signal_of_its_own_counts():
    loop = RestartLoop()
    for _ in range(LOOP_LENGTH):
        loop.ended(-signal.SIGSEGV, 1.0, alone=True)
    assert loop.stuck() and "signal SIGSEGV" in loop.cause()


def test_stopped_reboots_fall_back_as_used_up_ones():
    common = dict(worker_reboot=True, ended=False, rank_reboots=1, max_restarts=3)
    assert on_exit(1, group_restarts=0, **common) is Verdict.REBOOT_WORKER
    assert on_exit(1, group_restarts=0, reboots_stopped=True, **common) is Verdict.RESTART_GROUP
    assert on_exit(1, group_restarts=3, reboots_stopped=True, **common) is Verdict.GIVE_UP
    assert on_exit(ENDED_BY_CONTROLLER, group_restarts=0, reboots_stopped=True, **common) is Verdict.ENDED


# --- a replacement that reaches nothing --------------------------------------------------------------------

def closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens there once closed: connections are refused


def test_a_replacement_with_only_dead_addresses_names_them_and_exits_job_unreachable(caplog):
    store, controller = closed_port(), closed_port()
    env = {ENV_STORES: f"127.0.0.1:{store}", ENV_CONTROLLER: f"127.0.0.1:{controller}", "MASTER_PORT": str(store)}
    found = unreachable_job.problems(env, probe_s=1.0)
    assert len(found) == 2
    assert f"none of the job's stores answered within 1 s: 127.0.0.1:{store}" in found[0]
    assert f"{ENV_CONTROLLER}='127.0.0.1:{controller}'" in found[1]
    with caplog.at_level(logging.ERROR), pytest.raises(SystemExit) as exited:
        unreachable_job.exit_if_unreachable("replacement process of rank 2", env)
    assert exited.value.code == JOB_UNREACHABLE
    assert "replacement process of rank 2 cannot reach the job: stores" in caplog.text


def test_one_store_and_one_controller_answering_are_enough():
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    with socket.socket() as controller:
        controller.bind(("127.0.0.1", 0))
        controller.listen()
        env = {ENV_STORES: f"127.0.0.1:{closed_port()},127.0.0.1:{store.port}",
               ENV_CONTROLLER: f"127.0.0.1:{closed_port()},127.0.0.1:{controller.getsockname()[1]}"}
        assert unreachable_job.problems(env, probe_s=1.0) == []


# --- the launcher ----------------------------------------------------------------------------------------

def launcher(max_restarts=3):
    master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    config = LaunchConfig(nnodes=2, nproc_per_node=2, node_rank=1, master_addr="127.0.0.1", master_port=0,
                          run_id="r", max_restarts=max_restarts, worker_reboot=True, worker_reboot_reason="",
                          monitor_interval=0.1, shutdown_timeout=5, rdzv_timeout=10, role="default", controllers=2,
                          command=SLEEP)
    node_store = NodeStore(config, "t")
    store = node_store.store = node_store.sealed(PrefixStore("r", master))
    node_store.ownership.incarnation = 1
    for node in (0, 1):
        store.set(controller_key(node, 0), f"127.0.0.1:{7000 + node}")
        store.set(f"generation/0/store/{node}", f"127.0.0.1:{6000 + node}")
    store.set("generation/0/port", "6000")
    agent = NodeAgent(config, node_store, logging.getLogger("test_restart_loop"), None)
    agent.starts.lists.master_port = 6000
    return master, agent


def ended_with(worker, code, alone=True):
    """`worker`'s process: one that exits `code` at once."""
    worker.start([sys.executable, "-c", f"import sys; sys.exit({code})"], {})
    worker.alone = alone
    worker.proc.wait(timeout=30)


def test_unreachable_with_unchanged_lists_is_not_rebooted_and_with_changed_ones_it_is():
    master, agent = launcher()
    worker = agent.workers[0]
    worker.given = agent.starts.lists.refresh(agent.config, agent.store, agent.generation)
    ended_with(worker, JOB_UNREACHABLE)
    reason = agent.exits.no_blind_reboot(worker, JOB_UNREACHABLE)
    assert reason.startswith("its process reached none of the job's stores or controllers (exit code 88 "
                             "(JOB_UNREACHABLE)), and the launchers' store names the same ones now:")
    assert "MINDIO_STORE_ADDRS=127.0.0.1:6000,127.0.0.1:6001" in reason
    agent.store.store.set(controller_key(0, 0), "127.0.0.1:7100")  # a new node 0 re-hosted slot 0 meanwhile
    assert agent.exits.no_blind_reboot(worker, JOB_UNREACHABLE) == ""


def test_the_third_quick_failure_ends_the_ranks_reboots():
    master, agent = launcher()
    worker = agent.workers[0]
    lines = []
    for attempt in range(LOOP_LENGTH):
        ended_with(worker, 1)
        worker.reboots = attempt + 1
        lines.append(agent.exits.no_blind_reboot(worker, 1))
    assert lines[:-1] == ["", ""] and lines[-1].startswith("restart loop: its last 3 processes")


def stop_for_group_restart(agent, codes):
    """Local workers: one per code (None: still running when the group restart stops it)."""
    for worker, code in zip(agent.workers, codes):
        if code is None:
            worker.start(SLEEP, {})
        else:
            ended_with(worker, code, alone=False)
    return agent._stop_for_group_restart()


def test_no_group_restart_after_a_worker_exited_ended_by_controller(caplog):
    master, agent = launcher()
    with caplog.at_level(logging.INFO, logger="test_restart_loop"):
        assert not stop_for_group_restart(agent, [ENDED_BY_CONTROLLER, None])
    assert agent.ended and agent.store.controller_ended()
    assert agent.workers[1].poll() == -signal.SIGTERM
    assert "no group restart: the recovery controller ended the job (ranks [2] exited exit code 86 " \
           "(ENDED_BY_CONTROLLER))" in caplog.text


def test_no_group_restart_when_another_node_saw_the_end():
    master, agent = launcher()
    agent.store.store.set("controller_end", "0")
    assert not stop_for_group_restart(agent, [1, None])
    assert agent.ended


def test_a_group_restart_otherwise():
    master, agent = launcher()
    assert stop_for_group_restart(agent, [1, None])
    assert not agent.ended and not agent.store.controller_ended()


def test_following_another_nodes_group_restart_stops_at_an_ended_worker():
    """Another node moved the generation (its stop saw no end yet); this node's worker had exited 86: the
    launcher starts no generation of its own, and nothing else is started."""
    master, agent = launcher()
    agent.workers[0].start(SLEEP, {})
    ended_with(agent.workers[1], ENDED_BY_CONTROLLER, alone=False)
    agent.store.store.set(GENERATION, "1")
    started = [w.starts for w in agent.workers]
    assert agent.follow_generation()
    assert agent.generation == 0 and agent.ended
    assert [w.starts for w in agent.workers] == started and not any(w.running() for w in agent.workers)
