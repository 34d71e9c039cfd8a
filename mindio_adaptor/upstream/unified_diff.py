"""Unified diffs as data: files and hunks, parsed from and written back to the text `patch -p1` reads."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import List

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class DiffFormatError(ValueError):
    pass


@dataclass
class Hunk:
    path: str  # the file, relative to the tree (the "b/" side without its prefix)
    number: int  # 1-based within its file
    header: str  # "@@ -l,s +l,s @@ <section>"
    lines: List[str]  # body lines with their ' ', '-' or '+' prefix, no line ends

    @property
    def old(self) -> List[str]:
        return [line[1:] for line in self.lines if line[:1] in (" ", "-")]

    @property
    def new(self) -> List[str]:
        return [line[1:] for line in self.lines if line[:1] in (" ", "+")]

    @property
    def old_start(self) -> int:
        return int(_HUNK.match(self.header).group(1))

    @property
    def name(self) -> str:
        """How messages name the hunk: file, number and header."""
        return f"{self.path} hunk {self.number} ({self.header})"


@dataclass
class FileDiff:
    path: str
    old_header: str  # "--- a/..."
    new_header: str  # "+++ b/..."
    hunks: List[Hunk] = field(default_factory=list)


def parse(text: str) -> List[FileDiff]:
    """The files of a unified diff; lines before the first '---' of a file (comments) are skipped."""
    files: List[FileDiff] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            path = _strip_prefix(lines[i + 1][4:].split("\t")[0].strip())
            current = FileDiff(path, lines[i], lines[i + 1])
            files.append(current)
            i += 2
            continue
        match = _HUNK.match(lines[i])
        if match:
            if not files:
                raise DiffFormatError(f"hunk before any file header: {lines[i]!r}")
            i = _read_hunk(lines, i, match, files[-1])
            continue
        i += 1
    return files


def _read_hunk(lines: List[str], i: int, match, current: FileDiff) -> int:
    old_left = int(match.group(2) or 1)
    new_left = int(match.group(4) or 1)
    hunk = Hunk(current.path, len(current.hunks) + 1, lines[i], [])
    i += 1
    while (old_left or new_left) and i < len(lines):
        line = lines[i] or " "  # some tools drop the space of an empty context line
        kind = line[0]
        if kind == "\\":  # "\ No newline at end of file"
            i += 1
            continue
        if kind not in " -+":
            break
        old_left -= kind in " -"
        new_left -= kind in " +"
        hunk.lines.append(line)
        i += 1
    if old_left or new_left:
        raise DiffFormatError(f"{hunk.name}: shorter than its header says")
    current.hunks.append(hunk)
    return i


def _strip_prefix(path: str) -> str:
    return path[2:] if path.startswith(("a/", "b/")) else path


def render(files: List[FileDiff]) -> str:
    """The diff text of `files` with the hunks they hold (e.g. only those still to apply)."""
    out: List[str] = []
    for f in files:
        if f.hunks:
            out += [f.old_header, f.new_header]
            for hunk in f.hunks:
                out += [hunk.header, *hunk.lines]
    return "\n".join(out) + "\n" if out else ""
