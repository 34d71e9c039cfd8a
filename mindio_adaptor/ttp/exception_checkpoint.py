"""The reference's older "exception checkpoint" API (`mindx_elastic.torch_exception_module`).

One `ExceptionHandler`, `exception_checkpoint`, is created at import. A job configures it once with
`set_config(save_func, args, partial_save, group_info, replicas)`; when the process later receives
SIGTERM (the cluster manager stopping a job whose node failed), the handler calls `save_func(*args)`
and then does what the handler it replaced would have done. After the restart,
`check_resumable_model()` tells whether the healthy ranks' files hold the whole model; when they do
not, the job resumes from its last periodic checkpoint (`resume_iteration`).

Framework-agnostic: nothing here imports megatron, and torch is imported only where a file is
written or read (importing this module stays cheap). Details and choices: docs/exception_checkpoint.md.

group_info
    A list of rank lists, one per model-parallel position: the data-parallel ranks that hold copies
    of that position's state. Example, 8 ranks with TP=2: [[0, 2, 4, 6], [1, 3, 5, 7]]. None means
    pure data parallelism: one list, every rank of the world.
partial_save, replicas
    Without partial save every rank of a list holds (and saves) the whole state of its position, so
    any healthy rank of a list can restore it. With partial save each rank writes only its own shard,
    `model_optim_rng_{rank}.pt`; a list L of d ranks is cut as the replica layout cuts it (see
    core/layout/replica_layout): shard j of g = d / replicas shards is held by L[j], L[j+g], ...
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import Iterable, List, NamedTuple, Optional, Sequence, Tuple

from mindio_adaptor.core.layout.replica_layout import LayoutError, ReplicaSet

logger = logging.getLogger(__name__)

PARTIAL_FILE = "model_optim_rng_{rank}.pt"
FAULT_RANKS_ENV = "MINDIO_FAULT_RANKS"
_NOT_INSTALLED = object()  # the previous SIGTERM handler before we replace it (None is a real value)


class ShardUnavailableError(FileNotFoundError):
    """No readable file holds a shard: neither the rank's own nor any healthy replica's."""


class Shard(NamedTuple):
    """One piece of the model that must survive: shard `index` of rank list `group` and the ranks
    holding a copy. Without partial save a list has a single piece (index 0), its whole state."""

    group: int
    index: int
    holders: Tuple[int, ...]

    def describe(self) -> str:
        return f"shard {self.index} of data-parallel list {self.group} (held by ranks {list(self.holders)})"


# ------------------------------------------------------------------------------------------------
# Where this process stands: rank, world, node. Read at call time, never cached, because the job
# may call set_config before torch.distributed is initialised.
# ------------------------------------------------------------------------------------------------

def _initialised_dist():
    """torch.distributed when a process group exists. A module torch never imported cannot be
    initialised, so we do not import torch just to ask."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist
    return None


def _env_int(name: str) -> Optional[int]:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else None


def current_rank() -> int:
    dist = _initialised_dist()
    if dist is not None:
        return dist.get_rank()
    rank = _env_int("RANK")
    return 0 if rank is None else rank


def world_size() -> int:
    dist = _initialised_dist()
    if dist is not None:
        return dist.get_world_size()
    size = _env_int("WORLD_SIZE")
    return 1 if size is None else size


def node_ranks() -> Optional[range]:
    """Global ranks on this host, as torchrun places them (host n runs ranks n*L .. n*L+L-1 with
    L = LOCAL_WORLD_SIZE). The host index is GROUP_RANK, else derived from our rank. None when
    LOCAL_WORLD_SIZE is unknown: then we cannot tell hosts apart and treat the job as one host."""
    local = _env_int("LOCAL_WORLD_SIZE")
    if local is None or local < 1:
        return None
    node = _env_int("GROUP_RANK")
    if node is None:
        node = current_rank() // local
    return range(node * local, (node + 1) * local)


# ------------------------------------------------------------------------------------------------
# Partial-save files
# ------------------------------------------------------------------------------------------------

def partial_save_path(directory: str, rank: Optional[int] = None) -> str:
    """`<directory>/model_optim_rng_{rank}.pt`; rank defaults to this process's global rank."""
    return os.path.join(directory, PARTIAL_FILE.format(rank=current_rank() if rank is None else rank))


def save_partial(directory: str, state, rank: Optional[int] = None) -> str:
    """Write this rank's file. Written under a temporary name and renamed, so a file that exists is
    complete: a save cut short by SIGKILL leaves no half file for load_partial to trust."""
    import torch

    path = partial_save_path(directory, rank)
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


# ------------------------------------------------------------------------------------------------
# Argument checks (each error names the argument)
# ------------------------------------------------------------------------------------------------

def _is_rank(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_save_func(save_func):
    if not callable(save_func):
        raise TypeError(f"set_config: save_func must be callable, got {save_func!r}")


def _check_args(args) -> tuple:
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"set_config: args must be a tuple or list of save_func's arguments, "
                        f"got {type(args).__name__}")
    return tuple(args)


def _check_partial_save(partial_save):
    if not isinstance(partial_save, bool):
        raise TypeError(f"set_config: partial_save must be True or False, got {partial_save!r}")


def _check_group_info(group_info) -> Optional[Tuple[Tuple[int, ...], ...]]:
    if group_info is None:
        return None
    if not isinstance(group_info, (list, tuple)) or not group_info:
        raise TypeError("set_config: group_info must be None or a non-empty list of rank lists "
                        f"(one per model-parallel position), got {group_info!r}")
    seen = set()
    for i, ranks in enumerate(group_info):
        if not isinstance(ranks, (list, tuple)) or not ranks:
            raise TypeError(f"set_config: group_info[{i}] must be a non-empty list of ranks, got {ranks!r}")
        bad = [r for r in ranks if not _is_rank(r)]
        if bad:
            raise ValueError(f"set_config: group_info[{i}] holds values that are not ranks (int >= 0): {bad}")
        for rank in ranks:
            if rank in seen:
                raise ValueError(f"set_config: group_info lists rank {rank} more than once "
                                 "(a rank holds one model-parallel position)")
            seen.add(rank)
    return tuple(tuple(ranks) for ranks in group_info)


def _check_replicas(replicas):
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
        raise ValueError(f"set_config: replicas must be a positive int, got {replicas!r}")


def _replica_sets(groups: Sequence[Sequence[int]], replicas: int) -> List[ReplicaSet]:
    sets = []
    for i, ranks in enumerate(groups):
        try:
            sets.append(ReplicaSet(ranks, replicas, group_index=i))
        except LayoutError as exc:
            raise ValueError(f"set_config: replicas={replicas} does not fit data-parallel list {i} "
                             f"{list(ranks)}: {exc}") from None
    return sets


def _rank_list(ranks, what: str) -> List[int]:
    """An int or an iterable of ints, checked, as a list."""
    if isinstance(ranks, int) and not isinstance(ranks, bool):
        ranks = [ranks]
    elif isinstance(ranks, (str, bytes)) or not isinstance(ranks, Iterable):
        raise TypeError(f"{what}: expected a rank (int >= 0) or a list of ranks, got {ranks!r}")
    ranks = list(ranks)
    bad = [r for r in ranks if not _is_rank(r)]
    if bad:
        raise ValueError(f"{what}: not ranks (int >= 0): {bad}")
    return ranks


def _env_fault_ranks() -> List[int]:
    text = os.environ.get(FAULT_RANKS_ENV, "")
    tokens = [t.strip() for t in text.split(",") if t.strip()]
    try:
        ranks = [int(t) for t in tokens]
    except ValueError:
        raise ValueError(f"{FAULT_RANKS_ENV}={text!r}: expected a comma-separated list of ranks") from None
    return _rank_list(ranks, FAULT_RANKS_ENV)


# ------------------------------------------------------------------------------------------------
# The handler
# ------------------------------------------------------------------------------------------------

class ExceptionHandler:
    """Saves on SIGTERM and judges whether the surviving ranks can restore the whole model."""

    def __init__(self):
        self._save_func = None
        self._args = ()
        self._group_info = None  # how the model is split for hybrid parallelism; None: pure DP
        self._partial_save = False
        self._replicas = 1
        self._marked_faulty: set = set()
        self._previous_handler = _NOT_INSTALLED
        self._handling = False

    # -- configuration --------------------------------------------------------------------------

    def set_config(self, save_func, args=(), partial_save=False, group_info=None, replicas=1):
        """Validate and keep the configuration, then take over SIGTERM (see _install_signal_handler).
        Every argument is checked before anything is stored, so a bad call changes nothing."""
        _check_save_func(save_func)
        args = _check_args(args)
        _check_partial_save(partial_save)
        groups = _check_group_info(group_info)
        _check_replicas(replicas)
        self._check_layout(groups, replicas)
        self._save_func, self._args = save_func, args
        self._partial_save, self._group_info, self._replicas = partial_save, groups, replicas
        self._install_signal_handler()

    @staticmethod
    def _check_layout(groups, replicas):
        if groups is None and world_size() % replicas:
            raise ValueError(f"set_config: replicas={replicas} does not divide the world size "
                             f"{world_size()} (group_info=None: one data-parallel list of every rank)")
        _replica_sets(groups if groups is not None else [range(world_size())], replicas)

    def _groups(self) -> Sequence[Sequence[int]]:
        # None is resolved on every use: the world size may be known only after set_config.
        return self._group_info if self._group_info is not None else [tuple(range(world_size()))]

    def shards(self) -> List[Shard]:
        """Every piece of the model and who holds it, in the configured layout."""
        pieces = []
        for rset in _replica_sets(self._groups(), self._replicas):
            if self._partial_save:
                pieces += [Shard(rset.group_index, j, rset.holders(j)) for j in range(rset.num_shards)]
            else:
                pieces.append(Shard(rset.group_index, 0, rset.rank_list))
        return pieces

    def shard_of(self, rank: int) -> Shard:
        for piece in self.shards():
            if rank in piece.holders:
                return piece
        raise ValueError(f"rank {rank} is in no data-parallel list of group_info {list(self._groups())}")

    # -- faults ---------------------------------------------------------------------------------

    def mark_faulty(self, ranks):
        """Record global ranks known to have failed (an int or a list)."""
        self._marked_faulty.update(_rank_list(ranks, "mark_faulty"))

    def clear_faults(self):
        """Forget the ranks given to mark_faulty (MINDIO_FAULT_RANKS is read afresh on every call)."""
        self._marked_faulty.clear()

    def fault_ranks(self) -> List[int]:
        """Every known faulty global rank: mark_faulty's plus the MINDIO_FAULT_RANKS list."""
        return sorted(self._marked_faulty.union(_env_fault_ranks()))

    def _get_fault_npus(self) -> List[str]:
        """Known faulty global ranks that run on this host (node_ranks()); all of them when the
        host's ranks cannot be told (no LOCAL_WORLD_SIZE). As strings: the reference's documented
        use is `str(args.rank) in exception_checkpoint._get_fault_npus()`."""
        local = node_ranks()
        return [str(r) for r in self.fault_ranks() if local is None or r in local]

    # -- can we resume? -------------------------------------------------------------------------

    def lost_shards(self, fault_ranks: Optional[Iterable[int]] = None) -> List[Shard]:
        """Pieces of the model whose every holder is faulty (default: the known faulty ranks)."""
        bad = set(self.fault_ranks() if fault_ranks is None else _rank_list(fault_ranks, "fault_ranks"))
        return [piece for piece in self.shards() if bad.issuperset(piece.holders)]

    def check_resumable_model(self, fault_ranks: Optional[Iterable[int]] = None) -> bool:
        """True when the healthy ranks hold every piece of the model. When False, the dying-gasp
        files are incomplete and the caller must resume from its last periodic checkpoint:
        resume_iteration(iteration, save_interval) rounds down to it."""
        lost = self.lost_shards(fault_ranks)
        for piece in lost:
            logger.warning("exception checkpoint: %s has no healthy holder", piece.describe())
        return not lost

    def resume_iteration(self, iteration: int, save_interval: int,
                         fault_ranks: Optional[Iterable[int]] = None) -> int:
        """`iteration` if the model is resumable, else the last multiple of save_interval at or
        below it (the last periodic checkpoint)."""
        if not _is_rank(iteration):
            raise ValueError(f"resume_iteration: iteration must be an int >= 0, got {iteration!r}")
        if not _is_rank(save_interval) or save_interval == 0:
            raise ValueError(f"resume_iteration: save_interval must be a positive int, got {save_interval!r}")
        if self.check_resumable_model(fault_ranks):
            return iteration
        return iteration - iteration % save_interval

    # -- partial-save restore -------------------------------------------------------------------

    def load_partial(self, directory: str, rank: int, map_location="cpu", weights_only: bool = False):
        """The saved state of `rank`: its own file, or else the file of a replica holding the same
        shard. Files of ranks known to be faulty are skipped (they may be stale or absent). These
        are the job's own files, hence weights_only=False by default (they hold RNG states etc.)."""
        import torch

        piece = self.shard_of(rank)
        faulty = set(self.fault_ranks())
        tried = []
        for source in [rank] + [r for r in piece.holders if r != rank]:
            path = partial_save_path(directory, source)
            if source in faulty:
                tried.append(f"{path}: rank {source} is marked faulty")
                continue
            if not os.path.isfile(path):
                tried.append(f"{path}: missing")
                continue
            try:
                state = torch.load(path, map_location=map_location, weights_only=weights_only)
            except Exception as exc:  # any failure to read means: try the next replica
                tried.append(f"{path}: unreadable ({type(exc).__name__}: {exc})")
                continue
            if source != rank:
                logger.warning("exception checkpoint: rank %d restored from replica rank %d (%s)",
                               rank, source, path)
            return state
        raise ShardUnavailableError(f"cannot restore rank {rank}: no readable file of {piece.describe()}; "
                                    "tried " + "; ".join(tried))

    # -- SIGTERM --------------------------------------------------------------------------------

    def _install_signal_handler(self):
        """Take over SIGTERM here, not at import: importing the module must not replace the handler
        Megatron (or the launcher) installed. The replaced handler is kept and called after the
        save. Python only lets the main thread set handlers; elsewhere we warn and do nothing."""
        if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
            return  # already ours; re-installing would make us our own previous handler
        if threading.current_thread() is not threading.main_thread():
            logger.warning("exception checkpoint: set_config called outside the main thread; "
                           "SIGTERM will not trigger a save")
            return
        self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)

    def remove_signal_handler(self):
        """Give SIGTERM back to the handler we replaced (no-op when ours is not installed)."""
        if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
            previous = self._previous_handler
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous in (None, _NOT_INSTALLED) else previous)
        self._previous_handler = _NOT_INSTALLED

    def _on_sigterm(self, signum, frame):
        if self._handling:
            return  # a second SIGTERM during the save, or a handler chain leading back here
        self._handling = True
        try:
            self._save_now()
            self._chain(signum, frame)
        finally:
            self._handling = False

    def _save_now(self):
        if self._save_func is None:
            return
        logger.warning("exception checkpoint: SIGTERM received, saving")
        try:
            self._save_func(*self._args)
        except Exception:  # a failed save must not keep the process from ending as it should
            logger.exception("exception checkpoint: save_func failed")

    def _chain(self, signum, frame):
        """Do what the replaced handler would have done."""
        previous = self._previous_handler
        if previous == signal.SIG_IGN:
            return
        if callable(previous):
            previous(signum, frame)
            return
        # SIG_DFL, or a handler installed outside Python: die of the signal, as the default would.
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)


exception_checkpoint = ExceptionHandler()

# Module-level conveniences bound to the one instance.
check_resumable_model = exception_checkpoint.check_resumable_model
resume_iteration = exception_checkpoint.resume_iteration
load_partial = exception_checkpoint.load_partial
