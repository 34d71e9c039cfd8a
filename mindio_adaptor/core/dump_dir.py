"""Where a dying-gasp checkpoint is written and how it becomes the resume point, atomically.

The savers write into a staging directory inside the save root whose name never matches `iter_*`
(`.mindio_dump_step<N>`), laid out as a save root of its own: `<staging>/iter_000000N/...`. Only when
every saver is done does one rank publish it: rename `<staging>/iter_000000N` to `<root>/iter_000000N`
(one rename(2) on one file system) and then replace `latest_checkpointed_iteration.txt` (write a
temporary file, then rename over). A crash at any point leaves either the previous resume point intact
or the new one complete; a leftover staging directory is never read by a loader and is removed by
the next dump of that step.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

TRACKER = "latest_checkpointed_iteration.txt"


def iteration_dir_name(step: int) -> str:
    """Megatron's name for the checkpoint of one iteration."""
    return f"iter_{step:07d}"


def staging_root(save_root: str, step: int) -> Path:
    return Path(save_root) / f".mindio_dump_step{step}"


def prepare_staging(save_root: str, step: int) -> Path:
    """An empty staging root (a leftover of an earlier failed dump of this step is removed first)."""
    if not save_root:
        raise ValueError("no checkpoint directory to dump into: the run has no --save")
    staging = staging_root(save_root, step)
    discard(save_root, step)
    staging.mkdir(parents=True)
    return staging


def discard(save_root: str, step: int) -> None:
    shutil.rmtree(staging_root(save_root, step), ignore_errors=True)


class PublishError(RuntimeError):
    pass


def publish(save_root: str, step: int) -> Path:
    """Move the staged checkpoint of `step` into place and point the tracker at it. A complete
    checkpoint of that step already in place (a periodic save of the same step) is kept, not replaced."""
    root = Path(save_root)
    staged = staging_root(save_root, step) / iteration_dir_name(step)
    final = root / iteration_dir_name(step)
    if not staged.is_dir():
        raise PublishError(f"nothing staged for step {step}: {staged} does not exist")
    if not final.exists():
        os.rename(staged, final)
    write_tracker(save_root, step)
    discard(save_root, step)
    return final


def write_tracker(save_root: str, step: int) -> None:
    tracker = Path(save_root) / TRACKER
    temporary = tracker.with_name(TRACKER + ".mindio_tmp")
    temporary.write_text(str(step))
    with open(temporary, "rb") as f:
        os.fsync(f.fileno())
    os.replace(temporary, tracker)
