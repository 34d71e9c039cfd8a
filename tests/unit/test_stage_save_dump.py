"""stages/save_dump: what is refused before any communicator is touched (the save itself runs in the
dump e2e tests: tests/e2e/test_dump_after_fault.py)."""
import pytest

from recovery_fakes import FakeCommunicators, FakeMegatron, action, session_at
from mindio_adaptor.core.layout.dump_world import DumpError
from mindio_adaptor.core.job.processor_link import SaveAssignment
from mindio_adaptor.recovery.stages.save_dump import SAVE_DUMP, dense_savers, save_dump


def save(step, saves=(SaveAssignment(0, (0, 3)),)):
    return action("save_ckpt", strategy="dump", step=step, saves=tuple(saves))


def test_only_the_last_completed_step_is_saved(tmp_path):
    megatron = FakeMegatron()
    with pytest.raises(RuntimeError, match="asked to save step 6, but this rank's last consistent snapshot is "
                                           "step 5"):
        save_dump(session_at(5, save_root=str(tmp_path)), megatron, save(6))
    assert megatron.calls == []


def test_a_run_without_save_has_nowhere_to_dump():
    with pytest.raises(DumpError, match="the run has no --save directory"):
        save_dump(session_at(5), FakeMegatron(), save(5))


def test_the_savers_of_an_moe_job_are_those_of_its_dense_shards():
    # The expert shards' savers the controller named are not needed: each dense saver holds the expert
    # shard of its place in the savers' world (core/layout/dump_world checks it).
    assert dense_savers([SaveAssignment(0, (0, 3)), SaveAssignment(1, (2,)), SaveAssignment(1, (1,))]) == [0, 3]
    with pytest.raises(DumpError, match=r"no saver of the dense optimizer's shards was named \(savers by "
                                        r"optimizer type: \[\(1, \[1\]\)\]\)"):
        dense_savers([SaveAssignment(1, (1,))])


def test_savers_are_the_ranks_of_every_entry_once_in_order():
    assert dense_savers([SaveAssignment(0, (3, 0)), SaveAssignment(0, (0, 1))]) == [0, 1, 3]
    assert SAVE_DUMP.on_training_thread


def test_while_scaled_in_the_savers_named_by_their_start_ranks_save_at_their_current_ranks(tmp_path):
    """dp4 R=2 lost ranks 0 and 1: the controller names survivor 3 (its rank at the start), which is rank 1
    of the dp2 job now; the savers' world is laid out in the current numbering."""
    from mindio_adaptor.core.layout.replica_layout import ReplicaLayout
    from mindio_adaptor.core.layout.scale_in_plan import plan_scale_in

    session = session_at(6, save_root=str(tmp_path))
    session.scale_in = plan_scale_in([[0, 1, 2, 3]], {0, 1}, global_batch_size=16, micro_batch_size=2)
    session.job.layout = ReplicaLayout.from_dp_lists([[0, 1]], 2)  # the dp2 job's: both ranks hold the one shard
    session.communicators = FakeCommunicators(failure=DumpError("the savers' world could not meet"))
    megatron = FakeMegatron(rank=1, world_size=2, tensor_model_parallel_size=1, context_parallel_size=1,
                            pipeline_model_parallel_size=1, data_parallel_size=2,
                            num_distributed_optimizer_instances=2)
    with pytest.raises(DumpError, match="could not meet"):
        save_dump(session, megatron, save(6, [SaveAssignment(0, (3,))]))
    assert session.communicators.calls == [(1, 2, [1])]  # current rank 1 is the savers' data-parallel rank 0
    assert not (tmp_path / "iter_0000006").exists()
