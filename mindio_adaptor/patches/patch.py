"""One Megatron patch: what it wraps, with which wrapt wrapper, and where it was applied (patches/registry
applies it). A leaf module: every patch module declares its PATCHES with it."""
from dataclasses import dataclass, field
from typing import Callable, Optional

from mindio_adaptor.patches.megatron_versions import in_range


@dataclass
class Patch:
    module: str
    attribute: str  # "name" or "Class.method"
    wrapper: Callable  # wrapt signature: (wrapped, instance, args, kwargs)
    enabled: Callable[[], bool] = lambda: True  # checked when the module is imported
    # False: never a source hook in patches/upstream (device emulation for tests, not a user's tree)
    upstream: bool = True
    # The megatron-core series this row serves, inclusive ("0.12", "0.16"; None: open): a target that Megatron
    # renamed or added has one row per range (patches/megatron_versions)
    first: Optional[str] = None
    last: Optional[str] = None
    # (owner, name, original, wrapped) when wrapped; (HookPoint,) when attached to a source hook
    applied: Optional[tuple] = field(default=None, repr=False)

    def serves(self, series) -> bool:
        return in_range(series, self.first, self.last)

    @property
    def target(self) -> str:
        return f"{self.module}.{self.attribute}"
