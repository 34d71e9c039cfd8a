"""One process (gloo, world 1) and Megatron's own torch_dist save: a save abandoned at its closing barrier,
then a second save into another directory, which is loaded back. argv[1]: "discard" drops what the
abandoned save left in the checkpoint writer's queue before the second save (megatron/checkpoint_queue),
"keep" does not. Prints one JSON line: what was dropped and how the load went."""
import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist

from mindio_adaptor.core.checkpoint.checkpoint_readback import UnreadableCheckpoint, check_torch_dist
from mindio_adaptor.core.process import cpu_torch
from mindio_adaptor.megatron import checkpoint_queue
from mindio_adaptor.patches import cpu_support


def state(seed: int, size: int) -> dict:
    from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor

    generator = torch.Generator().manual_seed(seed)
    return {"weight": ShardedTensor.from_rank_offsets("weight", torch.randn(size, generator=generator)),
            "rng": ShardedObject("rng", {"seed": seed, "state": list(range(size))}, (1,), (0,)),
            "step": ShardedObject("step", {"iteration": seed}, (1,), (0,))}


def save_abandoned_at_its_barrier(directory: str) -> None:
    from megatron.core import dist_checkpointing

    def peer_lost(*args, **kwargs):
        raise RuntimeError("Connection closed by peer (a rank lost while the others wait at the barrier)")

    barrier, dist.barrier = dist.barrier, peer_lost
    try:
        dist_checkpointing.save(state(1, 4096), directory)
    except RuntimeError:
        pass
    finally:
        dist.barrier = barrier


def main(mode: str) -> dict:
    from megatron.core import dist_checkpointing

    root = tempfile.mkdtemp()
    abandoned, second = os.path.join(root, "abandoned"), os.path.join(root, "second")
    os.makedirs(abandoned)
    os.makedirs(second)
    save_abandoned_at_its_barrier(abandoned)
    dropped = checkpoint_queue.discard_stale_write_results("before the second save") if mode == "discard" else 0
    dist_checkpointing.save(state(2, 300), second)
    try:
        check_torch_dist(second)
        readback = "ok"
    except UnreadableCheckpoint as err:
        readback = str(err)
    try:
        loaded = dist_checkpointing.load(state(0, 300), second)
        load = "ok" if loaded["step"]["iteration"] == 2 and torch.equal(loaded["weight"], state(2, 300)["weight"].data) \
            else "wrong values"
    except BaseException as err:  # what a resume would meet (torch's CheckpointException is a BaseException)
        load = f"{type(err).__name__}: {str(err)[-300:]}"
    return {"dropped": dropped, "readback": readback, "load": load}


if __name__ == "__main__":
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2])
    dist.init_process_group("gloo", rank=0, world_size=1)
    cpu_torch.install()
    cpu_support.prepare_python_for_megatron()
    result = main(sys.argv[1])
    dist.destroy_process_group()
    print(json.dumps(result))
