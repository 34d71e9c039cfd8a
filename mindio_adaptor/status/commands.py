"""What an operator may ask of a running job's controller through its status server (POST with the job's
token in the Authorization header): pause training after a step, and continue it (csrc/controller/pause.h).
`mindio-adaptor pause` and `mindio-adaptor continue` send them."""
from __future__ import annotations

from typing import Any, Dict, Iterable

from mindio_adaptor.status.server import Command, CommandError


def controller_commands() -> Dict[str, Command]:
    return {"/pause": pause, "/continue": resume}


def pause(request: Dict[str, Any]) -> str:
    """{"after_step": N (default: the next step every rank can still hold after), "hold_s": S (default
    MINDIO_PAUSE_LIMIT_S of the controller, else 600)}."""
    from mindio_adaptor.ttp import controller

    _known(request, ("after_step", "hold_s"))
    after = request.get("after_step", -1)
    if isinstance(after, bool) or not isinstance(after, int) or after < -1:
        raise CommandError(f"after_step {after!r}: expected a step number (-1: the next step all ranks can reach)")
    hold = request.get("hold_s")
    if hold is not None and (isinstance(hold, bool) or not isinstance(hold, (int, float))):
        raise CommandError(f"hold_s {hold!r}: expected seconds")
    controller.pause_training(after, hold)  # ValueError: refused, and why
    return "pause asked for " + (f"after step {after}" if after >= 0 else "after the next step all ranks can reach")


def resume(request: Dict[str, Any]) -> str:
    from mindio_adaptor.ttp import controller

    _known(request, ())
    state = controller.controller_state()
    if state != "PAUSE":
        raise ValueError(f"the job is not paused (state {state})")
    controller.continue_training()
    return "continue asked for"


def _known(request: Dict[str, Any], names: Iterable[str]) -> None:
    unknown = sorted(set(request) - set(names))
    if unknown:
        raise CommandError(f"unknown fields {unknown}; known: {sorted(names) or 'none'}")
