"""patches/upstream: the shipped diffs match the registry, and check/apply give the right verdict per
hunk on pristine, patched, partly patched and hand-modified trees (copies of the installed Megatron's
patched files), touching nothing on a conflict."""
import ast
import shutil
import sys
from pathlib import Path

import pytest

from mindio_adaptor import cli
from mindio_adaptor.patches.registry import all_patches
from mindio_adaptor.upstream import generate, hook_insertion, tree, unified_diff
from mindio_adaptor.upstream.apply import ApplyRefused, apply_patch_set
from mindio_adaptor.upstream.check import APPLICABLE, APPLIED, CONFLICTING, check_tree

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from megatron_releases import unpack  # noqa: E402

INSTALLED = tree.installed_tree()  # megatron-core is a requirement of the tests (scripts/install_env.sh)
pytestmark = pytest.mark.skipif(INSTALLED.series != "0.19", reason="the shipped patch set is for 0.19")
FOLDER = tree.default_patches_root() / "megatron-core-0.19"
TRAINING = "megatron/training/training.py"


def patched_paths():
    return sorted({f.path for f in unified_diff.parse("".join(p.read_text() for p in FOLDER.glob("*.diff")))})


@pytest.fixture
def pristine(tmp_path):
    """A tree holding the installed Megatron's copies of every file the patch set edits."""
    root = tmp_path / "tree"
    for path in [*patched_paths(), str(tree.PACKAGE_INFO)]:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(INSTALLED.root / path, root / path)
    return tree.open_tree(root)


def snapshot(t):
    return {p: p.read_bytes() for p in t.root.rglob("*.py")}


def verdicts(report):
    return [(v.hunk.path, v.hunk.number, v.verdict) for v in report.verdicts()]


def test_shipped_diffs_are_generated_from_the_registry():
    stale = generate.differences(FOLDER, generate.make_patch_set(INSTALLED, all_patches()))
    assert not stale, f"out of date with the registry: {stale}; run scripts/make_upstream_patches.py"


def test_every_upstream_megatron_patch_has_its_hook_and_nothing_else_is_added():
    hooked = set()
    for diff in unified_diff.parse("".join(p.read_text() for p in FOLDER.glob("*.diff"))):
        added = [line[1:] for h in diff.hunks for line in h.lines if line.startswith("+")]
        hooks = [line.strip() for line in added if "@_mindio_hook(" in line]
        assert [line for line in added if line not in hook_insertion.IMPORT_BLOCK
                and "@_mindio_hook(" not in line] == [], diff.path
        assert not any(line.startswith("-") for h in diff.hunks for line in h.lines)
        hooked |= {line.split('"')[1] for line in hooks}
    expected = {p.target for p in all_patches() if p.module.startswith("megatron.") and p.upstream
                and p.serves((0, 19))}
    assert hooked == expected


# 0.17.0 has none: its megatron/training/utils.py lacks a final newline, which the diffs cannot carry
@pytest.mark.parametrize("release", ["0.12.1", "0.16.1", "0.18.0"])
def test_the_patch_sets_of_the_other_releases_are_generated_and_apply(release, tmp_path):
    """The releases of the version tests (tests/megatron_releases.py): their shipped diffs are what the
    registry makes for them, and they apply to a copy of the release."""
    pristine = tree.open_tree(unpack(release, tmp_path / "pristine"))
    folder = tree.patch_set_dir(pristine)
    stale = generate.differences(folder, generate.make_patch_set(pristine, all_patches()))
    assert not stale, f"out of date with the registry: {stale}; run scripts/make_upstream_patches.py --megatron-dir"
    shutil.copytree(pristine.root / "megatron", tmp_path / "copy" / "megatron")
    copy = tree.open_tree(tmp_path / "copy")
    assert check_tree(copy, folder).state == APPLICABLE
    assert apply_patch_set(copy, folder).state == APPLIED


def test_pristine_tree_is_applicable_and_apply_patches_every_hunk(pristine):
    report = check_tree(pristine, FOLDER)
    assert report.state == APPLICABLE and {v for _, _, v in verdicts(report)} == {APPLICABLE}
    after = apply_patch_set(pristine, FOLDER)
    assert after.state == APPLIED and len(after.verdicts()) == len(report.verdicts())
    for path in patched_paths():
        ast.parse((pristine.root / path).read_text())  # still Python
    before = snapshot(pristine)
    assert apply_patch_set(pristine, FOLDER).state == APPLIED  # twice: nothing to do
    assert snapshot(pristine) == before
    assert not list(pristine.root.rglob("*.orig")) and not list(pristine.root.rglob("*.rej"))


def test_partly_patched_tree_is_finished(pristine):
    apply_patch_set(pristine, FOLDER)
    shutil.copyfile(INSTALLED.root / TRAINING, pristine.root / TRAINING)  # one file back to stock
    report = check_tree(pristine, FOLDER)
    assert {(p, v) for p, _, v in verdicts(report)} == {(p, APPLIED) for p in patched_paths() if p != TRAINING} \
        | {(TRAINING, APPLICABLE)}
    assert apply_patch_set(pristine, FOLDER).state == APPLIED


def test_hand_modified_tree_conflicts_on_that_hunk_and_apply_changes_nothing(pristine):
    source = pristine.root / TRAINING
    source.write_text(source.read_text().replace("def train_step(forward_step_func,", "def train_step(fwd,"))
    report = check_tree(pristine, FOLDER)
    conflicts = [(p, n) for p, n, v in verdicts(report) if v == CONFLICTING]
    assert conflicts == [(TRAINING, 5)]
    assert report.state == CONFLICTING
    assert all(v == APPLICABLE for p, n, v in verdicts(report) if (p, n) != (TRAINING, 5))
    before = snapshot(pristine)
    with pytest.raises(ApplyRefused, match=r"no file changed: megatron/training/training\.py hunk 5 .*"
                                           r"hook on megatron\.training\.training\.train_step.* conflicts"):
        apply_patch_set(pristine, FOLDER)
    assert snapshot(pristine) == before


def test_bad_input_is_named(tmp_path, pristine):
    with pytest.raises(tree.TreeError, match="no such directory"):
        tree.open_tree(tmp_path / "missing")
    with pytest.raises(tree.TreeError, match="not a Megatron tree"):
        tree.open_tree(pristine.root / "megatron" / "training")
    assert tree.open_tree(pristine.root / "megatron").root == pristine.root  # the package dir is accepted
    info = pristine.root / tree.PACKAGE_INFO
    info.write_text(info.read_text().replace("MINOR = 19", "MINOR = 20"))
    with pytest.raises(tree.TreeError, match=r"megatron-core 0\.20\.2 .* not supported by the upstream patches \(the "
                                             r"adaptor serves megatron-core 0\.12 to 0\.19\): patch sets exist for "
                                             r"megatron-core 0\.12\.x, 0\.16\.x, 0\.18\.x, 0\.19\.x"):
        tree.patch_set_dir(tree.open_tree(pristine.root))
    info.write_text(info.read_text().replace("MINOR = 20", "MINOR = 14"))
    with pytest.raises(tree.TreeError, match=r"0\.14\.2 .* \(it has no patch set; patch_all\(\) serves it"):
        tree.patch_set_dir(tree.open_tree(pristine.root))


def test_cli_reports_per_hunk_and_exit_codes(pristine, capsys):
    argv = ["upstream", "check", "--megatron-dir", str(pristine.root)]
    assert cli.main(argv) == 1
    out = capsys.readouterr().out
    assert "megatron-core 0.19.2" in out and "supported" in out
    assert "hunk 5  applicable  hook on megatron.training.training.train_step" in out
    assert cli.main(["upstream", "apply", "--megatron-dir", str(pristine.root)]) == 0
    hunks = sum(d.read_text().count("\n@@ ") for d in FOLDER.glob("*.diff"))
    assert f"applied {hunks} hunk(s)" in capsys.readouterr().out
    assert cli.main(argv) == 0
    assert f"applied: {hunks} applied, 0 applicable, 0 conflicting" in capsys.readouterr().out
    assert cli.main(["upstream", "check", "--megatron-dir", str(pristine.root / "nowhere")]) == 2
    assert "no such directory" in capsys.readouterr().err


def test_cli_apply_refuses_a_conflict(pristine, capsys):
    source = pristine.root / TRAINING
    source.write_text(source.read_text().replace("def train(\n", "def train_renamed(\n"))
    before = snapshot(pristine)
    assert cli.main(["upstream", "check", "--megatron-dir", str(pristine.root)]) == 3
    assert "hunk 8  conflicting hook on megatron.training.training.train " in capsys.readouterr().out
    assert cli.main(["upstream", "apply", "--megatron-dir", str(pristine.root)]) == 3
    assert "refused, no file changed: megatron/training/training.py hunk 8" in capsys.readouterr().err
    assert snapshot(pristine) == before


SOURCE = '''"""Doc."""
from __future__ import annotations

import os

X = 1


# about f
@other
def f():
    pass


class C:
    @staticmethod
    def s():
        pass

    def m(self):
        pass
'''


def test_hook_insertion_edits_only_what_it_must():
    out = hook_insertion.insert_hooks(SOURCE, "pkg.mod", ["f", "C.m"])
    lines = out.splitlines()
    assert lines[:6] == SOURCE.splitlines()[:6]
    assert out.index("from mindio_adaptor.upstream_hook") < out.index("# about f")
    assert '# about f\n@_mindio_hook("pkg.mod.f")\n@other\ndef f():' in out  # above existing decorators
    assert '    @_mindio_hook("pkg.mod.C.m")\n    def m(self):' in out
    assert len(lines) == len(SOURCE.splitlines()) + len(hook_insertion.IMPORT_BLOCK) + 2  # nothing else
    with pytest.raises(hook_insertion.HookInsertionError, match="staticmethod"):
        hook_insertion.insert_hooks(SOURCE, "pkg.mod", ["C.s"])
    with pytest.raises(hook_insertion.HookInsertionError, match="pkg.mod.g: g is not defined"):
        hook_insertion.insert_hooks(SOURCE, "pkg.mod", ["g"])
    with pytest.raises(hook_insertion.HookInsertionError, match="already carries"):
        hook_insertion.insert_hooks(out, "pkg.mod", ["f"])


def test_unified_diff_round_trip():
    text = next(FOLDER.glob("*.diff")).read_text()
    files = unified_diff.parse(text)
    body = text[text.index("--- "):]
    assert unified_diff.render(files) == body


@pytest.mark.parametrize("inside_a_repository", [False, True])
def test_git_apply_when_there_is_no_patch_tool(pristine, monkeypatch, inside_a_repository):
    import subprocess

    from mindio_adaptor.upstream import apply as apply_module

    if inside_a_repository:  # git must not read the tree's paths relative to an enclosing repository
        subprocess.run(["git", "init", "-q", str(pristine.root.parent)], check=True, timeout=30)
    real_which = shutil.which
    monkeypatch.setattr(apply_module.shutil, "which", lambda name: None if name == "patch" else real_which(name))
    assert apply_patch_set(pristine, FOLDER).state == APPLIED
