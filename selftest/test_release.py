"""`harness release`: the student edition runs as all-stubs, holds no reference or hidden
data, passes every public test once the reference is copied into student/, and its
command line offers only what a student needs.

The edition's suite runs in a subprocess started in its folder, so it imports the
edition's own `harness` (the folder comes first on sys.path), never this checkout's,
and nothing depends on what the base interpreter has installed.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import PROJECT, TERM, reference_as_student
from harness.cli import main
from harness.term.release import release


def run(cmd, cwd):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "HARNESS"))}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    return release(PROJECT, tmp_path_factory.mktemp("release") / "assignment", TERM)


@pytest.fixture
def in_edition(edition, monkeypatch):
    monkeypatch.chdir(edition)
    return edition


def test_release_holds_no_reference_hidden_or_instructor_code(edition):
    out = edition
    files = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert not [f for f in files if f.startswith(("reference/", "selftest/", "benchmarks/"))]
    assert not [f for f in files if "/hidden/" in f]
    for instructor in ("build.py", "catalogue.py", "grade.py", "coverage.py", "release.py"):
        assert f"harness/{instructor}" not in files
    assert not [f for f in files if f.endswith(".py") and "import reference" in (out / f).read_text()]
    assert "Instructor" not in (out / "README.md").read_text()
    assert f'term = "{TERM}"' in (out / "pyproject.toml").read_text()


def test_release_runs_every_function_as_not_implemented(edition):
    result = run([sys.executable, "-m", "pytest", "-q"], edition)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    imported = run([sys.executable, "-c", "import harness; print(harness.__file__)"], edition).stdout
    assert imported.strip() == f"{edition}/harness/__init__.py"  # the edition's harness, not this checkout's
    assert " passed" not in result.stdout.splitlines()[-1]
    assert "not implemented yet" in result.stdout
    assert "Hidden cases (+P hidden above" in result.stdout and "Total: 0.0/" in result.stdout
    # the README's example says what the pinned term says (a newcomer found 248 cases there, 250 here)
    example = next(line for line in (PROJECT / "README.md").read_text().splitlines() if line.startswith("Hidden cases (+P"))
    assert example in result.stdout, example
    for name in ("run_embedding", "run_transformer_lm", "get_transformer_lm"):
        assert f"  {name}" in result.stdout and "not implemented" in result.stdout
    assert "holds no hidden cases" not in result.stdout
    # TA trial 10: --hidden in the student edition ran the public tests and said nothing
    asked = run([sys.executable, "-m", "pytest", "-q", "--hidden", "--function", "run_silu"], edition)
    assert f"note: --hidden: this copy of term {TERM} holds no hidden cases" in asked.stdout, asked.stdout[-2000:]


def test_release_passes_with_the_reference_copied_into_student(edition, tmp_path):
    student = shutil.copytree(edition, tmp_path / "student-copy")
    reference_as_student(student)  # overwrite the stubs in place
    result = run([sys.executable, "-m", "pytest", "-q"], student)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "failed" not in result.stdout.splitlines()[-1]


def test_student_help_lists_only_student_commands(in_edition, capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "contract" in out and "term" in out
    for instructor in ("release", "grade", "mistakes", "report"):
        assert instructor not in out
    assert "What a student runs" in out and "pytest --function" in out and "check(" in out, out
    assert "Instructor commands" in out and "master repository" in out, out


def test_master_help_opens_with_the_student_commands_and_says_where_the_instructors_are(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert out.index("What a student runs") < out.index("Instructor commands (this is the course's master copy)")
    assert "pytest --function" in out and "python -m harness term list" in out, out


def test_the_master_readme_says_what_it_is_and_the_release_readme_does_not(edition):
    master = (PROJECT / "README.md").read_text()
    assert "course's master copy" in "\n".join(master.splitlines()[:6]) and "python -m harness release" in master[:600]
    student = (edition / "README.md").read_text()
    assert student.startswith("# Transformer from scratch") and "master copy" not in student
    assert "## Student quick start" in student and "Total:" in student and "result.ok" in student


def test_contract_keeps_a_students_adapters_edits_and_check_says_nothing(in_edition, capsys):
    glue = in_edition / "adapters.py"
    original = glue.read_text()
    glue.write_text(original.replace("return impl.attention.silu(in_features)", "return impl.attention.silu(in_features) * 1"))
    try:
        assert main(["contract", "--check"]) == 0
        out = capsys.readouterr().out
        assert "stale" not in out and "out of date" not in out, out
        assert main(["contract"]) == 0
        assert "* 1" in glue.read_text() and "kept: adapters.py" in capsys.readouterr().out
    finally:
        glue.write_text(original)


def test_contract_force_replaces_a_students_file_after_a_backup(in_edition, capsys):
    work = in_edition / "student" / "rope.py"
    original = work.read_text()
    mine = original + "\n# my work\n"
    work.write_text(mine)
    try:
        assert main(["contract", "--force"]) == 0
        out = capsys.readouterr().out
        assert work.read_text() == original and (in_edition / "student" / "rope.py.bak").read_text() == mine
        assert "your version is kept in student/rope.py.bak" in out, out
    finally:
        work.write_text(original)
        (in_edition / "student" / "rope.py.bak").unlink(missing_ok=True)


def test_contract_in_the_master_never_overwrites_implemented_code(tmp_path, monkeypatch, capsys):
    copy = tmp_path / "project"
    shutil.copytree(PROJECT, copy, ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__", "selftest", "fixtures"))
    monkeypatch.chdir(copy)
    work = copy / "student" / "embeddings.py"
    solved = (PROJECT / "reference" / "embeddings.py").read_text().replace("reference", "student")
    work.write_text(solved)
    assert main(["contract", "--check"]) == 1
    out = capsys.readouterr().out
    assert "implemented: student/embeddings.py" in out and "stale" not in out, out
    assert main(["contract", "--stubs"]) == 0 and work.read_text() == solved
    stub = copy / "student" / "rope.py"
    stub.write_text(stub.read_text().replace("raise NotImplementedError(", "raise NotImplementedError(  'old', "))
    assert main(["contract", "--stubs"]) == 0 and work.read_text() == solved
    assert "rendered: student/rope.py (it held only stubs)" in capsys.readouterr().out
    assert main(["contract", "--stubs", "--force"]) == 0
    assert (copy / "student" / "embeddings.py.bak").read_text() == solved and "raise NotImplementedError" in work.read_text()


@pytest.mark.parametrize("command", [["term", "new", "x", "--seed", "1"], ["term", "verify", TERM],
                                     ["grade", "a.zip", "--term", TERM, "--out", "o"], ["mistakes"],
                                     ["report", "graded"]])
def test_instructor_commands_refuse_with_one_line(in_edition, capsys, command):
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "instructor command" in err and len(err.strip().splitlines()) == 1


def test_contract_check_is_clean_in_a_release(in_edition, capsys):
    """Clean, and says so: a command that prints nothing leaves a student wondering whether it ran."""
    assert main(["contract", "--check"]) == 0, capsys.readouterr().out
    assert capsys.readouterr().out.startswith("up to date: adapters.py and the ")


def test_contract_never_overwrites_a_students_file(in_edition, capsys):
    work = in_edition / "student" / "rope.py"
    original = work.read_text()
    work.write_text(original + "\n# my work\n")
    (in_edition / "student" / "accounting.py").unlink()
    try:
        assert main(["contract"]) == 0
        assert work.read_text().endswith("# my work\n")
        assert "rendered: student/accounting.py" in capsys.readouterr().out
    finally:
        work.write_text(original)


def test_term_list_counts_hidden_cases_from_the_manifest(in_edition, capsys):
    assert main(["term", "list"]) == 0
    manifest = json.loads((in_edition / "fixtures" / TERM / "manifest.json").read_text())
    hidden = sum(manifest["hidden_counts"].values())
    assert hidden and f", {hidden} hidden" in capsys.readouterr().out


def test_release_ships_rendered_stubs_not_the_instructors_student_folder(tmp_path):
    """A TA who solved student/ in this repository must not ship the solution."""
    import shutil
    from harness.contract import render_stub
    copy = tmp_path / "project"
    shutil.copytree(PROJECT, copy, ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__", "selftest"))
    (copy / "student" / "embeddings.py").write_text((PROJECT / "reference" / "embeddings.py").read_text())
    out = release(copy, tmp_path / "edition", TERM)
    assert (out / "student" / "embeddings.py").read_text() == render_stub("embeddings")
