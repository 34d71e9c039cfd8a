"""The source patches (patches/upstream) on a copy of the installed Megatron: training from the
patched tree behaves as the monkey-patched one (a dying-gasp dump, an online repair: same messages,
same final params digest), and with the adaptor not enabled it trains exactly like stock Megatron."""
import re
import shutil
import sys
from pathlib import Path

import pytest

from mindio_adaptor.tiny.job import run_training
from mindio_adaptor.upstream import tree as megatron_tree
from mindio_adaptor.upstream.apply import apply_patch_set
from mindio_adaptor.upstream.check import APPLIED

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from megatron_releases import byte_compiled, on_release  # noqa: E402

pytestmark = pytest.mark.e2e
HA = ["--enable-high-availability"]
STOCK = Path(__file__).with_name("stock_pretrain_gpt.py")


@pytest.fixture(scope="module")
def patched_tree(tmp_path_factory):
    """A copy of the installed megatron package with the upstream patches applied."""
    root = tmp_path_factory.mktemp("patched_megatron")
    installed = megatron_tree.installed_tree()
    shutil.copytree(installed.root / "megatron", root / "megatron", ignore=shutil.ignore_patterns("__pycache__"))
    copy = megatron_tree.open_tree(root)
    assert apply_patch_set(copy, megatron_tree.patch_set_dir(copy)).state == APPLIED
    return byte_compiled(root)


def on_tree(root, **extra):
    return {**on_release(root), **extra}


def assert_ran_source_patched(run, root):
    # Every rank's registry found the hook points of the tree's megatron, not the installed one's (a
    # checkpoint saver's helper process, which re-imports the entry script, may say it too).
    ranks = re.findall(rf"rank (\d+)\] INFO megatron at {re.escape(str(root))} is source-patched", run.output)
    assert set(ranks) == {"0", "1", "2", "3"}, run.output[-4000:]


def inject(spec, tmp_path):
    return {"MINDIO_FAULT_INJECT": spec, "MINDIO_FAULT_STATE_DIR": str(tmp_path / "faults")}


def test_dying_gasp_dump_from_the_patched_tree(tmp_path, patched_tree, reference_runs):
    ckpt = tmp_path / "ckpt"
    save = ["--save", str(ckpt), "--save-interval", "1000"]
    run = run_training([*HA, *save], env=on_tree(patched_tree, **inject("raise:rank=1,step=5", tmp_path)))
    assert_ran_source_patched(run, patched_tree)
    # What tests/e2e/test_dump_after_fault.py expects of the monkey-patched run.
    assert run.returncode != 0
    assert "step 5: training failed with RuntimeError: Other ERROR; reported as UNKNOWN" in run.output
    assert "dump of step 4 published" in run.output
    assert sorted(run.losses) == [1, 2, 3, 4]
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "4"
    resumed = run_training(["--load", str(ckpt), *HA], env=on_tree(patched_tree)).require_success()
    assert_ran_source_patched(resumed, patched_tree)
    reference, _ = reference_runs("ha")  # monkey-patched, installed Megatron, uninterrupted
    assert resumed.losses[5] == reference.losses[5]
    assert resumed.digest == reference.digest


def test_online_repair_from_the_patched_tree(tmp_path, patched_tree, reference_runs):
    spec = "raise:rank=1,step=5,msg=UCE ERROR injected"
    run = run_training([*HA, "--enable-hbmfault-repair"], env=on_tree(patched_tree, **inject(spec, tmp_path)))
    run.require_success()
    assert_ran_source_patched(run, patched_tree)
    assert "decision retry: faults 1:memory repair_step=4" in run.output
    assert "online repair finished at step 4" in run.output
    reference, _ = reference_runs("ha")
    assert run.losses == reference.losses
    assert run.digest == reference.digest


def test_patched_tree_without_the_adaptor_trains_like_stock_megatron(patched_tree):
    stock = run_training([], train_iters=4, script=str(STOCK)).require_success()
    patched = run_training([], train_iters=4, script=str(STOCK), env=on_tree(patched_tree)).require_success()
    assert f"megatron from {megatron_tree.installed_tree().root / 'megatron'}" in stock.output
    assert f"megatron from {patched_tree / 'megatron'}" in patched.output
    # Only the CPU device emulation is applied (on initialize_megatron it attaches to the tree's hook).
    assert stock.digest and patched.digest == stock.digest
    assert patched.losses == stock.losses and sorted(stock.losses) == [1, 2, 3, 4]
