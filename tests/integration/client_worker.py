"""A training process written the way the reference's client (MindSpeed-LLM) uses the reference API,
for the contract tests (run as a subprocess; our own code, following the client's call patterns).

Every name comes from the reference's import paths. train() is decorated with tft_exception_handler
and called as the client calls it, tft_train(train_args, test_data_iterator_list): the handlers find
the train arguments at args[0] and assign a rebuilt model and optimizer into that list. The repair
handler sends or receives per pair (type[i] the optimizer type of pair i), refusing pairs that are not
this rank's, as the client does. The optimizer "state" is a number that every update changes; a
rank's shard is shared by its replica peers, so a repaired rank must end with the value an
uninterrupted run gives (its digest). Shards travel between the processes through files.

One JSON line on stdout per event: each handler call (with the shape of the args it received) and
the result.
"""
import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

from mindio_ttp.framework_ttp import (
    OptimizerType, RepairType, set_mindio_export_version, tft_end_updating_os, tft_exception_handler,
    tft_init_processor, tft_register_clean_handler, tft_register_exit_handler, tft_register_rename_handler,
    tft_register_repair_handler, tft_register_rollback_handler, tft_register_save_ckpt_handler,
    tft_register_stop_handler, tft_set_optimizer_replica, tft_start_processor, tft_start_updating_os)
from mindio_ttp.framework_ttp.ttp_decorator import tft_get_repair_step, tft_get_repair_type

TRAIN_PARAM, MODEL_INDEX, OPTIM_INDEX, SCHEDULER_INDEX, CONFIG_INDEX = 0, 1, 2, 3, -1
_emit_lock = threading.Lock()


def emit(**event):
    with _emit_lock:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


def digest(shard: int, step: int) -> int:
    """The optimizer state of `shard` after `step` updates in an uninterrupted run."""
    value = shard + 1
    for s in range(1, step + 1):
        value = (value * 31 + s) % 1_000_003
    return value


class Optimizer:
    def __init__(self, shard: int, step: int = 0, value=None):
        self.shard, self.step = shard, step
        self.value = digest(shard, step) if value is None else value

    def update(self, step: int) -> None:
        assert step == self.step + 1, f"update of step {step} after step {self.step}"
        self.value = (self.value * 31 + step) % 1_000_003
        self.step = step


def args_shape(args, train_args) -> dict:
    """What the handler received as `args`, as the client reads it."""
    return {"type": type(args).__name__, "len": len(args), "train_len": len(args[TRAIN_PARAM]),
            "same_list": args[TRAIN_PARAM] is train_args}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--trigger", required=True)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--fail-rank", type=int, default=-1)
    p.add_argument("--fail-mode", default="idle", choices=["idle", "mid-update"],
                   help="idle: fail after the last update; mid-update: fail inside the last update")
    p.add_argument("--idle-s", type=float, default=30)
    p.add_argument("--enable-arf", type=int, default=0)
    a = p.parse_args()
    rank, world = a.rank, a.world_size
    exchange = Path(a.trigger).parent / "exchange"
    exchange.mkdir(exist_ok=True)
    stop_requested, exited = threading.Event(), threading.Event()
    set_mindio_export_version("MindSpeed-LLM")
    tft_init_processor(rank, world, False, enable_tls=False)

    train_args = ["forward_step_func", {"model": rank}, Optimizer(rank % (world // 2)), "scheduler",
                  "train_data_iterator", "valid_data_iterator", None, "config"]
    test_data_iterator_list = ["test_data_iterator"]

    def record(handler, args, **fields):
        emit(rank=rank, handler=handler, args_shape=args_shape(args, train_args) if args is not None else None,
             **fields)

    def stop(args, ctx):
        record("stop", args)
        stop_requested.set()

    def clean(is_uce_error, args, ctx):
        record("clean", args, is_uce=is_uce_error)
        return 0

    def repair(step, need_rebuild, error_ranks, repair_info, args, ctx):
        record("repair", args, step=step, need_rebuild=need_rebuild, error_ranks=error_ranks, info=repair_info)
        train = args[TRAIN_PARAM]
        if repair_info["repair_type"] == RepairType.RT_SEND.value:
            for idx, src in enumerate(repair_info["src"]):
                if src != rank:
                    raise ValueError(f"send pair {idx} is rank {src}'s, not rank {rank}'s")
                dst, optim_idx = repair_info["dst"][idx], repair_info["type"][idx]
                shard = train[OPTIM_INDEX]
                payload = json.dumps({"step": shard.step, "value": shard.value, "type": optim_idx})
                tmp = exchange / f"{src}-{dst}-{optim_idx}.tmp"
                tmp.write_text(payload)
                tmp.rename(exchange / f"{src}-{dst}-{optim_idx}.json")
            return 0
        if need_rebuild:  # as the client: a new model and optimizer, assigned into the train arguments
            train[MODEL_INDEX] = {"model": rank, "rebuilt": True}
            train[OPTIM_INDEX] = Optimizer(rank % (world // 2), value=-1)
        for idx, dst in enumerate(repair_info["dst"]):
            if dst != rank:
                raise ValueError(f"receive pair {idx} is rank {dst}'s, not rank {rank}'s")
            src, optim_idx = repair_info["src"][idx], repair_info["type"][idx]
            path = exchange / f"{src}-{dst}-{optim_idx}.json"
            deadline = time.monotonic() + 10
            while not path.exists():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no shard from rank {src}")
                time.sleep(0.01)
            shard = json.loads(path.read_text())
            train[OPTIM_INDEX].step, train[OPTIM_INDEX].value = shard["step"], shard["value"]
        return 0

    def rollback(step, args, ctx):
        record("rollback", args, step=step, optimizer_step=args[TRAIN_PARAM][OPTIM_INDEX].step)

    def save_ckpt(step, save_info, args, ctx):
        record("save_ckpt", args, step=step, save_info=save_info)
        shard = args[TRAIN_PARAM][OPTIM_INDEX]
        (exchange / f"dump-{rank}.json").write_text(json.dumps({"step": shard.step, "value": shard.value}))

    def rename(step, args):
        record("rename", args, step=step)

    def on_exit(ctx):
        emit(rank=rank, handler="exit")
        exited.set()

    tft_register_stop_handler(stop)
    tft_register_clean_handler(clean)
    tft_register_repair_handler(repair)
    tft_register_rollback_handler(rollback)
    tft_register_save_ckpt_handler(save_ckpt)
    tft_register_rename_handler(rename)
    tft_register_exit_handler(on_exit)
    tft_start_processor("127.0.0.1", a.port)
    tft_set_optimizer_replica(rank, [{"rank_list": list(range(world)), "replica_cnt": 2, "replica_shift": 0}])
    fired = []

    @tft_exception_handler
    def tft_train(train, test_iterators):
        optimizer = train[OPTIM_INDEX]
        first = optimizer.step + 1
        if first > 1:
            stop_requested.clear()
        if optimizer.step != tft_get_repair_step() and first > 1:
            raise AssertionError(f"resumed at step {optimizer.step}, the repair step is {tft_get_repair_step()}")
        last = a.steps if first == 1 else a.steps + 2  # after a repair, two more steps on the repaired state
        for step in range(first, last + 1):
            tft_start_updating_os(step)
            if rank == a.fail_rank and a.fail_mode == "mid-update" and step == a.steps and not fired:
                emit(rank=rank, ready=optimizer.step)
                wait_for_trigger(a.trigger, stop_requested)
                fired.append(1)
                raise RuntimeError("UCE ERROR injected inside the update of the last step")
            optimizer.update(step)
            tft_end_updating_os(step)
        if first > 1:
            return "done", optimizer.step, optimizer.value, tft_get_repair_type()
        emit(rank=rank, ready=optimizer.step)
        if rank == a.fail_rank and not fired:
            wait_for_trigger(a.trigger, stop_requested)
            fired.append(1)
            raise RuntimeError("UCE ERROR injected after the last update")
        deadline = time.monotonic() + a.idle_s
        while time.monotonic() < deadline:  # "blocked in a collective" until stopped or told to exit
            if stop_requested.is_set():
                raise RuntimeError("FORCE STOP by the controller")
            if exited.is_set():
                return "exit", optimizer.step, optimizer.value, ""
            time.sleep(0.01)
        return "timeout", optimizer.step, optimizer.value, ""

    try:
        result, step, value, repair_type = tft_train(train_args, test_data_iterator_list)
        emit(rank=rank, result=result, step=step, value=value, digest=digest(rank % (world // 2), step),
             repair_type=repair_type, model=train_args[MODEL_INDEX],
             optim_type=OptimizerType.ATTENTION.value)
    except SystemExit as exc:
        emit(rank=rank, result="exit", reason=str(exc))


def wait_for_trigger(trigger: str, stop_requested: threading.Event) -> None:
    while not os.path.exists(trigger) and not stop_requested.is_set():
        time.sleep(0.01)
    time.sleep(0.3)  # the other ranks are idle "in a collective" by now


if __name__ == "__main__":
    sys.exit(main())
