"""stages/drop_gradients: CLEAN of a process replacement drops the step's gradients and nothing else
(the groups wait for the replacement: REBUILD_GROUP)."""
from recovery_fakes import FakeMegatron, action, marks, session_at
from mindio_adaptor.recovery.stages.drop_gradients import DROP_GRADIENTS, drop_gradients


def test_clean_for_recover_only_drops_gradients():
    session, megatron = session_at(4), FakeMegatron()
    session.job.model = ["chunk 0", "chunk 1"]
    assert drop_gradients(session, megatron, action("clean", strategy="recover")) == 0
    assert megatron.calls == [("drop_gradients", ["chunk 0", "chunk 1"])]
    assert marks(session) == ["cleaned"]
    assert session.latest.iteration == 4 and session.received is None
    assert DROP_GRADIENTS.on_training_thread
