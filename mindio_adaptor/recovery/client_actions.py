"""What the handlers of a client of the reference API call to act on the Megatron job, when the client
handles faults (recovery/fault_handling, `mindio_adaptor.patch_all(fault_handling="client")`).

One function per handler of the reference (stop, clean, repair, rollback, save_ckpt, rename, exit),
taking that handler's own arguments. Each runs the stages that recovery/flows's flow table gives the
action under the controller's strategy in force, exactly as the adaptor's own mode does: on the
processor's thread where they must act while training still runs (stop, rename, exit), else posted to
the parked training thread (patches/client_loop). A stage's error is raised to the handler, which the
reference face turns into a failed reply naming it. Also: the replica layout in the reference's form
(for tft_set_optimizer_replica) and hooks around each optimizer update (for tft_start_updating_os /
tft_end_updating_os and the update times).
"""
from typing import Callable, List, Sequence

from mindio_adaptor import megatron as megatron_job
from mindio_adaptor.core.detection.enums import RepairType
from mindio_adaptor.core.job import processor_link
from mindio_adaptor.core.job.paired_store import control_ports
from mindio_adaptor.core.job.processor_link import RepairAssignment, SaveAssignment
from mindio_adaptor.core.job.recovery_limits import STAGE_TIMEOUT_S, stop_timeout_s
from mindio_adaptor.recovery import fault_handling, flows, train_reentry
from mindio_adaptor.recovery.session import SESSION
from mindio_adaptor.recovery.stages.stage import RecoveryAction


class NotInClientMode(RuntimeError):
    """A helper for a client's handlers was called while the adaptor handles faults itself."""


def replica_info() -> List[dict]:
    """This job's replica layout as tft_set_optimizer_replica takes it (one dict per optimizer type)."""
    _require_client_mode("replica_info")
    if SESSION.job.layout is None:
        raise NotInClientMode("replica_info: no replica layout; it exists once Megatron initialised with "
                              "--enable-high-availability")
    return SESSION.job.layout.to_reference()


def on_update(started: Callable[[int], None], ended: Callable[[int], None]) -> None:
    """started(iteration) right before each in-place optimizer update (after the gradient-norm
    collective); ended(iteration) once the iteration's state is final and its snapshot taken, so every
    step the controller learns is complete can be rolled back to or dumped."""
    _require_client_mode("on_update")
    SESSION.job.before_update.append(started)
    SESSION.job.step_completed.append(ended)


def stop() -> int:
    _require_client_mode("stop")  # before touching the link: in the adaptor's mode it is the adaptor's
    wire_link()
    return _run("stop")


def wire_link() -> None:
    """The client's processor runs this rank's posted stages while its training thread waits for
    the decision; a stop keeps the store's and the controller's connections."""
    link = processor_link.current_or_none()
    if link is None:
        return
    link.between_waits, link.wake_waits = SESSION.thread.run_jobs, SESSION.thread.wake
    address = link.controller_address()
    controller_port = int(address.rsplit(":", 1)[1]) if ":" in address else 0
    SESSION.thread.keep_ports = control_ports(also=[controller_port])


def clean(is_uce_error: bool = False) -> int:
    """The reference's clean handler answers 0 (clean done); is_uce_error changes nothing here: the
    communicators are rebuilt either way."""
    return _run("clean")


def repair(step: int, repair_info: dict) -> int:
    """One repair handler call: repair_info as the reference gives it (this rank's pairs, "type" the
    optimizer type of each pair, or one int for all of them)."""
    own = _assignment(repair_info)
    return _run("repair", step=_step(step), repair=own, error_ranks=own.dst)


def rollback(step: int) -> int:
    """Roll back to the repair step, then make Megatron's train(), when the client calls it again,
    start after it (its iteration, data position and FLOPs; its start barriers skipped)."""
    _run("rollback", step=_step(step))
    SESSION.thread.run_parked(lambda: train_reentry.prepare(SESSION, megatron_job, step, "rolled back by the client"),
                              STAGE_TIMEOUT_S, park_wait=stop_timeout_s())
    return 0


def save_ckpt(step: int, save_info: Sequence[dict]) -> int:
    """The dying-gasp checkpoint's part of this saver: save_info as the reference gives it, one
    {"type", "ranks"} per optimizer type."""
    try:
        saves = tuple(SaveAssignment(int(entry["type"]), tuple(int(r) for r in entry["ranks"])) for entry in save_info)
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"save_ckpt: save_info must be a list of {{'type': int, 'ranks': [int]}}, got "
                         f"{save_info!r} ({err})") from None
    return _run("save_ckpt", step=_step(step), saves=saves)


def rename(step: int) -> int:
    return _run("rename", step=_step(step))


def exit_even_if_hung() -> int:
    """The exit handler's part: a training thread that never parked (hung) cannot end the process
    itself, so the process is ended shortly after the reply."""
    return _run("exit")


def _run(name: str, **fields) -> int:
    """The action's stages under the controller's strategy in force (the flow table's row)."""
    _require_client_mode(name)
    return flows.run_action(SESSION, megatron_job, RecoveryAction(name, strategy=_strategy(), **fields))


def _strategy() -> str:
    return processor_link.current().strategy()


def _step(step) -> int:
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ValueError(f"step must be an int >= 0, got {step!r}")
    return step


def _assignment(info: dict) -> RepairAssignment:
    missing = {"repair_type", "src", "dst", "type"} - set(info) if isinstance(info, dict) else {"a dict"}
    if missing:
        raise ValueError(f"repair: repair_info lacks {sorted(missing)}: {info!r}")
    src, dst = tuple(int(r) for r in info["src"]), tuple(int(r) for r in info["dst"])
    types = info["type"]
    types = (int(types),) * len(src) if isinstance(types, int) else tuple(int(t) for t in types)
    if not len(src) == len(dst) == len(types):
        raise ValueError(f"repair: src, dst and type must be parallel lists, got {info!r}")
    return RepairAssignment(RepairType(int(info["repair_type"])), src, dst, types,
                            tuple(int(r) for r in info.get("rank_list", ())))


def _require_client_mode(what: str) -> None:
    if not fault_handling.client_handles_faults():
        raise NotInClientMode(f"{what}: the adaptor handles faults itself; these helpers are for a client's "
                              f"handlers under mindio_adaptor.patch_all(fault_handling=\"client\")")
