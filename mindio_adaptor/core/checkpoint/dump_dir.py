"""Where a dying-gasp checkpoint is written and how it becomes the resume point, atomically.

The savers write into a staging directory inside the save root whose name never matches `iter_*`
(`.mindio_dump_step<N>`), laid out as a save root of its own: `<staging>/iter_000000N/...`. Only when
every saver is done does one rank publish it: rename `<staging>/iter_000000N` to `<root>/iter_000000N`
(one rename(2) on one file system) and then replace `latest_checkpointed_iteration.txt` (write a
temporary file, then rename over). A crash at any point leaves either the previous resume point intact
or the new one complete; a leftover staging directory is never read by a loader and is removed by
the next dump of that step.

Before anything moves, a torch_dist checkpoint is read back (core/checkpoint/checkpoint_readback): one that a load
could not read is not published (a dump's staging directory stays, for inspection, until the next dump of
that step).

An `iter_000000N` already in place is Megatron's own save of that step. Megatron points the tracker at
it only once every rank has written its part, so it is kept only when the tracker names it; otherwise
it is what a save interrupted by the fault left, and the dump replaces it.
"""
from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Optional

from mindio_adaptor.core.checkpoint import checkpoint_readback

logger = logging.getLogger(__name__)

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
    """Move the staged checkpoint of `step` into place and point the tracker at it. A checkpoint of that
    step already in place is kept when the tracker vouches for it (a complete periodic save), and
    replaced when it does not (a save the fault interrupted)."""
    root = Path(save_root)
    staged = staging_root(save_root, step) / iteration_dir_name(step)
    final = root / iteration_dir_name(step)
    if not staged.is_dir():
        raise PublishError(f"nothing staged for step {step}: {staged} does not exist")
    _read_back(staged, step, save_root)
    if not final.exists():
        os.rename(staged, final)
    elif tracked_step(save_root) != step:
        _replace_unfinished(final, staged, tracked_step(save_root))
    write_tracker(save_root, step)
    discard(save_root, step)
    return final


def _read_back(staged: Path, step: int, save_root: str) -> None:
    if not checkpoint_readback.is_torch_dist(staged):
        return
    try:
        checkpoint_readback.check_torch_dist(staged)
    except checkpoint_readback.UnreadableCheckpoint as unreadable:
        tracked = tracked_step(save_root)
        raise PublishError(f"the checkpoint of step {step} staged in {staged} could not be loaded ({unreadable}): it "
                           f"is not published; the resume point stays "
                           f"{'none' if tracked is None else f'iteration {tracked}'}") from unreadable


def _replace_unfinished(final: Path, staged: Path, tracked: Optional[int]) -> None:
    # Renamed aside first (a name no loader reads), so that the iteration directory is at every moment
    # absent or complete; the tracker still names the previous checkpoint until write_tracker.
    aside = _set_aside(final)
    os.rename(staged, final)
    shutil.rmtree(aside, ignore_errors=True)
    logger.warning("%s was not marked complete (the tracker names %s): an interrupted save, replaced by "
                   "the dump", final, "no checkpoint" if tracked is None else f"iteration {tracked}")


def _set_aside(final: Path) -> Path:
    """Rename `final` to a name no loader reads, unique to this process: several ranks of one job may
    race to do it, and only the first rename finds the directory (the others raise FileNotFoundError)."""
    aside = final.with_name(f".mindio_unfinished_{final.name}.{os.getpid()}")
    shutil.rmtree(aside, ignore_errors=True)
    os.rename(final, aside)
    return aside


def remove_unfinished(save_root: str, step: int) -> bool:
    """Remove what an interrupted save of `step` left, unless the tracker names that step (then it is
    complete: Megatron's own, or a dump published in its place). False when there was nothing to
    remove, or another rank removed it first."""
    final = Path(save_root) / iteration_dir_name(step)
    if tracked_step(save_root) == step or not final.exists():
        return False
    try:
        aside = _set_aside(final)
    except FileNotFoundError:
        return False
    shutil.rmtree(aside, ignore_errors=True)
    return True


def tracked_step(save_root: str) -> Optional[int]:
    """The iteration the tracker names, or None without a readable one ('release' included)."""
    try:
        text = (Path(save_root) / TRACKER).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def write_tracker(save_root: str, step: int) -> None:
    tracker = Path(save_root) / TRACKER
    temporary = tracker.with_name(TRACKER + ".mindio_tmp")
    temporary.write_text(str(step))
    with open(temporary, "rb") as f:
        os.fsync(f.fileno())
    os.replace(temporary, tracker)
