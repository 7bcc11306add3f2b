"""`harness grade` on one batch of purpose-made submissions: honest ones keep full marks,
known mistakes lose the right points, and every hostile one (one per attack family,
selftest/hostile/) scores 0 and stays contained. Then grading where the machine or the setup
is not the usual one: under load, without bubblewrap, with a sandbox that cannot run Python,
and through the Gradescope template.

One file on purpose: a grading slot is a uid (61000 + slot), so two gradings at once would
kill each other's sandboxes; under `-n N` a file runs in one worker, one test at a time."""

import csv
import hashlib
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from decimal import Decimal

import pytest
import torch

from conftest import PROJECT, TERM, edit, reference_as_student
from harness.contract import ADAPTERS
from harness.grade import grade_all
from harness.sandbox import Protections
from harness.store import Term
from submissions import (ATTACKS, CANARY, EDITED, EXITS, FULL, bad_archives, copy_stubs,
                         hangs_and_exits, points_per_function, survivors, with_attack)

requires_bwrap = pytest.mark.skipif(not Protections.detect().confined, reason="bubblewrap is not usable here")

def _project_digest() -> dict:
    files = [p for folder in ("harness", "tests", "fixtures", "reference", "student")
             for p in (PROJECT / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in [*files, PROJECT / "adapters.py"]}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    subs = tmp_path_factory.mktemp("submissions")
    out = tmp_path_factory.mktemp("graded")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.1)
    constants = {"PROJECT": str(PROJECT), "OUT": str(out), "PORT": listener.getsockname()[1]}

    reference_as_student(subs / "reference")
    copy_stubs(subs / "stubs")
    for name, (target, old, new) in EDITED.items():
        edit(reference_as_student(subs / name) / "student" / target, old, new)
    for name, (start, attack) in ATTACKS.items():
        with_attack(subs / name, start, attack, constants)
    # a zip that carries its own edited tests and fixtures, and writes into any fixtures it
    # can reach at run time
    zipped = reference_as_student(tmp_path_factory.mktemp("zipsrc") / "zipped")
    shutil.copytree(PROJECT / "tests", zipped / "tests")
    (zipped / "tests" / "test_fixtures.py").write_text("def test_fixture():\n    pass\n")
    shutil.copytree(PROJECT / "fixtures" / TERM, zipped / "fixtures" / TERM)
    (zipped / "fixtures" / TERM / "run_rope.safetensors").write_bytes(b"forged")
    shutil.make_archive(str(subs / "zipped"), "zip", zipped.parent, "zipped")
    reference_as_student(subs / "no_adapters")
    (subs / "no_adapters" / "adapters.py").unlink()
    bad_archives(subs)

    # The attack on others goes first and honest work last, so that it is graded after the harm;
    # the stall (which only waits) starts early, beside the rest.
    first, last = ("harms_others", "stalls_reply"), ("reference", "zipped.zip")
    order = sorted(subs.iterdir(), key=lambda p: (p.name not in first, p.name in last, p.name))
    before = _project_digest()
    os.environ[CANARY] = "secret"
    try:
        results = grade_all(PROJECT, order, TERM, out, jobs=2, timeout=300, case_timeout=1)
    finally:
        del os.environ[CANARY]
    connections = 0
    try:
        while listener.accept():
            connections += 1
    except OSError:
        pass
    return {"results": {r.name: r for r in results}, "out": out, "before": before, "after": _project_digest(),
            "survivors": survivors(), "connections": connections, "subs": subs}


def _results_json(graded, name) -> dict:
    return json.loads((graded["out"] / name / "results.json").read_text())


def per_function(graded, name) -> dict[str, float]:
    with (graded["out"] / "grades.csv").open() as f:
        row = next(r for r in csv.DictReader(f) if r["submission"] == name)
    return {fn: float(row[fn]) for fn in ADAPTERS}


# ---------------------------------------------------------------- honest work

@pytest.mark.parametrize("name", ["reference", "zipped"])
def test_honest_submissions_get_full_marks(graded, name):
    """Graded after the submission that attacks the grader and the others."""
    result = graded["results"][name]
    assert result.status == "ok" and result.score == pytest.approx(FULL), (result.status, result.score)
    assert _results_json(graded, name)["score"] == pytest.approx(FULL)


def test_stubs_get_zero(graded):
    assert graded["results"]["stubs"].score == 0


def test_max_scores_add_up_exactly_to_each_functions_points(graded):
    tests = _results_json(graded, "reference")["tests"]
    for fn, adapter in ADAPTERS.items():
        shares = [Decimal(repr(t["max_score"])) for t in tests if t["name"].startswith(f"{fn}: ")]
        assert shares and sum(shares) == adapter.points, f"{fn}: {sum(shares)} != {adapter.points}"
    assert sum(Decimal(repr(t["max_score"])) for t in tests) == FULL


@pytest.mark.parametrize("name, wrong", [
    ("half_split_rope", {"run_rope", "run_multihead_self_attention_with_rope", "run_transformer_block",
                         "run_transformer_lm"}),
    ("no_scale", {"run_scaled_dot_product_attention", "run_multihead_self_attention",
                  "run_multihead_self_attention_with_rope", "run_transformer_block", "run_transformer_lm"}),
])
def test_known_mistakes_get_partial_credit_on_the_right_functions(graded, name, wrong):
    scores = per_function(graded, name)
    assert 0 < graded["results"][name].score < FULL
    for fn, points in scores.items():
        if fn in wrong:
            assert points < ADAPTERS[fn].points, f"{fn} should lose points"
        elif fn not in ("get_transformer_lm",):  # the module test reuses the LM fixture
            assert points == pytest.approx(ADAPTERS[fn].points), f"{fn} lost points it should keep"


def test_probes_run_in_the_worker_and_still_catch_a_cpu_mask(graded):
    """The meta-device probe runs where the code is; a mask made without device= fails it."""
    tests = _results_json(graded, "mask_on_cpu")["tests"]
    device = {t["name"]: t for t in tests if "runs_on_meta_device" in t["name"]}
    failed = {n for n, t in device.items() if t["status"] == "failed"}
    assert "run_multihead_self_attention: test_function_runs_on_meta_device[run_multihead_self_attention]" in failed
    assert all("meta-device" in device[n]["output"] for n in failed)
    assert device["run_linear: test_function_runs_on_meta_device[run_linear]"]["status"] == "passed"


def test_syntax_error_gets_zero_with_the_reason(graded):
    assert graded["results"]["syntax_error"].score == 0
    tests = _results_json(graded, "syntax_error")["tests"]
    assert tests and all("SyntaxError" in t["output"] for t in tests if not t["name"].count("hidden"))


def test_edited_official_files_are_reported_and_ignored(graded):
    tampered = graded["results"]["zipped"].tampered
    assert "tests/test_fixtures.py" in tampered and f"fixtures/{TERM}/run_rope.safetensors" in tampered


def test_missing_adapters_is_a_clear_zero(graded):
    result = graded["results"]["no_adapters"]
    assert result.score == 0 and result.status == "no-adapters"
    assert "No adapters.py" in _results_json(graded, "no_adapters")["output"]


# ---------------------------------------------------------------- attacks

@requires_bwrap
@pytest.mark.parametrize("name", list(ATTACKS))
def test_every_attack_scores_zero_or_only_its_honest_part(graded, name):
    result = graded["results"][name]
    if name == "records_hidden":  # correct code, except that SiLU raises: it loses SiLU's points only
        scores = per_function(graded, name)
        assert scores["run_silu"] < ADAPTERS["run_silu"].points
        assert all(scores[fn] == pytest.approx(a.points) for fn, a in ADAPTERS.items() if fn != "run_silu")
    else:
        assert result.score == 0, f"{name} scored {result.score}"


@requires_bwrap
def test_a_reply_that_stalls_half_way_costs_one_test_not_the_batch(graded):
    result = graded["results"]["stalls_reply"]
    assert result.status == "ok" and result.score == 0
    messages = [t["output"] for t in _results_json(graded, "stalls_reply")["tests"]]
    assert any("did not finish within" in m for m in messages)


@requires_bwrap
def test_hidden_failures_say_only_what_kind_of_failure(graded):
    """Nothing the submission controls (message, exception name, returned shape) is published."""
    for name in ATTACKS:
        for t in _results_json(graded, name)["tests"]:
            if t["visibility"] != "visible" and t["status"] == "failed":
                assert re.fullmatch(r"Hidden test\. \w+, a hidden case: [a-z ,()]+\. Hidden cases show no "
                                    r"details: re-read the docstring's rules\.", t["output"]), t["output"]


@pytest.mark.parametrize("attack", ["steals_answers", "imports_reference"])
def test_the_same_attacks_do_work_without_the_sandbox(tmp_path, attack, forget_other_repositories):
    """Proof that the attacks are real: run in-process, as a local student run does, they pass."""
    from conftest import run_suite
    sub = with_attack(tmp_path / attack, *ATTACKS[attack], {"PROJECT": str(PROJECT)})
    run = run_suite("--adapters", str(sub / "adapters.py"), "-k", "test_fixture and seed-exercise and output")
    assert run.outcomes and all(o == "passed" for o in run.outcomes.values()), run.messages


def test_the_graders_files_are_unchanged(graded):
    changed = [str(p.relative_to(PROJECT)) for p in graded["before"] if graded["before"][p] != graded["after"].get(p)]
    assert not changed, changed


@requires_bwrap
def test_no_process_outlives_grading(graded):
    assert not graded["survivors"], graded["survivors"]
    assert (graded["out"] / "grades.csv").read_text().startswith("submission,")


@requires_bwrap
def test_no_network(graded):
    assert graded["connections"] == 0


@requires_bwrap
def test_hidden_inputs_and_the_environment_never_reach_visible_output(graded):
    term = Term(PROJECT, TERM, hidden=True)
    hidden = set()
    for case in (c for c in term.cases if c.hidden):
        for value in term.inputs(case).values():
            if isinstance(value, torch.Tensor):
                data = value.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
                hidden.add(hashlib.sha256(data).hexdigest()[:16])
    out = graded["out"] / "records_hidden"
    visible = [t["output"] for t in json.loads((out / "results.json").read_text())["tests"]
               if t["visibility"] == "visible"]
    seen = (out / "output.txt").read_text() + "".join(visible)
    assert "SEEN" in seen and "seen so far" in seen, "the attack should have printed what it saw"
    assert not [h for h in hidden if h in seen], "a hidden case's input reached visible output"
    assert CANARY not in seen and "secret" not in seen
    published = [t["output"] for t in json.loads((out / "results.json").read_text())["tests"]
                 if t["visibility"] != "visible"]
    assert published and not [m for m in published if "seen so far" in m], "a hidden case showed the code's message"


@pytest.mark.parametrize("name", ["traversal", "absolute", "symlink", "bomb", "symlinked_adapters"])
def test_a_bad_archive_gets_a_status_and_the_batch_goes_on(graded, name):
    result = graded["results"][name]
    assert result.status == "bad-submission" and result.score == 0
    assert _results_json(graded, name)["output"]
    assert not (graded["subs"].parent / "escaped.py").exists()


def test_every_submission_has_results_and_junit(graded):
    for name in graded["results"]:
        data = _results_json(graded, name)
        assert {"score", "execution_time", "output", "tests"} <= set(data)
        for t in data["tests"]:
            assert {"name", "score", "max_score", "status", "output", "visibility"} <= set(t)
        assert (graded["out"] / name / "junit.xml").read_text().startswith("<?xml")


def test_hidden_tests_publish_later_and_leak_nothing(graded):
    tests = _results_json(graded, "no_scale")["tests"]
    hidden = [t for t in tests if "/hidden-" in t["name"]]
    assert hidden and all(t["visibility"] == "after_published" for t in hidden)
    for t in hidden:
        assert "inputs:" not in t["output"] and "first mismatches" not in t["output"]


# ---------------------------------------------------------------- other machines and setups

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


@pytest.mark.skipif(not Protections.detect().uid_drop, reason="worker uids are used only as root")
def test_a_second_grader_on_the_machine_is_refused_while_the_first_runs(tmp_path):
    """Both would use the worker uids 61000+, and each sandbox's teardown kills every process
    of its uid."""
    import fcntl
    from harness.cli import BadSetup
    from harness.grade import UIDS_LOCK
    with open(UIDS_LOCK, "a") as first:
        fcntl.flock(first, fcntl.LOCK_EX)
        with pytest.raises(BadSetup, match="another `harness grade` is running on this machine"):
            grade_all(PROJECT, [], TERM, tmp_path / "out")
