"""stages/publish_dump: the staged checkpoint becomes the resume point; nothing staged is an error
naming the step."""
import pytest

from recovery_fakes import FakeMegatron, action, marks, session_at
from mindio_adaptor.core.checkpoint import dump_dir
from mindio_adaptor.recovery.stages.publish_dump import PUBLISH_DUMP, publish_dump


def test_publish_makes_the_staged_step_the_resume_point(tmp_path):
    session = session_at(5, save_root=str(tmp_path))
    staged = dump_dir.prepare_staging(str(tmp_path), 5) / dump_dir.iteration_dir_name(5)
    staged.mkdir()
    (staged / "common.pt").write_bytes(b"state")
    assert publish_dump(session, FakeMegatron(), action("rename", strategy="dump", step=5)) == 0
    assert (tmp_path / "iter_0000005" / "common.pt").read_bytes() == b"state"
    assert dump_dir.tracked_step(str(tmp_path)) == 5
    assert not dump_dir.staging_root(str(tmp_path), 5).exists()
    assert marks(session) == ["dump published"]
    assert not PUBLISH_DUMP.on_training_thread


def test_nothing_staged_is_refused_naming_the_step(tmp_path):
    session = session_at(5, save_root=str(tmp_path))
    with pytest.raises(dump_dir.PublishError, match="nothing staged for step 5"):
        publish_dump(session, FakeMegatron(), action("rename", strategy="dump", step=5))
    assert dump_dir.tracked_step(str(tmp_path)) is None
