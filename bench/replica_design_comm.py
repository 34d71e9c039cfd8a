"""Gradient/parameter communication per step of the two replica designs, on real gloo processes.

For a gradient buffer of N fp32 elements, d data-parallel ranks and R replicas (g = d/R):
  plain      reduce-scatter over d, all-gather over d                (no replicas, the baseline)
  native     reduce-scatter over the g ranks of an optimizer instance, all-reduce of the 1/g shard
             over the R instances, all-gather over g                 (Megatron's optimizer instances;
             what the adaptor uses)
  reference  all-reduce over all d ranks, all-gather of the updated 1/g shard over g
             (the reference adaptor's re-sharding over replica groups)
Patterns run interleaved, many times; prints median ms per step and the ratios.

    python bench/replica_design_comm.py [--dp 4] [--replicas 2] [--numel 110336 4000000]
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def build_groups(d, r):
    g = d // r
    instances = [list(range(k * g, (k + 1) * g)) for k in range(r)]
    peers = [list(range(j, d, g)) for j in range(g)]
    rank = dist.get_rank()
    intra = inter = None
    for ranks in instances:
        group = dist.new_group(ranks)
        intra = group if rank in ranks else intra
    for ranks in peers:
        group = dist.new_group(ranks)
        inter = group if rank in ranks else inter
    return intra, inter


def plain_step(buf, world, d):
    shard = torch.empty(buf.numel() // d)
    dist.reduce_scatter_tensor(shard, buf, group=world)
    dist.all_gather_into_tensor(buf, shard, group=world)


def native_step(buf, intra, inter, g):
    shard = torch.empty(buf.numel() // g)
    dist.reduce_scatter_tensor(shard, buf, group=intra)
    dist.all_reduce(shard, group=inter)
    dist.all_gather_into_tensor(buf, shard, group=intra)


def reference_step(buf, world, intra, g):
    dist.all_reduce(buf, group=world)
    shard = buf[: buf.numel() // g].clone()
    dist.all_gather_into_tensor(buf, shard, group=intra)


def worker(rank, args, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.dp)
    d, r = args.dp, args.replicas
    g = d // r
    intra, inter = build_groups(d, r)
    world = dist.group.WORLD
    patterns = {
        "plain": lambda b: plain_step(b, world, d),
        "native": lambda b: native_step(b, intra, inter, g),
        "reference": lambda b: reference_step(b, world, intra, g),
    }
    for numel in args.numel:
        numel -= numel % d
        buf = torch.ones(numel)
        times = {name: [] for name in patterns}
        for it in range(args.iters + args.warmup):
            for name, step in patterns.items():
                dist.barrier()
                start = time.perf_counter()
                step(buf)
                elapsed = (time.perf_counter() - start) * 1000
                if it >= args.warmup:
                    times[name].append(elapsed)
        medians = {name: statistics.median(t) for name, t in times.items()}
        if rank == 0:
            print(f"N={numel} fp32 elements, dp{d}, R={r}: "
                  + ", ".join(f"{name} {ms:.2f} ms" for name, ms in medians.items()))
            print(f"  native/reference {medians['native'] / medians['reference']:.2f}, "
                  f"native/plain {medians['native'] / medians['plain']:.2f}, "
                  f"reference/plain {medians['reference'] / medians['plain']:.2f}", flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dp", type=int, default=4)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--numel", type=int, nargs="+", default=[110336, 4_000_000])
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    if args.dp % args.replicas:
        parser.error("--replicas must divide --dp")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args, port), nprocs=args.dp, join=True)


if __name__ == "__main__":
    main()
