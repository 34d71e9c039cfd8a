"""Child processes for tests/unit/test_exception_checkpoint.py. Every wait here ends within WAIT_S.

    sigterm <out_file> <previous>   one process; previous SIGTERM handler: default | exit7 | ignore |
                                    failing-save. Prints READY, then waits for the test's SIGTERM.
    partial <dir> <port> <world>    imports torch once, then forks <world> rank processes that form a
                                    gloo group and partial-save (2 replicas) on SIGTERM. Each rank
                                    prints "READY <rank> <pid>"; this launcher reaps them and prints
                                    "EXIT <rank> <exit code>" (negative: killed by that signal).
"""
import datetime
import os
import signal
import sys
import time
import traceback

WAIT_S = 15.0


def sigterm_mode(out_file: str, previous: str):
    from mindx_elastic.torch_exception_module import exception_checkpoint

    if previous == "exit7":
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(7))
    elif previous == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def write(path, text):
        if previous == "failing-save":
            raise OSError("disk full (simulated)")
        with open(path, "w") as f:
            f.write(text)

    done = []
    exception_checkpoint.set_config(lambda *a: (write(*a), done.append(1)), args=(out_file, "saved"))
    print("READY", flush=True)
    deadline = time.monotonic() + WAIT_S
    while not done and time.monotonic() < deadline:
        time.sleep(0.02)
    if done:
        print("CONTINUED", flush=True)  # only reached when the previous handler let us live
        sys.exit(0)
    sys.exit(3)  # no SIGTERM came


def rank_main(directory: str, port: int, rank: int, world: int):
    import torch
    import torch.distributed as dist

    from mindx_elastic.torch_exception_module import exception_checkpoint, save_partial

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=WAIT_S))
    state = {}  # filled below; the handler saves whatever it holds when SIGTERM comes
    exception_checkpoint.set_config(save_partial, args=(directory, state), partial_save=True, replicas=2)
    shard = exception_checkpoint.shard_of(dist.get_rank()).index
    # The content depends on a real collective (the sum of the ranks) and on the shard only, so
    # replicas of one shard save equal tensors.
    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    state.update(shard=shard, saved_by=rank, weights=torch.arange(4.0) * 10 + shard + total)
    dist.barrier()
    # One write(2) under PIPE_BUF is atomic: the ranks share the pipe, print() may split a line.
    os.write(1, f"READY {rank} {os.getpid()}\n".encode())
    time.sleep(WAIT_S)  # SIGTERM ends us inside the handler: the previous handler is the default


def partial_mode(directory: str, port: str, world: str):
    import torch.distributed  # noqa: F401  (once here, not once per rank: the forks share it)

    ranks = {}
    for rank in range(int(world)):
        pid = os.fork()
        if pid == 0:
            code = 3  # returned from the sleep: no SIGTERM came
            try:
                rank_main(directory, int(port), rank, int(world))
            except BaseException:
                traceback.print_exc()
                code = 4
            finally:
                os._exit(code)
        ranks[pid] = rank
    for pid, rank in ranks.items():  # bounded: every rank ends within its own WAIT_S
        _, status = os.waitpid(pid, 0)
        print(f"EXIT {rank} {os.waitstatus_to_exitcode(status)}", flush=True)


if __name__ == "__main__":
    {"sigterm": sigterm_mode, "partial": partial_mode}[sys.argv[1]](*sys.argv[2:])
