"""Run the student suite in this process and collect what each test said.

Used by the selftest and by `python -m harness mistakes`; torch is imported once,
so a run against one adapters module takes about a second.
"""

import contextlib
import io
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.student_run.plugin import ADAPTER, scoring_facts


@dataclass
class SuiteRun:
    exit_code: int = 0
    outcomes: dict = field(default_factory=dict)   # nodeid -> "passed" / "failed"
    messages: dict = field(default_factory=dict)   # nodeid -> failure report, or why a skipped test did not run
    adapters: dict = field(default_factory=dict)   # nodeid -> contract function
    facts: dict = field(default_factory=dict)      # nodeid -> what scoring needs (plugin.scoring_facts)
    output: str = ""                               # what pytest printed

    @property
    def failed(self) -> list[str]:
        return [n for n, o in self.outcomes.items() if o != "passed"]

    def mentions(self, phrase: str) -> bool:
        return bool(phrase) and any(phrase in m for m in self.messages.values())


class _Collector:
    def __init__(self, run: SuiteRun):
        self.run = run

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.failed:
            self.run.outcomes[report.nodeid] = report.outcome
            if report.failed:
                self.run.messages[report.nodeid] = str(report.longrepr)
            elif report.skipped and isinstance(report.longrepr, tuple):  # why it did not run
                self.run.messages[report.nodeid] = str(report.longrepr[2]).removeprefix("Skipped: ")

    def pytest_collection_modifyitems(self, items):
        for item in items:
            self.run.adapters[item.nodeid] = item.stash.get(ADAPTER, None)
        self.run.facts = scoring_facts(items)


def run_suite(project: Path, *args: str, quiet: bool = False, tests: list[str] | None = None,
              plugins: tuple = ()) -> SuiteRun:
    """`tests`: node ids ("tests/test_x.py::test_y[id]") to run instead of the whole suite."""
    run = SuiteRun()
    paths = [str(project / t) for t in tests] if tests else [str(project / "tests")]
    argv = [*paths, "-q", "-p", "no:cacheprovider", "--rootdir", str(project), *args]
    plugins = [_Collector(run), *plugins]
    if quiet:
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            run.exit_code = pytest.main(argv, plugins=plugins)
        run.output = buffer.getvalue()
    else:
        run.exit_code = pytest.main(argv, plugins=plugins)
    return run
