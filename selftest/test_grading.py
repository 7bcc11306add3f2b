"""`harness grade` on purpose-made submissions, in one call: every fault stays contained."""

import csv
import json
import os
import shutil
import subprocess

import pytest

from conftest import PROJECT, edit, reference_as_student
from harness.contract import ADAPTERS
from harness.grade import grade_all

TERM = "2026-fall"
FULL = sum(a.points for a in ADAPTERS.values())


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    subs = tmp_path_factory.mktemp("submissions")
    reference_as_student(subs / "reference")
    shutil.copytree(PROJECT / "student", subs / "stubs" / "student")
    shutil.copy(PROJECT / "adapters.py", subs / "stubs" / "adapters.py")
    for name, old, new in [
        # two known mistakes: partial credit on the right functions
        ("half_split_rope", "even, odd = x[..., 0::2], x[..., 1::2]",
         "even, odd = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]"),
        ("no_scale", "/ math.sqrt(Q.shape[-1])", ""),
        # faults that must stay contained
        ("hangs", "    V, T, d, L = vocab_size", "    while True:\n        pass\n    V, T, d, L = vocab_size"),
        ("exits", "    V, T, d, L = vocab_size", "    import os\n    os._exit(3)\n    V, T, d, L = vocab_size"),
        ("syntax_error", "def silu(", "def silu(:\ndef _("),
    ]:
        reference_as_student(subs / name)
        target = {"half_split_rope": "rope", "no_scale": "attention", "hangs": "accounting",
                  "exits": "accounting", "syntax_error": "attention"}[name]
        edit(subs / name / "student" / f"{target}.py", old, new)
    # edits its own copy of the fixtures and tests, and writes into the grader's copy at run time
    edits = reference_as_student(subs / "edits_fixtures")
    shutil.copytree(PROJECT / "tests", edits / "tests")
    (edits / "tests" / "test_fixtures.py").write_text("def test_fixture():\n    pass\n")
    shutil.copytree(PROJECT / "fixtures" / TERM, edits / "fixtures" / TERM)
    (edits / "fixtures" / TERM / "run_rope.safetensors").write_bytes(b"forged")
    with (edits / "student" / "embeddings.py").open("a") as f:
        f.write("\nimport pathlib\nfor _f in pathlib.Path('fixtures').rglob('*.safetensors'):\n"
                "    _f.write_bytes(b'garbage')\n")
    # a zip of a repository folder; one that prints megabytes; one without adapters.py
    zipped = reference_as_student(tmp_path_factory.mktemp("zipsrc") / "zipped")
    shutil.make_archive(str(subs / "zipped"), "zip", zipped.parent, "zipped")
    noisy = reference_as_student(subs / "noisy")
    lookup = "def embedding_lookup(weights: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:\n"
    edit(noisy / "student" / "embeddings.py", lookup, lookup + "    print('x' * 1_000_000)\n")
    reference_as_student(subs / "no_adapters")
    (subs / "no_adapters" / "adapters.py").unlink()
    out = tmp_path_factory.mktemp("graded")
    before = {p: p.read_bytes() for p in (PROJECT / "fixtures").rglob("*") if p.is_file()}
    results = grade_all(PROJECT, sorted(subs.iterdir()), TERM, out, jobs=2, timeout=240, case_timeout=1)
    after = {p: p.read_bytes() for p in (PROJECT / "fixtures").rglob("*") if p.is_file()}
    assert before == after, "grading changed the grader's own fixtures"
    return {r.name: r for r in results}, out


def per_function(out, name) -> dict[str, float]:
    with (out / "grades.csv").open() as f:
        row = next(r for r in csv.DictReader(f) if r["submission"] == name)
    return {fn: float(row[fn]) for fn in ADAPTERS}


def test_reference_gets_full_marks(graded):
    results, out = graded
    assert results["reference"].score == pytest.approx(FULL)
    assert json.loads((out / "reference" / "results.json").read_text())["score"] == pytest.approx(FULL)


def test_stubs_get_zero(graded):
    assert graded[0]["stubs"].score == 0


def test_a_zipped_repository_is_graded_like_a_folder(graded):
    assert graded[0]["zipped"].score == pytest.approx(FULL)


def test_printing_megabytes_changes_nothing_but_the_kept_output(graded):
    results, out = graded
    assert results["noisy"].score == pytest.approx(FULL)
    assert len((out / "noisy" / "output.txt").read_text()) <= 20_000


def test_missing_adapters_is_a_clear_zero(graded):
    results, out = graded
    assert results["no_adapters"].score == 0 and results["no_adapters"].status == "no-adapters"
    data = json.loads((out / "no_adapters" / "results.json").read_text())
    assert "No adapters.py" in data["output"]


@pytest.mark.parametrize("name, wrong", [
    ("half_split_rope", {"run_rope", "run_multihead_self_attention_with_rope", "run_transformer_block",
                         "run_transformer_lm"}),
    ("no_scale", {"run_scaled_dot_product_attention", "run_multihead_self_attention",
                  "run_multihead_self_attention_with_rope", "run_transformer_block", "run_transformer_lm"}),
])
def test_known_mistakes_get_partial_credit_on_the_right_functions(graded, name, wrong):
    results, out = graded
    scores = per_function(out, name)
    assert 0 < results[name].score < FULL
    for fn, points in scores.items():
        if fn in wrong:
            assert points < ADAPTERS[fn].points, f"{fn} should lose points"
        elif fn not in ("get_transformer_lm",):  # the module test reuses the LM fixture
            assert points == pytest.approx(ADAPTERS[fn].points), f"{fn} lost points it should keep"


@pytest.mark.parametrize("name", ["hangs", "exits"])
def test_a_hang_or_a_crash_costs_only_the_tests_it_touches(graded, name):
    results, out = graded
    scores = per_function(out, name)
    assert scores["run_transformer_accounting"] == 0
    assert scores["run_embedding"] == ADAPTERS["run_embedding"].points
    assert results[name].score > FULL * 0.8
    messages = [t["output"] for t in json.loads((out / name / "results.json").read_text())["tests"]]
    expected = "did not finish within" if name == "hangs" else "the test process died"
    assert any(expected in m for m in messages)


def test_syntax_error_gets_zero_with_the_reason(graded):
    results, out = graded
    assert results["syntax_error"].score == 0
    tests = json.loads((out / "syntax_error" / "results.json").read_text())["tests"]
    assert tests and all("SyntaxError" in t["output"] for t in tests)


def test_edited_fixtures_are_reported_and_ignored(graded):
    results, out = graded
    r = results["edits_fixtures"]
    assert r.score == pytest.approx(FULL), "the official tests and fixtures must be what counts"
    assert "tests/test_fixtures.py" in r.tampered and f"fixtures/{TERM}/run_rope.safetensors" in r.tampered
    with (out / "grades.csv").open() as f:
        row = next(x for x in csv.DictReader(f) if x["submission"] == "edits_fixtures")
    assert "run_rope.safetensors" in row["tampered"]


def test_every_submission_has_results_and_junit(graded):
    results, out = graded
    for name in results:
        data = json.loads((out / name / "results.json").read_text())
        assert {"score", "execution_time", "output", "tests"} <= set(data)
        for t in data["tests"]:
            assert {"name", "score", "max_score", "status", "output", "visibility"} <= set(t)
        assert (out / name / "junit.xml").read_text().startswith("<?xml")


def test_hidden_tests_publish_later_and_leak_nothing(graded):
    results, out = graded
    tests = json.loads((out / "no_scale" / "results.json").read_text())["tests"]
    hidden = [t for t in tests if "/hidden-" in t["name"]]
    assert hidden and all(t["visibility"] == "after_published" for t in hidden)
    for t in hidden:
        assert "inputs:" not in t["output"] and "first mismatches" not in t["output"]


def test_gradescope_run_autograder_writes_results(tmp_path):
    """The template, run against a fake /autograder tree with the reference as the submission."""
    root = tmp_path / "autograder"
    root.mkdir()
    (root / "source").symlink_to(PROJECT)
    reference_as_student(root / "submission")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "HARNESS"))}
    result = subprocess.run(["bash", str(PROJECT / "gradescope" / "run_autograder")],
                            env={**env, "AUTOGRADER": str(root)}, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    data = json.loads((root / "results" / "results.json").read_text())
    assert data["score"] == pytest.approx(FULL)
