"""Per file and hunk: is a Megatron tree's copy of the upstream patch set applied, applicable, or in
conflict? Exact matching, as `patch --fuzz=0` and `git apply` match: a hunk is applied where its new
lines stand in the file, applicable where its old lines do (anywhere: line numbers may drift), and
conflicting otherwise, e.g. when a hooked def or its neighbours were edited by hand."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence

from mindio_adaptor.upstream import unified_diff
from mindio_adaptor.upstream.generate import SUFFIX
from mindio_adaptor.upstream.tree import MegatronTree
from mindio_adaptor.upstream.unified_diff import FileDiff, Hunk

APPLIED, APPLICABLE, CONFLICTING = "applied", "applicable", "conflicting"
_HOOK_TARGET = re.compile(r'@_mindio_hook\("([^"]+)"\)')


@dataclass
class HunkVerdict:
    hunk: Hunk
    verdict: str
    line: Optional[int] = None  # 1-based line where the hunk's text starts in the tree's file
    reason: str = ""


@dataclass
class FileReport:
    diff: FileDiff
    hunks: List[HunkVerdict] = field(default_factory=list)


@dataclass
class TreeReport:
    tree: MegatronTree
    patch_set: Path
    files: List[FileReport]

    def verdicts(self) -> List[HunkVerdict]:
        return [h for f in self.files for h in f.hunks]

    def counts(self) -> Counter:
        return Counter(h.verdict for h in self.verdicts())

    @property
    def state(self) -> str:
        """conflicting if any hunk is; applied if every hunk is; else applicable."""
        counts = self.counts()
        if counts[CONFLICTING]:
            return CONFLICTING
        return APPLICABLE if counts[APPLICABLE] else APPLIED


def load_patch_set(folder: Path) -> List[FileDiff]:
    files: List[FileDiff] = []
    for path in sorted(Path(folder).glob(f"*{SUFFIX}")):
        files += unified_diff.parse(path.read_text())
    return files


def check_tree(tree: MegatronTree, folder: Path) -> TreeReport:
    reports = []
    for diff in load_patch_set(folder):
        target = tree.root / diff.path
        if not target.is_file():
            verdicts = [HunkVerdict(h, CONFLICTING, reason="file missing") for h in diff.hunks]
        else:
            lines = target.read_text().splitlines()
            verdicts = [hunk_verdict(h, lines) for h in diff.hunks]
        reports.append(FileReport(diff, verdicts))
    return TreeReport(tree, Path(folder), reports)


def hunk_verdict(hunk: Hunk, lines: Sequence[str]) -> HunkVerdict:
    at = _find(lines, hunk.new, hunk.old_start)
    if at is not None:
        return HunkVerdict(hunk, APPLIED, at + 1)
    at = _find(lines, hunk.old, hunk.old_start)
    if at is not None:
        return HunkVerdict(hunk, APPLICABLE, at + 1)
    return HunkVerdict(hunk, CONFLICTING, reason=_first_missing(lines, hunk))


def _find(lines: Sequence[str], block: List[str], expected_line: int) -> Optional[int]:
    """0-based start of `block` in `lines`, the one nearest the expected line; None if absent."""
    n = len(block)
    starts = [i for i in range(len(lines) - n + 1) if lines[i] == block[0] and list(lines[i:i + n]) == block]
    return min(starts, key=lambda i: abs(i + 1 - expected_line)) if starts else None


def describe(hunk: Hunk) -> str:
    """What the hunk adds: the hook on a target, or the guarded import."""
    targets = [m.group(1) for line in hunk.lines if line.startswith("+")
               for m in [_HOOK_TARGET.search(line)] if m]
    return "hook on " + ", ".join(targets) if targets else "guarded import of mindio_adaptor.upstream_hook"


def _first_missing(lines: Sequence[str], hunk: Hunk) -> str:
    """Names a line of the hunk's context that the file lacks, to point at the edit in the way."""
    present = set(lines)
    for line in hunk.old:
        if line.strip() and line not in present:
            return f"no line {line.strip()!r}"
    return "its lines are no longer together"
