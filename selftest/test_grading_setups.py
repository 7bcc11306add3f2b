"""`harness grade` where the machine or the setup is not the usual one: under load, without
bubblewrap, with a sandbox that cannot run Python, and through the Gradescope template."""

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile

import pytest

from conftest import PROJECT, TERM, edit, reference_as_student
from harness.contract import ADAPTERS
from harness.grade import grade_all
from harness.sandbox import Protections
from submissions import EXITS, FULL, hangs_and_exits, points_per_function, survivors


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """The reference, except that accounting hangs once and crashes once, graded while two
    busy loops keep both cores busy, with a per-call limit of 1 s of CPU time."""
    sub = hangs_and_exits(tmp_path_factory.mktemp("loaded") / "hangs_and_exits")
    load = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        [result] = grade_all(PROJECT, [sub], TERM, tmp_path_factory.mktemp("graded"), timeout=300, case_timeout=1)
    finally:
        for p in load:
            p.kill()
            p.wait()
    return result


def test_load_costs_honest_code_nothing(loaded):
    """Per-call limits count CPU time: with both cores busy, every function but the one that
    hangs and crashes keeps full marks."""
    scores = points_per_function(loaded)
    assert loaded.status == "ok"
    assert all(scores[fn] == pytest.approx(a.points) for fn, a in ADAPTERS.items()
               if fn not in ("run_transformer_accounting", "get_transformer_lm"))  # the LM's count test uses accounting


@pytest.mark.parametrize("said", ["did not finish within 1 s of CPU time", "the worker process died during this call"])
def test_a_hang_or_a_crash_costs_only_the_tests_it_touches(loaded, said):
    """Under load too; the next test runs in a fresh worker."""
    assert points_per_function(loaded)["run_transformer_accounting"] < ADAPTERS["run_transformer_accounting"].points
    assert any(said in t.message for t in loaded.tests)


def test_without_bubblewrap_the_worker_still_runs_apart_and_limited(tmp_path):
    """Where namespaces are forbidden: a plain subprocess (as root, under its own uid) still grades."""
    exits = reference_as_student(tmp_path / "subs" / "exits")
    edit(exits / "student" / EXITS[0], *EXITS[1:])
    plain = Protections.detect(bubblewrap=False)
    [result] = grade_all(PROJECT, [exits], TERM, tmp_path / "out", jobs=1, case_timeout=5, protections=plain)
    scores = points_per_function(result)
    assert result.status == "ok" and 0 < result.score < FULL and not survivors()
    assert all(scores[fn] == pytest.approx(a.points) for fn, a in ADAPTERS.items()
               if fn not in ("run_transformer_accounting", "get_transformer_lm"))
    assert "filesystem allow-list" in plain.describe().split("OFF:")[1]
    if os.geteuid() == 0 and not plain.uid_drop:  # e.g. Python under /root, unreachable for another uid
        assert "uid drop" in plain.describe().split("OFF:")[1]


def test_a_sandbox_that_cannot_run_python_stops_grading_before_it_starts(tmp_path):
    from harness.cli import BadSetup
    broken = Protections(bwrap="/bin/false", uid_drop=False)
    with pytest.raises(BadSetup, match="cannot start a worker"):
        grade_all(PROJECT, [], TERM, tmp_path / "out", protections=broken)


def test_gradescope_run_autograder_writes_results(tmp_path):
    """The template, run against a fake /autograder tree with the reference as the submission."""
    root = tmp_path / "autograder"
    root.mkdir()
    shutil.copytree(PROJECT, root / "source", ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__"))
    reference_as_student(root / "submission")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "HARNESS"))}
    result = subprocess.run(["bash", str(PROJECT / "gradescope" / "run_autograder")],
                            env={**env, "AUTOGRADER": str(root)}, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    data = json.loads((root / "results" / "results.json").read_text())
    assert data["score"] == pytest.approx(FULL)
    if os.geteuid() == 0:  # the worker's uid cannot read the answers
        assert stat.S_IMODE((root / "source" / "fixtures").stat().st_mode) & 0o077 == 0


def test_require_confinement_refuses_to_grade_without_the_sandbox(tmp_path, monkeypatch):
    """Before anything starts: no sandbox check left running, no submission graded. The
    grader's temporary folders go to a folder of this test's own (under -n, other workers
    make sandboxes in the shared one meanwhile)."""
    from harness.cli import BadSetup
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    with pytest.raises(BadSetup, match="--require-confinement: .*OFF: filesystem allow-list"):
        grade_all(PROJECT, [], TERM, tmp_path / "out", protections=Protections(bwrap=None, uid_drop=False),
                  require_confinement=True)
    assert not list((tmp_path / "tmp").iterdir())
