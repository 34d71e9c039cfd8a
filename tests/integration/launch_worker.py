"""A tiny worker for test_launch.py (no Megatron). It joins a gloo group through env:// (the launcher's store),
appends what it is to OUT/rank<RANK>.jsonl, and plays a scenario:

    python launch_worker.py SCENARIO OUT FAULT_RANK [extra args, ignored]

  ok      one all_reduce of the ranks; exit 0
  fail    FAULT_RANK exits 3 after the first all_reduce, each time it starts; the others wait to be stopped
  reboot  FAULT_RANK SIGKILLs itself once (a marker file remembers) after the first all_reduce; the
          survivors' next all_reduce fails; they and the restarted process (MINDIO_RESTARTED=1) meet in a new
          group under a new store prefix, as an epoch of core/communication/comm would, and all_reduce once more; exit 0
  ended   FAULT_RANK exits ENDED_BY_CONTROLLER after the first all_reduce; the others crash (exit 1) later
  held    every rank registers a processor with the controller at MINDIO_CONTROLLER_ADDR; FAULT_RANK starts
          a helper in a session of its own that inherits its controller connection (`sleep`, its pid in
          OUT/holder.pid) and one in its own process group (OUT/helper.pid), then SIGKILLs itself: its
          connection stays open; the others wait to be stopped
  dropped FAULT_RANK exits LEFT_THE_JOB after the first all_reduce (a scale-in dropped it); the others go
          on for 3 s (a job that trains on without it; where WENT_ON_WHEN_FILE is set, until that file exists,
          60 s at most), record "went_on" and exit 0
  left    every rank registers a processor and leaves (tft_destroy_processor: its training is over); then
          FAULT_RANK aborts (SIGABRT, as a library failing at exit) and the others exit 0
"""
import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from mindio_adaptor.core.detection.exit_codes import ENDED_BY_CONTROLLER, LEFT_THE_JOB

# A restarted rank imports torch before it joins; on a loaded 2-core machine that alone can take 20 s.
TIMEOUT = timedelta(seconds=60)
ENV_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE",
            "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID",
            "TORCHELASTIC_USE_AGENT_STORE", "MINDIO_RESTARTED", "MINDIO_FAILURE_DOMAIN")


def record(out, rank, **fields):
    with open(os.path.join(out, f"rank{rank}.jsonl"), "a") as f:
        f.write(json.dumps(dict(pid=os.getpid(), **fields)) + "\n")


def sum_of_ranks(rank):
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    return int(t.item())


def join_new_group(rank, world, prefix):
    """A group on the launcher's store under a prefix no earlier process wrote to (no stale addresses)."""
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=TIMEOUT)
    dist.init_process_group("gloo", store=dist.PrefixStore(prefix, store), rank=rank, world_size=world,
                            timeout=TIMEOUT)


def reboot(out, rank, world, fault_rank):
    if os.environ["MINDIO_RESTARTED"] == "1":
        join_new_group(rank, world, "epoch1")
    else:
        dist.init_process_group("gloo", init_method="env://", timeout=TIMEOUT)
        record(out, rank, event="round", sum=sum_of_ranks(rank))
        marker = os.path.join(out, "killed")
        if rank == fault_rank and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            sum_of_ranks(rank)
            raise SystemExit("the all_reduce after a peer died succeeded")
        except RuntimeError:
            pass
        dist.destroy_process_group()
        join_new_group(rank, world, "epoch1")
    record(out, rank, event="epoch1", sum=sum_of_ranks(rank))
    dist.destroy_process_group()


def hold_connection_and_die(out, rank, fault_rank):
    """A rank whose death its connection does not show: a helper outside its process group keeps a copy."""
    from mindio_adaptor.core.communication.comm_abort import tcp_connections
    from mindio_adaptor.core.job.controller_address import controller_address
    from mindio_adaptor.ttp import processor

    host, port = controller_address()
    processor.tft_init_processor(rank, int(os.environ["WORLD_SIZE"]), enable_tls=False)
    processor.tft_start_processor(host, port)
    record(out, rank, event="registered")
    if rank != fault_rank:
        time.sleep(60)
        return
    (link,) = [c for c in tcp_connections() if c.remote_port == port]
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # the launcher's output ends with the job
    holder = subprocess.Popen(["sleep", "60"], pass_fds=(link.fd,), start_new_session=True, **quiet)
    helper = subprocess.Popen(["sleep", "60"], **quiet)  # in the rank's process group: the launcher ends it
    for name, proc in (("holder", holder), ("helper", helper)):
        with open(os.path.join(out, f"{name}.pid"), "w") as f:
            f.write(str(proc.pid))
    time.sleep(0.5)  # a heartbeat or two: the controller has seen this rank alive
    os.kill(os.getpid(), signal.SIGKILL)


def leave_then_abort(out, rank, fault_rank):
    from mindio_adaptor.core.job.controller_address import controller_address
    from mindio_adaptor.ttp import processor

    processor.tft_init_processor(rank, int(os.environ["WORLD_SIZE"]), enable_tls=False)
    processor.tft_start_processor(*controller_address())
    processor.tft_destroy_processor()
    record(out, rank, event="left")
    if rank == fault_rank:
        os.abort()


def go_on_until(path):
    """Long after the launchers saw the LEFT_THE_JOB exit: 3 s, or until `path` exists (60 s at most)."""
    if not path:
        time.sleep(3.0)
        return
    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.1)


def main():
    scenario, out, fault_rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    record(out, rank, event="start", argv=sys.argv[4:], env={k: os.environ.get(k) for k in ENV_KEYS})
    if scenario == "reboot":
        return reboot(out, rank, world, fault_rank)
    if scenario == "held":
        return hold_connection_and_die(out, rank, fault_rank)
    if scenario == "left":
        return leave_then_abort(out, rank, fault_rank)
    dist.init_process_group("gloo", init_method="env://", timeout=TIMEOUT)
    record(out, rank, event="round", sum=sum_of_ranks(rank))
    if scenario == "fail":
        if rank == fault_rank:
            os._exit(3)
        time.sleep(60)
    elif scenario == "ended":
        if rank == fault_rank:
            os._exit(ENDED_BY_CONTROLLER)
        time.sleep(2.0)  # long after the launcher saw the ENDED_BY_CONTROLLER exit
        os._exit(1)
    elif scenario == "dropped":
        if rank == fault_rank:
            os._exit(LEFT_THE_JOB)
        go_on_until(os.environ.get("WENT_ON_WHEN_FILE"))
        record(out, rank, event="went_on")
        os._exit(0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
