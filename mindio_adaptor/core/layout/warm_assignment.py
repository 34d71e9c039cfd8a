"""A warm spare's rank, given late: the process runs the training script before it knows which rank it will
be (launch/warm_worker.py, "ahead"), as a stand-in rank, and takes its real rank's environment when its
launcher hands it one.

The launcher starts it with MINDIO_WARM_RANK=<stand-in rank> and no RANK, and later writes one JSON line on
its stdin: {"env": {...}, "argv": [...]}, the rank's environment (RANK, LOCAL_RANK, the generation's
stores, ...). EOF instead means the launcher is gone or no longer needs it. Whoever must not go further
without the real rank (patches/warm_spare) waits here; everything else reads this module's state.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Optional

ENV_WARM_RANK = "MINDIO_WARM_RANK"

_state = {"assigned": False, "began": time.monotonic()}


def provisional() -> bool:
    """A warm spare that runs ahead and has no rank yet."""
    return ENV_WARM_RANK in os.environ and not _state["assigned"]


def stand_in_rank() -> int:
    return int(os.environ[ENV_WARM_RANK])


def await_assignment() -> Optional[dict]:
    """Block until the launcher gives this process a rank; None on EOF (not needed after all). No timeout
    of its own: the launcher's end closes the pipe, which ends the wait."""
    line = sys.stdin.readline()
    if not line:
        return None
    assignment = json.loads(line)
    sys.stdin.close()
    return assignment


def adopt(assignment: dict, built_to: str) -> int:
    """The rank's environment replaces the stand-in's; returns the rank. `built_to` says how far the
    process got before (for the log line, which also counts as this rank's start)."""
    os.environ.clear()
    os.environ.update(assignment["env"])
    _state["assigned"] = True
    rank = int(os.environ["RANK"])
    print(f"[mindio-warm pid {os.getpid()}] takes rank {rank} after {time.monotonic() - _state['began']:.1f} s "
          f"warm ({built_to})", file=sys.stderr, flush=True)
    return rank


def not_needed() -> None:
    """EOF at the wait: the launcher closed the pool; end quietly."""
    sys.exit(0)
