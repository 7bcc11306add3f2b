"""Fixture terms: verified on load, built deterministically, never written by a test run.

Committed terms are frozen data: they keep verifying while the catalogue grows, and no
test rebuilds one and compares it with today's catalogue.
"""

import json
import shutil
import subprocess
from argparse import Namespace

from pathlib import Path

import pytest
import torch

from conftest import PROJECT, TERM, run_suite
from harness.term.build import build_term, verify_term
from harness.cli import term_diff, term_use
from harness.store import FixtureError, Term, list_terms, pinned_term, sha256

SEED = json.loads((PROJECT / "fixtures" / TERM / "manifest.json").read_text())["seed"]


@pytest.fixture
def copy_project(tmp_path, project):
    """A throwaway copy of the project's fixtures, to damage."""
    shutil.copytree(project / "fixtures", tmp_path / "fixtures")
    return tmp_path


@pytest.fixture(scope="module")
def twice(tmp_path_factory):
    """The same new term (another seed than the pinned one) built into two folders: once as
    `term new` builds it, and once running every known mistake on every case, where the
    first build skips the mistakes whose patched pieces the reference call never used."""
    return [build_term(tmp_path_factory.mktemp(f"build{i}"), "fresh", SEED + 1, skip_unreached=not i,
                       grading_seed=SEED + 2) for i in range(2)]


def files(folder):
    return sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("name", list_terms(PROJECT))
def test_every_committed_term_verifies(name):
    """Hashes, schema, and the reference passes every public and hidden case."""
    assert verify_term(PROJECT, name) == []


def test_building_twice_gives_identical_bytes(twice):
    a, b = twice
    assert files(a) == files(b) and files(a)
    for rel in files(a):
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), \
            f"{rel} differs between two builds: the build is not deterministic, or a skipped mistake differs"


def test_hidden_values_come_from_the_grading_seed_alone(twice, tmp_path):
    """The public seed (in every student's manifest) and the catalogue do not give the hidden
    cases or the twins: another grading seed changes every hidden file and no public one; a
    rebuild without --grading-seed keeps the term's own."""
    first = twice[0]
    assert "grading_seed" not in (first / "manifest.json").read_text()
    other = build_term(tmp_path, "fresh", SEED + 1, grading_seed=SEED + 3)
    for rel in files(first):
        same = (first / rel).read_bytes() == (other / rel).read_bytes()
        assert same == (rel.parts[0] != "hidden"), f"{rel}: {'same' if same else 'differs'} under another grading seed"
    again = build_term(tmp_path, "fresh", SEED + 1, force=True)
    assert all((again / rel).read_bytes() == (other / rel).read_bytes() for rel in files(other))


def test_another_seed_changes_every_random_expected_value(twice):
    old, new = Term(PROJECT, TERM), Term(twice[0].parents[1], "fresh")
    case = next(c for c in old.cases if c.id == "run_embedding/seed-exercise")
    assert not (old.tensors(case)["out"] == new.tensors(case)["out"]).all()


def test_build_refuses_to_overwrite(tmp_path):
    (tmp_path / "fixtures" / "t").mkdir(parents=True)
    with pytest.raises(FileExistsError, match="--force"):
        build_term(tmp_path, "t", seed=1)


def test_term_diff_reports_changed_cases(copy_project, capsys):
    edited = copy_project / "fixtures" / "edited"
    shutil.copytree(copy_project / "fixtures" / TERM, edited)
    manifest = json.loads((edited / "manifest.json").read_text())
    case = next(c for c in manifest["cases"] if c.get("check", "output") == "output")
    case["note"], case["atol"] = "a new note", case.get("atol", 0.0) + 1.0
    dropped = manifest["cases"].pop()
    (edited / "manifest.json").write_text(json.dumps(manifest))
    term_diff(copy_project, Namespace(a=TERM, b="edited"))
    out = capsys.readouterr().out
    case_id = f"{case['function']}/{case['name']}"
    assert f"changed  {case_id}: note" in out and "-> a new note" in out
    assert f"changed  {case_id}: tolerance" in out
    assert f"removed  {dropped['function']}/{dropped['name']}" in out


def test_term_use_pins_a_term_and_says_what_next(copy_project, capsys):
    shutil.copy(PROJECT / "pyproject.toml", copy_project / "pyproject.toml")
    shutil.copytree(copy_project / "fixtures" / TERM, copy_project / "fixtures" / "other")
    assert term_use(copy_project, Namespace(name="other")) == 0
    assert pinned_term(copy_project) == "other"
    assert "pytest selftest -n auto" in capsys.readouterr().out
    with pytest.raises(FixtureError, match="unknown fixture term 'nope'"):
        term_use(copy_project, Namespace(name="nope"))
    assert pinned_term(copy_project) == "other"


def test_flipped_byte_is_detected(copy_project):
    path = copy_project / "fixtures" / TERM / "run_embedding.safetensors"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(FixtureError, match="run_embedding.safetensors was modified or truncated"):
        Term(copy_project, TERM)


def test_truncated_file_is_detected(copy_project):
    path = copy_project / "fixtures" / TERM / "run_learned_positions.safetensors"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(FixtureError, match="run_learned_positions.safetensors was modified or truncated"):
        Term(copy_project, TERM)


def test_missing_file_is_detected(copy_project):
    (copy_project / "fixtures" / TERM / "run_sinusoidal_positions.safetensors").unlink()
    with pytest.raises(FixtureError, match="run_sinusoidal_positions.safetensors is missing"):
        Term(copy_project, TERM)


def test_tampered_hidden_file_is_detected_when_hidden_cases_load(copy_project):
    path = copy_project / "fixtures" / TERM / "hidden" / "run_embedding.safetensors"
    path.write_bytes(path.read_bytes() + b"\0")
    Term(copy_project, TERM)  # a student run does not read hidden files
    with pytest.raises(FixtureError, match="hidden/run_embedding.safetensors"):
        Term(copy_project, TERM, hidden=True)


def test_unknown_term_lists_the_known_ones(project):
    with pytest.raises(FixtureError, match=f"unknown fixture term 'nope'.*{TERM}"):
        Term(project, "nope")


def test_unknown_term_is_a_usage_error_in_pytest(capsys):
    run = run_suite("--term", "nope")
    assert run.exit_code == pytest.ExitCode.USAGE_ERROR
    assert "unknown fixture term 'nope'" in capsys.readouterr().err


def test_a_student_run_writes_nothing_under_fixtures(project):
    before = {p: (p.stat().st_mtime_ns, sha256(p)) for p in (project / "fixtures").rglob("*") if p.is_file()}
    run_suite("--adapters", "reference.adapters", "--hidden")
    run_suite("--adapters", "adapters")
    after = {p: (p.stat().st_mtime_ns, sha256(p)) for p in (project / "fixtures").rglob("*") if p.is_file()}
    assert before == after


def test_no_pickle_anywhere(project):
    """No code of ours unpickles: calls of torch's or pickle's load, or allow_pickle=True, found in the
    syntax tree (a docstring may tell students how a checkpoint is read back). Hidden folders
    (.venv, .git) hold other people's code; reference/variants.py writes checkpoints as students do
    (torch.save, and torch's load with its default weights_only=True), run in their worker when grading."""
    import ast

    def unpickles(node) -> bool:
        if not isinstance(node, ast.Call):
            return False
        func = node.func
        called = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and \
            (func.value.id, func.attr) in {("torch", "load"), ("pickle", "load"), ("pickle", "loads")}
        return called or any(k.arg == "allow_pickle" and getattr(k.value, "value", None) is True for k in node.keywords)
    # Ours: what git tracks or would (a TA's git-ignored submissions/ holds students' code, a variant's too)
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"], cwd=project,
                            capture_output=True, text=True)
    files = [project / f for f in listed.stdout.splitlines()] if listed.returncode == 0 else list(project.rglob("*.py"))
    offenders = [str(p.relative_to(project)) for p in files if p.is_file()
                 if not p.relative_to(project).parts[0].startswith(".") and p.relative_to(project) != Path("reference/variants.py")
                 and any(unpickles(n) for n in ast.walk(ast.parse(p.read_text())))]
    assert not offenders
    assert unpickles(ast.parse("torch." + "load(f)").body[0].value)  # the search finds what it looks for


def test_no_code_names_a_term(project):
    """Terms are data: code, tests and scripts read the pinned one (pyproject.toml) instead."""
    code = [p for p in project.rglob("*") if p.is_file()
            and (p.suffix == ".py" or p.parent.name in (".ci", "gradescope"))
            and p.relative_to(project).parts[0] not in (".venv", ".git", "fixtures")]
    offenders = [f"{p.relative_to(project)}: {name}" for p in code for name in list_terms(project)
                 if name in p.read_text()]
    assert not offenders, offenders


@pytest.mark.parametrize("kind", ["on_grid", "mostly_zero", "zero_rows_of_grid", "plain", "minus_zero_and_nan"])
def test_compact_storage_reads_back_bit_for_bit(tmp_path, kind):
    """Weights drawn on a grid are kept in 16 bits and mostly-zero tensors as their other
    elements; whatever is stored, a term reads back exactly the tensors it was given."""
    from harness.term.catalogue import on_grid
    from harness.store import Case, write_term
    g = torch.Generator().manual_seed(3)
    t = {"on_grid": on_grid(torch.randn(40, 24, generator=g) * 0.3),
         "mostly_zero": torch.zeros(300, 16).index_fill_(0, torch.tensor([2, 250]), -1.25),
         "zero_rows_of_grid": torch.zeros(300, 16).index_copy_(0, torch.tensor([5]), on_grid(torch.randn(1, 16, generator=g))),
         "plain": torch.randn(30, 20, generator=g),
         "minus_zero_and_nan": on_grid(torch.randn(20, 20, generator=g)).index_fill_(0, torch.tensor([1]), -0.0)
                                                                           .index_fill_(0, torch.tensor([2]), float("nan"))}[kind]
    case = Case("run_linear", "c", {}, ["weights"])
    write_term(tmp_path / "fixtures" / "t", {"term": "t", "seed": 0}, [case], {case.id: {"in/weights": t}})
    stored = sorted(json.loads((tmp_path / "fixtures" / "t" / "manifest.json").read_text())["files"])
    back = Term(tmp_path, "t").tensors(Term(tmp_path, "t").cases[0])["in/weights"]
    assert back.dtype == t.dtype and back.shape == t.shape and torch.equal(back.view(torch.int32), t.view(torch.int32))
    size = (tmp_path / "fixtures" / "t" / stored[0]).stat().st_size
    if kind in ("on_grid", "mostly_zero", "zero_rows_of_grid"):
        assert size < t.numel() * 4 * 0.6, f"{kind}: {size} bytes for {t.numel() * 4} bytes of float32"
    else:
        assert size > t.numel() * 4, f"{kind} is stored as it is"


def test_a_mistake_in_a_drill_that_trains_inside_gets_its_fingerprint():
    """Fingerprints were taken under no_grad alone, where a drill that calls backward inside (the checkpoint
    drill) raised: none of its mistakes had one, and a checkpoint that drops the optimizer state was told only
    'what differs' (blind trial 11, pytest -x). Such a call is run again with autograd."""
    from harness.store import Term
    from harness.term.build import _variant_output

    class Trains:
        @staticmethod
        def drill(x):
            w = torch.ones(2, requires_grad=True)
            (w * x).sum().backward()
            return w.grad.clone()
    assert torch.equal(_variant_output(Trains, "drill", {"x": torch.tensor([1.0, 2.0])}), torch.tensor([1.0, 2.0]))
    resumed = [c for c in Term(PROJECT, TERM).cases if c.function == "run_resume_training" and not c.hidden]
    assert resumed and all("checkpoint_without_optimizer" in c.diagnoses for c in resumed)
