"""What the real Megatron needs to train on a CPU-only torch (see shared notes, megatron-on-cpu).

Active only where the CPU device layer (`core.process.cpu_torch`) is installed, i.e. on machines without an
accelerator. The torch side lives in `core.process.cpu_torch`; this module holds the Megatron side.
"""
import importlib.abc
import importlib.util
import sys
import types
import typing

import torch

from mindio_adaptor.core.process import cpu_torch
from mindio_adaptor.patches.patch import Patch

# Megatron modules that import triton unconditionally although a CPU run never calls their kernels.
TRITON_IMPORTERS = ("megatron.core.transformer.moe.ops.paged_stash",
                    "megatron.core.transformer.moe.paged_stash",  # its place in 0.18
                    "megatron.core.transformer.custom_layers.batch_invariant_kernels")  # 0.16


def prepare_python_for_megatron():
    """Python-level gaps Megatron 0.19 hits on a CPU machine with Python 3.11."""
    if not hasattr(typing, "override"):
        import typing_extensions

        typing.override = typing_extensions.override
    if importlib.util.find_spec("triton") is None and not any(
            isinstance(f, _TritonPlaceholderFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _TritonPlaceholderFinder())


class _TritonPlaceholderFinder(importlib.abc.MetaPathFinder):
    """Lends a placeholder `triton` to the modules in TRITON_IMPORTERS while they execute, and to
    nobody else: torch and the rest of megatron must keep seeing that triton is absent."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in TRITON_IMPORTERS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                spec.loader = _WithTritonPlaceholder(spec.loader)
                return spec
        return None


class _WithTritonPlaceholder(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        lent = "triton" not in sys.modules  # one importer may import another (0.19's moe.paged_stash)
        if lent:
            sys.modules["triton"], sys.modules["triton.language"] = _triton_placeholder()
        try:
            self.loader.exec_module(module)
        finally:
            if lent:
                sys.modules.pop("triton", None), sys.modules.pop("triton.language", None)


def _triton_placeholder():
    def jit(fn=None, **kwargs):
        return fn if fn is not None else (lambda f: f)

    triton = types.ModuleType("triton")
    triton.__path__ = []
    triton.__doc__ = "placeholder lent by mindio_adaptor: triton kernels cannot run on a CPU"
    language = types.ModuleType("triton.language")
    language.__getattr__ = _placeholder_attribute
    triton.jit = jit
    triton.language = language
    return triton, language


def _placeholder_attribute(name):
    # Kernel signatures use names like tl.constexpr in annotations; dunders must stay absent.
    if name.startswith("__"):
        raise AttributeError(name)
    return object


def _get_rng_state(wrapped, instance, args, kwargs):
    return torch.get_rng_state()


def _set_rng_state(wrapped, instance, args, kwargs):
    new_state = args[0] if args else kwargs["new_state"]
    torch.set_rng_state(new_state)


def _no_device_arch(wrapped, instance, args, kwargs):
    return 0  # older than any GPU: Megatron keeps its conservative defaults


def _no_fused_kernels(wrapped, instance, args, kwargs):
    return None  # it builds no kernel, it only asks nvcc for CUDA's version, which a CPU machine lacks


def _allow_no_cuda(wrapped, instance, args, kwargs):
    kwargs["allow_no_cuda"] = True
    return wrapped(*args, **kwargs)


def _on_cpu():
    return cpu_torch.installed()


# upstream=False: a CPU-only machine is where tests and demos run, not a reason to edit a user's
# Megatron; these stay monkey patches on a source-patched tree too (docs/upstream.md).
RANDOM = "megatron.core.tensor_parallel.random"
PATCHES = [
    Patch(RANDOM, "_get_cuda_rng_state", _get_rng_state, _on_cpu, upstream=False),
    Patch(RANDOM, "_set_cuda_rng_state", _set_rng_state, _on_cpu, upstream=False),
    Patch("megatron.training.initialize", "initialize_megatron", _allow_no_cuda, _on_cpu, upstream=False),
    Patch("megatron.training.utils.common_utils", "get_device_arch_version", _no_device_arch, _on_cpu,
          upstream=False, first="0.18"),
    Patch("megatron.training.utils", "get_device_arch_version", _no_device_arch, _on_cpu, upstream=False,
          last="0.17"),
    Patch("megatron.legacy.fused_kernels", "load", _no_fused_kernels, _on_cpu, upstream=False, last="0.16"),
]
