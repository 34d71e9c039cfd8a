"""A gloo process for tests/integration/test_abandonable_waits.py: rank 0 waits in an all-reduce (or, in
the modes "late_send" and "stop_recv", in receives) while rank 1 is alive but late (or never comes); prints one
JSON line saying how rank 0's wait ended and, in the modes "drop" and "bury", how long dropping the abandoned group
took this thread."""
import json
import os
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from mindio_adaptor.core.communication import abandonable_waits, group_graveyard

GROUP_TIMEOUT = timedelta(seconds=6)


def main(rank: int, port: int, mode: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=60))
    group = dist.new_group([0, 1], timeout=GROUP_TIMEOUT)
    store = dist.distributed_c10d._get_default_store()
    if rank == 1:
        if mode == "late_send":
            store.wait(["rank0/waiting"], timedelta(seconds=30))
            for value in (5.0, 7.0):
                time.sleep(1.0)  # rank 0 waits in its recv meanwhile, five short waits' worth each time
                dist.send(torch.tensor([value]), dst=0, group=group)
            return
        if mode == "late":
            store.wait(["rank0/waiting"], timedelta(seconds=30))
            time.sleep(1.5)  # rank 0 is in the all-reduce by now: it waits through several short waits
            dist.all_reduce(torch.tensor([2.0]), group=group)
        else:
            time.sleep(10.0)  # never joins while rank 0 waits
        return
    store.set("rank0/waiting", "1")
    stop = threading.Event()
    abandonable_waits.install(stop.is_set)
    if mode == "late_send":
        print(json.dumps(wait_in_recv(group)), flush=True)
        return
    if mode == "stop_recv":
        threading.Timer(1.0, stop.set).start()
        print(json.dumps(wait_in_recv(group)), flush=True)
        return
    if mode != "late":
        threading.Timer(1.0, stop.set).start()
    result = wait_in_all_reduce(group)
    if mode in ("drop", "bury"):
        if mode == "bury":
            group_graveyard.bury([group])
        dist.distributed_c10d._abort_process_group(group)
        started = time.monotonic()
        del group  # the last reference but the graveyard's: its destructor joins the stuck gloo thread
        result["drop_s"] = time.monotonic() - started
    print(json.dumps(result), flush=True)


def wait_in_all_reduce(group) -> dict:
    x = torch.tensor([1.0])
    started = time.monotonic()
    try:
        dist.all_reduce(x, group=group)
        return {"ended": "completed", "sum": x.item(), "s": time.monotonic() - started}
    except abandonable_waits.CollectiveAbandoned as exc:
        return {"ended": "abandoned", "why": str(exc), "s": time.monotonic() - started}


def wait_in_recv(group) -> dict:
    """A late peer's two sends, received with dist.recv and with dist.irecv(...).wait()."""
    first, second = torch.zeros(1), torch.zeros(1)
    started = time.monotonic()
    try:
        dist.recv(first, src=1, group=group)
        dist.irecv(second, src=1, group=group).wait()
    except abandonable_waits.CollectiveAbandoned as exc:
        return {"ended": "abandoned", "why": str(exc), "s": time.monotonic() - started}
    except RuntimeError as exc:
        return {"ended": "failed", "why": str(exc), "s": time.monotonic() - started}
    return {"ended": "completed", "values": [first.item(), second.item()], "s": time.monotonic() - started}


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
    # os._exit: a group whose gloo thread is still inside the abandoned collective must not hold the
    # process at interpreter teardown (it would until the group's timeout).
    os._exit(0)
