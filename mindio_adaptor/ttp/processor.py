"""Processor side of the reference API: one processor per training process, over the typed link
(core/job/processor_link). Handlers registered here are run by the processor's worker thread when the
controller sends an action: each ControllerAction is translated into the reference's handler calls."""
from __future__ import annotations

import inspect
import logging
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from mindio_adaptor.core.job import hand_over, processor_link
from mindio_adaptor.core.job.processor_link import (ControllerAction, ControllerUnreachable,  # noqa: F401 (the face's)
                                                    RepairAssignment)
from mindio_adaptor.core.job.tls_config import tls_link
from mindio_adaptor.ttp.enums import Action, RepairType, ReportState

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_rank: Optional[int] = None
_world_size: Optional[int] = None
_handlers: Dict[str, Tuple[Callable, Any]] = {}
_step_args: Any = None
_decorated_args: Optional[list] = None  # the arguments of the call tft_exception_handler runs, a list
_dp_group: Optional[List[int]] = None
_decrypt_handler: Optional[Callable] = None
_export_version: Optional[str] = None
_update_times: Dict[str, int] = {}  # "start", "end": the last update's times (tft_set_update_*_time)

# handler name -> (positional arguments it is called with, for the error message)
_HANDLER_ARGS = {
    "save_ckpt": ("step", "save_info", "args", "ctx"),
    "rename": ("step", "args"),
    "exit": ("ctx",),
    "stop": ("args", "ctx"),
    "clean": ("is_uce_error", "args", "ctx"),
    "repair": ("step", "need_rebuild", "error_ranks", "repair_info", "args", "ctx"),
    "rollback": ("step", "args", "ctx"),
    "rebuild_group": ("fault_ranks", "args", "ctx"),
    "stream_sync": (),
    # Elastic training (ZIT); the reference hands these the scale-out/in parameters (a JSON string), not a ctx.
    "zit_downgrade_rebuild": ("new_dp_ranks", "new_world_ranks", "args", "params"),
    "zit_upgrade_rebuild": ("rank_list", "args", "params"),
    "zit_upgrade_repair": ("step", "need_rebuild", "error_ranks", "repair_info", "args", "params"),
    "zit_upgrade_rollback": ("step", "args", "params"),
}
# Actions that need no user handler to succeed.
_OPTIONAL = {"exit", "stream_sync"}


def _require():
    """The native processor under this process's link."""
    return processor_link.current().native


def tft_init_processor(rank: int, world_size: int, enable_local_copy: bool = False, enable_tls: bool = True,
                       tls_info: str = "", enable_uce: bool = True, enable_arf: bool = False,
                       enable_zit: bool = False) -> None:
    """Create this process's processor. With `enable_arf`, a process that registers for a dead rank
    becomes that rank's replacement (the controller decides; see tft_is_reboot_node), and one that the
    launcher started again for a dead rank (environment MINDIO_RESTARTED=1) registers as one."""
    global _rank, _world_size
    if enable_zit:
        raise NotImplementedError("elastic training (ZIT, enable_zit=True) is not implemented yet")
    tls_link("processor", enable_tls, tls_info)
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank!r}")
    with _lock:
        link = processor_link.open_link(rank, world_size, allow_replacement=bool(enable_arf))
        link.on_action(_run_handlers, answers=_handlers.keys())
        _rank, _world_size = rank, world_size


def tft_start_processor(master_ip: str, port: int, local_ip: str = "") -> None:
    """Connect and register (retrying per TTP_RETRY_TIMES); raises ValueError with the reason."""
    processor_link.current().start(master_ip, port)


def tft_destroy_processor() -> None:
    """Leave: the controller is told this rank goes on purpose (it logs "rank R left" and counts no
    fault), then the connection is closed."""
    global _rank, _world_size, _dp_group
    with _lock:
        _rank, _world_size, _dp_group = None, None, None
    processor_link.close_link()


def tft_set_optimizer_replica(rank: int, replica_info: List[dict]) -> None:
    """Report this rank's replica layout: one dict per optimizer type, {"rank_list", "replica_cnt",
    "replica_shift"}; the list position is the optimizer type unless a dict names "optimizer_type"."""
    processor_link.current().report_layout(int(rank), replica_info)


def tft_set_dp_group_info(rank: int, dp_list: List[int]) -> None:
    """Record this rank's data-parallel group (the ranks, in Megatron's order), checked: `rank` must be
    this processor's rank and appear in `dp_list`, whose ranks are distinct and inside the world.
    The controller plans repairs and savers from the replica layout of tft_set_optimizer_replica, so
    the DP list stays in this process, for the handlers: tft_get_dp_group_info() (ours)."""
    global _dp_group
    _require()
    if rank != _rank:
        raise ValueError(f"tft_set_dp_group_info: rank {rank!r} is not this processor's rank {_rank}")
    ranks = _check_rank_list("tft_set_dp_group_info", dp_list)
    if rank not in ranks:
        raise ValueError(f"tft_set_dp_group_info: rank {rank} is not in its DP group {ranks}")
    _dp_group = ranks


def tft_get_dp_group_info() -> Optional[List[int]]:
    """Ours: the DP group recorded by tft_set_dp_group_info, or None."""
    return None if _dp_group is None else list(_dp_group)


def _check_rank_list(where: str, ranks) -> List[int]:
    if not isinstance(ranks, (list, tuple)) or not ranks:
        raise ValueError(f"{where}: expected a non-empty list of ranks, got {ranks!r}")
    world = _require_world()
    bad = [r for r in ranks if not isinstance(r, int) or isinstance(r, bool) or not 0 <= r < world]
    if bad:
        raise ValueError(f"{where}: ranks {bad} are not ints in 0..{world - 1}")
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"{where}: ranks repeat in {list(ranks)}")
    return list(ranks)


def _require_world() -> int:
    return _world_size if _world_size is not None else 0


def tft_start_updating_os(backup_step: int = -1) -> None:
    processor_link.current().update_started(backup_step)


def tft_end_updating_os(step: int) -> None:
    processor_link.current().update_ended(step)


def tft_start_copy_os() -> None:
    """This rank's optimizer state is being copied (data status Copying): until tft_end_updating_os(step)
    the controller does not count it as holding a complete shard, so it is neither a saver nor a
    repair source, and a fault meanwhile repairs it from its peer."""
    _require().start_copy()


def tft_report_error(report_state: ReportState, error_code: str = "") -> None:
    """Report a fault. `error_code`, when given, is the device fault code (e.g. "80E01801", at most
    64 printable ASCII characters); a controller with a fault policy consults it."""
    if error_code is None:
        error_code = ""
    if not isinstance(error_code, str):
        raise TypeError(f"tft_report_error: error_code must be a string, got {type(error_code).__name__}")
    processor_link.current().report_fault(ReportState(report_state), error_code)


def tft_wait_next_action(timeout: Optional[float] = None) -> Action:
    """Block until the controller has finished handling the fault: RETRY (train again) or EXIT.
    `timeout` (ours, seconds) defaults to no limit; a lost controller raises ControllerUnreachable."""
    decision = processor_link.current().await_decision(timeout)
    return Action.RETRY if decision.go_on else Action.EXIT


def tft_get_repair_step() -> int:
    return processor_link.current().repair_step()


def tft_get_repair_type() -> str:
    return processor_link.current().strategy()


def tft_is_reboot_node() -> bool:
    """True in a process that replaces a dead rank (ARF); ask after tft_start_processor, as the
    reference's clients do. As in the reference, the controller decides: a process started with
    enable_arf=True whose first registration is for a rank the controller holds dead (or waiting for
    its new process) is taken as that rank's replacement. A launcher may say so from the start with
    MINDIO_RESTARTED=1 (ours). A replacement, once its model is built, raises RuntimeError("ARF
    FINISH") in its train loop so that the controller learns it is ready (tft_exception_handler
    reports it)."""
    return _require().restarted()


def tft_get_reboot_type() -> str:
    """The reference's kinds of restart: "arf" (a process started again for a dead rank) or "hot switch" (a
    process started for a live rank handed over to it: tft_notify_controller_prepare_action("hot switch")).
    Our launcher says which (MINDIO_REBOOT_TYPE, core/job/hand_over); as in the reference, the answer means
    something only where tft_is_reboot_node() is True."""
    _require()
    return hand_over.reboot_type()


def tft_reset_limit_step():
    raise NotImplementedError("tft_reset_limit_step: the step limit belongs to the reference's STEP_FINISH and "
                              "MIGRATION flows, which this controller does not have; to hold training, use "
                              "tft_notify_controller_stop_train(..., stop_type='pause') with tft_pause_train")


def _check_step(where: str, step) -> None:
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ValueError(f"{where}: step must be an int >= 0, got {step!r}")


def tft_report_load_ckpt_step(step: int) -> None:
    """This rank's state was loaded from the checkpoint of `step` (a resumed job, or a rank that
    reloaded the periodic checkpoint): the controller takes `step` as its last completed update, so a
    fault before the next update repairs or dumps at `step`."""
    _check_step("tft_report_load_ckpt_step", step)
    _require().report_loaded_step(step)


def tft_report_saved_ckpt_step(step: int) -> None:
    """Ours: every rank has written its part of the periodic checkpoint of `step`. When no replica can
    repair a faulty rank, the controller may have every rank load that checkpoint again online
    (the reference's LOAD_CKPT) instead of ending the job; it does so only when every rank reported
    the same step."""
    _check_step("tft_report_saved_ckpt_step", step)
    processor_link.current().report_saved_step(step)


def section_link():
    """Ours: the processor's timed sections (begin_section(name, limit_s), end_section(),
    add_progress(units)), which the controller's hang rule judges."""
    return processor_link.current().sections()


def report_training_finished() -> None:
    """Ours: training is over on this rank (last step, final save and evaluation done). The controller
    takes the job as completed and acts on no later fault. Nothing happens without a processor."""
    link = processor_link.current_or_none()
    if link is not None:
        link.finish()


def tft_register_decrypt_handler(fn):
    """The reference decrypts TLS key material with it. There is no TLS here (tft_start_controller refuses
    TLS settings when they are used), so the handler is kept and never called; None clears it."""
    global _decrypt_handler
    if fn is not None and not callable(fn):
        raise TypeError(f"tft_register_decrypt_handler: fn must be callable or None, got {fn!r}")
    _decrypt_handler = fn


def set_mindio_export_version(version: str) -> None:
    """Which framework adaptor drives this processor (the reference's clients set "MindSpeed-LLM")."""
    global _export_version
    if not isinstance(version, str):
        raise TypeError(f"set_mindio_export_version: version must be a string, got {version!r}")
    _export_version = version


def get_mindio_export_version() -> Optional[str]:
    return _export_version


def get_device() -> int:
    """The index of the accelerator this process trains on (torch_npu, else CUDA), or its LOCAL_RANK on
    a CPU-only host, where no device exists to select."""
    import torch

    npu = getattr(torch, "npu", None)
    for backend in (npu, torch.cuda):
        if backend is not None and backend.is_available():
            return int(backend.current_device())
    return int(os.environ.get("LOCAL_RANK", 0))


def tft_set_update_start_time(start_time: Optional[int] = None) -> None:
    """Record when the optimizer update started (microseconds on this process's monotonic clock, or the
    caller's own time), for tft_can_do_uce_repair without explicit times."""
    _update_times["start"] = _now_us() if start_time is None else start_time


def tft_set_update_end_time(end_time: Optional[int] = None) -> None:
    _update_times["end"] = _now_us() if end_time is None else end_time


def _now_us() -> int:
    return time.monotonic_ns() // 1000


def can_do_uce_repair_since_recorded(hbm_error_time, start_time=None, end_time=None) -> bool:
    """The reference's utils.tft_can_do_uce_repair: times default to those recorded by
    tft_set_update_start_time / tft_set_update_end_time; no error time, or no update recorded yet
    (before the first step), is no repair."""
    start = _update_times.get("start") if start_time is None else start_time
    end = _update_times.get("end") if end_time is None else end_time
    if not hbm_error_time or start is None:
        return False
    return tft_can_do_uce_repair(hbm_error_time, start, end)


def tft_can_do_uce_repair(err_time: float, update_start: float, update_end: Optional[float] = None) -> bool:
    """Whether a memory error (UCE) at `err_time` can be repaired as a plain UCE, given the times the
    last optimizer update started and ended (one clock, e.g. time.time()). An error before the update
    started may have been read by that update, so the state it produced is suspect: False, report
    UCE_CORRUPTED. An error during or after the update: True, report UCE (the interrupted step is
    recomputed from the peer's state either way). `update_end` None or earlier than `update_start`:
    the update is still running."""
    for name, value in (("err_time", err_time), ("update_start", update_start)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
            raise ValueError(f"tft_can_do_uce_repair: {name} must be a time in seconds, got {value!r}")
    if update_end is not None and (not isinstance(update_end, (int, float)) or isinstance(update_end, bool)
                                   or update_end != update_end):
        raise ValueError(f"tft_can_do_uce_repair: update_end must be a time in seconds or None, got {update_end!r}")
    return err_time >= update_start


def tft_set_step_args(args: Any) -> None:
    """What every handler receives as `args`; None: the arguments of the function decorated with
    tft_exception_handler (set_decorated_args)."""
    global _step_args
    _step_args = args


def set_decorated_args(args: Optional[list]) -> None:
    """Ours, called by tft_exception_handler: the decorated call's arguments, one list object that the
    handlers receive and that the retried call is made from, so a handler's assignment into it (a
    rebuilt model, a new optimizer) is what training goes on with."""
    global _decorated_args
    _decorated_args = args


def handler_args() -> Any:
    return _step_args if _step_args is not None else _decorated_args


def tft_pause_train(cur_step: int, timeout: Optional[float] = None) -> None:
    """Hold here while the controller holds training paused after a step this rank completed
    (stop_train(stop_type='pause')); for a client that drives its own loop. The patched Megatron holds
    before each optimizer update without it. TimeoutError when still held after `timeout` seconds."""
    processor = _require()
    if not processor.hold_if_paused(-1.0 if timeout is None else float(timeout)):
        raise TimeoutError(f"rank {_rank}: still paused at step {cur_step} after {timeout} s")


def _register(name: str, func: Callable, ctx: Any) -> None:
    if func is None:
        raise ValueError(f"tft_register_{name}_handler: func must not be None")
    if not callable(func):
        raise TypeError(f"tft_register_{name}_handler: func must be callable, got {func!r}")
    expected = _HANDLER_ARGS[name]
    try:
        inspect.signature(func).bind(*([None] * len(expected)))
    except TypeError:
        raise TypeError(f"tft_register_{name}_handler: {getattr(func, '__qualname__', func)!s} must accept "
                        f"{len(expected)} positional arguments ({', '.join(expected) or 'none'}); its signature "
                        f"is {inspect.signature(func)}") from None
    except ValueError:
        pass  # builtins without a signature: trust them
    _handlers[name] = (func, ctx)


def _make_register(name: str):
    def register(func: Callable, ctx: Any = None) -> None:
        _register(name, func, ctx)

    register.__name__ = f"tft_register_{name}_handler"
    register.__doc__ = f"Register the {name} handler, called as ({', '.join(_HANDLER_ARGS[name])})."
    return register


tft_register_save_ckpt_handler = _make_register("save_ckpt")
tft_register_rename_handler = _make_register("rename")
tft_register_exit_handler = _make_register("exit")
tft_register_stop_handler = _make_register("stop")
tft_register_clean_handler = _make_register("clean")
tft_register_repair_handler = _make_register("repair")
tft_register_rollback_handler = _make_register("rollback")
tft_register_rebuild_group_handler = _make_register("rebuild_group")
tft_register_stream_sync_handler = _make_register("stream_sync")
tft_register_zit_downgrade_rebuild_handler = _make_register("zit_downgrade_rebuild")
tft_register_zit_upgrade_rebuild_handler = _make_register("zit_upgrade_rebuild")
tft_register_zit_upgrade_repair_handler = _make_register("zit_upgrade_repair")
tft_register_zit_upgrade_rollback_handler = _make_register("zit_upgrade_rollback")


def _calls(action: ControllerAction) -> List[Tuple[str, tuple]]:
    """The handler calls one action makes: [(handler name, call arguments)]."""
    name, step, args = action.name, action.step, handler_args()
    ctx = _handlers.get(name, (None, None))[1]
    if name == "save_ckpt":
        save_info = [{"type": s.optimizer_type, "ranks": list(s.ranks)} for s in action.saves]
        return [(name, (step, save_info, args, ctx))]
    if name == "rename":
        return [(name, (step, args))]
    if name == "exit":
        return [(name, (ctx,))]
    if name == "stop":
        return [(name, (args, ctx))]
    if name == "clean":
        return [(name, (action.is_uce, args, ctx))]
    if name == "repair":
        return [(name, (step, _needs_rebuild(own.repair_type), list(own.dst), reference_repair_info(own), args, ctx))
                for own in action.own_repairs(_rank)]
    if name == "rollback":
        return [(name, (step, args, ctx))]
    if name == "rebuild_group":
        return [(name, (list(action.error_ranks), args, ctx))]
    if name == "continue":
        return [("stream_sync", ())]
    return []  # normal, pause: the native side records them


class PairTypes(list):
    """repair_info["type"]: the optimizer type of each (src, dst) pair, parallel to them, as the
    reference's clients index it (type[i]). A handler written for the older, int-typed repair_info
    (one optimizer type per call) may still read it as an int -- int(t), comparing with ==, indexing
    an enum table -- while every pair has the same type."""

    def __int__(self) -> int:
        types = set(self)
        if len(types) != 1:
            raise TypeError(f"repair_info['type'] is {list(self)}, the optimizer type of each (src, dst) pair; "
                            f"it is one int only when every pair has the same type")
        return int(next(iter(types)))

    __index__ = __int__

    def __eq__(self, other) -> bool:
        if isinstance(other, int) and not isinstance(other, bool):
            return len(set(self)) == 1 and self[0] == other
        return list.__eq__(self, other)

    def __ne__(self, other) -> bool:
        return not self.__eq__(other)

    __hash__ = None


def reference_repair_info(own: RepairAssignment) -> dict:
    """The reference's repair_info for one handler call: this rank's pairs, `type` parallel to them."""
    return {"type": PairTypes(own.optimizer_types), "repair_type": int(own.repair_type), "src": list(own.src),
            "dst": list(own.dst), "rank_list": list(own.rank_list)}


def own_repair_infos(entries: List[dict], rank: Optional[int]) -> List[dict]:
    """The repair_info of each handler call on `rank` for the controller's plan `entries` (one per
    optimizer type, every pair of that type): the reference calls the handler once per rank with only
    the pairs this rank sends or receives. Entries whose repair types differ (this rank sends one type
    and receives another) make one call each."""
    plan = ControllerAction("repair", repairs=tuple(RepairAssignment.from_wire(e) for e in entries))
    return [reference_repair_info(own) for own in plan.own_repairs(rank)]


def _needs_rebuild(repair_type: int) -> bool:
    """As the reference: a receiver whose memory error needs a rebuild, or a checkpoint load that
    rebuilds, builds its model and optimizer again before the repair."""
    return repair_type in (RepairType.UCE_HIGHLEVEL, RepairType.LOAD_REBUILD)


def _dispatch(wire: dict) -> Tuple[int, str]:
    """One action as the wire carries it (a dict), run through the registered handlers."""
    return _run_handlers(ControllerAction.from_wire(wire))


def _run_handlers(action: ControllerAction) -> Tuple[int, str]:
    """Run one action's handlers; returns (code, message). Never raises: an error becomes a reply
    naming the rank, the action and what went wrong."""
    code = 0
    for handler, call_args in _calls(action):
        where = f"rank {_rank} action {action.name}"
        entry = _handlers.get(handler)
        if entry is None:
            if handler in _OPTIONAL:
                continue
            return 1, f"{where}: no handler registered (tft_register_{handler}_handler)"
        try:
            result = entry[0](*call_args)
        except Exception as exc:  # the handler's failure is reported, not propagated into C++
            logger.exception("%s: handler raised", where)
            return 1, f"{where}: handler {getattr(entry[0], '__qualname__', entry[0])} raised " \
                      f"{type(exc).__name__}: {exc}"
        if handler == "clean":
            if result is None:
                result = 0
            if result not in (0, 1, 2):
                return 1, f"{where}: clean handler returned {result!r}, expected 0, 1 or 2"
            code = result
        elif isinstance(result, int) and not isinstance(result, bool) and result != 0:
            return result, f"{where}: handler returned failure code {result}"
    return code, ""
