"""Which megatron-core versions the adaptor serves, stated once: the version check at patch time, each patch's
version range (patches/patch), the upstream tool and the docs read it from here.

A release series is a (major, minor) pair. Megatron names some targets differently across series, or lacks them:
such a target is declared by one Patch row per range of series, each naming the target as that range has it
(the version's adapter), so every series in the range has every patch it needs, and none is skipped unseen.
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import List, Optional, Tuple

Series = Tuple[int, int]

FIRST: Series = (0, 12)  # MindSpeed-LLM's base, so the reference system's users
LAST: Series = (0, 19)
# Series whose release ran the version e2e here (docs/megatron_versions.md): 0.13 to 0.15 from Megatron-LM's tags
# on this machine only (CI has no tree of them), the others in CI. A series of the range not listed is served by
# the same adapters but has not been run.
TESTED: Tuple[Series, ...] = ((0, 12), (0, 13), (0, 14), (0, 15), (0, 16), (0, 17), (0, 18), (0, 19))


class UnsupportedMegatron(RuntimeError):
    """The installed megatron-core is outside FIRST..LAST."""


def series_of(version: str) -> Series:
    """"0.12.1" -> (0, 12); "0.19.0rc1" -> (0, 19)."""
    match = re.match(r"\s*(\d+)\.(\d+)", version)
    if not match:
        raise ValueError(f"not a megatron-core version: {version!r}")
    return int(match.group(1)), int(match.group(2))


def text(series: Series) -> str:
    return f"{series[0]}.{series[1]}"


def supported_range() -> str:
    return f"megatron-core {text(FIRST)} to {text(LAST)}"


def installed_version() -> Optional[str]:
    """The importable megatron-core's version string, None when it cannot be read. Read from its file, not
    imported: importing megatron.core runs modules whose patches are being applied when this is asked."""
    loaded = sys.modules.get("megatron.core.package_info")
    if loaded is not None:
        return getattr(loaded, "__version__", None)
    for base in _megatron_portions():
        path = Path(base, "core", "package_info.py")
        if path.is_file():
            version = version_in(path.read_text())
            return None if version is None else ".".join(map(str, version))
    return None


def version_in(package_info: str) -> Optional[Tuple[int, int, int]]:
    """(major, minor, patch) as megatron/core/package_info.py's source states them, None where it does not."""
    found = {}
    for node in ast.parse(package_info).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in ("MAJOR", "MINOR", "PATCH"):
                    found[target.id] = node.value.value
    try:
        return int(found["MAJOR"]), int(found["MINOR"]), int(found["PATCH"])
    except (KeyError, TypeError, ValueError):
        return None


def installed_series() -> Optional[Series]:
    version = installed_version()
    return None if version is None else series_of(version)


def check_supported(version: Optional[str]) -> Series:
    """The series of `version`, or UnsupportedMegatron naming the range."""
    if version is None:
        raise UnsupportedMegatron(f"mindio_adaptor cannot read the installed megatron-core's version "
                                  f"(megatron.core.package_info); it serves {supported_range()}")
    series = series_of(version)
    if not FIRST <= series <= LAST:
        raise UnsupportedMegatron(f"mindio_adaptor serves {supported_range()}; the installed megatron-core is "
                                  f"{version}")
    return series


def in_range(series: Series, first: Optional[str], last: Optional[str]) -> bool:
    """Whether `series` lies in first..last (series texts like "0.16", inclusive; None: open)."""
    return ((first is None or series >= series_of(first)) and (last is None or series <= series_of(last)))


def installed_root() -> str:
    """The folder holding the megatron package whose core is imported (a namespace package may span several)."""
    return next((str(base.parent) for base in _megatron_portions() if Path(base, "core").is_dir()), "?")


def module_exists(name: str) -> bool:
    """Whether megatron has module `name`, found by path (importing it would run it before its patches);
    `megatron` is a namespace package, and the first portion holding the top package is the one imported."""
    if name in sys.modules:
        return True
    top, *rest = name.split(".")[1:]
    for base in _megatron_portions():
        if _is_module(Path(base, top)):
            return _is_module(Path(base, top, *rest))
    return False


def _megatron_portions() -> List[Path]:
    # In the body: the facade package imports patch modules, which import this one.
    from mindio_adaptor.megatron.release import package_portions

    return package_portions()


def _is_module(path: Path) -> bool:
    return path.with_suffix(".py").is_file() or path.is_dir()  # a folder: a package, or a namespace package
