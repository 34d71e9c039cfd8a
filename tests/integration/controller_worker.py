"""A training process stand-in for the controller integration tests (run as a subprocess).

It registers with the controller through the reference API, reports a replica layout, runs a few
optimizer steps, then waits as if blocked in a collective until the controller stops it (or, for the
rank named by --fail-rank, until the trigger file appears, when it raises a UCE error). Every handler
call is printed as one JSON line on stdout for the test to check.
"""
import argparse
import json
import os
import sys
import threading
import time

from mindio_adaptor.core.detection.exit_codes import LEFT_THE_JOB
from mindio_adaptor.core.job.processor_link import LEAVES_THE_JOB
from mindio_adaptor.core.layout.scale_in_plan import plan_scale_in
from mindio_adaptor.ttp import processor as _processor_module
from mindio_ttp import framework_ttp as ttp


_emit_lock = threading.Lock()
LEAVING = threading.Event()  # this rank answered that it leaves: a thread of its own ends the process


def emit(**event):
    # One write per line under a lock: handlers emit from the processor's worker thread while the
    # training thread emits too, and print() writes the text and the newline separately.
    with _emit_lock:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


def leave_if_dropped(rank, dp_lists, fault_ranks):
    """As the adaptor's scale-in does on a Megatron rank (recovery/stages/scale_in_groups): a live rank of a
    data-parallel slice that lost a rank answers REBUILD_GROUP with LEAVES_THE_JOB, then its process leaves
    (the processor's goodbye follows the reply) and exits LEFT_THE_JOB. Returns the reply's code, or None."""
    plan = plan_scale_in(dp_lists, fault_ranks, global_batch_size=12, micro_batch_size=1)  # 12: any dp up to 4
    if rank not in plan.dropped:
        return None
    emit(rank=rank, leaves=list(plan.lost))
    LEAVING.set()

    def leave():
        ttp.tft_destroy_processor()
        os._exit(LEFT_THE_JOB)

    threading.Thread(target=leave).start()
    return LEAVES_THE_JOB


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--fail-rank", type=int, default=-1)
    p.add_argument("--trigger", default="")
    p.add_argument("--fail-code", default="", help="device fault code the injected error carries")
    p.add_argument("--hang-in", default="", help="handler that sleeps far beyond its time limit")
    p.add_argument("--hang-rank", type=int, default=-1)
    p.add_argument("--lag-rank", type=int, default=-1, help="rank that stops one update short (prelock tests)")
    p.add_argument("--lag-mode", default="finish", choices=["finish", "never", "start"],
                   help="finish: mid-update, ends it after the prelock; never: mid-update for good; "
                        "start: not updating, starts the next update after the prelock")
    p.add_argument("--start-rank", type=int, default=-1, help="rank that starts a new update after the prelock")
    p.add_argument("--enable-arf", type=int, default=0, help="1: tft_init_processor(enable_arf=True)")
    p.add_argument("--ckpt-step", type=int, default=-1, help=">= 0: report a saved periodic checkpoint of this step")
    p.add_argument("--save-ranks", default="", help="ranks that enter a checkpoint-save section at the trigger")
    p.add_argument("--save-s", type=float, default=1.5, help="how long the save section of --save-ranks lasts")
    p.add_argument("--finish-ranks", default="", help="ranks that report their training finished at the trigger")
    p.add_argument("--idle-s", type=float, default=50, help="how long to wait 'in a collective' after the steps")
    p.add_argument("--tp", type=int, default=1, help="> 1: the layout of tensor parallelism of this size (one "
                   "data-parallel list per TP rank); a scale-in's REBUILD_GROUP on a rank of a slice that lost a "
                   "rank answers that it leaves, and the process exits LEFT_THE_JOB")
    p.add_argument("--relayout", type=int, default=0,
                   help="1: at REBUILD_GROUP report the layout of the ranks left (a scale-in: whole data-parallel "
                   "slices, with --tp a lost rank's slice peers too) or of all (a scale-out)")
    p.add_argument("--absent", default="",
                   help="a returned process: the retired ranks that stay out of its partial scale-out (the adaptor "
                   "reads them from REBUILD_GROUP, which the reference's handler does not pass)")
    p.add_argument("--ready-after-s", type=float, default=0,
                   help="a restarted process: how long it builds its model before it reports ready")
    p.add_argument("--idle-after-repair", type=int, default=0,
                   help="1: after a repair, run the steps and wait 'in a collective' again instead of ending")
    a = p.parse_args()
    rank = a.rank
    saver = str(rank) in a.save_ranks.split(",")
    finisher = str(rank) in a.finish_ranks.split(",")
    stop_requested = threading.Event()
    fired = []

    def record(handler):
        def wrapped(*args):
            emit(rank=rank, handler=handler, args=[x for x in args if not isinstance(x, argparse.Namespace)])
            if handler == a.hang_in and rank == a.hang_rank:
                time.sleep(60)
            if handler == "stop":
                stop_requested.set()
            return 0
        return wrapped

    ttp.tft_init_processor(rank, a.world_size, enable_tls=False, enable_arf=bool(a.enable_arf))
    ttp.tft_register_stop_handler(lambda args, ctx: record("stop")(ctx))
    ttp.tft_register_clean_handler(lambda is_uce, args, ctx: record("clean")(is_uce))
    ttp.tft_register_repair_handler(
        lambda step, rebuild, errs, info, args, ctx: record("repair")(step, rebuild, errs, info))
    ttp.tft_register_rollback_handler(lambda step, args, ctx: record("rollback")(step))
    ttp.tft_register_save_ckpt_handler(lambda step, info, args, ctx: record("save_ckpt")(step, info))
    ttp.tft_register_rename_handler(lambda step, args: record("rename")(step))
    ttp.tft_register_exit_handler(lambda ctx: record("exit")())
    dp_lists = [list(range(tp_rank, a.world_size, a.tp)) for tp_rank in range(a.tp)]
    gone = {int(r) for r in a.absent.split(",") if r}  # ranks a scale-in retired, as far as this rank knows

    def rebuild_group(fault_ranks):
        result = record("rebuild_group")(fault_ranks)
        if a.tp > 1 and ttp.tft_get_repair_type() == "scale_in":
            leaves = leave_if_dropped(rank, dp_lists, fault_ranks)
            if leaves:
                return leaves
        if not a.relayout:
            return result
        # A scale-in names the lost ranks, a scale-out the returned ones (this rank among them if it is one; the
        # rest of a partial one's retired ranks stay gone).
        if ttp.tft_get_repair_type() == "scale_out" or rank in fault_ranks:
            gone.difference_update(fault_ranks)
        else:
            gone.update(fault_ranks)
        # Whole data-parallel slices go: with TP, a gone rank's slice peers too (they left with it).
        dropped = {r // a.tp for r in gone}
        lists = [[r for r in dp_list if r // a.tp not in dropped] for dp_list in dp_lists]
        replicas = max(n for n in range(1, min(a.replicas, len(lists[0])) + 1) if len(lists[0]) % n == 0)
        ttp.tft_set_optimizer_replica(rank, [{"rank_list": ranks, "replica_cnt": replicas, "replica_shift": 0,
                                              "optimizer_type": 0} for ranks in lists])
        emit(rank=rank, relayout=lists, replicas=replicas)
        return result

    ttp.tft_register_rebuild_group_handler(lambda fault_ranks, args, ctx: rebuild_group(fault_ranks))
    try:
        ttp.tft_start_processor("127.0.0.1", a.port)
    except ValueError as exc:
        emit(rank=rank, start_error=str(exc), start_error_type=type(exc).__name__)
        ttp.tft_destroy_processor()
        return 3
    restarted = ttp.tft_is_reboot_node()  # the controller's answer to the registration
    ttp.tft_set_optimizer_replica(rank, [{"rank_list": ranks, "replica_cnt": a.replicas, "replica_shift": 0,
                                          "optimizer_type": 0} for ranks in dp_lists])
    state = {"step": 0, "joined": False}
    if restarted:
        emit(rank=rank, restarted=True, reboot_type=ttp.tft_get_reboot_type())

    @ttp.tft_exception_handler
    def train():
        # The decorator destroys the processor when train returns: read the repair type before.
        return train_steps(), ttp.tft_get_repair_type()

    def train_steps():
        if restarted and not state["joined"]:
            # A replacement builds its model, then tells the controller it is ready and waits for the repair.
            time.sleep(a.ready_after_s)
            state["joined"] = True
            raise RuntimeError("ARF FINISH: the restarted process is ready")
        start = state["step"]
        if start > 0 or state["joined"]:  # after a repair: resume from the repaired step
            start = ttp.tft_get_repair_step()
            stop_requested.clear()
        lag = rank == a.lag_rank and start == 0 and not state["joined"]
        for step in range(start + 1, start + a.steps + 1):
            if lag and step == a.steps:
                if a.lag_mode != "start":
                    ttp.tft_start_updating_os(step)  # and stays mid-update
                break
            ttp.tft_start_updating_os(step)
            ttp.tft_end_updating_os(step)
            state["step"] = step
        if (start > 0 or state["joined"]) and not a.idle_after_repair:
            return "done"
        if a.ckpt_step >= 0:
            ttp.tft_report_saved_ckpt_step(a.ckpt_step)
        emit(rank=rank, ready=state["step"])
        if a.idle_s <= 0:
            return "done"  # training ends normally
        deadline = time.monotonic() + a.idle_s
        save = {}
        while time.monotonic() < deadline:  # "blocked in a collective"
            if stop_requested.is_set():
                raise RuntimeError("FORCE STOP by the controller")
            if finisher and "finished" not in save and a.trigger and os.path.exists(a.trigger):
                save["finished"] = True
                _processor_module.report_training_finished()
                emit(rank=rank, finished_training=True)
            if saver and "began" not in save and a.trigger and os.path.exists(a.trigger):
                save["began"] = time.monotonic()
                _processor_module.section_link().begin_section("save", 60.0)
                emit(rank=rank, saving=True)
            if "began" in save and "ended" not in save and time.monotonic() - save["began"] > a.save_s:
                save["ended"] = True
                _processor_module.section_link().end_section()
                emit(rank=rank, saved=True)
            if (lag or rank == a.start_rank) and not fired and a.trigger and os.path.exists(a.trigger):
                fired.append(1)
                native = _processor_module._require()
                wait_deadline = time.monotonic() + 10
                while native.prelock_step() < 0 and time.monotonic() < wait_deadline:
                    time.sleep(0.01)
                emit(rank=rank, prelock=native.prelock_step())
                if lag and a.lag_mode == "finish":
                    # Its PRELOCK reply is in before it finishes: finished at once, its status could reach the
                    # controller before the other ranks' replies, and the laggard check would find nobody behind.
                    time.sleep(0.5)
                    ttp.tft_end_updating_os(a.steps)
                    state["step"] = a.steps
                    emit(rank=rank, finished=a.steps)
                elif lag and a.lag_mode == "never":
                    pass
                else:
                    began = time.monotonic()
                    try:
                        ttp.tft_start_updating_os(state["step"] + 1)
                        emit(rank=rank, started=state["step"] + 1)
                    except RuntimeError as exc:
                        emit(rank=rank, start_error=str(exc), blocked_s=time.monotonic() - began)
                        raise
            if rank == a.fail_rank and not fired and a.trigger and os.path.exists(a.trigger):
                fired.append(1)
                time.sleep(0.3)  # the savers are in their section when the fault is reported
                if "began" in save:  # as patches/sections: a failed section ends before the report
                    _processor_module.section_link().end_section()
                error = RuntimeError("UCE ERROR injected by the test")
                error.fault_code = a.fail_code  # reported as tft_report_error's error_code
                raise error
            time.sleep(0.01)
        return "timeout"

    try:
        result, repair_type = train()
        emit(rank=rank, result=result, repair_type=repair_type, step=state["step"])
    except SystemExit as exc:
        emit(rank=rank, result="exit", reason=str(exc))
    except Exception:
        if LEAVING.is_set():  # the wait for a decision saw the link closed by the leaving thread, which exits
            time.sleep(60)
        raise
    finally:
        ttp.tft_destroy_processor()


if __name__ == "__main__":
    sys.exit(main())
