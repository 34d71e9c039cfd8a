"""The name that source-patched Megatron files import (patches/upstream, docs/upstream.md):

    try:
        from mindio_adaptor.upstream_hook import hook as _mindio_hook
    except ImportError:
        def _mindio_hook(target):
            return lambda function: function

Kept small and stable: the applied diffs depend on this import, and importing it must stay cheap and
never import megatron. The mechanism is `core.steps.hook_points`; the registry attaches each `Patch` to the
hook point of its target when `patch_all()` is active.
"""
from mindio_adaptor.core.steps.hook_points import hook

__all__ = ["hook"]
