"""One Megatron patch: what it wraps, with which wrapt wrapper, and where it was applied (patches/registry
applies it). A leaf module: every patch module declares its PATCHES with it."""
from dataclasses import dataclass, field
from typing import Callable, Optional


@dataclass
class Patch:
    module: str
    attribute: str  # "name" or "Class.method"
    wrapper: Callable  # wrapt signature: (wrapped, instance, args, kwargs)
    enabled: Callable[[], bool] = lambda: True  # checked when the module is imported
    # False: never a source hook in patches/upstream (device emulation for tests, not a user's tree)
    upstream: bool = True
    # (owner, name, original, wrapped) when wrapped; (HookPoint,) when attached to a source hook
    applied: Optional[tuple] = field(default=None, repr=False)

    @property
    def target(self) -> str:
        return f"{self.module}.{self.attribute}"
