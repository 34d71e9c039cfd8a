"""Megatron's dataset index helpers, on any device.

`initialize_megatron` runs `compile_helpers` (a `make` in megatron/core/datasets) on rank 0 at every start.
The megatron-core package ships those helpers compiled (`helpers_cpp`) and no Makefile, so on a GPU machine
with the package from the index the stock start fails there ("No targets specified and no makefile found",
then exit 1; seen on an H200 with megatron-core 0.19.2, docs/gpu_check.md). When the compiled helpers are
importable there is nothing to build: the call is skipped. A source tree without them still compiles.
"""
import importlib.util

from mindio_adaptor.patches.patch import Patch


def _skip(wrapped, instance, args, kwargs):
    return None


def _helpers_shipped() -> bool:
    try:
        return importlib.util.find_spec("megatron.core.datasets.helpers_cpp") is not None
    except ImportError:
        return False


# upstream=False: a packaging gap of the wheel, not a hook a user's source tree needs.
PATCHES = [Patch("megatron.core.datasets.utils", "compile_helpers", _skip, _helpers_shipped, upstream=False)]
