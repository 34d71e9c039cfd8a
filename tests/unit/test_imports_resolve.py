"""Every import of the package's own modules names something that exists, in function bodies too (where only
the code path that runs it would find a stale name): a moved or renamed module leaves no import behind in the
package, the reference-API packages, the tests, bench/, scripts/ or examples/."""
import ast
import importlib
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OURS = ("mindio_adaptor", "mindio_ttp", "mindx_elastic")
WHERE = ("mindio_adaptor", "mindio_ttp", "mindx_elastic", "tests", "bench", "scripts", "examples")


def stale_imports(path: Path) -> list:
    stale = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in OURS:
            try:
                module = importlib.import_module(node.module)
            except ImportError as exc:
                stale.append(f"{node.module}: {exc}")
                continue
            stale += [f"{node.module}.{a.name}" for a in node.names if a.name != "*" and not hasattr(module, a.name)
                      and importlib.util.find_spec(f"{node.module}.{a.name}") is None]
        elif isinstance(node, ast.Import):
            stale += [a.name for a in node.names
                      if a.name.split(".")[0] in OURS and importlib.util.find_spec(a.name) is None]
    return [f"{path.relative_to(ROOT)}: {name}" for name in stale]


def test_every_import_of_our_modules_resolves():
    files = [path for where in WHERE for path in (ROOT / where).rglob("*.py")]
    assert len(files) > 300
    assert [line for path in files for line in stale_imports(path)] == []
