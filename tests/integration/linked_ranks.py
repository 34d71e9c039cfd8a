"""Ranks played by ProcessorLinks in a process of their own, as the training processes of one node:
SIGKILL of this process loses them the way a node loss does (no goodbye, connections reset).

    python linked_ranks.py --world-size 4 --ranks 2 3 --step 5 --controllers 127.0.0.1:P1,127.0.0.1:P2

Prints "ready" once every rank registered, reported the layout (one instance per half of the ranks:
rank r's shard is also on rank r + world_size/2) and completed `step`, then waits to be killed. As a
training process, it leaves the job (exit code 88, core/detection/cut_off) when a rank is cut off from it."""
import argparse
import logging
import sys
import time

from mindio_adaptor.core.detection import cut_off
from mindio_adaptor.core.job.processor_link import ProcessorLink


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--ranks", type=int, nargs="+", required=True)
    p.add_argument("--step", type=int, required=True)
    p.add_argument("--controllers", required=True, help="host:port,host:port,... (active first)")
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    controllers = [(host, int(port)) for host, port in (c.rsplit(":", 1) for c in a.controllers.split(","))]
    links = []
    for rank in a.ranks:
        link = ProcessorLink(rank, a.world_size)
        link.on_action(lambda action: (0, ""))
        link.start(*controllers[0], backups=controllers[1:])
        link.report_layout(rank, [{"rank_list": list(range(a.world_size)), "replica_cnt": 2}], f"host/node{rank}")
        link.update_ended(a.step)
        cut_off.leave_when_cut_off(link, f"rank {rank}")
        links.append(link)
    print("ready", flush=True)
    time.sleep(600)  # until killed; bounded so that a leaked process ends by itself
    return 0


if __name__ == "__main__":
    sys.exit(main())
