"""Helpers for the harness's own tests."""

from pathlib import Path

import pytest

from harness.suite import SuiteRun, run_suite as _run_suite
from reference.submission import reference_as_student  # noqa: F401  (re-exported for the tests)

PROJECT = Path(__file__).resolve().parents[1]


def pinned_term() -> str:
    """The term pyproject.toml pins: the selftest never names one."""
    import tomllib
    return tomllib.loads((PROJECT / "pyproject.toml").read_text())["tool"]["harness"]["term"]


def run_suite(*args: str) -> SuiteRun:
    """The student suite, in this process, against whatever `args` select."""
    return _run_suite(PROJECT, *args)


@pytest.fixture(scope="session")
def project() -> Path:
    return PROJECT


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path}: {old!r} not found"
    path.write_text(text.replace(old, new, 1))
