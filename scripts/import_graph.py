"""The import graph of mindio_adaptor's own modules, and the check that it has no cycle.

    python scripts/import_graph.py            # exit 1 naming a cycle, if there is one
    python scripts/import_graph.py --edges    # every module and what it imports, one line each

Every import counts, those inside function bodies included: an import deferred into a function keeps a
cycle from failing at import time, it does not remove the cycle. Only the package's own modules are
nodes; megatron, torch and the standard library are not.
"""
from __future__ import annotations

import argparse
import ast
import graphlib
import sys
from pathlib import Path
from typing import Dict, Optional, Set

PACKAGE_DIR = Path(__file__).resolve().parent.parent / "mindio_adaptor"


# The package's compiled modules (setup.py): imported as `from mindio_adaptor import _native`, they are modules
# of their own, which import nothing of the package, not names inside the package's __init__.
NATIVE_MODULES = ("_native", "_fork_guard")


def module_names(package_dir: Path = PACKAGE_DIR) -> Dict[str, Path]:
    """Dotted module name -> source file, for every .py file of the package (a compiled module: its
    package's folder)."""
    names = {f"{package_dir.name}.{native}": package_dir for native in NATIVE_MODULES}
    for path in package_dir.rglob("*.py"):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _own_module(name: str, modules: Dict[str, Path]) -> Optional[str]:
    """The package module `name` lives in (a name may be a function or class inside one)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imported_modules(tree: ast.AST, package: str, modules: Dict[str, Path]):
    """The package modules an AST imports: `from a.b import c` names a.b.c when that is a module,
    else a.b (c is a name inside it)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (_own_module(alias.name, modules) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield full if full in modules else _own_module(base, modules)


def import_graph(package_dir: Path = PACKAGE_DIR) -> Dict[str, Set[str]]:
    """module -> the package's modules it imports (anywhere in its body)."""
    modules = module_names(package_dir)
    graph: Dict[str, Set[str]] = {}
    for name, path in modules.items():
        if path.is_dir():  # a compiled module
            graph[name] = set()
            continue
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set(_imported_modules(ast.parse(path.read_text()), package, modules))
        graph[name] = {t for t in targets if t and t != name}
    return graph


def find_cycle(graph: Dict[str, Set[str]]) -> Optional[list]:
    """One import cycle as [a, b, ..., a], or None."""
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as err:
        return list(reversed(err.args[1]))
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", action="store_true", help="print every module and its imports")
    args = parser.parse_args(argv)
    graph = import_graph()
    if args.edges:
        for module in sorted(graph):
            print(f"{module}: {', '.join(sorted(graph[module])) or '-'}")
    cycle = find_cycle(graph)
    if cycle:
        print(f"import cycle: {' -> '.join(cycle)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
