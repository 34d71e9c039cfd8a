"""Megatron paths that require Transformer Engine although nothing in the job uses it: a CPU machine, or a GPU
job with Megatron's own modules (--transformer-impl local), has none. Each is fixed in later releases the way it
is answered here, and applies only to the releases that need it.

- megatron-core 0.12 calls `quantize_param_shard` after every step, with no FP8 parameter, and without TE
  that call raises whatever it is given; 0.13 returns when there is nothing to quantize.
- megatron-core 0.12's load of a distributed checkpoint asks TE's version to decide whether FP8 parameters
  need a precision fix, and fails without TE; without TE no parameter is FP8, so there is nothing to fix.
"""
import importlib.util

from mindio_adaptor.patches.patch import Patch


def _nothing_to_quantize(wrapped, instance, args, kwargs):
    model_params = args[0] if args else kwargs["model_params"]
    return None if len(model_params) == 0 else wrapped(*args, **kwargs)


def _no_fp8_without_te(wrapped, instance, args, kwargs):
    return None


def _te_missing() -> bool:
    return importlib.util.find_spec("transformer_engine") is None


PATCHES = [
    Patch("megatron.core.optimizer.distrib_optimizer", "quantize_param_shard", _nothing_to_quantize,
          upstream=False, last="0.12"),
    Patch("megatron.training.checkpointing", "fix_fp8_params_lose_precision_when_loading_dist_ckpt",
          _no_fp8_without_te, _te_missing, last="0.12"),
]
