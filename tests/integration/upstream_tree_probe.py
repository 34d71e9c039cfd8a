"""Imports a source-patched Megatron tree (first on sys.path) in a fresh process; prints one JSON line.

    before | after   patch_all() before or after `import megatron`, then unpatch_all()
    no-adaptor       mindio_adaptor.upstream_hook cannot be imported (as if not installed)
"""
import json
import sys

from mindio_adaptor.patches import cpu_support

mode = sys.argv[1]
cpu_support.prepare_python_for_megatron()  # triton's absence on a CPU machine; patch_all() does it too


class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name == "mindio_adaptor.upstream_hook":
            raise ImportError(f"No module named {name!r}")
        return None


def hooked_functions():
    import megatron.core.optimizer.distrib_optimizer as dopt
    import megatron.training.training as training

    return {"train_step": training.train_step, "train": training.train,
            "initialize_megatron": training.initialize_megatron,
            "state_dict": dopt.DistributedOptimizer.__dict__["state_dict"]}


if mode == "no-adaptor":
    sys.meta_path.insert(0, _NotInstalled())
    functions = hooked_functions()
    import megatron.training.training as training

    print(json.dumps({"file": training.__file__,
                      "fallback": training._mindio_hook.__module__ == "megatron.training.training",
                      "plain": [f.__name__ for f in functions.values() if not hasattr(f, "__wrapped__")]}))
    sys.exit(0)

import mindio_adaptor  # noqa: E402
from mindio_adaptor.core.steps import hook_points  # noqa: E402
from mindio_adaptor.patches import registry  # noqa: E402

if mode == "after":
    before = hooked_functions()
mindio_adaptor.patch_all()
mindio_adaptor.patch_all()  # idempotent
functions = hooked_functions()
if mode == "after":
    assert functions == before
patches = registry.all_patches()
hooked = sorted({p.target for p in patches if registry.is_patched(p) and len(p.applied) == 1})
wrapped = sorted({p.target for p in patches if registry.is_patched(p) and len(p.applied) == 4})
# Each hook point runs the target's patches in registry order, as monkey patches would stack them.
in_order = all(hook_points.point_of(f).wrappers() == [p.wrapper for p in patches if p.target == t]
               for t, f in [(p.target, getattr(sys.modules[p.module], p.attribute.split(".")[0]))
                            for p in patches if "." not in p.attribute and p.target in hooked])
mindio_adaptor.unpatch_all()
print(json.dumps({
    "file": sys.modules["megatron.training.training"].__file__,
    "hooked": hooked, "wrapped": wrapped, "in_order": in_order,
    "unchanged_objects": hooked_functions() == functions,
    "detached": all(not hook_points.point_of(f).wrappers() for f in functions.values()),
    "restored": all(not registry.is_patched(p) for p in patches)}))
