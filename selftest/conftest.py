"""Helpers for the harness's own tests: run the student suite in-process and collect outcomes."""

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.plugin import ADAPTER

PROJECT = Path(__file__).resolve().parents[1]


@dataclass
class SuiteRun:
    exit_code: int
    outcomes: dict = field(default_factory=dict)   # nodeid -> "passed" / "failed"
    messages: dict = field(default_factory=dict)   # nodeid -> failure text
    adapters: dict = field(default_factory=dict)   # nodeid -> contract function

    @property
    def failed(self) -> list[str]:
        return [n for n, o in self.outcomes.items() if o != "passed"]

    def caught_by(self) -> str:
        return ", ".join(sorted({n.split("::")[-1] for n in self.failed})[:4])


class _Collector:
    def __init__(self, run: SuiteRun):
        self.run = run

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.failed:
            self.run.outcomes[report.nodeid] = report.outcome
            if report.failed:
                self.run.messages[report.nodeid] = str(report.longrepr)

    def pytest_collection_modifyitems(self, items):
        for item in items:
            self.run.adapters[item.nodeid] = item.stash.get(ADAPTER, None)


def run_suite(*args: str) -> SuiteRun:
    """Run the student suite in this process (torch is already imported, so it is fast)."""
    run = SuiteRun(0)
    run.exit_code = pytest.main([str(PROJECT / "tests"), "-q", "-p", "no:cacheprovider",
                                 "--rootdir", str(PROJECT), *args], plugins=[_Collector(run)])
    return run


@pytest.fixture(scope="session")
def project() -> Path:
    return PROJECT
