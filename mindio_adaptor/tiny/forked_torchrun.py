"""torchrun whose workers are forked from a worker template (launch/worker_template) instead of each importing
torch and Megatron again: the tiny jobs' launcher. Same command line as `python -m torch.distributed.run`.

Everything else is torchrun's own: its agent starts, watches, signals and ends the workers, which are its
children as before (launch/forked_workers). A worker the template cannot give is started by torchrun itself.
"""
from __future__ import annotations

import os
import sys

from torch.distributed import run as torchrun
from torch.distributed.elastic.multiprocessing.subprocess_handler import subprocess_handler

from mindio_adaptor.launch.forked_workers import WorkerTemplate
from mindio_adaptor.launch.worker_template import DEFAULT_PRELOAD


def _forking_popen(template: WorkerTemplate, started_plainly):
    def popen(handler, args, env):
        files = [getattr(f, "name", None) for f in (handler._stdout, handler._stderr)]
        return template.spawn(args, env, *files) or started_plainly(handler, args, env)
    return popen


def main() -> None:
    # torchrun gives its workers one thread each (OMP_NUM_THREADS=1 when it starts several); the template's
    # imports see what the workers will
    template = WorkerTemplate(DEFAULT_PRELOAD, {"OMP_NUM_THREADS": "1", **os.environ})
    print(f"[tiny torchrun] workers are forked from a template process (pid {template.proc.pid})", file=sys.stderr,
          flush=True)
    handler = subprocess_handler.SubprocessHandler
    plain = handler._popen
    handler._popen = _forking_popen(template, plain)
    try:
        torchrun.main()
    finally:
        handler._popen = plain
        template.close()


if __name__ == "__main__":
    main()
