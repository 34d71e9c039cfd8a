"""A rank handed over to a new process (a hot switch) and the launcher that starts that process.

The leaving process exits 0, as a worker that finished does, so its exit code cannot say it left for a new
process. It says so with a mark instead: an empty file named by its pid in a directory its launcher made for
it (MINDIO_HANDOVER_DIR, private to that launcher, on the same host), holding the ranks the whole switch hands
over, so that a launcher whose every rank goes knows to wait for its other ranks' marks. The launcher takes the
mark at its next
check, whether or not the process has exited yet, and starts the rank's new process (a warm spare when it has
one) with MINDIO_REBOOT_TYPE="hot switch", which tft_get_reboot_type() reports (launch/hand_overs). A process without the directory (torchrun, a plain run) has no
launcher that would start its successor."""
from __future__ import annotations

import os
from pathlib import Path
from typing import FrozenSet, Iterable, Optional

ENV_HANDOVER_DIR = "MINDIO_HANDOVER_DIR"
ENV_REBOOT_TYPE = "MINDIO_REBOOT_TYPE"
ARF = "arf"  # a process started again for a dead rank
HOT_SWITCH = "hot switch"  # a process started for a rank handed over while alive
REBOOT_TYPES = (ARF, HOT_SWITCH)


def mark_handed_over(switched: Iterable[int]) -> str:
    """Marks this process as handed over for its launcher, in a switch of the ranks `switched`; the mark's
    path, or '' when no launcher of ours started it (nothing will start its successor)."""
    directory = os.environ.get(ENV_HANDOVER_DIR, "")
    if not directory or not os.path.isdir(directory):
        return ""
    mark = Path(directory) / str(os.getpid())
    written = mark.with_suffix(".part")  # renamed when complete: the launcher never reads half a mark
    written.write_text(",".join(str(rank) for rank in sorted(switched)))
    written.chmod(0o600)
    written.replace(mark)
    return str(mark)


def take_mark(directory: str, pid: int) -> Optional[FrozenSet[int]]:
    """The ranks of the switch in which process `pid` left its rank to a new process, or None when it did
    not; the mark is removed (a pid is reused)."""
    mark = os.path.join(directory, str(pid))
    try:
        text = Path(mark).read_text()
        os.unlink(mark)
    except FileNotFoundError:
        return None
    return frozenset(int(rank) for rank in text.split(",") if rank.strip())


def reboot_type(env=os.environ) -> str:
    """The kind of process this is when it replaces another: "arf" (the default) or "hot switch"."""
    value = env.get(ENV_REBOOT_TYPE, ARF)
    if value not in REBOOT_TYPES:
        raise ValueError(f"{ENV_REBOOT_TYPE}={value!r}: expected one of {', '.join(repr(t) for t in REBOOT_TYPES)}")
    return value
