"""What one launcher does, checked: the node's place in the job, where node 0 is, the restart rules and the
command of the workers. Every error names the flag and what is wrong with it."""
from __future__ import annotations

import os
import shutil
import sys
import uuid
from dataclasses import dataclass, field
from typing import List, Mapping, Optional, Tuple

from mindio_adaptor.core.job.controller_address import controller_addresses
from mindio_adaptor.core.job.ha_config import ENV_OVERRIDE, HighAvailabilityConfig, HighAvailabilityConfigError
from mindio_adaptor.launch.slurm import SlurmError, SlurmPlace, slurm_place

DEFAULT_MASTER_ADDR = "127.0.0.1"
DEFAULT_MULTI_NODE_PORT = 29500  # torchrun's default; one node picks a free port instead
DEFAULT_RDZV_TIMEOUT_S = 600.0  # torchrun's static rendezvous waits as long
RDZV_BACKENDS = ("static", "c10d")
RDZV_TIMEOUT_KEYS = ("timeout", "join_timeout")
SCRIPT_REBOOT_FLAG = "--enable-worker-reboot"
SCRIPT_REPAIR_FLAG = "--enable-hbmfault-repair"
SCRIPT_ELASTIC_FLAG = "--enable-elastic-training"
SCRIPT_HA_FLAG = "--enable-high-availability"
# The reference's one active controller and two backups: hosted by default on this many nodes, at most.
DEFAULT_HOSTED_CONTROLLERS = 3
# Worker reboot without restarts would start no failed worker again; this many per rank unless told.
DEFAULT_REBOOT_RESTARTS = 3
# A launcher's beat stopped this long: its node is lost (launch/node_liveness). Longer than the stalls of a
# busy host, shorter than a scheduler's restart of a pod.
DEFAULT_LOST_AFTER_S = 10.0
DEFAULT_WARM_REFILL_DELAY_S = 20.0  # past the recovery that the handed-out workers take part in


REPEAT_OFFENDER_POLICIES = ("warn", "refuse")


class LaunchConfigError(ValueError):
    """A command line that cannot run; the message names the flag."""


@dataclass
class LaunchConfig:
    nnodes: int
    nproc_per_node: int
    node_rank: int
    master_addr: str
    master_port: int  # 0: node 0 picks a free port (one node only)
    run_id: str
    max_restarts: int
    worker_reboot: bool
    worker_reboot_reason: str  # why worker reboot is on (logged), "" when off
    monitor_interval: float
    shutdown_timeout: float
    rdzv_timeout: float
    role: str
    command: List[str] = field(default_factory=list)
    place_source: str = ""  # where the node's place came from when not from the flags (logged): "Slurm"
    node_lost_after: float = DEFAULT_LOST_AFTER_S  # seconds without a launcher's beat before its node counts as lost
    standby: bool = False  # a spare node: takes the rank of the first node lost (node_rank is set then)
    spare_workers: int = 0  # warm workers kept ready to replace a dead local rank (launch/warm_worker)
    fork_workers: bool = False  # workers forked from a template that imported torch and Megatron once
    warm_preload: str = ""  # what a warm worker imports ahead (module or module:function, comma-separated)
    warm_refill_delay: float = DEFAULT_WARM_REFILL_DELAY_S  # seconds from a hand-out to the pool's refill
    controllers: int = 0  # nodes 0..K-1 host the recovery controllers (launch/controllers); 0: in the job
    controllers_reason: str = ""  # why the launchers host them when --controllers was not given (logged)
    online_repair: bool = True  # the job asked for online repair (--enable-hbmfault-repair / retry)
    elastic_training: bool = False  # the job asked for the scale-in (--enable-elastic-training / elastic-training)
    node0_wait: float = DEFAULT_RDZV_TIMEOUT_S  # seconds a launcher that lost node 0 waits for a new one
    repeat_offenders: str = "warn"  # a node the offender record names: warn and run, or refuse to start

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    def global_rank(self, local_rank: int) -> int:
        return self.node_rank * self.nproc_per_node + local_rank


def resolve(args, environ: Mapping[str, str]) -> LaunchConfig:
    """From the parsed command line (an argparse namespace of args.add_arguments) to a LaunchConfig."""
    slurm = None if args.standalone else _slurm(environ)
    nnodes = _nnodes(args.nnodes if args.nnodes is not None else slurm.nnodes if slurm else 1)
    node_rank = args.node_rank if args.node_rank is not None else slurm.node_rank if slurm else 0
    if args.standalone and nnodes != 1:
        raise LaunchConfigError(f"--standalone is for one node, got --nnodes {args.nnodes}")
    if not 0 <= node_rank < nnodes:
        raise LaunchConfigError(f"--node-rank {node_rank} is out of range: with --nnodes {nnodes} it must "
                                f"be in 0..{nnodes - 1}")
    addr, port = _master(args, nnodes, slurm)
    reboot, reason = _worker_reboot(args, environ)
    rdzv_timeout = _rdzv_timeout(args.rdzv_conf)
    controllers, controllers_reason = _controllers(args, environ, nnodes, reboot)
    return LaunchConfig(
        nnodes=nnodes, nproc_per_node=_nproc(args.nproc_per_node), node_rank=node_rank,
        master_addr=addr, master_port=port, run_id=_run_id(args, slurm),
        max_restarts=_max_restarts(args.max_restarts, reboot, reason),
        worker_reboot=reboot, worker_reboot_reason=reason,
        monitor_interval=_positive("--monitor-interval", args.monitor_interval),
        shutdown_timeout=_positive("--shutdown-timeout", args.shutdown_timeout),
        rdzv_timeout=rdzv_timeout, role=args.role, command=_command(args),
        place_source="Slurm" if slurm else "", node_lost_after=_positive("--node-lost-after", args.node_lost_after),
        standby=_standby(args.standby, nnodes, reboot), spare_workers=_spare_workers(args.spare_workers, reboot),
        fork_workers=args.fork_workers, warm_preload=args.warm_preload,
        warm_refill_delay=_at_least("--warm-refill-delay", args.warm_refill_delay, 0),
        controllers=controllers,
        controllers_reason=controllers_reason,
        online_repair=_online_repair(args, environ),
        elastic_training=_training_asks(args, environ, SCRIPT_ELASTIC_FLAG, "enable_elastic_training"),
        node0_wait=_node0_wait(args.node0_wait, rdzv_timeout), repeat_offenders=args.repeat_offenders)


def _node0_wait(given, rdzv_timeout: float) -> float:
    """By default as long as the launchers wait for one another: a new node 0 meets them by a rendezvous."""
    if given is None:
        return rdzv_timeout
    try:
        seconds = float(given)
    except ValueError:
        raise LaunchConfigError(f"--node0-wait {given!r}: expected a number of seconds") from None
    return _positive("--node0-wait", seconds)


def _standby(standby: bool, nnodes: int, reboot: bool) -> bool:
    if standby and nnodes < 2:
        raise LaunchConfigError("--standby needs --nnodes 2 or more: a standby takes the place of a lost node "
                                "other than node 0, which hosts the stores")
    if standby and not reboot:
        raise LaunchConfigError("--standby needs worker reboot (--worker-reboot, or the script's "
                                "--enable-worker-reboot): the standby's workers replace the lost node's ranks")
    return standby


def _controllers(args, environ: Mapping[str, str], nnodes: int, reboot: bool) -> Tuple[int, str]:
    """--controllers, else hosted by default where a job of ours replaces processes: the in-job controller
    lives in rank 0's process, so rank 0's death (or node 0's) would take the recovery down with it. Not
    where the user runs a controller of their own (MINDIO_CONTROLLER_ADDR) or the script is not ours."""
    try:  # checked here, at start: otherwise only the first report of a worker's death would read it
        external = controller_addresses(environ)
    except ValueError as err:
        raise LaunchConfigError(str(err)) from None
    if args.controllers is not None:
        count = _at_least("--controllers", int(args.controllers), 0)
        if count > nnodes:
            raise LaunchConfigError(f"--controllers {count}: one per node at most (failure domains), and there "
                                    f"are {nnodes} nodes")
        return count, ""
    if not reboot or external or not _training_asks(args, environ, SCRIPT_HA_FLAG, "enable_high_availability"):
        return 0, ""
    count = min(DEFAULT_HOSTED_CONTROLLERS, nnodes)
    return count, (f"the default with worker reboot: one per node on the first {count} of {nnodes} "
                   f"node{'s' if nnodes > 1 else ''}; --controllers 0 keeps it in rank 0's process")


def _online_repair(args, environ: Mapping[str, str]) -> bool:
    """Whether the training asked for online repair, which a controller hosted by the launcher must know."""
    return _training_asks(args, environ, SCRIPT_REPAIR_FLAG, "enable_hbmfault_repair")


def _training_asks(args, environ: Mapping[str, str], script_flag: str, feature: str) -> bool:
    """A feature the training script asks for: its flag among the script's arguments, unless
    HIGH_AVAILABILITY says otherwise (it overrides the flags, as in the reference)."""
    flags = HighAvailabilityConfig(**{feature: script_flag in args.training_script_args})
    try:
        return getattr(flags.apply_env_override(environ.get(ENV_OVERRIDE)), feature)
    except HighAvailabilityConfigError as err:
        raise LaunchConfigError(str(err)) from None


def _spare_workers(count: int, reboot: bool) -> int:
    count = _at_least("--spare-workers", count, 0)
    if count and not reboot:
        raise LaunchConfigError("--spare-workers needs worker reboot (--worker-reboot, or the script's "
                                "--enable-worker-reboot): a spare only ever replaces a dead rank")
    return count


def _slurm(environ: Mapping[str, str]):
    try:
        return slurm_place(environ)
    except SlurmError as err:
        raise LaunchConfigError(str(err)) from None


def _max_restarts(given, reboot: bool, reason: str) -> int:
    """Worker reboot needs restarts: without any, a failed worker is never started again and the
    controller waits for a replacement that cannot come."""
    if given is None:
        return DEFAULT_REBOOT_RESTARTS if reboot else 0
    restarts = _at_least("--max-restarts", int(given), 0)
    if reboot and restarts == 0:
        raise LaunchConfigError(f"--max-restarts 0 with worker reboot on ({reason}) would never start a failed "
                                f"worker again: give --max-restarts N >= 1 (default with worker reboot: "
                                f"{DEFAULT_REBOOT_RESTARTS}) or turn worker reboot off")
    return restarts


def _nnodes(text) -> int:
    low, _, high = str(text).partition(":")
    try:
        low_n, high_n = int(low), int(high or low)
    except ValueError:
        raise LaunchConfigError(f"--nnodes {text!r}: expected a number of nodes") from None
    if low_n != high_n:
        raise LaunchConfigError(f"--nnodes {text}: elastic node ranges are not supported (process "
                                f"replacement keeps a fixed world); pass one number")
    return _at_least("--nnodes", low_n, 1)


def _nproc(text) -> int:
    text = str(text)
    if text in ("gpu", "auto"):
        import torch  # only here: the plain number needs no torch

        if torch.cuda.is_available():
            return torch.cuda.device_count()
        if text == "gpu":
            raise LaunchConfigError("--nproc-per-node gpu: no GPU is visible on this node")
        text = "cpu"
    if text == "cpu":
        return os.cpu_count() or 1
    if not text.lstrip("-").isdigit():
        raise LaunchConfigError(f"--nproc-per-node {text!r}: expected a number, gpu, cpu or auto")
    return _at_least("--nproc-per-node", int(text), 1)


def _master(args, nnodes: int, slurm: Optional[SlurmPlace]) -> Tuple[str, int]:
    """Node 0's address and the port of the launchers' store, from exactly one way of saying it (under
    Slurm, node 0 is the step's first node unless a flag says otherwise)."""
    if args.rdzv_backend not in RDZV_BACKENDS:
        raise LaunchConfigError(f"--rdzv-backend {args.rdzv_backend!r} is not supported; use one of "
                                f"{', '.join(RDZV_BACKENDS)} (node 0's launcher hosts the store)")
    given = [flag for flag, value in (("--master-addr", args.master_addr), ("--master-port", args.master_port))
             if value is not None]
    if args.standalone and (given or args.rdzv_endpoint):
        raise LaunchConfigError(f"--standalone picks its own local address and port; drop "
                                f"{', '.join(given) or '--rdzv-endpoint'}")
    if args.rdzv_endpoint:
        if given:
            raise LaunchConfigError(f"--rdzv-endpoint and {' and '.join(given)} both say where node 0 is; "
                                    f"pass one of them")
        return parse_endpoint(args.rdzv_endpoint)
    default_port = 0 if nnodes == 1 else DEFAULT_MULTI_NODE_PORT
    port = default_port if args.master_port is None else args.master_port
    if not 0 <= port < 65536:
        raise LaunchConfigError(f"--master-port {port} is not a TCP port (0..65535)")
    return args.master_addr or (slurm.first_node if slurm else DEFAULT_MASTER_ADDR), port


def parse_endpoint(endpoint: str) -> Tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets: [::1]:29500)."""
    host, sep, port = endpoint.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise LaunchConfigError(f"--rdzv-endpoint {endpoint!r} is malformed: expected HOST:PORT with a port in "
                                f"1..65535, e.g. node0.example:29500")
    return host, int(port)


def _rdzv_timeout(conf: str) -> float:
    timeout = DEFAULT_RDZV_TIMEOUT_S
    for item in filter(None, (part.strip() for part in (conf or "").split(","))):
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in RDZV_TIMEOUT_KEYS:
            raise LaunchConfigError(f"--rdzv-conf {item!r}: only {' or '.join(RDZV_TIMEOUT_KEYS)}=SECONDS is "
                                    f"used by this launcher")
        try:
            seconds = float(value)
        except ValueError:
            raise LaunchConfigError(f"--rdzv-conf {item!r}: expected a number of seconds") from None
        timeout = _positive(f"--rdzv-conf {key.strip()}", seconds)
    return timeout


def _run_id(args, slurm) -> str:
    if args.rdzv_id:
        return args.rdzv_id
    if slurm is not None:
        return slurm.job_id
    return uuid.uuid4().hex[:12] if args.standalone else "none"


def _worker_reboot(args, environ: Mapping[str, str]) -> Tuple[bool, str]:
    """On with --worker-reboot, or when the training itself asks for process replacement (the reference's
    --enable-worker-reboot, or HIGH_AVAILABILITY with `recover`, which overrides the flags there too)."""
    if args.worker_reboot:
        return True, "--worker-reboot"
    if not _training_asks(args, environ, SCRIPT_REBOOT_FLAG, "enable_worker_reboot"):
        return False, ""
    if environ.get(ENV_OVERRIDE, "").strip():
        return True, f"{ENV_OVERRIDE}={environ[ENV_OVERRIDE]} asks for process replacement (recover)"
    return True, f"the training script was given {SCRIPT_REBOOT_FLAG}"


def _command(args) -> List[str]:
    script, rest = args.training_script, list(args.training_script_args)
    if args.no_python and args.module:
        raise LaunchConfigError("--no-python and --module cannot be used together")
    if args.no_python:
        if not shutil.which(script):
            raise LaunchConfigError(f"program {script!r} not found (--no-python runs it as a program)")
        return [script, *rest]
    if args.module:
        return [sys.executable, "-u", "-m", script, *rest]
    if not os.path.isfile(script):
        raise LaunchConfigError(f"training script {script!r} not found")
    return [sys.executable, "-u", script, *rest]


def _at_least(flag: str, value: int, low: int) -> int:
    if value < low:
        raise LaunchConfigError(f"{flag} must be >= {low}, got {value}")
    return value


def _positive(flag: str, value: float) -> float:
    if not value > 0:
        raise LaunchConfigError(f"{flag} must be > 0, got {value}")
    return value
