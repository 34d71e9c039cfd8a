"""SAVE_CKPT of a scale-out (elastic training) with `--elastic-scale-out-from checkpoint`, on every survivor of
the scale-in: the checkpoint of the repair step at the smaller data-parallel size, which every rank of the
original size then loads (stages/scale_out_state). From the replicas (the default) nothing is saved: the state
goes from memory to memory at REPAIR. The survivors are one complete copy of the job's state, in their own
world (CLEAN rebuilt it after the stop), so Megatron's own save_checkpoint writes it as a periodic save would,
into a staging directory that the survivors' rank 0 publishes once every survivor is done (core/checkpoint/dump_dir): a
crash leaves the previous resume point or this one. Megatron's per-rank rerun state is written for every rank
of the original world, the returned ones included."""
import logging
import time

from mindio_adaptor.core.layout.scale_out_plan import ScaleOutRefused
from mindio_adaptor.recovery import scale_out
from mindio_adaptor.recovery.staged_checkpoint import save_and_publish
from mindio_adaptor.recovery.stages.stage import Stage

logger = logging.getLogger(__name__)


def scale_out_save(session, megatron, action) -> int:
    started, step, job, root = time.monotonic(), action.step, session.job, session.save_root
    scaled_in = session.scale_in
    if scaled_in is None:
        raise ScaleOutRefused(f"asked to save step {step} for a scale-out, but this rank never scaled in")
    if scale_out.from_replicas(session.config):
        if megatron.args().rank == 0:
            logger.info("scale-out: no checkpoint of step %d saved: the returned ranks take the state from the "
                        "replicas", step)
        return 0
    if not root:
        raise ScaleOutRefused("the run has no --save directory: there is nowhere to write the checkpoint the "
                              "scale-out loads")
    snapshot = session.snapshot_of(step, "save for the scale-out")
    world = len(scaled_in.survivors) + len(scaled_in.lost) + len(scaled_in.dropped)
    save_and_publish(megatron, job, root, snapshot, scaled_in.survivors, world)
    logger.info("scale-out: checkpoint of step %d saved at dp%d and published in %.2f s", step, scaled_in.new_dp,
                time.monotonic() - started)
    session.timeline.mark("scale-out saved", f"step {step} in {time.monotonic() - started:.2f} s")
    return 0


SCALE_OUT_SAVE = Stage("scale out: save", scale_out_save)
