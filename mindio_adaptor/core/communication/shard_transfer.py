"""Moving an optimizer shard (a list of tensors: fp32 main params, then each one's optimizer state)
point to point. Large tensors go as they are, all posted at once (isend/irecv), so transfers overlap;
the many small ones (biases, norms, 0-dim step counts) travel packed in one buffer per dtype, so they
cost one message rather than one each. Packing the large ones too would copy the whole shard twice,
which costs more than it saves (bench/shard_transfer.py). torch.distributed only."""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import torch
import torch.distributed as dist

SMALL_BYTES = 1 << 20  # tensors below this are packed


def _split(tensors: Sequence[torch.Tensor]) -> Tuple[List[int], Dict[torch.dtype, List[int]]]:
    large, small = [], {}
    for index, tensor in enumerate(tensors):
        if tensor.numel() * tensor.element_size() >= SMALL_BYTES:
            large.append(index)
        else:
            small.setdefault(tensor.dtype, []).append(index)
    return large, small


def send_shard(tensors: Sequence[torch.Tensor], dst: int) -> int:
    """Send every tensor to rank `dst`; returns the bytes sent."""
    large, small = _split(tensors)
    outgoing = [tensors[i].detach().contiguous() for i in large]
    outgoing += [torch.cat([tensors[i].detach().reshape(-1) for i in indexes]) for indexes in small.values()]
    for request in [dist.isend(t, dst) for t in outgoing]:
        request.wait()
    return sum(t.numel() * t.element_size() for t in outgoing)


def recv_shard(tensors: Sequence[torch.Tensor], src: int) -> int:
    """Receive into `tensors` (same shapes and dtypes as the sender's, in the same order); returns the
    bytes received. Large tensors are received in place: the receiver's shard is the one being
    replaced, and a transfer that fails half way fails the repair, which never uses it."""
    large, small = _split(tensors)
    incoming = [tensors[i] if tensors[i].is_contiguous() else torch.empty_like(tensors[i]) for i in large]
    packed = [torch.empty(sum(tensors[i].numel() for i in indexes), dtype=dtype,
                          device=tensors[indexes[0]].device) for dtype, indexes in small.items()]
    for request in [dist.irecv(t, src) for t in incoming + packed]:
        request.wait()
    with torch.no_grad():
        for i, value in zip(large, incoming):
            if value is not tensors[i]:
                tensors[i].copy_(value)
        for indexes, flat in zip(small.values(), packed):
            offset = 0
            for i in indexes:
                count = tensors[i].numel()
                tensors[i].copy_(flat[offset:offset + count].view_as(tensors[i]))
                offset += count
    return sum(t.numel() * t.element_size() for t in incoming + packed)
