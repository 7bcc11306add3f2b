"""`harness release`: the student edition installs, runs as all-stubs, holds no reference
or hidden data, and passes every public test once the reference is copied into student/."""

import os
import subprocess
import sys

import pytest

from conftest import PROJECT, reference_as_student
from harness.release import release

TERM = "2026-fall"


def run(cmd, cwd, **kw):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "HARNESS"))}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, **kw)


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    out = release(PROJECT, tmp_path_factory.mktemp("release") / "assignment", TERM)
    venv = tmp_path_factory.mktemp("venv")
    # The venv sees this machine's torch and tools; only the release itself is installed into it.
    # --without-pip: the venv's bundled setuptools is too old to build; this machine's is used.
    made = run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], out)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    installed = run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                     "--no-build-isolation", "-e", "."], out)
    assert installed.returncode == 0, installed.stderr[-2000:]
    return out, python


def test_release_holds_no_reference_hidden_or_instructor_code(edition):
    out, _ = edition
    files = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert not [f for f in files if f.startswith(("reference/", "selftest/", "benchmarks/"))]
    assert not [f for f in files if "/hidden/" in f]
    for instructor in ("build.py", "catalogue.py", "grade.py", "coverage.py", "release.py"):
        assert f"harness/{instructor}" not in files
    assert not [f for f in files if f.endswith(".py") and "import reference" in (out / f).read_text()]
    assert "Instructor" not in (out / "README.md").read_text()
    assert f'term = "{TERM}"' in (out / "pyproject.toml").read_text()


def test_release_runs_every_function_as_not_implemented(edition):
    out, python = edition
    result = run([str(python), "-m", "pytest", "-q"], out)
    assert result.returncode == 1, result.stdout[-3000:]
    assert " passed" not in result.stdout.splitlines()[-1]
    assert "not implemented yet" in result.stdout
    assert "Hidden cases exist and were not run here" in result.stdout
    for name in ("run_embedding", "run_transformer_lm", "get_transformer_lm"):
        assert f"  {name}" in result.stdout and "not implemented" in result.stdout


def test_release_passes_with_the_reference_copied_into_student(edition, tmp_path):
    out, python = edition
    reference_as_student(out)  # overwrite the stubs in place
    result = run([str(python), "-m", "pytest", "-q"], out)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "failed" not in result.stdout.splitlines()[-1]


def test_instructor_commands_say_they_are_absent(edition):
    out, python = edition
    result = run([str(python), "-m", "harness", "term", "new", "x", "--seed", "1"], out)
    assert result.returncode == 2 and "instructor command" in result.stderr
