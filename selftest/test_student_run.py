"""A student's run does what they expect: one function's tests, an honest table, one usage
error, any folder, xdist, a first run that fits on a screen, the README, notebooks."""

import contextlib
import io
import re
import shutil
import sys

import pytest

from conftest import PROJECT, reference_as_student
from harness.suite import run_suite as _run_suite
from harness.contract import ADAPTERS
from harness.notebook import check

README = (PROJECT / "README.md").read_text()
STUDENT_README = README.split("## Instructor and maintainer guide")[0]


def run_suite(*args):
    return _run_suite(PROJECT, *args, quiet=True)


def pytest_in(folder, *args) -> tuple[int, str]:
    """pytest as a student types it, started in `folder`; (exit code, what it printed)."""
    out = io.StringIO()
    with contextlib.chdir(folder), contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = pytest.main(["-p", "no:cacheprovider", *args])
    return int(code), out.getvalue()


@pytest.fixture(scope="module")
def everything() -> dict:
    """nodeid -> function for the whole student suite."""
    return run_suite("--collect-only").adapters


# 1 -------------------------------------------------------------------- --function

@pytest.mark.parametrize("name", ADAPTERS)
def test_function_option_selects_exactly_that_functions_tests(name, everything):
    picked = run_suite("--collect-only", "--function", name).adapters
    assert set(picked) == {n for n, f in everything.items() if f == name}


def test_readme_selects_one_function_with_the_option():
    assert "pytest --function run_embedding" in STUDENT_README
    assert "pytest -k" not in STUDENT_README


def test_unknown_function_is_a_usage_error():
    code, out = pytest_in(PROJECT, "--function", "run_sofmax")
    assert code == 4 and "did you mean run_softmax" in out


# 2 -------------------------------------------------------------------- an honest table

def test_partial_runs_claim_no_unit():
    for args in (["-k", "softmax or linear or scaled_dot"], ["tests/test_embeddings.py"]):
        code, out = pytest_in(PROJECT, "--adapters", "reference.adapters", *args)
        assert code == 0, out
        assert "every function passes" not in out and "Next:" not in out, out
    assert re.search(r"run_embedding +passed +\d+/\d+ +tests .* \d+ not run", out), out


def test_full_run_against_the_reference_declares_every_unit_done():
    code, out = pytest_in(PROJECT, "--adapters", "reference.adapters")
    assert code == 0 and out.count("every function passes. Next:") == 6 and not re.search(r"\d+ not run", out), out


# 3, 4 ----------------------------------------------------------------- --adapters

@pytest.mark.parametrize("target", ["no/such/adapters.py", "no_such_module", "reference.adapters:nope"])
def test_an_adapters_target_that_cannot_load_is_one_usage_error(target):
    code, out = pytest_in(PROJECT, "--adapters", target)
    assert code == 4, out
    assert len([line for line in out.splitlines() if line.strip()]) == 1, out


def test_adapters_that_raise_on_import_are_one_usage_error(tmp_path):
    (tmp_path / "broken_adapters.py").write_text("import student\nraise NameError('typo')\n")
    code, out = pytest_in(PROJECT, f"--adapters={tmp_path / 'broken_adapters.py'}")
    assert code == 4 and out.count("ERROR") == 1 and "NameError: typo" in out, out


@pytest.mark.parametrize("form", ["space", "equals"])
def test_adapters_outside_the_repository(tmp_path, form):
    outside = tmp_path / "my_adapters.py"
    shutil.copy(PROJECT / "reference" / "adapters.py", outside)
    option = ["--adapters", str(outside)] if form == "space" else [f"--adapters={outside}"]
    code, out = pytest_in(PROJECT, *option, "--function", "run_silu")
    assert code == 0 and "selftest" not in out and f"rootdir: {PROJECT}" in out, out
    assert "run_silu                               passed             7/7" in out, out


# 5, 6 ----------------------------------------------------------------- folders

@pytest.mark.parametrize("folder", ["student", "tests", "fixtures"])
def test_pytest_from_any_folder_runs_the_student_suite(folder, everything):
    code, out = pytest_in(PROJECT / folder, "--collect-only", "-q")
    assert code == 0 and f"{len(everything)} tests collected" in out, out


@pytest.mark.parametrize("arg", [".", str(PROJECT)])
def test_selftest_is_collected_only_when_named(arg, everything):
    code, out = pytest_in(PROJECT, arg, "--collect-only", "-q")
    assert code == 0 and "selftest" not in out and f"{len(everything)} tests collected" in out, out
    code, out = pytest_in(PROJECT, "selftest/test_readme.py", "--collect-only", "-q")
    assert code == 0 and "selftest/test_readme.py::" in out, out


# 7 -------------------------------------------------------------------- xdist

def test_xdist_keeps_the_table_and_course_order():
    pytest.importorskip("xdist")
    functions = [n for n in ADAPTERS if n in ("run_embedding", "run_softmax", "run_rope", "run_silu")]
    code, out = pytest_in(PROJECT, "-n", "2", "--function", ",".join(reversed(functions)))
    assert code == 1, out
    listed = re.findall(r"^  (\w+) +student/", out, re.M)
    assert listed == functions, out
    table = re.findall(r"^  (\w+) +not implemented", out, re.M)
    assert table == functions and "Hidden cases" in out, out


# 8 -------------------------------------------------------------------- the first run

def test_the_first_run_on_the_stubs_fits_on_a_screen():
    code, out = pytest_in(PROJECT)
    lines = out.splitlines()
    assert code == 1 and len(lines) <= 65, out
    assert len(re.findall(r"^  \w+ +student/\S+:\d+$", out, re.M)) == len(ADAPTERS), out
    assert "FAILED" not in out and out.count("Hidden cases exist") == 1 and "Progress: term" in out, out


def test_a_partial_run_mentions_hidden_cases_once_briefly():
    code, out = pytest_in(PROJECT, "--function", "run_embedding")
    assert out.count("Hidden") == 1 and "+1 hidden" not in out, out


def test_output_and_gradient_failures_of_one_case_are_one_report():
    code, out = pytest_in(PROJECT, "--adapters", "reference.variants:rope_half_split", "--function", "run_rope")
    assert code == 1
    assert "run_rope/arange:output]" in out and "_ test_fixture[run_rope/arange:gradient] _" not in out, out
    assert "gradient check of this case fails too" in out, out


# 9 -------------------------------------------------------------------- README

def test_readme_sets_a_newcomer_up():
    for needed in ("python3 -m venv", "source .venv/bin/activate", "https://download.pytorch.org/whl/cpu",
                   "from harness.notebook import check", "notebooks/check_unit_2_1.ipynb"):
        assert needed in STUDENT_README, needed
    assert "adapters adapters" not in README and "(CPU)" not in STUDENT_README


# 10 ------------------------------------------------------------------- notebooks

def test_check_takes_a_function_from_a_cell_and_returns_results(monkeypatch):
    monkeypatch.setenv("PYTEST_ADDOPTS", "--hidden")  # must not reach the notebook's run
    from reference.adapters import run_embedding
    good = check("run_embedding", run_embedding, quiet=True)
    assert good.passed and len(good.tests) >= 10 and not [t for t in good.tests if "hidden" in t.name]
    assert repr(good).startswith("<check run_embedding:") and "<table>" in good._repr_html_()

    def one_hot(vocab_size, d_model, weights, token_ids):
        return (token_ids[..., None] == __import__("torch").arange(vocab_size)).float() @ weights
    bad = check("run_embedding", one_hot, quiet=True)
    assert not bad.passed and any("one-hot" in t.message for t in bad.failed), bad.report


def test_check_tests_the_files_as_they_are_now(tmp_path, monkeypatch, forget_other_repositories):
    repo = reference_as_student(tmp_path / "repo")
    shutil.copy(PROJECT / "pyproject.toml", repo)
    for folder in ("tests", "fixtures"):
        shutil.copytree(PROJECT / folder, repo / folder, ignore=shutil.ignore_patterns("hidden"))
    monkeypatch.chdir(repo)
    monkeypatch.delenv("HARNESS_ADAPTERS", raising=False)
    monkeypatch.setattr(sys, "path", [str(repo), *sys.path])
    fresh = check("run_softmax", quiet=True)
    assert fresh.passed, fresh.report
    with (repo / "student" / "attention.py").open("a") as f:
        f.write("\n\ndef softmax(x, dim):\n    return x.exp() / x.exp().sum(dim, keepdim=True)\n")
    stale = check("run_softmax", quiet=True)
    assert not stale.passed and "finite" in stale.report, stale.report


def test_the_example_notebook_runs_against_the_reference(monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("HARNESS_ADAPTERS", "reference.adapters")
    monkeypatch.setenv("PYTHONPATH", str(PROJECT))
    notebook = nbformat.read(PROJECT / "notebooks" / "check_unit_2_1.ipynb", as_version=4)
    nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(PROJECT / "notebooks")}}).execute()
    text = "\n".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
                     for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs)
    assert "run_embedding                          passed            17/17" in text, text
    assert "run_sinusoidal_positions               passed" in text, text  # a cell that raised stops execute()
    assert "negative-id" in text, text  # the cell's function lacks the range check


def test_an_in_process_run_leaves_the_heap_unfrozen():
    """A `pytest` command freezes the heap as it exits (its last garbage collection is then
    quick); a run inside a living process (a notebook, this selftest) must not."""
    import gc
    before = gc.get_freeze_count()
    run_suite("--collect-only")
    assert gc.get_freeze_count() == before
