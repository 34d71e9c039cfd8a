"""The registry on a source-patched Megatron tree (a copy of the installed one with patches/upstream
applied), each case in a fresh process: patches attach to the hook points instead of wrapping (never
twice, whatever the import order), unpatch_all() detaches them, and without mindio_adaptor the
decorated functions are Megatron's own."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mindio_adaptor.patches.registry import all_patches
from mindio_adaptor.upstream import tree as megatron_tree
from mindio_adaptor.upstream.apply import apply_patch_set

PROBE = Path(__file__).with_name("upstream_tree_probe.py")
INSTALLED = megatron_tree.installed_tree()
pytestmark = pytest.mark.skipif(INSTALLED.series != "0.19", reason="the shipped patch set is for 0.19")


@pytest.fixture(scope="module")
def patched_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("patched_megatron")
    shutil.copytree(INSTALLED.root / "megatron", root / "megatron", ignore=shutil.ignore_patterns("__pycache__"))
    copy = megatron_tree.open_tree(root)
    apply_patch_set(copy, megatron_tree.patch_set_dir(copy))
    return root


def probe(root, mode):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(PROBE), mode], capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["file"] == str(root / "megatron" / "training" / "training.py")
    return result


@pytest.mark.parametrize("order", ["before", "after"])
def test_patches_attach_to_the_source_hooks_and_detach(patched_tree, order):
    result = probe(patched_tree, order)
    upstream = {p.target for p in all_patches() if p.module.startswith("megatron.") and p.upstream
                and p.serves((0, 19))}
    assert set(result["hooked"]) >= upstream
    assert not set(result["hooked"]) & set(result["wrapped"])  # never both on one target
    assert result["in_order"] and result["unchanged_objects"] and result["detached"] and result["restored"]


def test_without_mindio_adaptor_the_patched_tree_is_megatron_unchanged(patched_tree):
    result = probe(patched_tree, "no-adaptor")
    assert result["fallback"]
    assert sorted(result["plain"]) == ["initialize_megatron", "state_dict", "train", "train_step"]
