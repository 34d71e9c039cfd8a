"""A resize's REPAIR from the survivors' memory, with no checkpoint written or read: a scale-out's
(`--elastic-scale-out-from replicas`, the default), where the returned ranks receive their state from the
replicas, and a scale-in's (`--elastic-scale-in-from replicas`, the default), where the survivors, who hold
every shard between them, cut it anew for the smaller size.

Every rank of the new world builds its model, DDP wrapper, optimizer and scheduler again at the new sizes,
loaded from nothing (megatron/rebuild). Within each data-parallel group (the ranks of one tensor-
and pipeline-parallel position), then:
1. the step's common state (iteration, data position, FLOPs, RNG: the repair step's snapshot; the
   optimizer's param groups and step count; the scheduler) goes from the group's first survivor to every
   rank, which installs it, and the new optimizer allocates its moments;
2. the optimizer state by parameter (fp32 main params and moments), cut for the old size in the
   survivors' old optimizers, is resharded into the new ones' shards (core/layout/state_reshard): a survivor
   copies what it holds itself, the rest comes point to point from a survivor that holds it, spread over
   the replicas. The experts' state (expert parallelism) is resharded the same way within the expert
   data-parallel group, the group Megatron shards it over.
ROLLBACK then re-derives the model params from the main params on every rank. The survivors' old objects
are dropped once their state was sent."""
import logging
import time

from mindio_adaptor.core.layout import state_reshard
from mindio_adaptor.core.layout.scale_out_plan import ScaleOutRefused
from mindio_adaptor.recovery import scale_in

logger = logging.getLogger(__name__)


def resume_from_replicas(session, megatron, step: int, returning: bool, what: str) -> None:
    """A resize's REPAIR on one rank (`what`: "scale in" or "scale out"): `returning` for a process that
    returned for a retired rank."""
    started, job = time.monotonic(), session.job
    held = {} if returning else megatron.optimizer_state_slots(job.model, job.optimizer)
    common = None if returning else common_state(session, megatron, step, what)
    megatron.rebuild(job, None, None)
    group = megatron.data_parallel_group()
    common = _first_survivors(state_reshard.gather(group, (megatron.args().rank, common)), step)
    snapshot = common["snapshot"]
    megatron.set_iteration_state(snapshot)
    megatron.set_valid_position(common["consumed_valid_samples"])
    megatron.install_optimizer_common_state(job.optimizer, common["optimizer"])
    if job.scheduler is not None and common["scheduler"] is not None:
        job.scheduler.load_state_dict(common["scheduler"])
    wanted = megatron.optimizer_state_slots(job.model, job.optimizer)
    pieces = received = 0
    for kind in sorted(wanted):  # one order on every rank; a kind's group agrees on whether it has any
        if wanted[kind]:
            moved = state_reshard.reshard_in_group(megatron.state_group(kind), held.get(kind, {}), wanted[kind])
            pieces, received = pieces + moved[0], received + moved[1]
    scale_in.resume_at(session, megatron, snapshot, what)
    logger.info("%s: step %d's optimizer state resharded from the replicas in memory at rank %d (%d pieces, %d "
                "bytes received) in %.2f s", what.replace(" ", "-"), step, megatron.args().rank, pieces, received,
                time.monotonic() - started)


def common_state(session, megatron, step: int, what: str) -> dict:
    """What a survivor gives the rest of its data-parallel group besides the optimizer shards."""
    job = session.job
    return {"snapshot": session.snapshot_of(step, f"{what} from"),
            "consumed_valid_samples": megatron.valid_position(),
            "optimizer": megatron.optimizer_common_state(job.optimizer),
            "scheduler": job.scheduler.state_dict() if job.scheduler is not None else None}


def _first_survivors(reports, step: int) -> dict:
    for _rank, common in reports:
        if common is not None:
            return common
    raise ScaleOutRefused(f"no survivor of the scale-in in data-parallel group {[r for r, _ in reports]}: "
                          f"nothing holds step {step}'s state")
