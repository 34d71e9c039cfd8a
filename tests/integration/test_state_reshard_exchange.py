"""core/state_reshard between four real gloo processes: a state held by two ranks, cut at one set of
boundaries, arrives bit-exact at four ranks cut at other boundaries (the survivors' shards at dp2 become
the shards of dp4), in two dtypes, with nothing sent that a rank holds itself."""
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mindio_adaptor.core.state_reshard import Slot, reshard_in_group

SIZES = {"embedding": 37, "layer.weight": 64, "layer.bias": 8, "norm": 5}


def _truth():
    g = torch.Generator().manual_seed(7)
    return {key: {"param": torch.randn(n, generator=g), "exp_avg_sq": torch.rand(n, generator=g).to(torch.bfloat16)}
            for key, n in SIZES.items()}


def _cut(parts: int, rank: int) -> dict:
    """Rank `rank`'s ranges when the parameters, laid end to end, are cut into `parts` equal shards."""
    total = sum(SIZES.values())
    lo, hi = rank * total // parts, (rank + 1) * total // parts
    ranges, offset = {}, 0
    for key, n in SIZES.items():
        start, end = max(lo, offset), min(hi, offset + n)
        if start < end:
            ranges[key] = (start - offset, end - offset)
        offset += n
    return ranges


def _slots(ranges: dict, fill=None) -> dict:
    truth = _truth()
    return {key: Slot(a, {name: (t[a:b].clone() if fill is None else torch.full((b - a,), fill, dtype=t.dtype))
                          for name, t in truth[key].items()}) for key, (a, b) in ranges.items()}


def _worker(rank, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=4)
    try:
        held = _slots(_cut(2, rank)) if rank < 2 else {}  # ranks 2 and 3 returned with nothing
        wanted = _slots(_cut(4, rank), fill=float("nan"))
        pieces, received = reshard_in_group(None, held, wanted)
        truth = _truth()
        exact = all(torch.equal(t, truth[key][name][slot.start:slot.start + t.numel()])
                    for key, slot in wanted.items() for name, t in slot.tensors.items())
        out.put((rank, pieces, received, exact))
    finally:
        dist.destroy_process_group()


def test_the_survivors_state_arrives_bit_exact_at_the_new_shards():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, port, out)) for r in range(4)]
    for p in procs:
        p.start()
    results = {item[0]: item[1:] for item in (out.get(timeout=120) for _ in procs)}
    for p in procs:
        p.join(30)
    assert all(exact for _, _, exact in results.values())
    assert len({pieces for pieces, _, _ in results.values()}) == 1  # one plan, computed alike everywhere
    total = sum(SIZES.values())
    # float32 param + bfloat16 moment per element; rank 0's new quarter lies inside its old half
    assert results[0][1] == 0
    assert results[2][1] + results[3][1] == (total - total // 2) * 6
    assert results[2][1] > 0 and results[3][1] > 0
