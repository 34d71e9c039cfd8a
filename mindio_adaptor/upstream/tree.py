"""A Megatron source tree on disk: where it is, which megatron-core version it is, which patch set fits.

A tree is the directory that holds the `megatron` package: a Megatron-LM checkout, or site-packages.
Nothing is imported from it; the version is read from megatron/core/package_info.py.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

from mindio_adaptor.patches import megatron_versions
from mindio_adaptor.patches.megatron_versions import version_in

PACKAGE_INFO = Path("megatron/core/package_info.py")
PATCH_SET_PREFIX = "megatron-core-"


class TreeError(ValueError):
    """The directory is missing, is not a Megatron tree, or no patch set fits it."""


@dataclass(frozen=True)
class MegatronTree:
    root: Path  # holds megatron/
    version: Tuple[int, int, int]

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version))

    @property
    def series(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"


def open_tree(directory) -> MegatronTree:
    """The tree at `directory` (the one holding megatron/, or the megatron/ package itself)."""
    path = Path(directory).expanduser()
    if not path.is_dir():
        raise TreeError(f"{directory}: no such directory")
    path = path.resolve()
    if not (path / PACKAGE_INFO).is_file() and (path.parent / PACKAGE_INFO).is_file() \
            and path.name == "megatron":
        path = path.parent
    if not (path / PACKAGE_INFO).is_file():
        raise TreeError(f"{directory}: not a Megatron tree (no {PACKAGE_INFO}); pass the directory "
                        f"that holds the megatron package, e.g. a Megatron-LM checkout")
    return MegatronTree(path, _read_version(path / PACKAGE_INFO))


def _read_version(package_info: Path) -> Tuple[int, int, int]:
    version = version_in(package_info.read_text())
    if version is None:
        raise TreeError(f"{package_info}: no MAJOR/MINOR/PATCH version numbers")
    return version


def installed_tree() -> MegatronTree:
    """The tree of the megatron package Python would import here (not imported)."""
    spec = importlib.util.find_spec("megatron")
    for location in (spec.submodule_search_locations or []) if spec else []:
        if (Path(location).parent / PACKAGE_INFO).is_file():
            return open_tree(Path(location).parent)
    raise TreeError("no megatron package is installed")


def default_patches_root() -> Path:
    """patches/upstream of the checkout this package runs from."""
    return Path(__file__).resolve().parents[2] / "patches" / "upstream"


def patch_sets(patches_root: Path) -> List[str]:
    """The megatron-core series (e.g. "0.19") that have a patch set."""
    if not patches_root.is_dir():
        return []
    return sorted(p.name[len(PATCH_SET_PREFIX):] for p in patches_root.iterdir()
                  if p.is_dir() and p.name.startswith(PATCH_SET_PREFIX))


def patch_set_dir(tree: MegatronTree, patches_root: Optional[Path] = None) -> Path:
    """The folder of diffs for the tree's megatron-core series, or TreeError saying what exists."""
    root = Path(patches_root) if patches_root else default_patches_root()
    if not root.is_dir():
        raise TreeError(f"no patch sets at {root} (pass --patches-dir: the patches/upstream folder of "
                        f"a mindio_adaptor checkout)")
    folder = root / f"{PATCH_SET_PREFIX}{tree.series}"
    if not folder.is_dir():
        have = ", ".join(f"{s}.x" for s in patch_sets(root)) or "none"
        served = megatron_versions.in_range(tree.version[:2], megatron_versions.text(megatron_versions.FIRST),
                                            megatron_versions.text(megatron_versions.LAST))
        why = ("it has no patch set; patch_all() serves it with the monkey patches" if served else
               f"the adaptor serves {megatron_versions.supported_range()}")
        raise TreeError(f"megatron-core {tree.version_text} at {tree.root} is not supported by the upstream patches "
                        f"({why}): patch sets exist for megatron-core {have}")
    return folder
