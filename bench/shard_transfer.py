"""Optimizer-shard transfer (online repair, process replacement) against plain send/recv of the same
bytes, between two real gloo processes on this machine.

The shard is laid out like a distributed-optimizer shard of a GPT: per parameter tensor of L layers of
hidden size H, the fp32 main param, then Adam's exp_avg, exp_avg_sq and a 0-dim step. Three ways to
move it, interleaved, many rounds, median per way:
  shard      core/communication/shard_transfer.send_shard / recv_shard (what a repair uses)
  per-tensor one isend/irecv per tensor (how the repair moved it before)
  plain      one send/recv of a single flat buffer of the same bytes (the ideal; nothing to copy)
Prints the median and the best round of each (the best is the steadier estimate on a shared machine)
and the ratios shard/plain (goal >= 0.8).

    python bench/shard_transfer.py [--layers 4] [--hidden 1024] [--rounds 7]
"""
import argparse
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mindio_adaptor.core.communication.shard_transfer import recv_shard, send_shard


def shard(layers: int, hidden: int):
    shapes = []
    for _ in range(layers):
        shapes += [(3 * hidden, hidden), (3 * hidden,), (hidden, hidden), (hidden,), (4 * hidden, hidden),
                   (4 * hidden,), (hidden, 4 * hidden), (hidden,), (hidden,), (hidden,), (hidden,), (hidden,)]
    tensors = []
    for shape in shapes:
        tensors += [torch.randn(shape), torch.randn(shape), torch.rand(shape), torch.tensor(7.0)]
    return tensors


def per_tensor(tensors, rank):
    requests = [dist.isend(t, 1) if rank == 0 else dist.irecv(t, 0) for t in tensors]
    for request in requests:
        request.wait()


def plain(flat, rank):
    dist.send(flat, 1) if rank == 0 else dist.recv(flat, 0)


def worker(rank, args, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    tensors = shard(args.layers, args.hidden)
    total = sum(t.numel() * t.element_size() for t in tensors)
    flat = torch.empty(total // 4, dtype=torch.float32)
    ways = {"shard": lambda: send_shard(tensors, 1) if rank == 0 else recv_shard(tensors, 0),
            "per-tensor": lambda: per_tensor(tensors, rank), "plain": lambda: plain(flat, rank)}
    times = {name: [] for name in ways}
    for _ in range(args.rounds):
        for name, move in ways.items():
            dist.barrier()
            started = time.perf_counter()
            move()
            dist.barrier()  # the receiver has everything
            times[name].append(time.perf_counter() - started)
    if rank == 1:
        out.put((total, len(tensors), {name: (statistics.median(t), min(t)) for name, t in times.items()}))
    dist.destroy_process_group()


def _plain_worker(rank, nbytes, rounds, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    flat = torch.empty((nbytes + 3) // 4, dtype=torch.float32)
    times = []
    for _ in range(rounds):
        dist.barrier()
        started = time.perf_counter()
        plain(flat, rank)
        dist.barrier()
        times.append(time.perf_counter() - started)
    if rank == 1:
        out.put(statistics.median(times))
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def plain_transfer_seconds(nbytes: int, rounds: int = 7) -> float:
    """Median time of one plain gloo send/recv of `nbytes` between two fresh processes (bench/mttr.py)."""
    port, ctx = _free_port(), mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_plain_worker, args=(rank, nbytes, rounds, port, out)) for rank in range(2)]
    for p in procs:
        p.start()
    seconds = out.get(timeout=600)
    for p in procs:
        p.join(60)
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    port = _free_port()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(rank, args, port, out)) for rank in range(2)]
    for p in procs:
        p.start()
    total, count, medians = out.get(timeout=600)
    for p in procs:
        p.join(60)
    print(f"shard: {count} tensors, {total / 1e6:.1f} MB; {args.rounds} interleaved rounds; "
          f"load {open('/proc/loadavg').read().split()[0]}")
    for name, (median, best) in medians.items():
        print(f"  {name:<11} median {median * 1e3:8.1f} ms ({total / median / 1e6:7.1f} MB/s)   "
              f"best {best * 1e3:8.1f} ms ({total / best / 1e6:7.1f} MB/s)")
    ratio = {name: (medians["plain"][0] / m, medians["plain"][1] / b) for name, (m, b) in medians.items()}
    print(f"ratio shard/plain: median {ratio['shard'][0]:.2f}, best {ratio['shard'][1]:.2f} (goal >= 0.8); "
          f"per-tensor/plain: median {ratio['per-tensor'][0]:.2f}, best {ratio['per-tensor'][1]:.2f}")


if __name__ == "__main__":
    main()
