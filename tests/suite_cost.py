"""What each test module costs, in wall and CPU seconds, printed at the end of every pytest run and, after a full run,
written as a markdown table to $MINDIO_SUITE_COST_FILE for the docs.

Per module because the suite hands a whole module to a pytest-xdist worker (scripts/run_tests.sh, --dist loadfile):
a module is what one worker is busy with, and what a developer waits for; --durations lists single tests and leaves
out the module-scoped fixtures and the CPU. CPU as well as wall because the Megatron jobs run in child processes and
their CPU, not their wall, is what they take from the other worker on a two-core node.

A module is measured in the worker that runs it, the only process that sees its clock and its children's rusage; the
figures travel to the controlling process on the teardown reports' user_properties, which pytest-xdist serialises.
"""
import fnmatch
import os
import resource
import time
from pathlib import Path

import pytest

FILE_ENV = "MINDIO_SUITE_COST_FILE"
PROPERTY = "suite_cost"  # (wall s, CPU s) of the module from its first setup to this teardown


def cpu_seconds():
    """User and system CPU of this process and of the children it has waited for, where the tests' jobs run."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def module_of(nodeid):
    return nodeid.split("::", 1)[0]


def every_test_module(config):
    """The test files under the testpaths, relative to the rootdir as the node ids are."""
    root, patterns = config.rootpath, config.getini("python_files")
    for directory in config.getini("testpaths") or ["."]:
        for path in (root / directory).rglob("*.py"):
            if any(fnmatch.fnmatch(path.name, pattern) for pattern in patterns):
                yield path.relative_to(root).as_posix()


def markdown_row(name, tests, wall, cpu, width):
    return f"| {name:<{width}} | {tests:>5} | {wall:>8.1f} | {cpu:>8.1f} |"


class SuiteCost:
    def __init__(self, config):
        self.config = config
        self.run_started = time.monotonic()
        self.module_started = {}  # in the worker: module -> (wall, CPU) when its first setup began
        self.tests = {}  # in the controlling process: module -> tests that began their setup
        self.cost = {}  # in the controlling process: module -> (wall s, CPU s)

    def pytest_runtest_logstart(self, nodeid):
        # Just before the test's setup, and unlike a setup hook never skipped by another's raising first; setdefault:
        # the span runs from the module's first test, wherever its later tests are ordered.
        self.module_started.setdefault(module_of(nodeid), (time.monotonic(), cpu_seconds()))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if call.when == "teardown":
            # Every teardown carries the module's cost so far: the last one, after the module-scoped fixtures'
            # teardown, carries the whole, and no test has to know it is the module's last.
            wall, cpu = self.module_started[module_of(item.nodeid)]
            cost = (PROPERTY, (time.monotonic() - wall, cpu_seconds() - cpu))
            # A new list: the report's own is the item's, which would carry it on to the item's later reports.
            report.user_properties = [*report.user_properties, cost]
        return report

    def pytest_runtest_logreport(self, report):
        module = module_of(report.nodeid)
        if report.when == "setup":
            self.tests[module] = self.tests.get(module, 0) + 1
        for name, value in report.user_properties:
            if name == PROPERTY:
                # One worker runs a whole module and its reports arrive in order: the latest covers the most.
                self.cost[module] = tuple(value)

    def full_run(self):
        """Nothing was left out: no -k, -m or --deselect, and every test module under the testpaths ran, so no
        narrower path was named and no -x or crash ended the run early."""
        option = self.config.option
        if option.keyword or option.markexpr or option.deselect:
            return False
        return set(self.cost) == set(every_test_module(self.config))

    def table(self):
        by_wall = sorted(self.cost.items(), key=lambda module_cost: module_cost[1][0], reverse=True)
        total = f"all {len(by_wall)} modules (wall: the whole run)"
        width = max(len(name) for name in [*self.cost, total])
        lines = [f"| {'module':<{width}} | tests |   wall s |    CPU s |",
                 f"|{'-' * (width + 2)}|------:|---------:|---------:|"]
        lines += [markdown_row(module, self.tests.get(module, 0), *cost, width) for module, cost in by_wall]
        cpu = sum(cpu for _, cpu in self.cost.values())
        lines.append(markdown_row(total, sum(self.tests.values()), time.monotonic() - self.run_started, cpu, width))
        return lines

    def pytest_terminal_summary(self, terminalreporter, config):
        if hasattr(config, "workerinput") or not self.cost:
            return
        lines = self.table()
        terminalreporter.write_sep("-", "cost per test module")
        for line in lines:
            terminalreporter.write_line(line)
        path = os.environ.get(FILE_ENV)
        if path and self.full_run():
            Path(path).write_text("\n".join(lines) + "\n")
            terminalreporter.write_line(f"{FILE_ENV}: the table of this full run is in {path}")
        elif path:
            # Said, since a module skipped whole at collection would otherwise keep the file from ever being written.
            terminalreporter.write_line(f"{FILE_ENV}: not written, not a full run (-k, -m, --deselect, or a test "
                                        "module that ran no test)")


def pytest_configure(config):
    config.pluginmanager.register(SuiteCost(config), "suite_cost_table")
