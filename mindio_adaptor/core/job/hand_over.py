"""A rank handed over to a new process (a hot switch) and the launcher that starts that process.

The leaving process exits 0, as a worker that finished does, so its exit code cannot say it left for a new
process. It says so with a mark instead: an empty file named by its pid in a directory its launcher made for
it (MINDIO_HANDOVER_DIR, private to that launcher, on the same host). The launcher takes the mark at its next
check, whether or not the process has exited yet, and starts the rank's new process (a warm spare when it has
one) with MINDIO_REBOOT_TYPE="hot switch", which tft_get_reboot_type() reports (launch/hand_overs). A process without the directory (torchrun, a plain run) has no
launcher that would start its successor."""
from __future__ import annotations

import os
from pathlib import Path

ENV_HANDOVER_DIR = "MINDIO_HANDOVER_DIR"
ENV_REBOOT_TYPE = "MINDIO_REBOOT_TYPE"
ARF = "arf"  # a process started again for a dead rank
HOT_SWITCH = "hot switch"  # a process started for a rank handed over while alive
REBOOT_TYPES = (ARF, HOT_SWITCH)


def mark_handed_over() -> str:
    """Marks this process as handed over for its launcher; the mark's path, or '' when no launcher of ours
    started it (nothing will start its successor)."""
    directory = os.environ.get(ENV_HANDOVER_DIR, "")
    if not directory or not os.path.isdir(directory):
        return ""
    mark = Path(directory) / str(os.getpid())
    mark.touch(mode=0o600)
    return str(mark)


def take_mark(directory: str, pid: int) -> bool:
    """Whether process `pid` left its rank to a new process; the mark is removed (a pid is reused)."""
    try:
        os.unlink(os.path.join(directory, str(pid)))
    except FileNotFoundError:
        return False
    return True


def reboot_type(env=os.environ) -> str:
    """The kind of process this is when it replaces another: "arf" (the default) or "hot switch"."""
    value = env.get(ENV_REBOOT_TYPE, ARF)
    if value not in REBOOT_TYPES:
        raise ValueError(f"{ENV_REBOOT_TYPE}={value!r}: expected one of {', '.join(repr(t) for t in REBOOT_TYPES)}")
    return value
