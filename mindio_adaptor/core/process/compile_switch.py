"""`torch.compile` while TORCH_COMPILE_DISABLE=1 hands back what it was given.

That is what torch itself does then (the function runs eagerly), but torch only decides at the call:
each `torch.compile` imports torch._dynamo and torch._inductor first. Megatron decorates its fused
kernels with `torch.compile` at import, so every process paid those imports (2 of the 4.7 s a rank spends
importing Megatron on these machines, measured) for functions that would never be compiled. Installed
before Megatron is imported; with the variable unset or "0", `torch.compile` is untouched.
"""
from __future__ import annotations

import os

import torch
import wrapt

_original = None


def compile_disabled() -> bool:
    """torch's own reading of the variable (torch._dynamo.config.disable)."""
    return os.environ.get("TORCH_COMPILE_DISABLE", "0") == "1"


def _return_it_unchanged(wrapped, instance, args, kwargs):
    if not compile_disabled():
        return wrapped(*args, **kwargs)
    model = args[0] if args else kwargs.get("model")
    if model is None:  # the decorator form, @torch.compile(...)
        return lambda fn: fn
    return model


def install():
    """Idempotent."""
    global _original
    if _original is None:
        _original = torch.compile
        torch.compile = wrapt.FunctionWrapper(_original, _return_it_unchanged)


def uninstall():
    global _original
    if _original is not None:
        torch.compile = _original
        _original = None
