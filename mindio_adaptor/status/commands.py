"""What an operator may ask of a running job's controller through its status server (POST with the job's
token in the Authorization header): pause training after a step, and continue it (csrc/controller/pause.h);
hand ranks, or a node's, over to new processes (a hot switch, csrc/controller/controller_hot_switch.cpp).
`mindio-adaptor pause`, `continue` and `drain` send them."""
from __future__ import annotations

from typing import Any, Dict, Iterable

from mindio_adaptor.status.server import Command, CommandError


def controller_commands() -> Dict[str, Command]:
    return {"/pause": pause, "/continue": resume, "/hot_switch": hot_switch}


def pause(request: Dict[str, Any]) -> str:
    """{"after_step": N (default: the next step every rank can still hold after), "hold_s": S (default
    MINDIO_PAUSE_LIMIT_S of the controller, else 600)}."""
    from mindio_adaptor.ttp import controller

    _known(request, ("after_step", "hold_s"))
    after = _after_step(request)
    hold = request.get("hold_s")
    if hold is not None and (isinstance(hold, bool) or not isinstance(hold, (int, float))):
        raise CommandError(f"hold_s {hold!r}: expected seconds")
    controller.pause_training(after, hold)  # ValueError: refused, and why
    return "pause asked for " + (f"after step {after}" if after >= 0 else "after the next step all ranks can reach")


def hot_switch(request: Dict[str, Any]) -> str:
    """{"ranks": [R, ...]} or {"node": its failure domain as the status page names it}, and "after_step" as
    the pause's."""
    from mindio_adaptor.ttp import controller

    _known(request, ("ranks", "node", "after_step"))
    after = _after_step(request)
    if ("ranks" in request) == ("node" in request):
        raise CommandError("name either ranks or a node")
    if "node" in request:
        node = request["node"]
        ranks = [rank for rank, entry in enumerate(controller.controller_ranks())
                 if entry["domain"] == node and "dead" not in entry["flags"] and "left" not in entry["flags"]]
        if not ranks:
            raise CommandError(f"no live rank runs on node {node!r}")
    else:
        ranks = request["ranks"]
        if not isinstance(ranks, list) or not ranks or any(isinstance(r, bool) or not isinstance(r, int)
                                                            for r in ranks):
            raise CommandError(f"ranks {ranks!r}: expected a non-empty list of rank numbers")
    controller.hot_switch(ranks, after)  # ValueError: refused, and why
    return (f"hot switch of ranks {sorted(set(ranks))} asked for " +
            (f"after step {after}" if after >= 0 else "after the next step all ranks can reach"))


def _after_step(request: Dict[str, Any]) -> int:
    after = request.get("after_step", -1)
    if isinstance(after, bool) or not isinstance(after, int) or after < -1:
        raise CommandError(f"after_step {after!r}: expected a step number (-1: the next step all ranks can reach)")
    return after


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
