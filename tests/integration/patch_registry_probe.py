"""Checks patch_all()/unpatch_all() on the real megatron in a fresh process; prints one JSON line."""
import json
import sys

import mindio_adaptor
from mindio_adaptor.patches import megatron_versions, registry

order = sys.argv[1]  # "before": patch_all before importing megatron; "after": the other way round
if order == "after":
    # On a CPU machine megatron.core only imports once triton's absence is dealt with, which
    # patch_all() does first; on a GPU machine this line is not needed.
    from mindio_adaptor.patches import cpu_support

    cpu_support.prepare_python_for_megatron()
    import megatron.training.training  # noqa: F401  (binds initialize_megatron by name)

mindio_adaptor.patch_all()
mindio_adaptor.patch_all()  # idempotent

import megatron.training.arguments as arguments  # noqa: E402
import megatron.training.initialize as initialize  # noqa: E402
import megatron.training.training as training  # noqa: E402
import megatron.core.parallel_state as ps  # noqa: E402
import torch  # noqa: E402

patches = [p for p in registry.all_patches() if p.serves(megatron_versions.installed_series())]

applied = [p.target for p in patches if registry.is_patched(p)]


def wrapper_depth(function):
    depth = 0
    while hasattr(function, "__wrapped__"):
        function, depth = function.__wrapped__, depth + 1
    return depth


# Two patch_all() calls must leave one wrapper per declared patch, not two.
wrapped_once = all(
    wrapper_depth(getattr(arguments, name)) == sum(p.target == f"megatron.training.arguments.{name}"
                                                   for p in patches)
    for name in ("validate_args", "add_megatron_arguments"))
alias_patched = training.initialize_megatron is initialize.initialize_megatron  # bound by name
mode_active = registry.is_patched(patches[0]) and torch.cuda.current_device.__module__.startswith("mindio")

mindio_adaptor.unpatch_all()
restored = all(not registry.is_patched(p) for p in patches)
originals = (not hasattr(arguments.validate_args, "__wrapped__")
             and not hasattr(initialize.initialize_megatron, "__wrapped__")
             and not hasattr(training.initialize_megatron, "__wrapped__")
             and not hasattr(training.train_step, "__wrapped__")
             and not hasattr(ps.initialize_model_parallel, "__wrapped__"))
cuda_restored = not torch.cuda.current_device.__module__.startswith("mindio")
print(json.dumps({"applied": applied, "wrapped_once": wrapped_once, "alias_patched": alias_patched,
                  "mode_active": mode_active, "restored": restored, "originals": originals,
                  "cuda_restored": cuda_restored, "total": len(patches)}))
