"""core/communication/shard_transfer between two real gloo processes: every tensor arrives bit-exact, large ones
in place, small ones through the packed buffer, whatever their dtypes and shapes (0-dim included)."""
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mindio_adaptor.core.communication import shard_transfer


def _shard(seed):
    g = torch.Generator().manual_seed(seed)
    big = (shard_transfer.SMALL_BYTES // 4) + 3
    return [torch.randn(big, generator=g), torch.randn(5, 7, generator=g), torch.tensor(3.0 + seed),
            torch.randint(0, 100, (11,), generator=g, dtype=torch.int64), torch.randn(big // 2, 2, generator=g),
            torch.randn(1, generator=g).to(torch.bfloat16)]


def _worker(rank, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        if rank == 0:
            out.put(("sent", shard_transfer.send_shard(_shard(1), 1)))
        else:
            mine = _shard(2)
            large_before = mine[0]
            received = shard_transfer.recv_shard(mine, 0)
            expected = _shard(1)
            out.put(("received", received, all(torch.equal(a, b) for a, b in zip(mine, expected)),
                     mine[0] is large_before))
    finally:
        dist.destroy_process_group()


def test_a_shard_arrives_bit_exact():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, port, out)) for r in range(2)]
    for p in procs:
        p.start()
    results = {item[0]: item[1:] for item in (out.get(timeout=120), out.get(timeout=120))}
    for p in procs:
        p.join(30)
    total = sum(t.numel() * t.element_size() for t in _shard(1))
    assert results["sent"] == (total,)
    assert results["received"] == (total, True, True)
