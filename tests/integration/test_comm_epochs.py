"""core/communication/comm.py with real processes: 4 gloo ranks on 127.0.0.1, one SIGKILLed mid all_reduce; the survivors
rebuild among themselves (dying-gasp path), or with a replacement process of the dead rank (ARF), or twice
in a row. The test process hosts the store, as a launcher agent does under torchrun."""
import json
import os
import signal
import time
from datetime import timedelta

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

import comm_worker
from mindio_adaptor.core.communication.comm import CommEpochs, StoreUnreachable, host_store

pytestmark = pytest.mark.integration

# forkserver: torch is imported once by the server, each worker (and the late replacement) is a cheap
# fork of a process that never started a thread or a store; 2 shared cores make 4 fresh imports slow.
CTX = mp.get_context("forkserver")
CTX.set_forkserver_preload(["torch", "torch.distributed", "mindio_adaptor.core.communication.comm", "comm_worker"])
FULL = [0, 1, 2, 3]
TEST_LIMIT_S = 60


class Job:
    """The test's view of a job: its store, its worker processes, and bounded reads of what they report."""

    def __init__(self, epochs):
        self.epochs = epochs
        self.store = host_store(0, "127.0.0.1", timeout=timedelta(seconds=30))
        self.rep = dist.PrefixStore("test", self.store)
        self.procs, self.all_procs = {}, []

    def start(self, rank, start_epoch=0):
        p = CTX.Process(target=comm_worker.run, args=(rank, self.store.port, self.epochs, start_epoch),
                        daemon=True, name=f"comm-rank{rank}")
        p.start()
        self.procs[rank] = p
        self.all_procs.append(p)

    def wait_count(self, key, n, timeout=30.0):
        deadline = time.monotonic() + timeout
        while self.rep.add(key, 0) < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"{key}: {self.rep.add(key, 0)}/{n} within {timeout}s; {self.states()}")
            time.sleep(0.05)

    def get(self, key, timeout=30.0):
        try:
            self.rep.wait([key], timedelta(seconds=timeout))
        except Exception as exc:
            raise AssertionError(f"{key} not reported within {timeout}s; {self.states()}") from exc
        return json.loads(self.rep.get(key))

    def kill(self, rank):
        os.kill(self.procs[rank].pid, signal.SIGKILL)
        self.procs[rank].join(5)

    def finish(self, ranks, timeout=30.0):
        self.wait_count("done", len(ranks), timeout)
        for r in ranks:
            self.procs[r].join(10)
            assert self.procs[r].exitcode == 0, self.states()

    def states(self):
        return {p.name: (p.pid, p.exitcode) for p in self.all_procs}

    def cleanup(self):
        for p in self.all_procs:
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
            p.join(5)


def _too_long(signum, frame):
    raise TimeoutError(f"test ran past {TEST_LIMIT_S}s")


@pytest.fixture
def job_factory():
    """Jobs whose processes are SIGKILLed at the end whatever happened; the test is cut at TEST_LIMIT_S."""
    jobs = []
    old = signal.signal(signal.SIGALRM, _too_long)
    signal.alarm(TEST_LIMIT_S)

    def make(epochs):
        jobs.append(Job(epochs))
        return jobs[-1]
    yield make
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)
    for job in jobs:
        job.cleanup()


def start_and_kill(job, ranks, epoch, victim):
    """Wait until every rank of `epoch` completed an all_reduce and loops on the next, then SIGKILL one."""
    job.wait_count(f"up/{epoch}", len(ranks))
    time.sleep(0.2)
    job.kill(victim)


def assert_comm_failures(job, epoch, survivors):
    for r in survivors:
        err = job.get(f"err/{epoch}/{r}")
        assert err["state"] == "HCCL_FAILED", err  # core/detection/faults: a communication failure, not UNKNOWN


def test_survivors_rebuild_among_themselves(job_factory):
    job = job_factory([FULL, [0, 1, 2]])
    for r in FULL:
        job.start(r)
    start_and_kill(job, FULL, 0, victim=3)
    assert_comm_failures(job, 0, [0, 1, 2])
    results = {r: job.get(f"result/1/{r}") for r in (0, 1, 2)}
    assert {r: res["sum"] for r, res in results.items()} == {0: 6.0, 1: 6.0, 2: 6.0}
    assert {r: (res["dense"], res["size"]) for r, res in results.items()} == {0: (0, 3), 1: (1, 3), 2: (2, 3)}
    # pairs [0,1],[2,3] re-created among survivors: [0,1] and [2] alone
    assert {r: (res["pair_sum"], res["pair_size"]) for r, res in results.items()} == {
        0: (3.0, 2), 1: (3.0, 2), 2: (3.0, 1)}
    assert all(res["teardown"] in ("abort", "destroy") for res in results.values())
    job.finish([0, 1, 2])


def test_replacement_process_joins_full_world(job_factory):
    job = job_factory([FULL, FULL])
    for r in FULL:
        job.start(r)
    pids = {r: job.procs[r].pid for r in FULL}
    start_and_kill(job, FULL, 0, victim=3)
    assert_comm_failures(job, 0, [0, 1, 2])  # survivors are now in rebuild(1, FULL), waiting for rank 3
    job.start(3, start_epoch=1)
    results = {r: job.get(f"result/1/{r}") for r in FULL}
    assert {r: res["sum"] for r, res in results.items()} == {r: 10.0 for r in FULL}
    assert {r: res["pair_sum"] for r, res in results.items()} == {0: 3.0, 1: 3.0, 2: 7.0, 3: 7.0}
    assert {r: res["dense"] for r, res in results.items()} == {r: r for r in FULL}  # global numbers kept
    assert {r: results[r]["pid"] for r in (0, 1, 2)} == {r: pids[r] for r in (0, 1, 2)}
    assert results[3]["pid"] == job.procs[3].pid != pids[3]
    job.finish(FULL)


def test_two_consecutive_faults_two_epochs(job_factory):
    job = job_factory([FULL, [0, 1, 2], [0, 1]])
    for r in FULL:
        job.start(r)
    start_and_kill(job, FULL, 0, victim=3)
    assert_comm_failures(job, 0, [0, 1, 2])
    assert [job.get(f"result/1/{r}")["sum"] for r in (0, 1, 2)] == [6.0] * 3
    start_and_kill(job, [0, 1, 2], 1, victim=2)
    assert_comm_failures(job, 1, [0, 1])
    # epoch 2's dense ranks 0,1 were epoch 1's too: only the epoch prefix keeps epoch 1's keys (rank 2's
    # address among them) out of epoch 2's rendezvous
    results = [job.get(f"result/2/{r}") for r in (0, 1)]
    assert [(res["sum"], res["pair_sum"], res["size"]) for res in results] == [(3.0, 3.0, 2)] * 2
    job.finish([0, 1])


def test_lost_store_host_is_reported_by_address(job_factory):
    """This slice requires the store host to survive; when it does not, rebuild says so, bounded."""
    queue = CTX.Queue()
    host = CTX.Process(target=comm_worker.host_store_until_killed, args=(queue,), daemon=True)
    host.start()
    ce = None
    try:
        port = queue.get(timeout=30)
        ce = CommEpochs(0, 1, "127.0.0.1", port, timeout=timedelta(seconds=5),
                        store_timeout=timedelta(seconds=2), join_timeout=timedelta(seconds=2))
        ce.join(0, [0])
        os.kill(host.pid, signal.SIGKILL)
        host.join(5)
        start = time.monotonic()
        with pytest.raises(StoreUnreachable, match=f"store at 127.0.0.1:{port} not reachable within 2s"):
            ce.rebuild(1, [0])
        assert time.monotonic() - start < 8
    finally:
        if host.is_alive():
            os.kill(host.pid, signal.SIGKILL)
        host.join(5)
        if ce is not None and dist.is_initialized():
            ce.teardown()
