"""Lets CUDA-minded code (Megatron) run on a CPU-only torch.

Megatron places buffers with `torch.cuda.current_device()`, writes `device='cuda'`, calls
`.cuda()`, forks the CUDA RNG and synchronises streams. On a machine with no accelerator we map all of
that onto the CPU: the torch.cuda entry points it uses become CPU equivalents or no-ops, and one
TorchFunctionMode, entered once per process, rewrites CUDA devices to the CPU.

Never installed where an accelerator exists (`install()` refuses), so CUDA/NPU runs are untouched.
"""
from __future__ import annotations

import contextlib
import logging
import threading

import torch
from torch.overrides import TorchFunctionMode

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_saved = {}  # torch.cuda attribute name -> original value (or _MISSING)
_mode = None
_MISSING = object()


class _NullStream:
    """Stands for a CUDA stream or event: every operation is already complete on the CPU."""

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __getattr__(self, name):
        return _no_op

    def query(self):
        return True

    def elapsed_time(self, other):
        return 0.0


def _no_op(*args, **kwargs):
    return None


def _returning(value):
    """A new function object per replaced name: torch._dynamo keys its trace rules by function."""

    def replacement(*args, **kwargs):
        return value() if callable(value) else value

    return replacement


def _is_cuda_device(device) -> bool:
    if isinstance(device, int) and not isinstance(device, bool):
        return True
    if isinstance(device, str):
        return device.startswith("cuda")
    return isinstance(device, torch.device) and device.type == "cuda"


def _cpu_if_cuda(device):
    return torch.device("cpu") if _is_cuda_device(device) else device


class CpuDeviceMode(TorchFunctionMode):
    """Rewrites CUDA devices to the CPU in every torch call made while it is active."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if "device" in kwargs:
            kwargs["device"] = _cpu_if_cuda(kwargs["device"])
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.to:
            args = tuple(_cpu_if_cuda(a) if i > 0 else a for i, a in enumerate(args))
        if func is torch.Tensor.type and len(args) == 1 and not kwargs:
            # DistributedOptimizer accepts only torch.cuda.* parameter types.
            name = func(*args)
            return name if ".cuda." in name else name.replace("torch.", "torch.cuda.", 1)
        return func(*args, **kwargs)


def _cuda_replacements():
    def get_rng_state(device="cuda"):
        return torch.get_rng_state()

    def set_rng_state(new_state, device="cuda"):
        torch.set_rng_state(new_state)

    def manual_seed(seed):
        # torch.manual_seed already seeds the CPU generator, which stands in for the CUDA one.
        torch.default_generator.manual_seed(int(seed))

    return {
        "current_device": _returning(0),
        "set_device": _returning(None),
        "device_count": _returning(1),
        "synchronize": _returning(None),
        "empty_cache": _returning(None),
        "get_rng_state": get_rng_state,
        "set_rng_state": set_rng_state,
        "manual_seed": manual_seed,
        "Stream": _NullStream,
        "Event": _NullStream,
        "current_stream": _returning(_NullStream),
        "default_stream": _returning(_NullStream),
        "set_stream": _returning(None),
        "stream": _returning(contextlib.nullcontext),
        "memory_allocated": _returning(0),
        "max_memory_allocated": _returning(0),
        "memory_reserved": _returning(0),
        "max_memory_reserved": _returning(0),
        "reset_peak_memory_stats": _returning(None),
        "memory_stats": _returning(dict),
        "get_device_capability": _returning((0, 0)),
        "get_device_name": _returning("cpu"),
    }


def accelerator_present() -> bool:
    """True when a CUDA GPU or an Ascend NPU is usable by this torch."""
    if torch.cuda.is_available():
        return True
    return bool(getattr(torch, "npu", None) and torch.npu.is_available())


def installed() -> bool:
    return _mode is not None


def install():
    """Map CUDA onto the CPU in this process. Idempotent; refuses when an accelerator is present."""
    global _mode
    with _lock:
        if _mode is not None:
            return
        if accelerator_present():
            raise RuntimeError("mindio_adaptor: refusing to install the CPU device layer: an accelerator "
                               "is present, and Megatron should use it")
        for name, value in _cuda_replacements().items():
            _saved[name] = getattr(torch.cuda, name, _MISSING)
            setattr(torch.cuda, name, value)
        _mode = CpuDeviceMode()
        _mode.__enter__()
        logger.debug("CPU device layer installed: torch.cuda calls run on the CPU")


def uninstall():
    """Undo `install()`: restore torch.cuda and leave the device mode."""
    global _mode
    with _lock:
        if _mode is None:
            return
        for name, value in _saved.items():
            if value is _MISSING:
                delattr(torch.cuda, name)
            else:
                setattr(torch.cuda, name, value)
        _saved.clear()
        _mode.__exit__(None, None, None)
        _mode = None
