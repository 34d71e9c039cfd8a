"""The launcher's command line: torchrun's flag names (and underscore spellings) where they exist.

Like torchrun, every option can also come from the environment as PET_<NAME> (PET_NNODES, PET_NODE_RANK,
PET_MASTER_ADDR, ...), which is what Kubernetes operators for PyTorch jobs set. Nothing here imports
torch: a bad command line is answered at once.
"""
from __future__ import annotations

import argparse
import os
from typing import Tuple

from mindio_adaptor.launch.config import (DEFAULT_LOST_AFTER_S, DEFAULT_WARM_REFILL_DELAY_S, REPEAT_OFFENDER_POLICIES,
                                          LaunchConfig, LaunchConfigError, resolve)
from mindio_adaptor.launch.job_token import launcher_token
from mindio_adaptor.launch.warm_worker import DEFAULT_PRELOAD

PROG = "mindio-adaptor launch"
DESCRIPTION = (
    "Start the training processes of one node, like torchrun, and restart them when they fail. With "
    "--worker-reboot (or when the training script is given --enable-worker-reboot) only a failed process is "
    "started again, with the same rank and MINDIO_RESTARTED=1; the others keep running. See docs/launch.md.")


def _env(dest: str, default):
    """torchrun's convention: PET_<DEST> replaces the built-in default (the command line still wins)."""
    return os.environ.get(f"PET_{dest.upper()}", default)


def _env_flag(dest: str) -> bool:
    return os.environ.get(f"PET_{dest.upper()}", "0") not in ("", "0", "false", "False")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--nnodes", default=_env("nnodes", None),
        help="number of nodes, one launcher each (N, or N:N; elastic ranges are not supported; default 1, "
             "or SLURM_NNODES under srun)")
    add("--nproc-per-node", "--nproc_per_node", dest="nproc_per_node", default=_env("nproc_per_node", "1"),
        help="workers on this node: a number, or gpu, cpu, auto (default 1)")
    add("--node-rank", "--node_rank", dest="node_rank", type=int, default=_env("node_rank", None),
        help="rank of this node, 0..nnodes-1 (default 0, or SLURM_NODEID under srun); node 0's launcher hosts "
             "the stores")
    add("--master-addr", "--master_addr", dest="master_addr", default=_env("master_addr", None),
        help="address of node 0 (default 127.0.0.1, or the first node of the Slurm step)")
    add("--master-port", "--master_port", dest="master_port", type=int, default=_env("master_port", None),
        help="port of the launchers' store on node 0 (default: a free one on one node, 29500 on several)")
    add("--rdzv-endpoint", "--rdzv_endpoint", dest="rdzv_endpoint", default=_env("rdzv_endpoint", None),
        help="HOST:PORT of node 0, instead of --master-addr/--master-port")
    add("--rdzv-backend", "--rdzv_backend", dest="rdzv_backend", default=_env("rdzv_backend", "static"),
        help="static or c10d: both mean a store hosted by node 0's launcher, with a fixed set of nodes")
    add("--rdzv-id", "--rdzv_id", dest="rdzv_id", default=_env("rdzv_id", None),
        help="job id, given to workers as TORCHELASTIC_RUN_ID (default 'none', SLURM_JOB_ID under srun; random "
             "with --standalone)")
    add("--rdzv-conf", "--rdzv_conf", dest="rdzv_conf", default=_env("rdzv_conf", ""),
        help="KEY=VALUE,...: timeout (or join_timeout), seconds to wait for every node (default 600)")
    add("--standalone", action="store_true", default=_env_flag("standalone"),
        help="one node, a free local port, a random job id")
    add("--max-restarts", "--max_restarts", dest="max_restarts", type=int, default=_env("max_restarts", None),
        help="restarts allowed: of the whole group, and with worker reboot of each rank (default 0; 3 with "
             "worker reboot, where 0 is refused)")
    add("--worker-reboot", "--worker_reboot", dest="worker_reboot", action="store_true",
        default=_env_flag("worker_reboot"), help="restart only a failed worker, not the whole group")
    add("--monitor-interval", "--monitor_interval", dest="monitor_interval", type=float,
        default=_env("monitor_interval", 0.1), help="seconds between checks of the workers (default 0.1)")
    add("--shutdown-timeout", "--shutdown_timeout", dest="shutdown_timeout", type=float,
        default=_env("shutdown_timeout", 30.0),
        help="seconds a stopped worker gets after SIGTERM before SIGKILL (default 30)")
    add("--node-lost-after", "--node_lost_after", dest="node_lost_after", type=float,
        default=_env("node_lost_after", DEFAULT_LOST_AFTER_S),
        help="seconds without a launcher's beat before its node counts as lost: then a new launcher started "
             "with its --node-rank, or a --standby, takes its place (default 10)")
    add("--node0-wait", "--node0_wait", dest="node0_wait", default=_env("node0_wait", None),
        help="seconds a launcher that lost node 0 (the store's host) keeps its workers running and waits for "
             "a new launcher with --node-rank 0 at the same address; past it, it stops them and exits 1 "
             "(default: the --rdzv-conf timeout, 600 s)")
    add("--standby", action="store_true", default=_env_flag("standby"),
        help="a spare node: start no workers until a node (not node 0) is lost, then take its rank; "
             "--node-rank is ignored")
    add("--spare-workers", "--spare_workers", dest="spare_workers", type=int, default=_env("spare_workers", 0),
        help="warm workers kept on this node to replace a dead local rank at once (default 0; needs worker "
             "reboot): the preloaded modules imported and, for a Megatron script with --enable-worker-reboot, "
             "the script run ahead as a stand-in rank up to the optimizer's build (docs/launch.md)")
    add("--fork-workers", "--fork_workers", dest="fork_workers", action="store_true",
        default=_env_flag("fork_workers"),
        help="fork every worker from one template process that imported torch and Megatron once, instead of "
             "starting each in a new interpreter: a worker, and a replacement, starts without its imports "
             "(about 6 CPU-s per rank on a small host); workers stay the launcher's own children "
             "(docs/launch.md). Not for workers that must not share the launcher's Python (--no-python: ignored)")
    add("--warm-preload", "--warm_preload", dest="warm_preload", default=_env("warm_preload", DEFAULT_PRELOAD),
        help="what a warm worker imports before it is needed: comma-separated modules, module:function to "
             f"call one (default {DEFAULT_PRELOAD})")
    add("--warm-refill-delay", "--warm_refill_delay", dest="warm_refill_delay", type=float,
        default=_env("warm_refill_delay", DEFAULT_WARM_REFILL_DELAY_S),
        help="seconds after warm workers were handed out before new ones are started (default "
             f"{DEFAULT_WARM_REFILL_DELAY_S:g}): new ones build a model, and beside a recovery they slow it down")
    add("--controllers", type=int, default=_env("controllers", None),
        help="nodes 0..K-1 each host a recovery controller in a process of their own: node 0's is active, the "
             "others are backups that take over in node order (default: min(3, nodes) when the training "
             "script asks for high availability with worker reboot and MINDIO_CONTROLLER_ADDR is not set, "
             "else 0; 0: the controller runs inside rank 0's process)")
    add("--token-file", "--token_file", dest="token_file", default=_env("token_file", ""),
        help="a file of yours, readable by you only (mode 600), holding the job's token: the same on every "
             "node (or MINDIO_TOKEN). Without either, launchers whose store is on a loopback address make one "
             "and share it through a private file; on any other address the launcher refuses to start")
    add("--repeat-offenders", "--repeat_offenders", dest="repeat_offenders", choices=REPEAT_OFFENDER_POLICIES,
        default=_env("repeat_offenders", "warn"),
        help="when the offender record (MINDIO_OFFENDER_FILE, `mindio-adaptor offenders`) names this node a "
             "repeat offender: warn and run (default), or refuse to start")
    add("--role", default=_env("role", "default"), help="ROLE_NAME of the workers (default 'default')")
    add("-m", "--module", action="store_true", default=_env_flag("module"),
        help="run the script as a Python module (python -m)")
    add("--no-python", "--no_python", dest="no_python", action="store_true", default=_env_flag("no_python"),
        help="run the script as a program, not with the Python interpreter")
    add("training_script", help="the training script (or module, or program), then its arguments")
    add("training_script_args", nargs=argparse.REMAINDER)


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    add_arguments(parser)
    return parser


def config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Tuple[LaunchConfig, str]:
    """The checked configuration and the job's token (launch/job_token); a bad combination ends the program
    with argparse's usage error (2)."""
    try:
        config = resolve(args, os.environ)
        return config, launcher_token(config, args.token_file, os.environ)
    except LaunchConfigError as err:
        parser.error(str(err))
