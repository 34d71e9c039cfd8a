"""Read back a torch_dist checkpoint directory before it becomes the resume point.

A checkpoint whose .metadata does not describe its own files is worse than none: it is published, the
tracker names it, and only the next load finds out (`invalid load key, '\\x00'` when a byte item's offset
points into another item). That happened once a save took an abandoned save's write results for its own
(patches/checkpoint_writer). Before a dump or a scale-out's checkpoint is published, the publishing rank
checks what a loader relies on, reading little: the metadata unpickles; every chunk it lists has a place in
a file; every place lies inside an existing file; every byte item (RNG states, rerun state, optimizer step:
small) unpickles as the loader unpickles it. Tensor data is only bounds-checked: reading it would cost as
much as a load.
"""
from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Dict

METADATA = ".metadata"
# Byte items are per-rank objects of a few KiB; one past this is only bounds-checked, as tensors are.
BYTE_ITEM_READ_LIMIT = 64 << 20


class UnreadableCheckpoint(RuntimeError):
    """The checkpoint cannot be loaded; the message names the first item that shows it."""


def is_torch_dist(directory: Path) -> bool:
    return (Path(directory) / METADATA).is_file()


def check_torch_dist(directory: Path) -> int:
    """Raise UnreadableCheckpoint naming the first problem; return how many items were checked."""
    directory = Path(directory)
    metadata = _read_metadata(directory)
    places = metadata.storage_data
    if not isinstance(places, dict) or not places:
        raise UnreadableCheckpoint(f"{directory / METADATA} lists no storage for its items")
    _check_every_chunk_has_a_place(metadata.state_dict_metadata, places)
    sizes: Dict[str, int] = {}
    byte_items = {key for key, item in metadata.state_dict_metadata.items() if _is_bytes(item)}
    for index, place in places.items():
        size = sizes.setdefault(place.relative_path, _file_size(directory, place.relative_path))
        if place.offset < 0 or place.offset + place.length > size:
            raise UnreadableCheckpoint(f"{index.fqn} lies at bytes {place.offset}..{place.offset + place.length} of "
                                       f"{place.relative_path}, which has {size} bytes")
        if index.fqn in byte_items and place.length <= BYTE_ITEM_READ_LIMIT and not getattr(
                place, "transform_descriptors", None):
            _unpickle(directory / place.relative_path, place, index.fqn)
    return len(places)


def _read_metadata(directory: Path):
    try:
        with open(directory / METADATA, "rb") as f:
            return pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as err:
        raise UnreadableCheckpoint(f"{directory / METADATA} cannot be read: {type(err).__name__}: {err}") from err


def _check_every_chunk_has_a_place(items: dict, places: dict) -> None:
    from torch.distributed.checkpoint.metadata import MetadataIndex

    for fqn, item in items.items():
        offsets = [None] if _is_bytes(item) else [chunk.offsets for chunk in item.chunks]
        for offset in offsets:
            if MetadataIndex(fqn, offset) not in places:
                where = "" if offset is None else f" (chunk at {tuple(offset)})"
                raise UnreadableCheckpoint(f"{fqn}{where} is in the metadata but stored nowhere")


def _is_bytes(item) -> bool:
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    return isinstance(item, BytesStorageMetadata)


def _file_size(directory: Path, relative_path: str) -> int:
    try:
        return os.stat(directory / relative_path).st_size
    except OSError as err:
        raise UnreadableCheckpoint(f"{relative_path}, named by the metadata, cannot be read: {err}") from err


def _unpickle(path: Path, place, fqn: str) -> None:
    import torch

    with open(path, "rb") as f:
        f.seek(place.offset)
        data = f.read(place.length)
    try:
        torch.load(io.BytesIO(data), weights_only=False)  # as torch.distributed.checkpoint's loader does
    except Exception as err:
        raise UnreadableCheckpoint(f"{fqn} (bytes {place.offset}..{place.offset + place.length} of "
                                   f"{place.relative_path}) does not unpickle: {type(err).__name__}: {err}") from err
