"""The course grows without surprises. In a temporary copy the contract gains a Unit 2.1 module with
constructor arguments no function had (num_buckets), appended as the README's walkthrough appends,
and the pinned term is NOT rebuilt: it is now an old term. Then

- the term keeps its own points: a student's run and the grader give the maximum it was built with,
  and the new function, which it does not cover, is absent (not 0 out of N) from the progress table,
  grades.csv and results.json;
- the new function is listed with its unit (adapters.py), and the selftest's docstring rule builds
  the new module from its own public case, with no edit;
- a submission that cannot be imported is graded with the status import-error and its file and line,
  and the class report lists it apart."""

import csv
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import PROJECT, TERM

CONTRACT = '''
@adapter("2.1", "embeddings", """
    return with_weights(impl.embeddings.BucketBias(num_buckets, num_heads), {'weight': weights}, buckets)
""", points=5, stub=\'\'\'
    class BucketBias(nn.Module):
        """One parameter, `weight` [num_buckets, num_heads]: a bias per bucket and head."""

        def __init__(self, num_buckets: int, num_heads: int):
\'\'\')
def run_bucket_bias(
    num_buckets: int,
    num_heads: int,
    weights: Float[Tensor, "num_buckets heads"],
    buckets: Int[Tensor, "..."],
) -> Float[Tensor, "... heads"]:
    """A learned bias per relative-position bucket and head (T5's table): weights[buckets]."""
'''
REFERENCE = '''
class BucketBias(nn.Module):
    def __init__(self, num_buckets: int, num_heads: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(num_buckets, num_heads))

    def forward(self, buckets: torch.Tensor) -> torch.Tensor:
        return self.weight[buckets]
'''
CASES = '''
CATALOGUE += [
    case("run_bucket_bias", "2d", "buckets [2, 3]", num_buckets=8, num_heads=3, weights=normal(8, 3),
         buckets=ints(2, 3, high=8)),
    case("run_bucket_bias", "1d", "buckets [5]", num_buckets=6, num_heads=4, weights=normal(6, 4),
         buckets=ints(5, high=6)),
    case("run_bucket_bias", "bf16", "a bfloat16 table [32, 10]", num_buckets=32, num_heads=10,
         weights=normal(32, 10, dtype="bfloat16"), buckets=ints(4, 6, high=32)),
    case("run_bucket_bias", "hidden-2d", "", hidden=True, num_buckets=10, num_heads=2, weights=normal(10, 2),
         buckets=ints(3, 4, high=10)),
]
'''


def python(args, cwd, timeout=900):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "HARNESS"))}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def grown(tmp_path_factory):
    copy = tmp_path_factory.mktemp("grown") / "repo"
    shutil.copytree(PROJECT, copy, ignore=shutil.ignore_patterns(".*", "__pycache__", "*.egg-info", "benchmarks",
                                                                 "gradescope", "hostile"))
    for path, code in (("harness/contract.py", CONTRACT), ("reference/embeddings.py", REFERENCE),
                       ("harness/term/catalogue.py", CASES)):
        with open(copy / path, "a") as f:
            f.write("\n\n" + code)
    result = python(["-m", "harness", "contract", "--stubs"], copy)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return copy


def test_the_new_function_is_listed_with_its_unit(grown):
    adapters = (grown / "adapters.py").read_text()
    assert adapters.index("def get_sinusoidal_positions(") < adapters.index("def run_bucket_bias(") \
        < adapters.index("def run_linear(")
    stubs = (grown / "student" / "embeddings.py").read_text()
    assert "class BucketBias(nn.Module):" in stubs


def test_the_docstring_rule_builds_a_module_with_new_arguments_unedited(grown):
    result = python(["-m", "pytest", "-q", "-p", "no:cacheprovider", "selftest/test_functions.py",
                     "-k", "docstrings and BucketBias"], grown)
    assert result.returncode == 0 and "1 passed" in result.stdout, result.stdout[-3000:]


def test_a_students_run_on_the_old_term_keeps_its_points(grown):
    result = python(["-m", "pytest", "-q", "-p", "no:cacheprovider", "--adapters", "reference.adapters"], grown)
    assert result.returncode == 0, result.stdout[-3000:]
    table = result.stdout[result.stdout.index("Progress: term"):]
    total = json.loads((PROJECT / "fixtures" / TERM / "manifest.json").read_text()).get("functions")
    most = sum(f["points"] for f in total.values()) if total else 85
    assert re.search(rf"Total: [\d.]+/{most:g} points", table), table
    assert not re.search(r"^  run_bucket_bias ", table, re.M), table
    # the note names every function the term does not cover: others too, where the contract grew since it was built
    assert re.search(rf"note: term {TERM} does not cover [^\n]*\brun_bucket_bias\b", table), table
    asked = python(["-m", "pytest", "-q", "-p", "no:cacheprovider", "--function", "run_bucket_bias"], grown)
    assert asked.returncode == 4 and "does not cover it" in asked.stdout + asked.stderr


@pytest.fixture(scope="module")
def graded(grown, tmp_path_factory):
    subs, out = tmp_path_factory.mktemp("subs"), tmp_path_factory.mktemp("out")
    make = ("from pathlib import Path; from reference.submission import reference_as_student as r; "
            f"r(Path({str(subs / 'reference')!r})); b = r(Path({str(subs / 'syntax')!r})); "
            "p = b / 'adapters.py'; lines = p.read_text().splitlines(); lines[7] = 'def oops(:'; "
            "p.write_text(chr(10).join(lines) + chr(10))")
    assert python(["-c", make], grown).returncode == 0
    result = python(["-m", "harness", "grade", str(subs / "reference"), str(subs / "syntax"), "--out", str(out),
                     "--jobs", "2"], grown)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    with (out / "grades.csv").open() as f:
        rows = {r["submission"]: r for r in csv.DictReader(f)}
    return {"out": out, "rows": rows}


def test_grading_the_old_term_keeps_its_maximum_and_leaves_the_new_function_out(graded):
    from harness.store import Term
    built_with = sum(f["points"] for f in Term(PROJECT, TERM).functions.values())  # the term's own maximum
    row = graded["rows"]["reference"]
    assert row["status"] == "ok" and row["score"] == row["max_score"] == f"{built_with:.2f}", row
    assert "run_bucket_bias" not in row
    results = json.loads((graded["out"] / "reference" / "results.json").read_text())
    assert not [t for t in results["tests"] if t["name"].startswith("run_bucket_bias")]
    assert results["score"] == pytest.approx(built_with)


def test_a_submission_that_cannot_be_imported_is_named_with_its_file_and_line(graded):
    """Its adapters.py does not import (a student/ file that does not import stops only its own
    functions: test_grading's syntax_error)."""
    row = graded["rows"]["syntax"]
    assert row["status"] == "import-error" and row["score"] == "0.00", row
    assert "SyntaxError at adapters.py:8" in row["error"], row
    results = json.loads((graded["out"] / "syntax" / "results.json").read_text())
    assert "adapters.py:8" in results["output"]
    report = (graded["out"] / "report.html").read_text()
    assert "Could not be imported: 1" in report and "worker died" not in report
