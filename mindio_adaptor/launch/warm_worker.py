"""A warm worker: a Python process that has already imported what the training script needs (torch,
Megatron, the adaptor's patches) and waits, rank unknown, until its launcher gives it one; then it
becomes that rank's worker by running the script in itself. It takes a dead rank's place (--spare-workers)
or a lost node's (--standby) without paying for the interpreter and the imports, which are most of a
replacement process's start on a busy host.

The launcher writes one JSON line on the warm worker's stdin: {"env": {...}, "argv": [...]}, the rank's
full environment and the script's command line. The process replaces its environment and sys.argv with
them and runs the script (or module) as __main__. EOF on stdin (the launcher is gone or no longer needs
it) ends the process quietly.

Ahead (`--ahead SCRIPT ARGS...`, for a Megatron script with the adaptor's worker reboot): the script runs at
once, as a stand-in rank (MINDIO_WARM_RANK, core/layout/warm_assignment), and goes as far as the adaptor lets it
without its real rank (patches/warm_spare: with data parallelism alone, through Megatron's initialisation on
the fake backend and the model's build); the same JSON line is read there, and the process takes that rank.
When the adaptor's patches could not be preloaded the worker waits for its rank first, as without --ahead.

    python -m mindio_adaptor.launch.warm_worker PRELOAD [--ahead SCRIPT ARGS...]
    (PRELOAD: comma list, `module` or `module:function`)
"""
from __future__ import annotations

import importlib
import json
import os
import runpy
import sys
import time
from typing import List

from mindio_adaptor.core.layout import warm_assignment

DEFAULT_PRELOAD = "torch,mindio_adaptor:patch_all,megatron.training.training"
ADAPTOR_PATCHES = "mindio_adaptor:patch_all"  # what must be preloaded for a script to run ahead


def preload(spec: str) -> List[str]:
    """Import each module of `spec` (calling `module:function` entries); returns what could not be loaded,
    named with its error: the script imports those itself, so a failure here only costs the warmth."""
    failed = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        module, _, function = item.partition(":")
        try:
            loaded = importlib.import_module(module)
            if function:
                getattr(loaded, function)()
        except Exception as err:  # noqa: BLE001 - any failure only means less was preloaded
            failed.append(f"{item} ({type(err).__name__}: {err})")
    return failed


def become(assignment: dict) -> None:
    """Take the rank's environment and command line, and run the script as __main__ in this process."""
    os.environ.clear()
    os.environ.update(assignment["env"])
    argv = list(assignment["argv"])
    if argv[:1] == ["-m"]:
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        runpy.run_path(argv[0], run_name="__main__")


def main() -> int:
    began = time.monotonic()
    spec = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_PRELOAD
    ahead = sys.argv[3:] if sys.argv[2:3] == ["--ahead"] else None
    failed = preload(spec)
    if failed:
        print(f"[mindio-warm pid {os.getpid()}] not preloaded: {'; '.join(failed)}", file=sys.stderr, flush=True)
    if ahead and not any(item.startswith(ADAPTOR_PATCHES) for item in failed):
        become({"env": dict(os.environ), "argv": ahead})  # the script waits for its rank (core/layout/warm_assignment)
        return 0
    os.environ.pop(warm_assignment.ENV_WARM_RANK, None)  # not ahead: the rank is known before the script runs
    line = sys.stdin.readline()
    if not line:
        return 0
    assignment = json.loads(line)
    sys.stdin.close()
    print(f"[mindio-warm pid {os.getpid()}] rank {assignment['env'].get('RANK')}: starting the script after "
          f"{time.monotonic() - began:.1f} s warm", file=sys.stderr, flush=True)
    become(assignment)
    return 0


if __name__ == "__main__":
    sys.exit(main())
