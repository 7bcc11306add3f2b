"""Helpers for the harness's own tests."""

import os
import sys
from pathlib import Path

import pytest
import torch

from harness.term.coverage import coverage
from harness.store import pinned_term
from harness.term.suite import SuiteRun, run_suite as _run_suite
from reference.submission import reference_as_student  # noqa: F401  (re-exported for the tests)

# Many processes share few cores here (workers, drivers, suites in subprocesses): more than
# one torch thread each only makes them fight (OpenMP threads spin while they wait).
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)

PROJECT = Path(__file__).resolve().parents[1]
TERM = pinned_term(PROJECT)  # terms are data: the selftest runs whichever one is pinned


def pytest_configure(config):
    """With `-n N` (pytest-xdist), whole files go to a worker: a file's module fixtures (the
    graded batch, the coverage table, a built term) are expensive, and would be built once
    per worker that runs any of its tests."""
    if getattr(config.option, "dist", "no") == "load":
        config.option.dist = "loadfile"
    # The student suite's 60 s per test is for one function's case; a selftest that grades a batch (two
    # graders side by side) takes minutes on a loaded 2-core machine. A hang still fails, later.
    if "--case-timeout" not in " ".join(config.invocation_params.args):
        config.option.case_timeout = 900.0


def run_suite(*args: str) -> SuiteRun:
    """The student suite, in this process, against whatever `args` select."""
    return _run_suite(PROJECT, *args)


@pytest.fixture(scope="session")
def project() -> Path:
    return PROJECT


@pytest.fixture(scope="session")
def table():
    """The mistake-coverage table: one run of the whole suite, hidden cases included, per
    variant (the selftest's longest step, so it runs once and its tests share it)."""
    return {row.variant: row for row in coverage(PROJECT, extra=("--hidden",))}


@pytest.fixture
def forget_other_repositories():
    """The test imports another repository's adapters and student/: forget them, and the
    path that found them, afterwards."""
    path = list(sys.path)
    yield
    sys.path[:] = path
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] in ("adapters", "student") or name.startswith("test_") and \
                PROJECT not in Path(getattr(module, "__file__", None) or "/").parents:
            del sys.modules[name]


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path}: {old!r} not found"
    path.write_text(text.replace(old, new, 1))
