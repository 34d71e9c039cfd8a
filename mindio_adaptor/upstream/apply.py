"""Applies the upstream patch set to a Megatron tree with `patch` (or `git apply` where there is no
`patch`), all or nothing: the hunks are checked first (`check`), then a dry run of the tool must
pass, and only then is any file written. Hunks already applied are left out, so applying twice, or
finishing a partly patched tree, is fine."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import List

from mindio_adaptor.upstream import unified_diff
from mindio_adaptor.upstream.check import APPLICABLE, CONFLICTING, TreeReport, check_tree, describe
from mindio_adaptor.upstream.tree import MegatronTree
from mindio_adaptor.upstream.unified_diff import FileDiff


class ApplyRefused(RuntimeError):
    """Nothing was changed; the message says why (which hunk conflicts, what the tool said)."""


def apply_patch_set(tree: MegatronTree, folder: Path) -> TreeReport:
    """Apply what is not applied yet; returns the tree's report afterwards (every hunk applied)."""
    before = check_tree(tree, folder)
    conflicts = [v for v in before.verdicts() if v.verdict == CONFLICTING]
    if conflicts:
        raise ApplyRefused("no file changed: " + "; ".join(
            f"{v.hunk.name} ({describe(v.hunk)}) conflicts: {v.reason}" for v in conflicts))
    todo = [FileDiff(f.diff.path, f.diff.old_header, f.diff.new_header,
                     [v.hunk for v in f.hunks if v.verdict == APPLICABLE]) for f in before.files]
    todo = [f for f in todo if f.hunks]
    if not todo:
        return before
    _check_writable(tree, todo)
    with tempfile.NamedTemporaryFile("w", suffix=".diff", delete=False) as handle:
        handle.write(unified_diff.render(todo))
    try:
        dry = _run(_command(tree, handle.name, dry_run=True), tree)
        if dry.returncode != 0:
            raise ApplyRefused(f"no file changed: the dry run failed:\n{dry.stdout}")
        real = _run(_command(tree, handle.name, dry_run=False), tree)
        if real.returncode != 0:  # after a clean dry run only an I/O error gets here
            raise RuntimeError(f"applying failed after a clean dry run (check the tree):\n{real.stdout}")
    finally:
        os.unlink(handle.name)
    return check_tree(tree, folder)


def _check_writable(tree: MegatronTree, todo: List[FileDiff]):
    locked = [f.path for f in todo if not os.access(tree.root / f.path, os.W_OK)]
    if locked:
        raise ApplyRefused(f"no file changed: not writable: {', '.join(locked)}")


def _command(tree: MegatronTree, diff_file: str, dry_run: bool) -> List[str]:
    if shutil.which("patch"):
        return ["patch", "-p1", "--forward", "--batch", "--fuzz=0", "--no-backup-if-mismatch",
                "--reject-file=-", "-d", str(tree.root), "-i", diff_file, *(["--dry-run"] if dry_run else [])]
    if shutil.which("git"):
        return ["git", "apply", "-p1", *(["--check"] if dry_run else []), diff_file]
    raise ApplyRefused("no file changed: neither `patch` nor `git` is installed")


def _run(command: List[str], tree: MegatronTree) -> subprocess.CompletedProcess:
    # git must treat the tree as plain files, never as part of a repository above it.
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tree.root.parent)}
    return subprocess.run(command, cwd=tree.root, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120)
