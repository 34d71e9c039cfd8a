"""Controller side of the reference API: one controller per job, inside rank 0 or standalone
(rank -1) beside the job. The tft_notify_* calls and tft_register_mindx_callback return 0 on success, as
the reference's do (its clients check `rsp != 0`); a call that cannot be carried out raises, naming why."""
from __future__ import annotations

import logging
import threading
from typing import Callable, Dict, Optional, Sequence

from mindio_adaptor import _native
from mindio_adaptor.core.job.tls_config import tls_link
from mindio_adaptor.core.process import fork_safety
from mindio_adaptor.core.process.env_values import seconds_from_env
from mindio_adaptor.ttp.fault_policy import DEFAULT_TIMEOUT_S, PolicySpec, check_timeout, make_policy

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_controller: Optional["_native.Controller"] = None
_port: Optional[int] = None

_cluster_callbacks: Dict[str, Callable] = {}  # kept across controllers: a cluster manager registers them once
_CLUSTER_ACTIONS = ("report_fault_ranks", "report_stop_complete", "report_strategies", "report_result")
PAUSE_LIMIT_ENV = "MINDIO_PAUSE_LIMIT_S"  # how long a pause holds at most unless told (tft_notify_controller_stop_train)
_IMPLEMENTED_STRATEGIES = ("retry", "recover", "downgrade", "dump", "exit", "continue")


def _require() -> "_native.Controller":
    if _controller is None:
        raise RuntimeError("no controller: call tft_init_controller() first")
    return _controller


def tft_init_controller(rank: int, world_size: int, enable_local_copy: bool = False, enable_arf: bool = False,
                        enable_zit: bool = False, *, enable_uce: bool = True, fault_policy: PolicySpec = None,
                        backup: bool = False, enable_scale_in: bool = False) -> None:
    """Create the controller (rank -1: standalone). `enable_uce` (ours) turns online repair off;
    `fault_policy` (ours) is passed to tft_set_fault_policy. `backup` (ours): a backup controller, idle
    until ranks that lost their controller register with it; it then leads the job under the next term.
    Ranks that do not register with it within MINDIO_TAKEOVER_WAIT_S seconds (default 10) of the first
    died with the old controller's node and are handled as dead; a recovery the old controller left is
    restarted or ends in a dump (docs/controller.md).

    `enable_arf`: a dead process (or a process/node fault) is replaced instead of dumping: the survivors
    are stopped and cleaned, and the controller waits up to MINDIO_ARF_WAIT_S seconds (default 600) for
    a restarted process of that rank (started by the launcher with MINDIO_RESTARTED=1) to register and
    report ready, then rebuilds the groups, repairs it from a replica peer and resumes. See
    docs/controller.md.

    `enable_scale_in` (ours, the scale-in of elastic training; needs `enable_arf`): when no replacement
    arrives within MINDIO_ARF_WAIT_S, the savers write the dump of the repair step and the survivors go on
    from it at a smaller data-parallel size instead of ending (docs/elastic.md). The reference's ZIT
    handlers (enable_zit) are another protocol, not built."""
    global _controller
    if enable_zit:
        raise NotImplementedError("elastic training (ZIT, enable_zit=True) is not implemented yet")
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if not isinstance(rank, int) or not -1 <= rank < world_size:
        raise ValueError(f"controller rank must be -1 (standalone) or in 0..{world_size - 1}, got {rank!r}")
    with _lock:
        if _controller is not None:
            raise RuntimeError("a controller already exists in this process; call tft_destroy_controller() first")
        fork_safety.guard_forks()  # the controller's threads call back into Python
        _controller = _native.Controller(rank, world_size, retry=enable_uce, recover=bool(enable_arf),
                                         term=0 if backup else 1, elastic=bool(enable_scale_in))
        for action, func in _cluster_callbacks.items():
            _controller.set_cluster_callback(action, func)
    if fault_policy is not None:
        tft_set_fault_policy(fault_policy)


def tft_set_fault_policy(policy: PolicySpec, *, sub_healthy_strategy: str = "ignore",
                         timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Ours, beyond the reference: let the controller consult a fault policy for every reported
    fault that carries an error code (tft_report_error(state, error_code)).

    `policy`: None removes it; a PolicyEngine, a PolicyConfig, a faultCode.json path or a
    (faultCode.json, faultCustomization.json) pair is wrapped in a FaultPolicy; any other callable
    `(rank, report_state, code) -> "none"|"retry"|"recover"|"dump"|"exit"` is used as it is.
    The answer can only make the controller's decision more drastic. A policy that raises, answers
    something else or takes longer than `timeout_s` is logged with the rank, and the built-in
    decision stands. See docs/policy.md."""
    callback = make_policy(policy, sub_healthy_strategy)
    _require().set_policy(callback, check_timeout(timeout_s))


def tft_start_controller(bind_ip: str, port: int, enable_tls: bool = True, tls_info: str = "") -> int:
    """Start listening; returns the bound port (useful with port 0).

    The link is TLS 1.3 with mutual authentication when the job's certificate is configured
    (MINDIO_TLS_CERT, MINDIO_TLS_KEY, MINDIO_TLS_CA: core/job/tls_config), whatever `enable_tls` says; else
    plain TCP authenticated by MINDIO_TOKEN, for a trusted network, with a warning when `enable_tls` (the
    reference's default) asked for TLS. `tls_info` is not read: the certificates come from those variables.
    """
    global _port
    tls = tls_link("controller", enable_tls, tls_info)
    if not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an int in 0..65535, got {port!r}")
    _port = _require().start(bind_ip, port)
    if tls is not None:
        logger.info("the controller's link is TLS 1.3, mutual, with the job's certificate %s", tls.cert)
    return _port


def tft_destroy_controller() -> None:
    global _controller, _port
    with _lock:
        controller, _controller, _port = _controller, None, None
    if controller is not None:
        controller.stop()


def tft_query_high_availability_switch() -> bool:
    """Whether a controller runs in this process."""
    return _controller is not None


def tft_register_mindx_callback(action: str, func: Callable) -> int:
    """Callbacks towards the cluster manager, called from the controller's thread:
    report_fault_ranks(fault_ranks), report_stop_complete(code, msg, fault_ranks),
    report_strategies(fault_ranks, strategies), report_result(code, msg, fault_ranks, strategy).
    May come before tft_init_controller and stays registered across tft_destroy_controller, as the
    reference's cluster manager expects. Returns 0 (the reference's success code; clients check it)."""
    if action not in _CLUSTER_ACTIONS:
        raise ValueError(f"unknown cluster-manager action {action!r}; known: {', '.join(_CLUSTER_ACTIONS)}")
    if not callable(func):
        raise TypeError(f"tft_register_mindx_callback({action!r}): func must be callable, got {func!r}")
    with _lock:
        _cluster_callbacks[action] = func
        if _controller is not None:
            _controller.set_cluster_callback(action, func)
    return 0


def tft_notify_controller_stop_train(fault_ranks: Dict[int, int], stop_type: str = "stop",
                                     timeout: Optional[float] = None) -> int:
    """`stop`: these ranks are faulty (0 memory, 1 process/node, 2 communication); recovery starts.
    `pause`: every rank holds before its next optimizer update, after the next step all can still reach,
    until change_strategy('continue') (or MINDIO_PAUSE_LIMIT_S, default 600 s). See pause_training."""
    if stop_type == "pause":
        pause_training()
    elif stop_type == "stop":
        if not fault_ranks:
            raise ValueError("tft_notify_controller_stop_train: fault_ranks is empty")
        _require().notify_faults({int(r): int(t) for r, t in fault_ranks.items()})
    else:
        raise ValueError(f"stop_type must be 'stop' or 'pause', got {stop_type!r}")
    return 0


def tft_notify_controller_change_strategy(strategy: str, params: str = "") -> int:
    """The cluster manager's answer to report_strategies (one of the offered). `downgrade` is the scale-in
    of elastic training without the wait for replacements (docs/elastic.md), offered for lost processes."""
    if strategy not in _IMPLEMENTED_STRATEGIES:
        if strategy == "upgrade":
            raise NotImplementedError("strategy 'upgrade' is not taken from the cluster manager: the controller "
                                      "scales out by itself once every rank retired by the scale-in returned")
        if strategy == "migration":
            raise NotImplementedError(f"strategy {strategy!r} is not implemented yet "
                                      f"(implemented: {', '.join(_IMPLEMENTED_STRATEGIES)})")
        raise ValueError(f"unknown strategy {strategy!r}")
    _require().notify_strategy(strategy)
    return 0


def tft_notify_controller_dump() -> int:
    """Ask for a dying-gasp checkpoint now (from NORMAL or PAUSE)."""
    _require().notify_dump()
    return 0


def tft_notify_controller_on_global_rank(fault_ranks, time: int = 1) -> int:
    """The cluster manager names faulty global ranks: a dict rank -> fault type (0 memory, 1 process/
    node, 2 communication) or a list of ranks (process/node faults). They are handled like the faults
    the processors report (decision, recovery, report_fault_ranks). `time` (the reference's; a
    positive int) is checked and otherwise unused: the controller gathers related faults for
    MINDIO_FAULT_COLLECT_TIME."""
    if not isinstance(time, int) or isinstance(time, bool) or time < 1:
        raise ValueError(f"tft_notify_controller_on_global_rank: time must be a positive int, got {time!r}")
    if isinstance(fault_ranks, dict):
        faults = fault_ranks
    elif isinstance(fault_ranks, (list, tuple, set)):
        faults = {rank: 1 for rank in fault_ranks}
    else:
        raise ValueError("tft_notify_controller_on_global_rank: fault_ranks must be a dict rank -> fault type or "
                         f"a list of ranks, got {fault_ranks!r}")
    if not faults:
        raise ValueError("tft_notify_controller_on_global_rank: fault_ranks is empty")
    bad = [r for r in list(faults) + list(faults.values()) if not isinstance(r, int) or isinstance(r, bool)]
    if bad:
        raise ValueError(f"tft_notify_controller_on_global_rank: ranks and fault types must be ints, got {bad}")
    _require().notify_faults(dict(faults))
    return 0


_PREPARE_ACTIONS = ("hot switch", "stop switch")  # the reference's sub-health migration actions


def tft_notify_controller_prepare_action(action: str, fault_ranks: Optional[Dict[int, int]] = None) -> int:
    """The reference's cluster manager prepares a sub-health migration with it. "hot switch": the ranks of
    `fault_ranks` (its keys; the fault types are checked, not used) are handed over to new processes at the
    next step boundary every rank can hold at, with no step lost (hot_switch below). "stop switch": a hot switch
    asked for and not yet begun is withdrawn. ValueError names why either cannot be done (nothing changes)."""
    if action not in _PREPARE_ACTIONS:
        raise ValueError(f"tft_notify_controller_prepare_action: unknown action {action!r}; the reference's are "
                         f"{', '.join(repr(a) for a in _PREPARE_ACTIONS)}")
    faults = fault_ranks or {}
    if not isinstance(faults, dict) or any(not isinstance(r, int) or not isinstance(t, int) or not 0 <= t <= 2
                                           for r, t in faults.items()):
        raise ValueError(f"tft_notify_controller_prepare_action: fault_ranks must map ranks to fault types 0..2, "
                         f"got {fault_ranks!r}")
    if action == "stop switch":
        refused = _require().cancel_hot_switch()
        if refused:
            raise ValueError(f"stop switch refused: {refused}")
        return 0
    if not faults:
        raise ValueError("tft_notify_controller_prepare_action('hot switch'): fault_ranks names no rank")
    hot_switch(sorted(faults))
    return 0


# Ours, for tools and tests.
def pause_training(after_step: int = -1, hold_s: Optional[float] = None) -> None:
    """Pause every rank after `after_step` (-1: the next step all ranks can still hold after) for at most
    `hold_s` seconds (default MINDIO_PAUSE_LIMIT_S, else 600); ValueError naming why when it cannot be kept."""
    hold = pause_limit_s() if hold_s is None else hold_s
    refused = _require().notify_pause(int(after_step), float(hold))
    if refused:
        raise ValueError(f"pause refused: {refused}")


def hot_switch(ranks: Sequence[int], after_step: int = -1) -> None:
    """Hand `ranks` over to new processes once every rank holds after `after_step` (-1: the next step all ranks
    can still hold after): their state from live replica peers, their launchers starting the new processes;
    ValueError naming why when it cannot be done."""
    bad = [r for r in ranks if not isinstance(r, int) or isinstance(r, bool)]
    if bad or not ranks:
        raise ValueError(f"hot switch: ranks must be a non-empty list of ints, got {list(ranks)!r}")
    refused = _require().notify_hot_switch(set(ranks), int(after_step))
    if refused:
        raise ValueError(f"hot switch refused: {refused}")


def pause_limit_s() -> float:
    return seconds_from_env(PAUSE_LIMIT_ENV, _native.DEFAULT_PAUSE_HOLD_MS / 1000, 1, _native.MAX_PAUSE_HOLD_MS / 1000)


def continue_training() -> None:
    """End a pause (change_strategy('continue'))."""
    _require().notify_strategy("continue")


def controller_goodput() -> dict:
    """Where the job's wall time went so far: {"wall_s", "uses": {use: s}, "recoveries": [...]}
    (csrc/controller/goodput.h; status/goodput prints it)."""
    return _require().goodput()


def controller_state() -> str:
    return _require().state()


def controller_events():
    return _require().events()


def controller_event_count() -> int:
    """How many events controller_events() would return: a watch polled at every step reads them only when
    this grew."""
    return _require().event_count()


def controller_stats():
    return _require().stats()


def controller_ranks():
    """Per rank: {"step": last completed step, "data": "updated"|"updating"|"copying", "flags": [...],
    "silent_ms", "heartbeat_ms", "domain": its node}."""
    return _require().ranks()


def controller_layout():
    """Ours: the replica layout the ranks reported, [{"optimizer_type", "group", "replica_cnt", "ranks"}]."""
    return _require().layout()


def controller_term() -> int:
    """Ours: 1 for the job's first controller, one more for each takeover; 0 for a backup not yet leading."""
    return _require().term()
