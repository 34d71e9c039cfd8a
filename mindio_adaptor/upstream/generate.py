"""Derives the upstream patch set from the patch registry: one diff per Megatron file that a `Patch`
targets, made by `hook_insertion` on a pristine copy of that file. scripts/make_upstream_patches.py
writes it; a unit test fails when the shipped diffs differ from what the registry gives today.

Targets outside megatron (torch's DataLoader signal handling) have no Megatron file to edit, and
patches marked `upstream=False` (the CPU device emulation) do not belong in a user's tree: both stay
monkey patches, applied by `patch_all()` on every tree. A target that carries a hook gets every patch
on it attached there, whatever its mark (the registry decides per target, not per patch).
"""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Dict, List, Sequence

from mindio_adaptor.upstream.hook_insertion import insert_hooks
from mindio_adaptor.upstream.tree import PATCH_SET_PREFIX, MegatronTree

SUFFIX = ".diff"
HEADER = ("# mindio_adaptor source hooks for {path} (megatron-core {series}.x). Generated from\n"
          "# mindio_adaptor/patches by scripts/make_upstream_patches.py; do not edit by hand.\n")


def megatron_targets(patches: Sequence) -> Dict[str, List[str]]:
    """module -> attributes ("name" or "Class.method") of the upstream patches on megatron, each once,
    in registry order."""
    targets: Dict[str, List[str]] = {}
    for patch in patches:
        if patch.module.split(".")[0] == "megatron" and patch.upstream:
            attributes = targets.setdefault(patch.module, [])
            if patch.attribute not in attributes:
                attributes.append(patch.attribute)
    return targets


def module_file(tree: MegatronTree, module: str) -> str:
    """The module's source file, relative to the tree root."""
    relative = module.replace(".", "/")
    for candidate in (f"{relative}.py", f"{relative}/__init__.py"):
        if (tree.root / candidate).is_file():
            return candidate
    raise FileNotFoundError(f"{module}: no source file under {tree.root}")


def make_patch_set(tree: MegatronTree, patches: Sequence) -> Dict[str, str]:
    """diff file name -> diff text, for a pristine `tree`."""
    diffs = {}
    served = [patch for patch in patches if patch.serves(tree.version[:2])]
    for module, attributes in sorted(megatron_targets(served).items()):
        path = module_file(tree, module)
        old = (tree.root / path).read_text()
        if not old.endswith("\n"):
            raise ValueError(f"{path} does not end with a newline; the diff would not apply cleanly")
        new = insert_hooks(old, module, attributes)
        body = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                    f"a/{path}", f"b/{path}")
        diffs[module + SUFFIX] = HEADER.format(path=path, series=tree.series) + "".join(body)
    return diffs


def patch_set_folder(patches_root: Path, tree: MegatronTree) -> Path:
    return Path(patches_root) / f"{PATCH_SET_PREFIX}{tree.series}"


def differences(folder: Path, diffs: Dict[str, str]) -> List[str]:
    """Names of the diff files in `folder` that are missing, different or no longer made."""
    present = {p.name for p in folder.glob(f"*{SUFFIX}")} if folder.is_dir() else set()
    changed = [name for name, text in diffs.items()
               if name not in present or (folder / name).read_text() != text]
    return sorted(changed + sorted(present - set(diffs)))


def write(folder: Path, diffs: Dict[str, str]) -> List[str]:
    """Bring `folder` up to date; the names written or removed."""
    changed = differences(folder, diffs)
    folder.mkdir(parents=True, exist_ok=True)
    for name in changed:
        if name in diffs:
            (folder / name).write_text(diffs[name])
        else:
            (folder / name).unlink()
    return changed
