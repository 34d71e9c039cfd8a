"""stages/scale_in_state: with --elastic-scale-in-from checkpoint the survivors load the dump of the repair step
into a model and optimizer built at the smaller size (from the replicas: test_resize_from_replicas); the session's snapshot, the data position and the replay follow it; and how the rebuilt
objects take the places Megatron's frames hold (megatron/rebuild.take_place_of); the sizes Megatron takes
(megatron/sizes)."""
import logging
from types import SimpleNamespace

import pytest

from recovery_fakes import FakeMegatron, FakeReplay, action, session_at
from mindio_adaptor.core.job.ha_config import HighAvailabilityConfig
from mindio_adaptor.core.layout.scale_in_plan import ScaleInRefused, plan_scale_in
from mindio_adaptor.core.layout.scale_out_plan import plan_scale_out
from mindio_adaptor import megatron as megatron_job
from mindio_adaptor.recovery import scale_in
from mindio_adaptor.recovery.stages.scale_in_state import SCALE_IN_STATE, scale_in_state

PLAN = plan_scale_in([[0, 1, 2, 3]], {2, 3}, global_batch_size=16, micro_batch_size=2)

# The job's resizes take the state from the checkpoint (--elastic-scale-in-from checkpoint).
FROM_CHECKPOINT = HighAvailabilityConfig(elastic_scale_in_from="checkpoint")


def scaled_in_session(step=5):
    session = session_at(step, save_root="/ckpt", config=FROM_CHECKPOINT)
    session.scale_in = PLAN
    return session


def test_the_dump_is_loaded_at_the_new_size_and_the_data_restarts_at_its_sample(caplog):
    session, megatron = scaled_in_session(), FakeMegatron(global_batch_size=16)
    megatron.rebuilt = (4, 400.0)
    megatron.margs.consumed_train_samples = 64  # what the load set
    replay = FakeReplay()
    session.replay.iterators[1] = replay
    with caplog.at_level(logging.INFO):
        assert scale_in_state(session, megatron, action("repair", strategy="scale_in", step=4)) == 0
    assert megatron.called("rebuild") == [("/ckpt", 4)] and megatron.called("weigh_loss") == [()]
    assert (session.latest.iteration, session.latest.consumed_train_samples,
            session.latest.floating_point_operations) == (4, 64, 400.0)
    assert session.job.completed_steps == [4] and replay.restarts == [(64, 4)]
    [said] = [r.getMessage() for r in caplog.records if "elastic training: scaled in" in r.getMessage()]
    assert said.startswith("elastic training: scaled in dp4 -> dp2") and "ranks [2, 3] were lost" in said
    assert SCALE_IN_STATE.on_training_thread


def test_a_checkpoint_of_another_step_or_no_plan_or_no_save_is_refused():
    megatron = FakeMegatron()
    megatron.rebuilt = (3, 300.0)
    with pytest.raises(ScaleInRefused, match="scale in from the checkpoint of step 4 under /ckpt; loaded step 3"):
        scale_in_state(scaled_in_session(), megatron, action("repair", step=4))
    with pytest.raises(ScaleInRefused, match="before the groups were rebuilt"):
        scale_in_state(session_at(5, save_root="/ckpt", config=FROM_CHECKPOINT), FakeMegatron(),
                       action("repair", step=4))
    no_save = scaled_in_session()
    no_save.save_root = None
    with pytest.raises(ScaleInRefused, match="no --save directory"):
        scale_in_state(no_save, FakeMegatron(), action("repair", step=4))


class Optimizer:
    def __init__(self, shard):
        self.shard = shard

    def step(self):
        return self.shard


def test_a_rebuilt_object_takes_the_old_ones_place_for_every_holder():
    old, new = Optimizer("dp4 shard"), Optimizer("dp2 shard")
    held_by_a_frame = old
    megatron_job.take_place_of(old, new)
    assert held_by_a_frame.step() == "dp2 shard"
    new.shard = "after the next update"  # one state, seen through either reference
    assert held_by_a_frame.shard == "after the next update"
    with pytest.raises(ScaleInRefused, match="cannot take the place of the job's Optimizer"):
        megatron_job.take_place_of(Optimizer("x"), object())


def test_context_parallelism_is_refused_naming_the_size():
    from types import SimpleNamespace

    margs = SimpleNamespace(tensor_model_parallel_size=2, pipeline_model_parallel_size=2, context_parallel_size=2,
                            expert_model_parallel_size=2)
    with pytest.raises(ScaleInRefused, match="data, tensor, pipeline and expert parallelism alone so far; this job "
                                             "has context-parallel size 2$"):
        scale_in.refuse_unsupported(margs)
    margs.context_parallel_size = 1
    scale_in.refuse_unsupported(margs)  # tp2 x pp2 x ep2: accepted


def test_an_expert_parallel_job_scales_in_only_to_a_multiple_of_its_expert_parallel_size():
    from mindio_adaptor.core.layout.replica_layout import ReplicaLayout
    from mindio_adaptor.core.layout.scale_in_plan import plan_scale_in

    layout = ReplicaLayout.from_dp_lists([[0, 1, 2, 3]], 2, expert_dp_lists=[[0, 2], [1, 3]])
    to_dp2 = plan_scale_in([[0, 1, 2, 3]], {2, 3}, 16, 2, layout, expert_parallel=2)
    scale_in.refuse_expert_misfit(2, to_dp2)  # dp2 holds EP2
    to_dp3 = plan_scale_in([[0, 1, 2, 3]], {3}, 16, 2, None, expert_parallel=2)
    with pytest.raises(ScaleInRefused, match=r"scale-in to dp3 with expert-parallel size 2: the new data-parallel "
                                             r"size must be a multiple of it, with the step's micro-batches shared evenly$"):
        scale_in.refuse_expert_misfit(2, to_dp3)
    scale_in.refuse_expert_misfit(1, to_dp3)  # dense: the uneven dp3 is fine


def test_the_rebuild_call_takes_the_current_replica_count_and_drops_cached_strategies():
    cfg = SimpleNamespace(ddp=SimpleNamespace(num_distributed_optimizer_instances=2))
    context = {"save_strategy": object(), "load_strategy": object(), "kept": 1}
    call_args, call_kwargs = megatron_job.with_current_groups(("model type",), {"cfg_container": cfg,
                                                                            "checkpointing_context": context},
                                                              replicas=1)
    assert call_args == ("model type",) and call_kwargs["cfg_container"] is cfg
    assert cfg.ddp.num_distributed_optimizer_instances == 1  # tp2 x dp2 R=2 -> dp1: one instance
    assert context == {"kept": 1}  # the context pretrain() holds, cleared in place


def test_the_parallel_state_call_takes_the_plan_replica_count():
    from mindio_adaptor.core.layout.replica_layout import ReplicaLayout

    layout = ReplicaLayout.from_dp_lists([[0, 2], [1, 3]], 2)
    plan = plan_scale_in([[0, 2], [1, 3]], {2, 3}, global_batch_size=16, micro_batch_size=2, layout=layout)
    init_call = ((2, 1, None), {"context_parallel_size": 1, "num_distributed_optimizer_instances": 2})
    margs = SimpleNamespace(rank=0, world_size=4, global_batch_size=16, micro_batch_size=2, seq_length=64,
                            data_parallel_size=2, num_distributed_optimizer_instances=2)
    # Megatron's calculator is a process global: a stand-in that counts as it does.
    sizes = {}
    calculator = (lambda rank, ramp, gbs, mbs, dp, seq_length=None: sizes.update(n=gbs // (mbs * dp)),
                  lambda: sizes["n"])
    assert megatron_job.apply_scale_in_sizes(plan, 0, init_call, margs, calculator) == (
        (2, 1, None), {"context_parallel_size": 1, "num_distributed_optimizer_instances": 1})
    assert init_call[1]["num_distributed_optimizer_instances"] == 2  # the recorded call is not changed
    assert (margs.data_parallel_size, margs.num_distributed_optimizer_instances, margs.world_size) == (1, 1, 2)
    # ... and the scale-out back gives the job its replicas again
    back = plan_scale_out(plan, {2, 3}, global_batch_size=16, micro_batch_size=2)
    assert megatron_job.apply_original_sizes(back, init_call, margs, calculator)[1][
        "num_distributed_optimizer_instances"] == 2
    assert (margs.data_parallel_size, margs.num_distributed_optimizer_instances) == (2, 2)
