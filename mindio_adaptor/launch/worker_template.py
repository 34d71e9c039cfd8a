"""A worker template: a process that imports what every worker of the launcher imports (torch, Megatron) once,
and then forks each worker from itself, so that no worker pays for the interpreter and the imports again (about
6 CPU-seconds per rank on these machines, most of a small job's start).

The launcher asks on a pipe (one JSON line: {"env": {...}, "argv": [...], "stdout": path, "stderr": path}) and
reads the worker's pid back (one JSON line). The worker is forked through a middle process that exits at once,
while the launcher is a child subreaper (launch/forked_workers): the kernel then makes the worker the
launcher's own child, which it waits for, signals and kills like any process it started. The worker leads its
own session, waits until it is the launcher's, takes the rank's environment and command line and runs the script
as __main__ (launch/warm_worker.become), exactly as a warm worker does. EOF on the pipe ends the template.

Only modules are preloaded, never the adaptor's patches: a script that runs without them (stock Megatron) must
get none. What a script must find in place before Megatron is imported on this machine is preloaded first
(patches.before_megatron_import: the CPU device layer, the torch.compile switch).

    python -u -m mindio_adaptor.launch.worker_template PRELOAD REQUEST_FD REPLY_FD
"""
from __future__ import annotations

import gc
import json
import os
import sys
import time
from typing import Optional

from mindio_adaptor.core.process import orphan_guard
from mindio_adaptor.launch.warm_worker import become, preload

DEFAULT_PRELOAD = ("mindio_adaptor.patches:before_megatron_import,torch,megatron.training.training,"
                   "megatron.core.datasets.gpt_dataset,megatron.core.datasets.blended_megatron_dataset_builder")
ADOPTION_WAIT_S = 10.0  # the middle process exits right after its fork: the kernel re-parents at once


def fork_worker() -> int:
    """Fork a worker through a middle process; in the template the worker's pid, in the worker 0."""
    pid_reader, pid_writer = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.close(pid_reader)
        worker = os.fork()
        if worker == 0:
            os.close(pid_writer)
            return 0
        os.write(pid_writer, str(worker).encode())
        os._exit(0)
    os.close(pid_writer)
    with os.fdopen(pid_reader, "rb") as reader:
        text = reader.read()
    os.waitpid(middle, 0)  # once reaped, the worker has its new parent: only then is its pid handed out
    return int(text)


def wait_until_adopted(middle: int) -> None:
    deadline = time.monotonic() + ADOPTION_WAIT_S
    while os.getppid() == middle and time.monotonic() < deadline:
        time.sleep(0.001)


def redirect(path: Optional[str], fd: int) -> None:
    if path:
        with open(path, "ab", buffering=0) as target:
            os.dup2(target.fileno(), fd)


def serve(requests, replies) -> Optional[dict]:
    """Fork a worker per request; returns the request in the forked worker, None in the template at EOF."""
    for line in requests:
        assignment = json.loads(line)
        pid = fork_worker()
        if pid == 0:
            middle = os.getppid()
            os.setsid()  # the worker leads its own process group, as the launcher's Popen(start_new_session) does
            requests.close()
            replies.close()
            wait_until_adopted(middle)
            redirect(assignment.get("stdout"), 1)
            redirect(assignment.get("stderr"), 2)
            return assignment
        replies.write(json.dumps({"pid": pid}) + "\n")
        replies.flush()
    return None


def main() -> int:
    spec, request_fd, reply_fd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    orphan_guard.die_with(os.getppid())  # the launcher's; the forked workers do not inherit it
    gc.disable()  # the imports make objects that live as long as the process: see examples/pretrain_gpt.py
    failed = preload(spec)
    gc.freeze()
    gc.enable()
    if failed:
        print(f"[mindio-template pid {os.getpid()}] not preloaded: {'; '.join(failed)}", file=sys.stderr, flush=True)
    with os.fdopen(request_fd, "r") as requests, os.fdopen(reply_fd, "w") as replies:
        assignment = serve(requests, replies)
    if assignment is None:
        return 0
    become(assignment)
    return 0


if __name__ == "__main__":
    sys.exit(main())
