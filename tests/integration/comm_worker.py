"""A training process for tests/integration/test_comm_epochs.py: walks a list of epochs, each a list of
members; runs collectives until a peer is killed, then rebuilds. Everything it observes goes to the
test's store under `test/` so the test process can assert on it."""
import json
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from mindio_adaptor.core.detection import faults
from mindio_adaptor.core.communication.comm import CommEpochs

WORLD = 4
PAIRS = [[0, 1], [2, 3]]
LOOP_LIMIT_S = 40  # a loop that never sees its fault gives up (the test then fails on the missing key)


def _reporter(port):
    return dist.PrefixStore("test", dist.TCPStore("127.0.0.1", port, is_master=False,
                                                   timeout=timedelta(seconds=10), wait_for_workers=False))


def _check(ce, rep, epoch, rank, teardown_s):
    """The collectives a repaired job needs: the default group's sum and each registered subgroup's."""
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    pair = torch.tensor([float(rank + 1)])
    dist.all_reduce(pair, group=ce.groups["pairs"])
    ms = ce.membership
    rep.set(f"result/{epoch}/{rank}", json.dumps({
        "sum": total.item(), "pair_sum": pair.item(), "pid": os.getpid(), "dense": ms.rank,
        "size": ms.size, "pair_size": dist.get_world_size(ce.groups["pairs"]),
        "teardown": ce.last_teardown, "teardown_s": teardown_s}))


def _run_until_fault(rep, epoch, rank):
    """All-reduce in a loop until a peer dies under us; returns the error it raised."""
    x = torch.ones(1 << 14)
    deadline = time.monotonic() + LOOP_LIMIT_S
    first = True
    while time.monotonic() < deadline:
        try:
            dist.all_reduce(x)
        except Exception as exc:  # the fault the test injected
            return exc
        x.fill_(1.0)
        if first:
            rep.add(f"up/{epoch}", 1)
            first = False
    raise SystemExit(f"rank {rank}: no fault within {LOOP_LIMIT_S}s in epoch {epoch}")


def run(rank, port, epochs, start_epoch=0):
    """epochs[e]: members of epoch e. A replacement process starts at start_epoch > 0 with join()."""
    rep = _reporter(port)
    ce = CommEpochs(rank, WORLD, "127.0.0.1", port, timeout=timedelta(seconds=5),
                    join_timeout=timedelta(seconds=40), store_timeout=timedelta(seconds=10))
    ce.register("pairs", PAIRS)
    ce.join(start_epoch, epochs[start_epoch])
    _check(ce, rep, start_epoch, rank, 0.0)
    for epoch in range(start_epoch + 1, len(epochs)):
        exc = _run_until_fault(rep, epoch - 1, rank)
        state = faults.classify_exception(exc).state.name
        rep.set(f"err/{epoch - 1}/{rank}", json.dumps({"text": str(exc)[:300], "type": type(exc).__name__,
                                                       "state": state}))
        ce.rebuild(epoch, epochs[epoch])
        _check(ce, rep, epoch, rank, ce.last_teardown_s)
    dist.barrier()  # nobody tears down while a peer is still inside the last check
    rep.add("done", 1)
    ce.close()


def host_store_until_killed(queue):
    """A store host that can die: the launcher agent or rank 0 of a plain env:// job."""
    from mindio_adaptor.core.communication.comm import host_store
    store = host_store(0, "127.0.0.1")
    queue.put(store.port)
    time.sleep(60)
