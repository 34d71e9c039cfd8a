"""The source edit behind every upstream diff: a guarded import and one decorator line per target.

Edits the text, not the syntax tree (`ast` only finds the lines), so everything else in the file,
comments and formatting included, stays byte for byte as it was.
"""
from __future__ import annotations

import ast
from typing import List, Sequence

DECORATOR = "_mindio_hook"
IMPORT_BLOCK = [
    "# >>> mindio_adaptor hook (patches/upstream, generated): once mindio_adaptor.patch_all() has run,",
    "# each function decorated with _mindio_hook runs mindio_adaptor's wrappers around itself; without",
    "# mindio_adaptor, or without patch_all(), it behaves exactly as before.",
    "try:",
    f"    from mindio_adaptor.upstream_hook import hook as {DECORATOR}",
    "except ImportError:",
    f"    def {DECORATOR}(target):",
    "        return lambda function: function",
    "# <<< mindio_adaptor hook",
    "",
    "",
]


class HookInsertionError(ValueError):
    """A target is not a plain def this edit can decorate, or the file is already edited."""


def insert_hooks(source: str, module: str, attributes: Sequence[str]) -> str:
    """`source` of `module` with a hook decorator above each attribute ("name" or "Class.method")."""
    if f"@{DECORATOR}(" in source:
        raise HookInsertionError(f"{module} already carries mindio_adaptor hooks: generate from a pristine tree")
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    inserts = []  # (0-based line index, text)
    for attribute in attributes:
        node = _find_def(tree, module, attribute)
        indent = " " * node.col_offset
        inserts.append((_first_line(node), f'{indent}@{DECORATOR}("{module}.{attribute}")\n'))
    inserts.append((_import_line(tree, lines, module), "".join(f"{line}\n" for line in IMPORT_BLOCK)))
    for index, text in sorted(inserts, key=lambda item: item[0], reverse=True):
        lines.insert(index, text)
    return "".join(lines)


def _find_def(tree: ast.Module, module: str, attribute: str):
    owner, name = tree, attribute
    if "." in attribute:
        class_name, name = attribute.split(".", 1)
        owner = _only(tree.body, ast.ClassDef, class_name, f"{module}.{attribute}", "module")
    node = _only(owner.body, (ast.FunctionDef, ast.AsyncFunctionDef), name, f"{module}.{attribute}",
                 "class" if owner is not tree else "module")
    for decorator in node.decorator_list:
        if isinstance(decorator, ast.Name) and decorator.id in ("staticmethod", "classmethod", "property"):
            raise HookInsertionError(f"{module}.{attribute} is a {decorator.id}; hooks decorate plain functions")
    return node


def _only(body: List[ast.stmt], kinds, name: str, target: str, where: str):
    found = [node for node in body if isinstance(node, kinds) and node.name == name]
    if len(found) != 1:
        what = "not defined" if not found else f"defined {len(found)} times"
        raise HookInsertionError(f"{target}: {name} is {what} at the top level of its {where}; "
                                 f"only a plain def can carry a hook")
    return found[0]


def _first_line(node) -> int:
    """0-based index of the def's first line: its topmost decorator, so the hook wraps what
    attribute access returns (as a monkey patch would)."""
    return min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1


def _import_line(tree: ast.Module, lines: List[str], module: str) -> int:
    """Right above the first top-level def or class (and the comments directly above it): every
    import and module setup has run by then, and nothing defined later can miss the name."""
    first = next((node for node in tree.body
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))), None)
    if first is None:
        raise HookInsertionError(f"{module} defines no function or class")
    index = _first_line(first)
    while index > 0 and lines[index - 1].lstrip().startswith("#"):
        index -= 1
    return index
