"""The package's module graph stays acyclic (imports inside function bodies count), and core/ never
imports megatron (scripts/import_graph.py)."""
import ast
import importlib.util
from pathlib import Path

import pytest

from mindio_adaptor.core.job.ha_config import HighAvailabilityConfig

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def import_graph():
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_package_has_no_import_cycle(import_graph):
    graph = import_graph.import_graph()
    assert "mindio_adaptor.patches.exception_loop" in graph  # the graph is the real package's
    assert import_graph.find_cycle(graph) is None, f"import cycle: {import_graph.find_cycle(graph)}"


def test_a_cycle_through_a_function_body_import_is_found(import_graph, tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("def later():\n    from pkg.a import something\n")
    (package / "c.py").write_text("from . import b\n")
    graph = import_graph.import_graph(package)
    assert graph["pkg.c"] == {"pkg.b"}
    assert sorted(import_graph.find_cycle(graph)) == ["pkg.a", "pkg.a", "pkg.b"]


def megatron_imports(paths) -> list:
    offenders = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] == "megatron"]
    return offenders


def test_core_never_imports_megatron():
    assert megatron_imports((ROOT / "mindio_adaptor" / "core").rglob("*.py")) == []


# The drop-in packages of other projects' APIs: they reach Megatron through the door too.
DROP_INS = ("mindio_ttp", "mindx_elastic")


def test_only_the_door_and_patches_import_megatron_in_the_package_and_its_drop_ins():
    package = ROOT / "mindio_adaptor"
    outside = [path for path in package.rglob("*.py") if path.relative_to(package).parts[0] not in
               ("megatron", "patches")]
    outside += [path for drop_in in DROP_INS for path in (ROOT / drop_in).rglob("*.py")]
    assert [path for path in outside if path.is_relative_to(ROOT / "mindio_ttp")]  # the walk reaches them
    assert megatron_imports(outside) == []


# Inside patches/, Megatron is imported only by the patches whose job is its internals: the optimizer-instance
# groups, the distributed optimizer. Everything else goes through the door (mindio_adaptor/megatron).
MEGATRON_IMPORTERS = {"parallel_state.py", "optimizer_state.py"}


def test_inside_patches_only_the_internals_patches_import_megatron():
    patches = ROOT / "mindio_adaptor" / "patches"
    importers = {str(path.relative_to(patches)) for path in patches.rglob("*.py") if megatron_imports([path])}
    assert importers <= MEGATRON_IMPORTERS, sorted(importers - MEGATRON_IMPORTERS)


# The layers, lowest first: a package imports only from the layers below it (and from the rooms beside them:
# launch, status, ttp, tiny, cli are not layered here).
LAYERS = ("core", "megatron", "recovery", "patches")


def test_imports_go_down_the_layers_only(import_graph):
    graph = import_graph.import_graph()
    assert "mindio_adaptor.megatron.data" in graph and "mindio_adaptor.recovery.flows" in graph

    def layer(module):
        part = module.split(".")[1] if module.count(".") else ""
        return LAYERS.index(part) if part in LAYERS else None

    upward = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                    if layer(a) is not None and layer(b) is not None and layer(b) > layer(a))
    assert upward == []


# The facade writes Megatron's arguments; so do the patches whose job is to change what Megatron reads there
# at the moment it reads it (its argument parsing; the uneven data-parallel split's log and FLOPs).
ARGS_WRITERS = {"patches/arguments.py"}


def package_nodes():
    """(path inside mindio_adaptor/, line, AST node) for every node of every module of the package."""
    for path in (ROOT / "mindio_adaptor").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            yield str(path.relative_to(ROOT / "mindio_adaptor")), getattr(node, "lineno", 0), node


def test_only_the_facade_and_the_argument_patches_write_megatrons_arguments():
    writers = set()
    for path, _, node in package_nodes():
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        flat = [t for target in targets for t in (target.elts if isinstance(target, ast.Tuple) else [target])]
        if any(isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "margs"
               for t in flat):
            writers.add(path)
    assert "megatron/args.py" in writers  # the facade's own writes are seen
    assert {w for w in writers if not w.startswith("megatron/")} <= ARGS_WRITERS, sorted(writers)


def test_the_adaptor_reads_its_settings_from_the_session_only():
    """One configuration object: the settings are validated once (patches/arguments) into SESSION.config, and no
    module of the package reads one back from Megatron's arguments by name (`margs.enable_worker_reboot`,
    `getattr(margs, "sdc_check_interval")`). patches/arguments, their one writer, puts them there too."""
    names = set(HighAvailabilityConfig.__dataclass_fields__)
    readers = []
    for path, line, node in package_nodes():
        by_attribute = isinstance(node, ast.Attribute) and node.attr in names and isinstance(
            node.value, ast.Name) and node.value.id in ("margs", "args")
        by_getattr = isinstance(node, ast.Call) and getattr(node.func, "id", "") == "getattr" and any(
            isinstance(a, ast.Constant) and a.value in names for a in node.args)
        if (by_attribute or by_getattr) and path not in ARGS_WRITERS:
            readers.append(f"{path}:{line}")
    assert readers == []


def test_stages_reach_megatron_only_through_their_facade_parameter():
    """A stage is run(session, megatron, action): it imports neither Megatron nor the facade, nor a module that
    reaches Megatron outside it, so its unit test passes stand-ins instead of patching module globals."""
    stages = ROOT / "mindio_adaptor" / "recovery" / "stages"
    assert len(list(stages.glob("*.py"))) > 10
    reaching = {"mindio_adaptor.megatron", "mindio_adaptor.patches.parallel_state",
                "mindio_adaptor.patches.optimizer_state", "mindio_adaptor.recovery.comm_rebuild"}
    offenders = megatron_imports(stages.glob("*.py"))
    for path in stages.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = {f"{node.module}.{a.name}" for a in node.names} | {node.module}
                offenders += [f"{path.name}: {n}" for n in sorted(names & reaching)]
    assert offenders == []
