"""Every Megatron patch, declared in one place and applied with wrapt.

A patch names a module, an attribute path inside it and a wrapt wrapper. `patch_all()` registers a
post-import hook per module, so it may run before or after `import megatron`. Applying is idempotent,
`unpatch_all()` puts every original back. At the first patched module's import the installed megatron-core's
series is checked against the supported range (patches/megatron_versions; outside it: UnsupportedMegatron),
and only the rows serving that series apply; a served target or module missing from the installed Megatron
raises `PatchTargetMissing` naming it and the supported range.

Megatron often binds functions by name (`from megatron.training.arguments import validate_args`), so
applying a patch also replaces the original in every already-imported megatron module that holds it.

A Megatron tree patched with patches/upstream carries a hook point (core.steps.hook_points) on each target:
there the patch is attached to the hook point instead of wrapping the function, so a target is never
patched twice, and the behaviour is the same either way (docs/upstream.md).
"""
from __future__ import annotations

import importlib
import logging
import sys
import threading
from pathlib import Path
from typing import Iterable, List, Optional

import wrapt

from mindio_adaptor.core.steps import hook_points
from mindio_adaptor.patches import compositions, megatron_versions
from mindio_adaptor.patches.patch import Patch
from mindio_adaptor.recovery import fault_handling as fault_handling_mode

logger = logging.getLogger(__name__)


class PatchTargetMissing(RuntimeError):
    """The installed Megatron lacks something a patch must wrap."""


_lock = threading.RLock()
_active = False
_selected: Optional[tuple] = None  # the PATCH_MODULES that patch_all() applies; None: all of them
_hooked_modules: set = set()
_source_hooks_seen = False


def all_patches(modules: Optional[Iterable[str]] = None) -> List[Patch]:
    """The patches of `modules` (names in PATCH_MODULES; default all), in application order."""
    from mindio_adaptor.patches import PATCH_MODULES

    patches = []
    for name in PATCH_MODULES:
        if modules is None or name in modules:
            patches.extend(importlib.import_module(f"mindio_adaptor.patches.{name}").PATCHES)
    return _composed_in_order(patches)


def _composed_in_order(patches: List[Patch]) -> List[Patch]:
    """The rows of a function several patches wrap, moved within the places they hold so that they are applied
    innermost first (patches/compositions); every other row keeps its place."""
    result = list(patches)
    for target in compositions.COMPOSED:
        places = [i for i, patch in enumerate(result) if patch.target == target]
        ordered = sorted((result[i] for i in places), key=lambda p: compositions.innermost_first(target, p.wrapper))
        for i, patch in zip(places, ordered):
            result[i] = patch
    return result


def patch_all(only: Optional[Iterable[str]] = None, fault_handling: str = fault_handling_mode.ADAPTOR):
    """Apply every patch, or those of the PATCH_MODULES named in `only` (e.g. ("cpu_support",) to run
    stock Megatron on a CPU-only machine). `fault_handling`: who handles faults and answers the
    controller, "adaptor" or "client" (recovery/fault_handling)."""
    global _active, _selected
    with _lock:
        if _active:
            fault_handling_mode.select(fault_handling)
            return
        fault_handling_mode.select(fault_handling)
        _selected = None if only is None else _known_modules(only)
        _active = True
        from mindio_adaptor.patches import before_megatron_import

        before_megatron_import()
        for module in sorted({p.module for p in all_patches(_selected)}):
            if module not in _hooked_modules:
                _hooked_modules.add(module)
                wrapt.register_post_import_hook(_apply_module_patches, module)
            elif module in sys.modules:
                _apply_module_patches(sys.modules[module])


def _known_modules(names: Iterable[str]) -> tuple:
    from mindio_adaptor.patches import PATCH_MODULES

    names = tuple(names)
    unknown = sorted(set(names) - set(PATCH_MODULES))
    if unknown:
        raise ValueError(f"patch_all(only=...): no patch module {unknown}; known: {PATCH_MODULES}")
    return names


def unpatch_all():
    global _active
    with _lock:
        for patch in reversed(all_patches()):  # two patches may stack on one target
            _remove(patch)
        _active = False
        fault_handling_mode.reset()
        from mindio_adaptor.patches import after_unpatch

        after_unpatch()


def is_patched(patch: Patch) -> bool:
    return patch.applied is not None


def _apply_module_patches(module):
    with _lock:
        if not _active:
            return
        series = _check_version()
        for patch in all_patches(_selected):
            if (patch.module == module.__name__ and patch.applied is None and patch.serves(series)
                    and patch.enabled()):
                _apply(patch, module)


def _apply(patch: Patch, module):
    owner, name = _resolve_owner(patch, module)
    original = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name)
    if isinstance(owner, type) and isinstance(original, (staticmethod, classmethod)):
        raise PatchTargetMissing(f"{patch.target} is a {type(original).__name__}; patches wrap functions")
    point = hook_points.point_of(original)
    if point is not None:
        _attach(patch, point)
        return
    wrapped = wrapt.FunctionWrapper(original, patch.wrapper)
    setattr(owner, name, wrapped)
    if owner is module:
        _replace_everywhere(original, wrapped, name)
    patch.applied = (owner, name, original, wrapped)
    logger.debug("patched %s", patch.target)


def _attach(patch: Patch, point: hook_points.HookPoint):
    """The source already calls into us here: attach instead of wrapping (every alias of the
    function is the thin hooked function, so nothing needs rebinding)."""
    global _source_hooks_seen
    point.attach(patch, patch.wrapper)
    patch.applied = (point,)
    if not _source_hooks_seen:
        _source_hooks_seen = True
        logger.info("megatron at %s is source-patched (patches/upstream): patches are attached to "
                    "its hook points, not wrapped", _tree_of(point.original))
    logger.debug("attached %s to its source hook", patch.target)


def _tree_of(function) -> str:
    """The directory holding the `megatron` package that defines `function`."""
    file = getattr(sys.modules.get(function.__module__), "__file__", None)
    if not file:
        return "?"
    path = Path(file)
    if path.name == "__init__.py":
        path = path.parent
    return str(path.parents[function.__module__.count(".")])


def _remove(patch: Patch):
    if patch.applied is None:
        return
    if len(patch.applied) == 1:
        patch.applied[0].detach(patch)
        patch.applied = None
        return
    owner, name, original, wrapped = patch.applied
    setattr(owner, name, original)
    # Modules imported after patching bound the wrapper by name too.
    _replace_everywhere(wrapped, original, name)
    patch.applied = None


def _resolve_owner(patch: Patch, module):
    *path, name = patch.attribute.split(".")
    owner = module
    for part in path:
        owner = getattr(owner, part, None)
        if owner is None:
            break
    if owner is None or not hasattr(owner, name):
        raise PatchTargetMissing(
            f"mindio_adaptor cannot patch {patch.target}: not found in the installed Megatron "
            f"({_megatron_version()}); it serves {megatron_versions.supported_range()}")
    return owner, name


def _replace_everywhere(old, new, name):
    """Rebind `name` from `old` to `new` in every imported megatron module that holds `old`."""
    for mod_name, mod in list(sys.modules.items()):
        if mod_name.startswith("megatron") and mod is not None and getattr(mod, name, None) is old:
            setattr(mod, name, new)


def _megatron_version() -> str:
    return f"megatron-core {megatron_versions.installed_version() or 'of unknown version'}"


_checked_series: Optional[megatron_versions.Series] = None


def _check_version() -> megatron_versions.Series:
    """The installed series, checked once: in the supported range, and every module a served patch names
    present (a module Megatron lacks would otherwise never be imported, and its patches never applied)."""
    global _checked_series
    if _checked_series is not None:
        return _checked_series
    version = megatron_versions.installed_version()
    series = megatron_versions.check_supported(version)
    missing = sorted({p.module for p in all_patches(_selected) if p.serves(series) and not megatron_versions.module_exists(p.module)})
    if missing:
        raise PatchTargetMissing(f"mindio_adaptor cannot patch megatron-core {version}: no module {missing}; "
                                 f"it serves {megatron_versions.supported_range()}")
    logger.info("megatron-core %s at %s: the patches serving %s apply", version, megatron_versions.installed_root(),
                megatron_versions.text(series))
    if series not in megatron_versions.TESTED:
        logger.warning("mindio_adaptor serves megatron-core %s with the adapters of its range; found %s, a series "
                       "not run end to end here (tested: %s)", megatron_versions.supported_range(), version,
                       ", ".join(megatron_versions.text(t) for t in megatron_versions.TESTED))
    _checked_series = series
    return series


def missing_targets() -> List[str]:
    """Every patch target serving the installed Megatron's series that does not resolve, each with why (an
    empty list: all resolve). Imports the patched Megatron modules: a check for a test or a tool, run in a
    process of its own, with patches not applied."""
    series = megatron_versions.check_supported(megatron_versions.installed_version())
    missing = []
    for patch in all_patches():
        if not patch.serves(series):
            continue
        try:
            _resolve_owner(patch, importlib.import_module(patch.module))
        except (ImportError, PatchTargetMissing) as error:
            missing.append(f"{patch.target}: {type(error).__name__}: {error}")
    return missing
