"""Reads Megatron's data-parallel rank lists once its groups exist and builds the replica layout.

Replicas use Megatron's own distributed-optimizer instances (`num_distributed_optimizer_instances`
= R): instance k is the k-th contiguous slice of each DP x CP rank list, exactly the reference's
replica groups. We check that the groups Megatron built are the ones the layout describes, so the
controller, dumps and repairs can rely on the layout alone.
"""
import logging
import os
import socket

import torch.distributed as dist

from mindio_adaptor.core.replica_layout import ReplicaLayout, crowded_shards
from mindio_adaptor.patches.registry import Patch
from mindio_adaptor.patches.training_state import STATE

logger = logging.getLogger(__name__)

FAILURE_DOMAINS_ENV = "MINDIO_FAILURE_DOMAINS"  # comma list by global rank; default: host names


def _after_initialize(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    margs = _megatron_args()
    if margs is not None and getattr(margs, "enable_high_availability", False):
        STATE.layout = build_layout(margs.num_distributed_optimizer_instances)
    return result


def _megatron_args():
    try:
        from megatron.training.global_vars import get_args

        return get_args()
    except (ImportError, AssertionError):
        return None


def failure_domain(rank: int) -> str:
    listed = os.environ.get(FAILURE_DOMAINS_ENV)
    if listed:
        domains = [d.strip() for d in listed.split(",")]
        if len(domains) != dist.get_world_size():
            raise ValueError(f"{FAILURE_DOMAINS_ENV} lists {len(domains)} domains for a world of "
                             f"{dist.get_world_size()} ranks")
        return domains[rank]
    return socket.gethostname()


def build_layout(replica_cnt: int) -> ReplicaLayout:
    """Collective over the world: every rank contributes its DP lists and failure domain."""
    from megatron.core import parallel_state as ps

    rank = dist.get_rank()
    mine = (tuple(ps._DATA_PARALLEL_GLOBAL_RANKS_WITH_CP),
            tuple(dist.get_process_group_ranks(ps.get_expert_data_parallel_group())),
            failure_domain(rank))
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    dp_lists = sorted({entry[0] for entry in everyone})
    expert_lists = sorted({entry[1] for entry in everyone})
    node_of = {r: entry[2] for r, entry in enumerate(everyone)}
    expert_lists = [] if expert_lists == dp_lists else expert_lists
    layout = ReplicaLayout.from_dp_lists(dp_lists, replica_cnt, expert_dp_lists=expert_lists)
    _check_matches_megatron(layout, rank, ps)
    _warn_crowding(layout, node_of, rank)
    if rank == 0:
        logger.info("replica layout: %s", layout.sets)
    return layout


def _check_matches_megatron(layout: ReplicaLayout, rank: int, ps):
    if layout.sets[0].replica_cnt == 1:
        return
    group = ps.get_data_parallel_group(with_context_parallel=True, partial_data_parallel=True)
    built = tuple(dist.get_process_group_ranks(group))
    rset = layout.set_of(rank)
    expected = rset.replica_groups[rset.replica_of(rank)]
    if built != expected:
        raise RuntimeError(f"rank {rank}: Megatron's optimizer instance {list(built)} differs from "
                           f"the replica layout's group {list(expected)}")


def _warn_crowding(layout: ReplicaLayout, node_of, rank: int):
    if rank != 0:
        return
    crowded = [(s, shard, holders) for s in layout.sets for shard, holders in crowded_shards(s, node_of)]
    if crowded and layout.sets[0].replica_cnt > 1:
        s, shard, holders = crowded[0]
        logger.warning("%d optimizer shard(s) have several holders on one node (first: shard %d of "
                       "%s held by %s on %s): losing that node loses every copy", len(crowded),
                       shard, list(s.rank_list), list(holders), sorted({node_of[h] for h in holders}))


PATCHES = [
    Patch("megatron.core.parallel_state", "initialize_model_parallel", _after_initialize),
]
