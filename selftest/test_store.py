"""Fixture terms: verified on load, reproducible from the reference, never written by a test run."""

import json
import shutil

import pytest

from harness.build import build_term, verify_term
from harness.store import FixtureError, Term, sha256
from conftest import run_suite

TERM = "2026-fall"


@pytest.fixture
def copy_project(tmp_path, project):
    """A throwaway copy of the project's fixtures, to damage."""
    shutil.copytree(project / "fixtures", tmp_path / "fixtures")
    return tmp_path


def test_committed_term_verifies(project):
    assert verify_term(project, TERM) == []


def test_rebuilding_the_term_gives_identical_bytes(project, tmp_path):
    seed = json.loads((project / "fixtures" / TERM / "manifest.json").read_text())["seed"]
    folder = build_term(tmp_path, TERM, seed)
    committed = project / "fixtures" / TERM
    built = sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file())
    assert built == sorted(p.relative_to(committed) for p in committed.rglob("*") if p.is_file())
    for rel in built:
        assert (folder / rel).read_bytes() == (committed / rel).read_bytes(), f"{rel} differs"


def test_another_seed_changes_every_random_expected_value(project, tmp_path):
    build_term(tmp_path, "other", seed=7)
    old, new = Term(project, TERM), Term(tmp_path, "other")
    case = next(c for c in old.cases if c.id == "run_embedding/seed-exercise")
    assert not (old.tensors(case)["out"] == new.tensors(case)["out"]).all()


def test_build_refuses_to_overwrite(project, tmp_path):
    build_term(tmp_path, "t", seed=1)
    with pytest.raises(FileExistsError, match="--force"):
        build_term(tmp_path, "t", seed=1)


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
    # Spelled in pieces so this file does not match its own search.
    banned = ("torch." + "load", "pickle." + "load", "allow_pickle" + "=True")
    offenders = [str(p.relative_to(project)) for p in project.rglob("*.py")
                 if any(b in p.read_text() for b in banned)]
    assert not offenders
