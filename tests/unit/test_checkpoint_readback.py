"""core/checkpoint/checkpoint_readback on real torch.distributed.checkpoint directories (written without a process
group): a complete one passes; each way a .metadata can fail to describe its files is named."""
import pickle
import shutil

import pytest
import torch
import torch.distributed.checkpoint as dcp

from mindio_adaptor.core.checkpoint import dump_dir
from mindio_adaptor.core.checkpoint.checkpoint_readback import UnreadableCheckpoint, check_torch_dist, is_torch_dist

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def write(directory, seed, size):
    generator = torch.Generator().manual_seed(seed)
    state = {"weight": torch.randn(size, generator=generator), "bias": torch.zeros(size),
             "rng": {"seed": seed, "state": list(range(size))}, "step": {"iteration": seed}}
    dcp.save(state, checkpoint_id=str(directory), no_dist=True)
    return directory


def metadata_of(directory):
    with open(directory / ".metadata", "rb") as f:
        return pickle.load(f)


def rewrite_metadata(directory, metadata):
    with open(directory / ".metadata", "wb") as f:
        pickle.dump(metadata, f)


def test_a_complete_checkpoint_passes(tmp_path):
    directory = write(tmp_path / "ckpt", 1, 64)
    assert is_torch_dist(directory) and not is_torch_dist(tmp_path)
    assert check_torch_dist(directory) == len(metadata_of(directory).storage_data)


def test_the_metadata_of_another_save_is_refused(tmp_path):
    # The defect it guards against: a save's .metadata made from another save's write results.
    own = write(tmp_path / "own", 1, 64)
    other = write(tmp_path / "other", 2, 5000)
    shutil.copy(other / ".metadata", own / ".metadata")
    with pytest.raises(UnreadableCheckpoint, match="lies at bytes|does not unpickle"):
        check_torch_dist(own)


def test_a_byte_item_at_a_wrong_offset_is_named(tmp_path):
    directory = write(tmp_path / "ckpt", 1, 64)
    metadata = metadata_of(directory)
    index = next(i for i in metadata.storage_data if i.fqn.startswith("rng"))
    place = metadata.storage_data[index]
    place.offset += 1  # inside the item, as stale offsets land: not the start of a pickle
    place.length -= 1
    rewrite_metadata(directory, metadata)
    with pytest.raises(UnreadableCheckpoint, match=rf"{index.fqn} \(bytes .*\) does not unpickle"):
        check_torch_dist(directory)


def test_an_item_past_the_end_of_its_file_is_named(tmp_path):
    directory = write(tmp_path / "ckpt", 1, 64)
    data_file = next(p for p in directory.iterdir() if p.suffix == ".distcp")
    with open(data_file, "r+b") as f:
        f.truncate(data_file.stat().st_size // 2)
    with pytest.raises(UnreadableCheckpoint, match=rf"lies at bytes \d+\.\.\d+ of {data_file.name}, which has"):
        check_torch_dist(directory)


def test_a_missing_data_file_is_named(tmp_path):
    directory = write(tmp_path / "ckpt", 1, 64)
    data_file = next(p for p in directory.iterdir() if p.suffix == ".distcp")
    data_file.unlink()
    with pytest.raises(UnreadableCheckpoint, match=rf"{data_file.name}, named by the metadata, cannot be read"):
        check_torch_dist(directory)


def test_a_chunk_stored_nowhere_is_named(tmp_path):
    directory = write(tmp_path / "ckpt", 1, 64)
    metadata = metadata_of(directory)
    metadata.storage_data = {i: p for i, p in metadata.storage_data.items() if i.fqn != "weight"}
    rewrite_metadata(directory, metadata)
    with pytest.raises(UnreadableCheckpoint, match=r"weight \(chunk at \(0,\)\) is in the metadata but stored nowhere"):
        check_torch_dist(directory)


def test_zeroed_metadata_is_named(tmp_path):
    directory = write(tmp_path / "ckpt", 1, 64)
    size = (directory / ".metadata").stat().st_size
    (directory / ".metadata").write_bytes(b"\x00" * size)
    with pytest.raises(UnreadableCheckpoint, match=r"\.metadata cannot be read: UnpicklingError"):
        check_torch_dist(directory)


def test_an_unreadable_dump_is_not_published_and_the_reason_is_given(tmp_path):
    (tmp_path / "iter_0000002").mkdir()
    dump_dir.write_tracker(str(tmp_path), 2)
    staged = dump_dir.prepare_staging(str(tmp_path), 4) / dump_dir.iteration_dir_name(4)
    write(staged, 1, 64)
    shutil.copy(write(tmp_path / "other", 2, 5000) / ".metadata", staged / ".metadata")
    with pytest.raises(dump_dir.PublishError, match=r"the checkpoint of step 4 staged in .* could not be loaded "
                                                    r"\(.*\): it is not published; the resume point stays "
                                                    r"iteration 2"):
        dump_dir.publish(str(tmp_path), 4)
    assert dump_dir.tracked_step(str(tmp_path)) == 2
    assert not (tmp_path / "iter_0000004").exists() and (staged / ".metadata").exists()


def test_a_readable_dump_is_published(tmp_path):
    staged = dump_dir.prepare_staging(str(tmp_path), 4) / dump_dir.iteration_dir_name(4)
    write(staged, 1, 64)
    final = dump_dir.publish(str(tmp_path), 4)
    assert check_torch_dist(final) > 0 and dump_dir.tracked_step(str(tmp_path)) == 4
