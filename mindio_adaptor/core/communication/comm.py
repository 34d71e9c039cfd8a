"""Communicators that survive a membership change: rebuild every process group this adaptor owns under a
new repair epoch, among the survivors (dying-gasp save) or the full world again (process replacement,
ARF), without restarting the surviving processes. torch.distributed only; nothing here imports megatron.

How it works (one epoch = one membership):
  1. teardown: abort every process group of this process, the default one and every subgroup, whoever
     created them (`_abort_all`, in a thread joined with a timeout), so torch's global group registry is
     empty again and init_process_group can run a second time;
  2. arrival: each member writes `arrive/<global rank>` under the epoch's store prefix and waits (bounded)
     for every other member's key; a missing rank is named in the error instead of a bare store timeout,
     and the members lists every rank passed are compared, so two views of the membership never meet;
  3. a new default group among `members` on a PrefixStore `mindio/comm/epoch<E>`: every key of an
     earlier epoch (rank addresses of processes that may be dead, counters of old groups) lives under
     another prefix and can never be read by this one;
  4. the registered group specs are re-created, in registration order, on every member.

Store: the TCPStore at MASTER_ADDR:MASTER_PORT (or an explicit host/port) must outlive the fault. Under
torchrun the store is hosted by the launcher agent (workers get TORCHELASTIC_USE_AGENT_STORE=True), so any
worker may die; with a plain env:// init rank 0's process hosts it, and rank 0 must survive. A launcher
that wants worker reboot should host it itself (`host_store`). When the store is gone, every call here
fails within its timeout with an error naming host:port (StoreUnreachable); re-hosting it on a surviving
rank is not done in this slice.

Rank numbering: `members` is a list of global ranks; the new group's rank of a member is its index in
`members` (dense 0..k-1) and `Membership` maps both ways. Passing the full world in order keeps every
global rank number; a replacement process takes the dead rank's number.

Megatron will need re-pointing after `rebuild` (the lead wires that, not this module): the
parallel_state globals (_DATA_PARALLEL_GROUP[_GLOO], _TENSOR_MODEL_PARALLEL_GROUP, _PIPELINE_*,
_MODEL_PARALLEL_GROUP, _EMBEDDING_GROUP, the *_GLOBAL_RANKS lists, _INTRA/_INTER distributed-optimizer
instance groups), the DDP buckets' `data_parallel_group` / `intra_distributed_optimizer_instance_group`
(ParamAndGradBuffer and each _ParamAndGradBucketGroup), the DistributedOptimizer's
`data_parallel_group[_gloo]` and the replica groups of our replicated optimizer, and torch's
GroupMember.WORLD users such as the RNG tracker and timers. The group specs registered here should be
exactly those of parallel_state so that re-pointing is a lookup by name.
"""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

from mindio_adaptor.core.communication import comm_in_place, group_graveyard
from mindio_adaptor.core.communication.comm_in_place import InPlaceUnavailable

STORE_PREFIX = "mindio/comm"


def epoch_prefix(epoch: int) -> str:
    """Every key of an epoch lives under this (PrefixStore adds the "/"), e.g. mindio/comm/epoch1/arrive/3."""
    return f"{STORE_PREFIX}/epoch{epoch}"


class CommError(RuntimeError):
    """A rebuild that could not complete: a member did not arrive, members disagree, teardown stuck."""


class StoreUnreachable(CommError):
    """The rendezvous store cannot be reached; the message always names host:port."""


@dataclass(frozen=True)
class Membership:
    """Who is in the current epoch and how dense group ranks map to global ranks."""
    epoch: int
    members: Tuple[int, ...]  # global ranks, in dense-rank order
    global_rank: int

    @property
    def rank(self) -> int:
        return self.members.index(self.global_rank)

    @property
    def size(self) -> int:
        return len(self.members)

    def to_dense(self, global_rank: int) -> int:
        return self.members.index(global_rank)


# --- device-specific bits: the only places NCCL/HCCL differ from gloo -------------------------------

def _init_kwargs(backend: str) -> dict:
    """NCCL: bind the device so the communicator is created eagerly inside the bounded rebuild,
    not lazily inside the first training collective where a missing peer would hang it."""
    if backend == "nccl":
        return {"device_id": torch.device("cuda", torch.cuda.current_device())}
    return {}


def _abort_all() -> str:
    """Drop every process group of this process. abort (not destroy) first: NCCL's destroy/finalize
    waits for pending work and can hang when a peer died (ncclCommDestroy); abort is the path torch
    documents for a broken communicator. destroy is the fallback for a backend without abort. Returns
    which call was used, for the log.

    Observed on gloo (torch 2.13.0+cpu, tests/integration/test_comm_epochs.py): after a peer was
    SIGKILLed, `_abort_process_group()` returned in under 1 ms on every survivor. Both abort and
    destroy_process_group also return at once when another thread is still inside a collective on a
    silent (alive, not answering) peer, but neither wakes that collective: it returns only at the
    group's own timeout. So on gloo a rank stuck in a collective is bounded by the group timeout, not by
    teardown: keep `timeout` short. Not observed here (no GPU): NCCL's and HCCL's abort."""
    if not dist.is_initialized():
        return "none"
    group_graveyard.bury(dist.distributed_c10d._world.pg_map)  # their last reference is dropped there
    try:
        dist.distributed_c10d._abort_process_group()
        return "abort"
    except (NotImplementedError, RuntimeError, AttributeError):
        if dist.is_initialized():
            dist.destroy_process_group()
        return "destroy"


# --- validation --------------------------------------------------------------------------------------

def validate_members(members: Sequence[int], world_size: int, rank: int) -> Tuple[int, ...]:
    """Members must be distinct global ranks of this job and contain the caller."""
    out = tuple(members)
    if not out:
        raise ValueError("members is empty")
    bad = [m for m in out if not isinstance(m, int) or isinstance(m, bool) or not 0 <= m < world_size]
    if bad:
        raise ValueError(f"members {list(out)}: unknown ranks {bad} (world size {world_size})")
    dups = sorted({m for m in out if out.count(m) > 1})
    if dups:
        raise ValueError(f"members {list(out)}: duplicate ranks {dups}")
    if rank not in out:
        raise ValueError(f"members {list(out)} do not contain this process's rank {rank}")
    return out


def _validate_spec(name: str, rank_lists: Sequence[Sequence[int]], world_size: int) -> Tuple[Tuple[int, ...], ...]:
    lists = tuple(tuple(r) for r in rank_lists)
    for ranks in lists:
        if not ranks or len(set(ranks)) != len(ranks) or not all(
                isinstance(r, int) and 0 <= r < world_size for r in ranks):
            raise ValueError(f"group spec {name!r}: bad rank list {list(ranks)} (world size {world_size})")
    return lists


# --- the epochs --------------------------------------------------------------------------------------

class CommEpochs:
    """Owns the default process group and the registered subgroups of this process, epoch by epoch.

    timeout: collective timeout of every group created (short, so a dead peer surfaces quickly);
    join_timeout: how long a member waits for the others to arrive (covers a replacement's start-up);
    store_timeout: connecting to the store and each store operation.
    """

    def __init__(self, rank: int, world_size: int, host: Optional[str] = None, port: Optional[int] = None,
                 backend: str = "gloo", timeout: timedelta = timedelta(seconds=30),
                 join_timeout: timedelta = timedelta(seconds=120),
                 store_timeout: timedelta = timedelta(seconds=30)):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} not in a world of {world_size}")
        self.host = host if host is not None else os.environ.get("MASTER_ADDR", "127.0.0.1")
        if port is None and "MASTER_PORT" not in os.environ:
            raise ValueError("no store port: pass port= or set MASTER_PORT")
        self.port = int(port if port is not None else os.environ["MASTER_PORT"])
        self.rank, self.world_size, self.backend = rank, world_size, backend
        self.timeout, self.join_timeout, self.store_timeout = timeout, join_timeout, store_timeout
        self.specs: Dict[str, Tuple[Tuple[int, ...], ...]] = {}
        self.membership: Optional[Membership] = None
        self.groups: Dict[str, Optional[dist.ProcessGroup]] = {}
        self.all_groups: Dict[str, List[Tuple[Tuple[int, ...], Optional[dist.ProcessGroup]]]] = {}
        self.last_teardown = ""  # "abort" / "destroy" / "none": what the last teardown used
        self.last_teardown_s = 0.0
        self._store: Optional[dist.Store] = None
        self._last_epoch: Optional[int] = None  # attempted, not only completed: a failed try leaves keys

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def register(self, name: str, rank_lists: Sequence[Sequence[int]]) -> None:
        """A group spec in global ranks, re-created on each epoch among those of its ranks that are members
        (empty lists are skipped). Specs are created in registration order, identical on every rank."""
        self.specs[name] = _validate_spec(name, rank_lists, self.world_size)

    def rebuild(self, epoch: int, members: Sequence[int]) -> Dict[str, Optional[dist.ProcessGroup]]:
        """Survivor path: tear down whatever groups exist, then join epoch `epoch` among `members`."""
        members = self._check(epoch, members)
        self.teardown()
        return self._start(epoch, members)

    def join(self, epoch: int, members: Sequence[int]) -> Dict[str, Optional[dist.ProcessGroup]]:
        """First start, or a replacement process (same global rank, new PID) meeting the survivors'
        `rebuild(epoch, ...)`. Nothing to tear down: this process has no groups yet."""
        members = self._check(epoch, members)
        if dist.is_initialized():
            raise CommError(f"join(epoch {epoch}) with a process group already initialised; use rebuild")
        return self._start(epoch, members)

    def reinitialize_in_place(self, epoch: int, members: Sequence[int], reinits_done: int) -> int:
        """Online repair path, every process alive: keep every group object and give each a fresh
        backend under epoch `epoch` (core/communication/comm_in_place). `members` must be the current world, in
        order; the arrival barrier makes sure every member takes this path. Returns how many groups.
        Raises InPlaceUnavailable before touching anything when it cannot apply."""
        members = self._check(epoch, members)
        if not dist.is_initialized() or members != tuple(range(dist.get_world_size())):
            raise InPlaceUnavailable(f"members {list(members)} are not this process's world")
        if self.backend != "gloo":
            raise InPlaceUnavailable(f"backend {self.backend}: in-place re-initialisation is gloo only")
        chosen = comm_in_place.plan(reinits_done)  # before the barrier: no member waits for this one yet
        self._last_epoch = epoch
        store = dist.PrefixStore(epoch_prefix(epoch), self._connect())
        self._arrive(store, epoch, members, mode="in place")
        try:
            return comm_in_place.reinitialize(chosen, dist.PrefixStore("inplace", store), self.rank, self.timeout)
        except Exception as exc:  # not InPlaceUnavailable: the others are committed to this path
            raise CommError(f"epoch {epoch}: in-place re-initialisation of the process groups failed: "
                            f"{exc}") from exc

    def teardown(self, timeout: Optional[timedelta] = None) -> None:
        """Abort every group, bounded: a teardown that does not return in time raises (the process is
        then unusable for training and should dump or exit) instead of hanging the repair."""
        limit = (timeout or self.timeout).total_seconds()
        start = time.monotonic()
        result: List[object] = []
        worker = threading.Thread(target=lambda: result.append(_safe(_abort_all)), daemon=True,
                                  name="mindio-comm-teardown")
        worker.start()
        worker.join(limit)
        if worker.is_alive():
            raise CommError(f"teardown of the process groups did not finish within {limit:.0f}s")
        if isinstance(result[0], BaseException):
            raise CommError(f"teardown of the process groups failed: {result[0]}") from result[0]
        self.last_teardown, self.last_teardown_s = result[0], time.monotonic() - start
        self.groups, self.all_groups = {}, {}

    def close(self) -> None:
        """Drop the groups and the store connection (end of job or tests)."""
        self.teardown()
        self._store = None

    # --- internals ---------------------------------------------------------------------------------

    def _check(self, epoch: int, members: Sequence[int]) -> Tuple[int, ...]:
        members = validate_members(members, self.world_size, self.rank)
        if not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be a non-negative int, got {epoch!r}")
        if self._last_epoch is not None and epoch <= self._last_epoch:
            raise ValueError(f"epoch {epoch} is not newer than the last epoch tried, {self._last_epoch}: "
                             f"reusing an epoch, even a failed one, would meet its stale keys")
        return members

    def _start(self, epoch: int, members: Tuple[int, ...]) -> Dict[str, Optional[dist.ProcessGroup]]:
        self._last_epoch = epoch  # from here on this epoch may have left keys in the store
        store = dist.PrefixStore(epoch_prefix(epoch), self._connect())
        self._arrive(store, epoch, members)
        ms = Membership(epoch, members, self.rank)
        dist.init_process_group(self.backend, store=dist.PrefixStore("world", store), rank=ms.rank,
                                world_size=ms.size, timeout=self.timeout, **_init_kwargs(self.backend))
        self.membership = ms
        self._create_specs(ms)
        return dict(self.groups)

    def _connect(self) -> dist.Store:
        """A fresh client per epoch: the previous connection may have broken with the fault, and a
        replacement process has none. A dead store host surfaces here, named."""
        try:
            self._store = dist.TCPStore(self.host, self.port, is_master=False, timeout=self.store_timeout,
                                        wait_for_workers=False)
        except Exception as exc:  # torch raises DistNetworkError / DistStoreError / RuntimeError here
            raise StoreUnreachable(f"store at {self.address} not reachable within "
                                   f"{self.store_timeout.total_seconds():.0f}s: {exc}") from exc
        return self._store

    def _arrive(self, store: dist.Store, epoch: int, members: Tuple[int, ...], mode: str = "rebuild") -> None:
        """Bounded meeting of the members before any backend connects, with errors that say who is missing
        or who disagrees (a bare gloo/NCCL init timeout says neither). `mode`: a full rebuild or an
        in-place re-initialisation; members that chose differently would wait in different groups."""
        me = json.dumps({"pid": os.getpid(), "members": list(members), "mode": mode})
        keys = [f"arrive/{m}" for m in members]
        try:
            store.set(f"arrive/{self.rank}", me)
            store.wait(keys, self.join_timeout)
        except Exception as exc:
            raise self._arrival_error(store, epoch, keys, exc) from exc
        views = {m: json.loads(store.get(k)) for m, k in zip(members, keys)}
        other = {m: v["members"] for m, v in views.items() if v["members"] != list(members)}
        if other:
            raise CommError(f"epoch {epoch}: members disagree: rank {self.rank} has {list(members)}, "
                            f"others have {other}")
        modes = {m: v.get("mode", "rebuild") for m, v in views.items() if v.get("mode", "rebuild") != mode}
        if modes:
            raise CommError(f"epoch {epoch}: rank {self.rank} chose {mode}, ranks {sorted(modes)} chose "
                            f"{sorted(set(modes.values()))}")

    def _arrival_error(self, store, epoch: int, keys: List[str], exc: BaseException) -> CommError:
        try:
            missing = [int(k.split("/")[1]) for k in keys if not store.check([k])]
        except Exception:  # the store itself is gone
            return StoreUnreachable(f"epoch {epoch}: store at {self.address} failed during the arrival "
                                    f"barrier: {exc}")
        return CommError(f"epoch {epoch}: ranks {missing} did not arrive at store {self.address} within "
                         f"{self.join_timeout.total_seconds():.0f}s")

    def _create_specs(self, ms: Membership) -> None:
        """new_group is collective over the default group: every member walks the same lists in the same
        order, including the lists it is not part of."""
        self.groups, self.all_groups = {}, {}
        for name, lists in self.specs.items():
            self.groups[name], self.all_groups[name] = None, []
            for ranks in lists:
                alive = tuple(r for r in ranks if r in ms.members)
                if not alive:
                    continue
                pg = dist.new_group([ms.to_dense(r) for r in alive], timeout=self.timeout,
                                    backend=self.backend)
                mine = pg if self.rank in alive else None
                self.all_groups[name].append((alive, mine))
                if mine is not None:
                    self.groups[name] = mine


def _safe(fn):
    try:
        return fn()
    except BaseException as exc:  # handed back to the caller's thread
        return exc


def host_store(port: int = 0, host: str = "0.0.0.0", timeout: timedelta = timedelta(seconds=30)) -> dist.TCPStore:
    """Host the rendezvous store in this process (a launcher, or the designated store process): it must
    outlive every worker it serves. port 0 picks a free port (read it from `.port`)."""
    return dist.TCPStore(host, port, is_master=True, timeout=timeout, wait_for_workers=False)
