"""The megatron-core releases the version tests run besides the installed one: those before the wheels carried
megatron.training come from the Megatron-LM source trees in ../shared/megatron-lm (copied: Megatron builds its
dataset helpers inside the tree), the later ones from their wheels (downloaded by scripts/install_env.sh,
unpacked, not installed). A release is used by putting its folder first on PYTHONPATH.

MINDIO_MEGATRON_TREES names another folder of trees (core_v<release>/, e.g. `git archive` of Megatron-LM's tags),
and MINDIO_MEGATRON_EXTRA_TREES more releases to take from it ("0.13.1,0.14.0"): how releases with no tree in
../shared are run on a machine that has them (docs/megatron_versions.md)."""
from __future__ import annotations

import compileall
import os
import shutil
import warnings
import zipfile
from pathlib import Path
from typing import Dict

import pytest

TREES = Path(os.environ.get("MINDIO_MEGATRON_TREES", Path(__file__).resolve().parents[2] / "shared" / "megatron-lm"))
WHEELS = Path(os.environ.get("MINDIO_MEGATRON_WHEELS", Path.home() / ".cache" / "mindio-adaptor" / "megatron-wheels"))
RELEASES = {"0.12.1": "tree", "0.16.1": "tree", "0.17.0": "wheel", "0.18.0": "wheel",
            **{release: "tree" for release in os.environ.get("MINDIO_MEGATRON_EXTRA_TREES", "").split(",") if release}}


def unpack(release: str, into: Path) -> Path:
    """The release's megatron package (and a tree's scripts) in `into`; returns `into`."""
    if RELEASES[release] == "tree":
        source = TREES / f"core_v{release}"
        if not source.is_dir():
            pytest.skip(f"no Megatron-LM tree at {source}")
        shutil.copytree(source, into, ignore=shutil.ignore_patterns("__pycache__"))
        return into
    wheels = sorted(WHEELS.glob(f"megatron_core-{release}-*.whl"))
    assert wheels, f"no megatron-core {release} wheel in {WHEELS}: run scripts/install_env.sh"
    with zipfile.ZipFile(wheels[0]) as wheel:
        wheel.extractall(into, [name for name in wheel.namelist() if name.startswith("megatron/")])
    return into


def byte_compiled(root: Path) -> Path:
    """root, its megatron package compiled once here: these machines set PYTHONDONTWRITEBYTECODE, so
    otherwise every rank of every run on the release compiles the modules it imports again. A module that does
    not compile is left to fail where it is imported, as it would have."""
    with warnings.catch_warnings():  # the releases' own (e.g. 0.16's legacy vision code: '"is" with a literal')
        warnings.simplefilter("ignore", SyntaxWarning)
        compileall.compile_dir(root / "megatron", quiet=2)
    return root


def on_release(root: Path) -> Dict[str, str]:
    """The environment in which `import megatron` resolves to the release unpacked at root."""
    return {"PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
