"""A framework adaptor in the style of MindSpeed-LLM's high-availability package, written for these
tests (our own code, following how that client uses the reference API): every call goes through the
reference's import paths (mindio_ttp.framework_ttp, mindio_ttp.utils). The Megatron patches run with
fault_handling="client", so they give only the replica layout, the CPU device layer and the recovery
stages (mindio_adaptor.recovery.client_actions); this adaptor starts the controller and the processors,
reports the layout and the DP group, brackets each optimizer update, registers the handlers and runs
Megatron's train() under tft_exception_handler.

Each handler prints one line, `client handler <name> rank <R>: ...`, so a test sees which ran where.
"""
import functools
import os
import secrets
import socket
import sys

import torch.distributed as dist

from mindio_adaptor.recovery import client_actions
from mindio_ttp.framework_ttp import (
    RepairType, set_mindio_export_version, tft_end_updating_os, tft_exception_handler, tft_init_controller,
    tft_init_processor, tft_register_clean_handler, tft_register_exit_handler, tft_register_rename_handler,
    tft_register_repair_handler, tft_register_rollback_handler, tft_register_save_ckpt_handler,
    tft_register_stop_handler, tft_set_dp_group_info, tft_set_optimizer_replica, tft_start_controller,
    tft_start_processor, tft_start_updating_os)
from mindio_ttp.utils import tft_set_update_end_time, tft_set_update_start_time

# Megatron's train(forward_step_func, model, optimizer, opt_param_scheduler, train_data_iterator, ...):
# positions in the argument list that tft_exception_handler hands every handler.
MODEL_INDEX, OPTIM_INDEX, SCHEDULER_INDEX = 1, 2, 3


def say(line: str) -> None:
    sys.stdout.write(line + "\n")  # one write: lines of several processes never interleave
    sys.stdout.flush()


def rank() -> int:
    """The global rank (a dump's savers renumber their process group)."""
    return int(os.environ["RANK"])


def install(training_module) -> None:
    """Replace Megatron's train() (looked up by pretrain at call time) by the decorated one."""
    training_module.train = train_wrapper(training_module.train)


def train_wrapper(train):
    @tft_exception_handler
    def decorated(*args, **kwargs):
        return train(*args, **kwargs)

    @functools.wraps(train)
    def wrapper(*args, **kwargs):
        if not getattr(wrapper, "connected", False):
            init_controller_and_processor()
            register_processor()
            wrapper.connected = True
        return decorated(*args, **kwargs)

    return wrapper


def init_controller_and_processor() -> None:
    """Rank 0 hosts the controller; its port and the job's token reach the others by a broadcast over
    Megatron's world group (the reference's client reads fixed addresses from its environment)."""
    from megatron.training import get_args

    margs = get_args()
    me, world = dist.get_rank(), dist.get_world_size()
    host = socket.gethostbyname(os.environ.get("MASTER_ADDR", "127.0.0.1"))
    contact = [None, None]
    if me == 0:
        os.environ.setdefault("MINDIO_TOKEN", secrets.token_hex(16))
        tft_init_controller(me, world, False, False, enable_uce=bool(margs.enable_hbmfault_repair))
        contact = [tft_start_controller(host, 0, False, ""), os.environ["MINDIO_TOKEN"]]
    dist.broadcast_object_list(contact, src=0)
    port, os.environ["MINDIO_TOKEN"] = contact
    set_mindio_export_version("MindSpeed-LLM")
    tft_init_processor(me, world, False, False, "", bool(margs.enable_hbmfault_repair), False, False)
    tft_start_processor(host, port)


def register_processor() -> None:
    from megatron.core import parallel_state

    me = dist.get_rank()
    tft_set_optimizer_replica(me, client_actions.replica_info())
    tft_set_dp_group_info(me, dist.get_process_group_ranks(parallel_state.get_data_parallel_group()))
    client_actions.on_update(update_started, update_ended)
    tft_register_stop_handler(stop_handler)
    tft_register_clean_handler(clean_handler)
    tft_register_repair_handler(repair_handler)
    tft_register_rollback_handler(rollback_handler)
    tft_register_save_ckpt_handler(save_ckpt_handler)
    tft_register_rename_handler(rename_handler)
    tft_register_exit_handler(exit_handler)


def update_started(iteration: int) -> None:
    tft_set_update_start_time()
    tft_start_updating_os(iteration - 1)  # the last step whose state stays complete meanwhile


def update_ended(iteration: int) -> None:
    tft_set_update_end_time()
    tft_end_updating_os(iteration)


def stop_handler(args, ctx):
    say(f"client handler stop rank {rank()}")
    client_actions.stop()


def clean_handler(is_uce_error, args, ctx):
    say(f"client handler clean rank {rank()}: is_uce_error={is_uce_error}")
    client_actions.clean(is_uce_error)
    return 0


def repair_handler(step, need_rebuild, error_ranks, repair_info, args, ctx):
    me = rank()
    pairs = list(zip(repair_info["src"], repair_info["dst"], repair_info["type"]))
    for src, dst, _ in pairs:  # as the client: only this rank's pairs reach it
        if me not in (src, dst):
            raise ValueError(f"repair pair {src}->{dst} is not rank {me}'s")
    kind = RepairType(repair_info["repair_type"]).name
    say(f"client handler repair rank {me}: step {step} {kind} pairs {pairs} error_ranks {list(error_ranks)}")
    client_actions.repair(step, repair_info)
    return 0


def rollback_handler(step, args, ctx):
    from megatron.training import get_args

    client_actions.rollback(step)
    optimizer = args[OPTIM_INDEX]  # Megatron's own optimizer, among the decorated call's arguments
    say(f"client handler rollback rank {rank()}: step {step}, Megatron's iteration now "
        f"{get_args().iteration}, optimizer {type(optimizer).__name__}")


def save_ckpt_handler(step, save_info, args, ctx):
    say(f"client handler save_ckpt rank {rank()}: step {step} savers {save_info}")
    client_actions.save_ckpt(step, save_info)


def rename_handler(step, args):
    say(f"client handler rename rank {rank()}: step {step}")
    client_actions.rename(step)


def exit_handler(ctx):
    say(f"client handler exit rank {rank()}")
    client_actions.exit_even_if_hung()
