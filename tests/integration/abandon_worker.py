"""A gloo process for tests/integration/test_abandonable_waits.py: rank 0 waits in an all-reduce while
rank 1 is alive but late (or never comes); prints one JSON line saying how rank 0's wait ended."""
import json
import os
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from mindio_adaptor.core import abandonable_waits


def main(rank: int, port: int, mode: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=60))
    if rank == 1:
        time.sleep(1.5 if mode == "late" else 8.0)  # "stop": never joins while rank 0 waits
        if mode == "late":
            dist.all_reduce(torch.tensor([2.0]))
        return
    stop = threading.Event()
    abandonable_waits.install(stop.is_set)
    if mode == "stop":
        threading.Timer(1.0, stop.set).start()
    x = torch.tensor([1.0])
    started = time.monotonic()
    try:
        dist.all_reduce(x)
        print(json.dumps({"ended": "completed", "sum": x.item(), "s": time.monotonic() - started}), flush=True)
    except abandonable_waits.CollectiveAbandoned as exc:
        print(json.dumps({"ended": "abandoned", "why": str(exc), "s": time.monotonic() - started}), flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
    # os._exit: a group whose gloo thread is still inside the abandoned collective must not hold the
    # process at interpreter teardown (it would until the group's timeout).
    os._exit(0)
