"""Publishing a staged dump: atomic for the loader, never replacing a good checkpoint."""
import pytest

from mindio_adaptor.core.checkpoint import dump_dir


def stage(root, step, payload="data"):
    staging = dump_dir.prepare_staging(str(root), step)
    target = staging / dump_dir.iteration_dir_name(step)
    target.mkdir()
    (target / "shard").write_text(payload)
    return staging


def test_publish_moves_the_staged_iteration_and_points_the_tracker_at_it(tmp_path):
    (tmp_path / "iter_0000002").mkdir()
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("2")
    stage(tmp_path, 4)
    final = dump_dir.publish(str(tmp_path), 4)
    assert final == tmp_path / "iter_0000004" and (final / "shard").read_text() == "data"
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "4"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iter_0000002", "iter_0000004",
                                                          "latest_checkpointed_iteration.txt"]


def test_staging_never_looks_like_a_checkpoint_to_a_loader(tmp_path):
    staging = stage(tmp_path, 5)
    assert not staging.name.startswith("iter_")
    assert not (tmp_path / "latest_checkpointed_iteration.txt").exists()


def test_a_complete_checkpoint_of_the_same_step_is_kept(tmp_path):
    (tmp_path / "iter_0000004").mkdir()
    (tmp_path / "iter_0000004" / "shard").write_text("periodic")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("4")
    stage(tmp_path, 4, payload="dump")
    dump_dir.publish(str(tmp_path), 4)
    assert (tmp_path / "iter_0000004" / "shard").read_text() == "periodic"
    assert not dump_dir.staging_root(str(tmp_path), 4).exists()


@pytest.mark.parametrize("tracker", [None, "2", "release"])
def test_a_save_of_the_same_step_the_tracker_does_not_name_is_replaced(tmp_path, tracker, caplog):
    unfinished = tmp_path / "iter_0000004"
    unfinished.mkdir()
    (unfinished / "common.pt").write_text("half written")
    if tracker is not None:
        (tmp_path / "latest_checkpointed_iteration.txt").write_text(tracker)
    stage(tmp_path, 4, payload="dump")
    dump_dir.publish(str(tmp_path), 4)
    assert sorted(p.name for p in unfinished.iterdir()) == ["shard"]
    assert (unfinished / "shard").read_text() == "dump"
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "4"
    assert not any(p.name.startswith(".mindio") for p in tmp_path.iterdir())
    assert "iter_0000004 was not marked complete" in caplog.text


def test_publish_without_a_staged_step_names_the_missing_directory(tmp_path):
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("2")
    with pytest.raises(dump_dir.PublishError, match=r"nothing staged for step 7: .*iter_0000007"):
        dump_dir.publish(str(tmp_path), 7)
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "2"


def test_a_leftover_staging_dir_of_a_failed_dump_is_replaced(tmp_path):
    stage(tmp_path, 3, payload="half")
    staging = stage(tmp_path, 3, payload="whole")
    assert (staging / "iter_0000003" / "shard").read_text() == "whole"


def test_no_save_directory_is_a_clear_error():
    with pytest.raises(ValueError, match="no --save"):
        dump_dir.prepare_staging("", 3)


@pytest.mark.parametrize("tracker", [None, "2", "release"])
def test_an_interrupted_save_no_tracker_names_is_removed(tmp_path, tracker):
    (tmp_path / "iter_0000002").mkdir()
    (tmp_path / "iter_0000004").mkdir()
    (tmp_path / "iter_0000004" / "common.pt").write_text("half written")
    if tracker is not None:
        (tmp_path / "latest_checkpointed_iteration.txt").write_text(tracker)
    assert dump_dir.remove_unfinished(str(tmp_path), 4)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("iter_", ".mindio"))) == ["iter_0000002"]
    if tracker is not None:
        assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == tracker
    assert not dump_dir.remove_unfinished(str(tmp_path), 4)  # another rank came first: nothing left


def test_a_save_the_tracker_names_is_never_removed(tmp_path):
    (tmp_path / "iter_0000004").mkdir()
    (tmp_path / "iter_0000004" / "shard").write_text("complete")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("4")
    assert not dump_dir.remove_unfinished(str(tmp_path), 4)
    assert (tmp_path / "iter_0000004" / "shard").read_text() == "complete"
