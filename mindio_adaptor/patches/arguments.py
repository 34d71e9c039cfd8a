"""The high-availability flags on Megatron's own parser, checked in Megatron's `validate_args`."""
import logging
import os
import re

from mindio_adaptor.core.job.ha_config import (ENV_OVERRIDE, RESIZE_SOURCES, HighAvailabilityConfig,
                                               HighAvailabilityConfigError)
from mindio_adaptor.patches import warm_rank
from mindio_adaptor.patches.patch import Patch
from mindio_adaptor.recovery.session import SESSION

logger = logging.getLogger(__name__)

FLAGS = [
    ("--enable-high-availability", dict(
        action="store_true",
        help="Keep every distributed-optimizer shard on R ranks and save a dying-gasp checkpoint "
             "after a fault (mindio_adaptor).")),
    ("--enable-hbmfault-repair", dict(
        action="store_true",
        help="Repair a rank online from its replica peer after a memory error (needs "
             "--enable-high-availability).")),
    ("--enable-worker-reboot", dict(
        action="store_true",
        help="Replace a dead process while the others keep running (needs "
             "--enable-high-availability).")),
    ("--distributed-optimizer-no-replica", dict(
        action="store_true",
        help="High availability without optimizer replicas (R=1): recovery then needs a checkpoint.")),
    ("--enable-elastic-training", dict(
        action="store_true",
        help="Drop failed data-parallel replicas and continue with a smaller DP (needs "
             "--enable-high-availability).")),
    ("--elastic-scale-in-from", dict(
        choices=RESIZE_SOURCES, default="replicas",
        help="Where the survivors of a scale-in take the job's state at the smaller size: resharded among "
             "themselves in memory (replicas, the default), or from the dying-gasp checkpoint the savers write "
             "first (checkpoint: slower, but a resume point if the scale-in fails).")),
    ("--elastic-scale-out-from", dict(
        choices=RESIZE_SOURCES, default="replicas",
        help="Where the ranks that return after a scale-in take the job's state: from the survivors' "
             "memory, resharded to the original size (replicas, the default), or from a checkpoint the "
             "survivors save first (checkpoint: slower, but a resume point if the scale-out fails).")),
    ("--optimizer-replica-num", dict(
        type=int, default=2, metavar="R",
        help="Copies of every optimizer shard with --enable-high-availability (default 2); must "
             "divide DP x CP.")),
    ("--verify-optimizer-replicas", dict(
        action="store_true",
        help="After every step, check that the R holders of each shard hold bit-identical fp32 "
             "main params and Adam moments (--sdc-check-interval 1, and a line per step).")),
    ("--sdc-check-interval", dict(
        type=int, default=20, metavar="N",
        help="Every N steps, and at every step a periodic checkpoint is saved, the R holders of each "
             "optimizer shard compare fingerprints of it; a difference (silent data corruption) is "
             "recomputed from the last checkpoint. 0: only at checkpoint steps (default 20).")),
]


def config_from_args(args) -> HighAvailabilityConfig:
    config = HighAvailabilityConfig(**{
        name: getattr(args, name) for name in HighAvailabilityConfig.__dataclass_fields__})
    return config.apply_env_override(os.environ.get(ENV_OVERRIDE))


def _add_flags(wrapped, instance, args, kwargs):
    parser = wrapped(*args, **kwargs)
    group = parser.add_argument_group("high availability (mindio_adaptor)")
    for flag, options in FLAGS:
        if flag not in parser._option_string_actions:  # a user script may already define it
            group.add_argument(flag, **options)
    _escape_stray_percent(parser)
    return parser


_FORMAT_TOKEN = re.compile(r"%%|%\([^)]*\)[#0 +-]*\d*(?:\.\d+)?[diouxXeEfFgGcrsa]|%")


def _escape_stray_percent(parser):
    """megatron-core 0.19.2 has a help text with a bare '%' (--moe-paged-stash-buffer-size-factor-cuda)
    that makes `--help` crash; argparse needs it written '%%'."""
    for action in parser._actions:
        if action.help and "%" in action.help:
            action.help = _FORMAT_TOKEN.sub(
                lambda m: m.group(0) if len(m.group(0)) > 1 else "%%", action.help)


def _validate(wrapped, instance, args, kwargs):
    margs = args[0] if args else kwargs["args"]
    config = config_from_args(margs)
    config.check_flags(margs.use_distributed_optimizer)
    if config.enable_worker_reboot and getattr(margs, "data_parallel_random_init", False):
        # A replacement takes its RNG state from a replica peer, which must then hold the same one.
        raise HighAvailabilityConfigError("--enable-worker-reboot cannot be combined with "
                                          "--data-parallel-random-init: replica peers' RNG states differ")
    warm_rank.stand_in(margs)
    result = wrapped(*args, **kwargs)
    config.check_layout(margs.data_parallel_size, margs.context_parallel_size,
                        margs.num_distributed_optimizer_instances)
    config.check_elastic(margs.tensor_model_parallel_size, margs.pipeline_model_parallel_size,
                         margs.context_parallel_size, margs.expert_model_parallel_size)
    SESSION.config = config
    # Also on Megatron's arguments, with the HIGH_AVAILABILITY override applied: what a checkpoint saves of them
    # and what a user's script reads there are the settings in force. The adaptor reads SESSION.config.
    for name in HighAvailabilityConfig.__dataclass_fields__:
        setattr(margs, name, getattr(config, name))
    margs.num_distributed_optimizer_instances = config.replica_count
    if config.enable_high_availability:
        # A job manager's SIGTERM (to any rank) makes every rank save the step it just completed,
        # through Megatron's own distributed signal handler, then exit.
        margs.exit_signal_handler = True
    _announce(config, margs)
    return result


def _announce(config: HighAvailabilityConfig, margs):
    if margs.rank != 0 or not config.enable_high_availability:
        return
    logger.info("high availability on: every optimizer shard on %d rank(s)", config.replica_count)
    if margs.save:
        logger.info("on SIGTERM every rank saves a checkpoint of the last completed step to %s, then "
                    "exits; after a fault (an exception, a dead rank) the survivors save one there",
                    margs.save)
    else:
        logger.warning("no --save directory: a SIGTERM or a fault stops the job without a checkpoint")
    for request in config.inactive_requests():
        logger.warning("%s is accepted but NOT active in this version: no recovery of that kind "
                       "will happen", request)


PATCHES = [
    Patch("megatron.training.arguments", "add_megatron_arguments", _add_flags),
    Patch("megatron.training.arguments", "validate_args", _validate),
]

__all__ = ["PATCHES", "HighAvailabilityConfigError", "config_from_args"]
