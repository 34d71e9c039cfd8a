"""Checks that the R holders of every optimizer shard hold the same bytes.

Each rank hashes its shard's state (fp32 main params, Adam moments, step) and the peers holding
the same shard compare their hashes with one all-gather."""
import hashlib
from typing import Iterable

import torch
import torch.distributed as dist


class ReplicaMismatch(RuntimeError):
    """Holders of one shard diverged: a replica can no longer stand in for its peer."""


def state_digest(tensors: Iterable[torch.Tensor]) -> bytes:
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().cpu().contiguous()
        h.update(str((t.dtype, tuple(t.shape))).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.digest()


def check_peers_agree(tensors: Iterable[torch.Tensor], peer_group, step: int):
    """Raise ReplicaMismatch, naming the ranks, unless every peer's state digest equals ours."""
    local = torch.tensor(list(state_digest(tensors)), dtype=torch.uint8)
    device = "cuda" if dist.get_backend(peer_group) == "nccl" else "cpu"
    local = local.to(device)
    gathered = [torch.empty_like(local) for _ in range(dist.get_world_size(peer_group))]
    dist.all_gather(gathered, local, group=peer_group)
    if any(not torch.equal(g, gathered[0]) for g in gathered):
        ranks = dist.get_process_group_ranks(peer_group)
        raise ReplicaMismatch(f"optimizer shard replicas diverged after step {step}: holders {ranks} "
                              f"hold different fp32 main params / Adam moments")
