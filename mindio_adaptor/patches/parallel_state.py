"""Reads Megatron's data-parallel rank lists once its groups exist and builds the replica layout.

Replicas use Megatron's own distributed-optimizer instances (`num_distributed_optimizer_instances`
= R): Megatron makes instance k the k-th contiguous slice of each DP x CP rank list, exactly the
reference's replica groups. Where that cut would put every holder of a shard on one node and another
cut would not, the instances are re-created along the layout's groups. Either way we check that the
groups Megatron uses are the ones the layout describes, so the controller, dumps and repairs can
rely on the layout alone.
"""
import logging
import os
import socket

import torch.distributed as dist

from mindio_adaptor import megatron as megatron_job
from mindio_adaptor.core.job import job_store
from mindio_adaptor.core.job.job_store import LAYOUT_INPUTS
from mindio_adaptor.core.layout import warm_assignment
from mindio_adaptor.core.layout.replica_layout import ATTENTION, MOE, ReplicaLayout, crowded_shards
from mindio_adaptor.patches.patch import Patch
from mindio_adaptor.recovery.session import SESSION

logger = logging.getLogger(__name__)

FAILURE_DOMAINS_ENV = "MINDIO_FAILURE_DOMAINS"  # comma list by global rank, for every rank at once
FAILURE_DOMAIN_ENV = "MINDIO_FAILURE_DOMAIN"  # this process's (mindio-adaptor launch sets it); default: host name


def _after_initialize(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    margs = _megatron_args()
    if margs is not None and SESSION.config.enable_high_availability:
        # A warm spare's stand-in rank reads no store: its layout comes with its rank (patches/warm_spare).
        if not warm_assignment.provisional():
            SESSION.job.layout = build_layout(margs.num_distributed_optimizer_instances)
        # An online repair initialises the same groups again after rebuilding the world.
        SESSION.job.model_parallel_init = (args, kwargs)
    return result


def _megatron_args():
    try:
        return megatron_job.args_if_parsed()
    except ImportError:
        return None


def failure_domain(rank: int) -> str:
    listed = os.environ.get(FAILURE_DOMAINS_ENV)
    if listed:
        domains = [d.strip() for d in listed.split(",")]
        if len(domains) != dist.get_world_size():
            raise ValueError(f"{FAILURE_DOMAINS_ENV} lists {len(domains)} domains for a world of "
                             f"{dist.get_world_size()} ranks")
        return domains[rank]
    return os.environ.get(FAILURE_DOMAIN_ENV) or socket.gethostname()


def build_layout(replica_cnt: int) -> ReplicaLayout:
    """Collective over the world: every rank contributes its DP lists and failure domain."""
    from megatron.core import parallel_state as ps

    rank = dist.get_rank()
    mine = (tuple(ps._DATA_PARALLEL_GLOBAL_RANKS_WITH_CP),
            tuple(dist.get_process_group_ranks(ps.get_expert_data_parallel_group())),
            failure_domain(rank))
    everyone = _gather_layout_inputs(mine, rank)
    dp_lists = sorted({entry[0] for entry in everyone})
    expert_lists = sorted({entry[1] for entry in everyone})
    node_of = {r: entry[2] for r, entry in enumerate(everyone)}
    expert_lists = [] if expert_lists == dp_lists else expert_lists
    natural = ReplicaLayout.from_dp_lists(dp_lists, replica_cnt, expert_dp_lists=expert_lists)
    # _warn_crowding below says it once, on rank 0, with the shard and the node.
    spread = ReplicaLayout.from_dp_lists(dp_lists, replica_cnt, node_of, expert_dp_lists=expert_lists,
                                         warn=False)
    layout = natural
    if _groups(spread) != _groups(natural):
        if expert_lists and spread.instances is None:
            if rank == 0:
                logger.warning("replica holders could be spread over nodes, but the expert data-parallel lists "
                               "%s cannot be cut into optimizer instances of whole expert slices", expert_lists)
        else:
            _rebuild_optimizer_instances(spread, ps)
            layout = spread
    _check_matches_megatron(layout, rank, ps)
    _warn_crowding(layout, node_of, rank)
    if rank == 0:
        logger.info("replica layout: %s (failure domains: %s)", layout.sets,
                    sorted(set(node_of.values())))
    return layout


def _gather_layout_inputs(mine, rank: int) -> list:
    """Every rank's entry. A replacement process starting on the fake backend (patches/
    process_replacement) cannot gather: it reads what rank 0 published in the job's store."""
    if SESSION.replacement.fake_world:
        return job_store.read(LAYOUT_INPUTS)
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    margs = _megatron_args()
    if rank == 0 and SESSION.config.enable_worker_reboot and len(everyone) == started_world_size():
        # Not a scaled-in world's (elastic training): a replacement, or a process returning for a scale-out,
        # starts in the job's full world. Only a launcher that gives its workers the job's token starts one
        # (mindio-adaptor launch); without the token (torchrun restarts whole groups) there is none to read it.
        if job_store.has_token():
            job_store.publish(LAYOUT_INPUTS, everyone)
        else:
            logger.info("the replica layout's inputs are not published for replacement processes: this job has "
                        "no token yet (MINDIO_TOKEN), as under torchrun, whose restarts are of the whole group")
    return everyone


def started_world_size() -> int:
    """The world the job was launched with (torchrun's and mindio-adaptor launch's WORLD_SIZE)."""
    return int(os.environ.get("WORLD_SIZE") or dist.get_world_size())


def _groups(layout: ReplicaLayout):
    return [s.replica_groups for s in layout.sets]


def _rebuild_optimizer_instances(layout: ReplicaLayout, ps):
    """Megatron cut every DP list into contiguous optimizer instances; the layout chose other
    groups so that no shard has all its holders on one node. Create those groups (every rank calls
    new_group for every group, in the same order) and point Megatron's globals at them before the
    model, DDP and optimizer read them."""
    rank, r_count = dist.get_rank(), layout.sets[0].replica_cnt
    with_gloo = ps._INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP_GLOO is not None
    dense, experts = layout.sets_of(ATTENTION), layout.sets_of(MOE)
    mine = {}
    instances = [[] for _ in range(r_count)]
    for s in dense:
        for k, members in enumerate(s.replica_groups):
            _new_groups(members, rank, mine, "intra", with_gloo)
            instances[k] += members
    for s in experts:
        for members in s.replica_groups:
            _new_groups(members, rank, mine, "expert_intra", with_gloo)
    # Dense and expert shards are all-reduced across instances over one group; with experts it is
    # theirs (the layout chose instances under which each rank's dense and expert holders agree).
    for s in experts or dense:
        for shard in range(s.num_shards):
            _new_group(s.holders(shard), rank, mine, "inter")
    for members in instances:
        _new_group(sorted(members), rank, mine, "instance")
    # Without separate expert lists Megatron's expert DP groups are the dense ones.
    expert_intra = "expert_intra" if experts else "intra"
    for name, group in [("_INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP", mine["intra"]),
                        ("_INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP_GLOO", mine.get("intra_gloo")),
                        ("_INTRA_PARTIAL_EXPERT_DATA_PARALLEL_GROUP", mine[expert_intra]),
                        ("_INTRA_PARTIAL_EXPERT_DATA_PARALLEL_GROUP_GLOO", mine.get(expert_intra + "_gloo")),
                        (_inter_instance_name(ps), mine["inter"]),
                        ("_INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP", mine["instance"])]:
        if hasattr(ps, name):  # megatron-core 0.12 has neither expert instances nor an instance group
            _repoint(ps, name, group)
    if rank == 0:
        logger.info("optimizer instances re-laid so each shard's holders are on different nodes: %s",
                    [s.replica_groups for s in layout.sets])


def _inter_instance_name(ps) -> str:
    """The group across optimizer instances: shared with the experts' from megatron-core 0.13 on, the
    dense one's alone in 0.12."""
    for name in ("_INTER_PARTIAL_EXPERT_DATA_PARALLEL_GROUP", "_INTER_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP"):
        if hasattr(ps, name):
            return name
    raise RuntimeError("this Megatron's parallel_state has no group across distributed-optimizer instances "
                       "that the adaptor knows (_INTER_PARTIAL_EXPERT_DATA_PARALLEL_GROUP, "
                       "_INTER_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP)")


def _repoint(ps, name, group):
    """Set ps.<name> to `group`, and every other parallel_state global that aliased the old group
    (e.g. the *_WITH_GTP_REMAT names, which equal the plain ones when GTP is off)."""
    old = getattr(ps, name)
    for attribute, value in list(vars(ps).items()):
        if old is not None and value is old and attribute.isupper():
            setattr(ps, attribute, group)
    setattr(ps, name, group)


def _new_group(members, rank, mine, name, backend=None):
    group = dist.new_group(sorted(members), backend=backend)
    if rank in members:
        mine[name] = group


def _new_groups(members, rank, mine, name, with_gloo):
    """The group, and its gloo twin where Megatron keeps one (its CPU-side state gathers)."""
    _new_group(members, rank, mine, name)
    if with_gloo:
        _new_group(members, rank, mine, name + "_gloo", backend="gloo")


def _check_matches_megatron(layout: ReplicaLayout, rank: int, ps):
    if layout.sets[0].replica_cnt == 1:
        return
    dense = layout.set_of(rank)
    _check_group(ps.get_data_parallel_group(with_context_parallel=True, partial_data_parallel=True),
                 dense.replica_groups[dense.replica_of(rank)], "optimizer instance", rank)
    _check_group(getattr(ps, _inter_instance_name(ps)), dense.holders(dense.shard_of(rank)),
                 "group across optimizer instances", rank)
    if any(s.optimizer_type == MOE for s in layout.sets):
        experts = layout.set_of(rank, MOE)
        _check_group(ps._INTRA_PARTIAL_EXPERT_DATA_PARALLEL_GROUP, experts.replica_groups[experts.replica_of(rank)],
                     "expert optimizer instance", rank)


def _check_group(group, expected, what: str, rank: int):
    built = tuple(dist.get_process_group_ranks(group))
    if built != tuple(expected):
        raise RuntimeError(f"rank {rank}: Megatron's {what} {list(built)} differs from the replica layout's "
                           f"group {list(expected)}")


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
