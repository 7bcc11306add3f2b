"""`harness grade` on one batch of purpose-made submissions: honest ones keep full marks,
known mistakes lose the right points, and every hostile one (one per attack family,
selftest/hostile/) scores 0 and stays contained. Then grading where the machine or the setup
is not the usual one: under load, without bubblewrap, with a sandbox that cannot run Python
(Gradescope's container: selftest/test_gradescope.py).

One file on purpose, so that the machine's two cores grade one batch at a time: under `-n N`
a file runs in one worker, one test at a time. (Two graders at once do work: each claims its
own block of worker uids, and one test here runs two side by side.)"""

import ast
import csv
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest
import torch

from conftest import PROJECT, TERM, edit, reference_as_student
from harness.grading.grade import grade_all
from harness.grading.report import known_mistakes
from harness.grading.sandbox import NOFILE, PIDS, UID_BLOCK, Protections, readable_by_workers
from harness.store import Term
from submissions import (ACCOUNTING_PIECES, ATTACKS, CANARY, EDITED, EDITED_PIECES, EXITS, FULL, GRADED,
                         KEYRING_SECRET, LOOKUPS, OWNER, PROBE_MISTAKES, RESOURCE_ATTACKS, STEPS_OUTSIDE_STATE,
                         TWO_BUGS, bad_archives, copy_stubs, hangs_and_exits, looks_up, points_per_function,
                         survivors, with_attack, with_edits)

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
    constants = {"PROJECT": str(PROJECT), "OUT": str(out), "PORT": listener.getsockname()[1],
                 "KEYRING_SECRET": KEYRING_SECRET, "HINTS": [m.hint for m in known_mistakes() if m.hint][:12],
                 "PHRASES": [m.named_by for m in known_mistakes() if m.named_by][:12]}

    reference_as_student(subs / "reference")
    copy_stubs(subs / "stubs")
    for name, (target, old, new) in EDITED.items():
        edit(reference_as_student(subs / name) / "student" / target, old, new)
    for name, (start, attack) in ATTACKS.items():
        with_attack(subs / name, start, attack, constants)
    with_edits(subs / "two_bugs", TWO_BUGS)
    with_attack(with_edits(subs / "skips_drills_over_a_bug", STEPS_OUTSIDE_STATE), "as is", "skips_drills.py", constants)
    for name, (start, fallback) in LOOKUPS.items():
        looks_up(subs / name, start, fallback, constants, TERM)
    with_edits(subs / "probe_mistakes", PROBE_MISTAKES)
    with_attack(with_edits(subs / "lies_to_probes", PROBE_MISTAKES), "as is", "lies_to_probes.py", constants)
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

    # The keyring's writer and reader go first, side by side (two slots); then the attack on others,
    # so that honest work is graded after the harm; the stalls (which only wait) start early. Honest
    # work goes last, each beside an attack on the machine's resources.
    first = ("keyring_store", "keyring_read", "harms_others", "stalls_reply", "slow_drip")
    last = ("cpu_storm", "reference", "memory_fork", "zipped.zip", "disk_fill", "deep_tree")
    order = sorted(subs.iterdir(), key=lambda p: (p.name not in first, p.name in last,
                                                  (first + last).index(p.name) if p.name in first + last else 0,
                                                  p.name))
    before = _project_digest()
    os.environ[CANARY] = "secret"
    try:
        # 1 GiB: the memory fork (3 GB in 60 processes of 50 MB) must meet a per-submission limit
        # a block of worker uids of its own, so that a grader beside this one (its workers, its zombies) is
        # not taken for a survivor of this one
        block = _free_uid_block()
        results = grade_all(PROJECT, order, TERM, out, jobs=2, timeout=300, case_timeout=1, memory_mb=1024,
                            uid_block=block)
    finally:
        del os.environ[CANARY]
    connections = 0
    try:
        while listener.accept():
            connections += 1
    except OSError:
        pass
    return {"results": {r.name: r for r in results}, "out": out, "before": before, "after": _project_digest(),
            "survivors": survivors(block), "connections": connections, "subs": subs}


def _free_uid_block() -> int:
    from harness.grading.grade import _claim_uid_block
    lock, first_slot = _claim_uid_block()
    lock.close()
    return first_slot // UID_BLOCK


def _results_json(graded, name) -> dict:
    return json.loads((graded["out"] / name / "results.json").read_text())


def per_function(graded, name) -> dict[str, float]:
    with (graded["out"] / "grades.csv").open() as f:
        row = next(r for r in csv.DictReader(f) if r["submission"] == name)
    return {fn: float(row[fn]) for fn in GRADED}


# ---------------------------------------------------------------- honest work
def test_what_a_submission_says_neither_breaks_the_results_nor_fakes_a_verdict(tmp_path):
    """A lone surrogate once stopped junit.xml (and grades.csv) being written; terminal escapes
    could colour a fake "PASSED"; the wall time of the whole grading (hidden phase included)
    was published, a channel for hidden inputs."""
    import xml.etree.ElementTree as ET
    from harness.grading.grade import Graded, Grader, _write_results
    said = "bad \udc80 \x1b[32mPASSED 58/58\x1b[0m \x00\x0b end"
    graded = Graded("x")
    Grader.record(graded, {"tests": [{"id": "t::a", "adapter": "run_silu", "hidden": False, "outcome": "failed",
                                      "message": said, "check": "output", "points": True, "twin": ""}],
                           "output": said})
    _write_results(tmp_path, graded, "term")
    results = json.loads((tmp_path / "results.json").read_text())
    ET.parse(tmp_path / "junit.xml")  # well-formed
    shown = results["tests"][0]["output"] + (tmp_path / "output.txt").read_text()
    assert "\x1b" not in shown and "\x00" not in shown and "PASSED 58/58" in shown and "end" in shown, shown
    assert "execution_time" not in results



@pytest.mark.parametrize("name", ["reference", "zipped"])
def test_honest_submissions_get_full_marks(graded, name):
    """Graded after the submission that attacks the grader and the others."""
    result = graded["results"][name]
    assert result.status == "ok" and result.score == pytest.approx(FULL), (result.status, result.score)
    assert _results_json(graded, name)["score"] == pytest.approx(FULL)


def test_stubs_get_zero(graded):
    assert graded["results"]["stubs"].score == 0


def test_max_scores_add_up_exactly_to_each_functions_points(graded):
    """Per test (junit.xml, grades.csv) and per function (results.json's points entries)."""
    result = graded["results"]["reference"]
    scores = result.scores()
    entries = {t["name"]: t for t in _results_json(graded, "reference")["tests"] if "max_score" in t}
    for fn, points in GRADED.items():
        shares = [Decimal(repr(scores[t.id][1])) for t in result.tests if t.adapter == fn]
        assert shares and sum(shares) == Decimal(repr(points)), f"{fn}: {sum(shares)} != {points}"
        assert entries[f"{fn}: points"]["max_score"] == points
    assert sum(Decimal(repr(t["max_score"])) for t in entries.values()) == FULL
    assert set(entries) == {f"{fn}: points" for fn in GRADED}  # no other entry carries points


@pytest.fixture(scope="module")
def reached() -> dict[str, set[str]]:
    """contract function -> the variant-patched reference pieces its tests used (one spied run of
    the suite, as `harness mistakes` does): an edit of other pieces cannot cost it points."""
    from harness.term.coverage import reach
    from conftest import run_suite
    attributed = run_suite("--adapters", "reference.adapters", "--hidden", "--collect-only").adapters
    out: dict[str, set[str]] = {}
    for nodeid, pieces in reach(PROJECT, ("--hidden",)).items():
        out.setdefault(attributed.get(nodeid), set()).update(pieces)
    return out


def can_lose(reached, pieces: set[str]) -> set[str]:
    return {fn for fn, used in reached.items() if fn and used & pieces}


@pytest.mark.parametrize("name", list(EDITED_PIECES))
def test_known_mistakes_get_partial_credit_on_the_right_functions(graded, reached, name):
    """Functions whose tests never used an edited piece keep every point; the function that
    owns the piece loses some."""
    scores = per_function(graded, name)
    assert 0 < graded["results"][name].score < FULL
    exposed = can_lose(reached, EDITED_PIECES[name])
    for fn, points in scores.items():
        if fn not in exposed:
            assert points == pytest.approx(GRADED[fn]), f"{fn} lost points it should keep"
    lost = {fn for fn, points in scores.items() if points < GRADED[fn]}
    assert OWNER[name] in lost and lost <= exposed, (lost, exposed)
    # TA trial 9 read 94.94 in grades.csv and 94.9413 in results.json: one number, written one way
    with (graded["out"] / "grades.csv").open() as f:
        row = next(r for r in csv.DictReader(f) if r["submission"] == name)
    assert Decimal(row["score"]) == Decimal(repr(_results_json(graded, name)["score"])), row["score"]


def test_probes_run_in_the_worker_and_still_catch_a_cpu_mask(graded):
    """The meta-device probe runs where the code is; a mask made without device= fails it."""
    tests = _results_json(graded, "probe_mistakes")["tests"]  # right on the CPU, so judged on devices
    device = {t["name"]: t for t in tests if "runs_on_meta_device" in t["name"]}
    failed = {n for n, t in device.items() if t["status"] == "failed"}
    assert "run_multihead_self_attention: test_function_runs_on_meta_device[run_multihead_self_attention]" in failed
    assert all("meta-device" in device[n]["output"] for n in failed)
    assert device["run_linear: test_function_runs_on_meta_device[run_linear]"]["status"] == "passed"


def test_a_file_that_does_not_import_costs_only_the_functions_that_use_it(graded):
    """attention.py holds a syntax error: its functions, and those whose code imports it, fail with the
    reason; embeddings.py's keep their points."""
    assert graded["results"]["syntax_error"].status == "ok"
    scores = per_function(graded, "syntax_error")
    assert scores["run_silu"] == 0 and scores["run_embedding"] == pytest.approx(GRADED["run_embedding"])
    tests = _results_json(graded, "syntax_error")["tests"]
    silu = [t for t in tests if t["visibility"] == "visible" and t["name"].startswith("run_silu:")]
    assert silu and all("SyntaxError" in t["output"] for t in silu)
    # as the student's own run says it: the file and line, no traceback through the adapters (TA trial 10)
    assert all("cannot run: its code does not import at student/attention.py:" in t["output"]
               and "__getattr__" not in t["output"] for t in silu), silu[0]["output"]
    # TA trial 14: a must-raise case of a function whose file does not import was told it "raised StudentCodeError
    # where its docstring asks for ValueError", and the class report counted a known mistake for it
    raises = [t for t in tests if t["visibility"] == "visible" and t["name"].startswith("run_gpt2_lm:") and ":raises]" in t["name"]]
    assert raises and all("cannot run: its code does not import" in t["output"] and "asks for" not in t["output"]
                          for t in raises), raises


def test_edited_official_files_are_reported_and_ignored(graded):
    tampered = graded["results"]["zipped"].tampered
    assert "tests/test_fixtures.py" in tampered and f"fixtures/{TERM}/run_rope.safetensors" in tampered


def test_missing_adapters_is_a_clear_zero(graded):
    result = graded["results"]["no_adapters"]
    assert result.score == 0 and result.status == "no-adapters"
    said = _results_json(graded, "no_adapters")["output"]
    # what the top held, once, and no "0 of 0 tests are hidden" (TA trial 11)
    assert said.startswith("No adapters.py at the top of the submission, which holds ") and "No test could run" in said
    assert said.count("adapters.py at the top") == 1 and " of 0 tests" not in said, said


# ---------------------------------------------------------------- attacks

@requires_bwrap
@pytest.mark.parametrize("name", list(ATTACKS))
def test_every_attack_scores_zero_or_only_its_honest_part(graded, name):
    result = graded["results"][name]
    # correct code, except one function that raises where it spies: it loses that function's points only
    if spied := {"records_hidden": "run_silu", "reports_its_draws": "run_softmax"}.get(name):
        scores = per_function(graded, name)
        assert scores[spied] < GRADED[spied]
        assert all(scores[fn] == pytest.approx(points) for fn, points in GRADED.items() if fn != spied)
    elif name == "lists_non_tensors":  # correct code that lies only about its modules' listings
        assert result.status == "ok" and 0 < result.score <= FULL
    else:
        assert result.score == 0, f"{name} scored {result.score}"


@requires_bwrap
def test_a_reply_that_stalls_half_way_costs_one_test_not_the_batch(graded):
    result = graded["results"]["stalls_reply"]
    assert result.status == "ok" and result.score == 0
    messages = [t["output"] for t in _results_json(graded, "stalls_reply")["tests"]]
    assert any("began its reply but did not finish it within" in m for m in messages)


@requires_bwrap
def test_the_kernel_keyring_keeps_nothing_for_another_submission(graded):
    """One submission stores a secret in every keyring in reach; another, graded beside it in the
    other slot, looks for it and publishes what it finds. (A later batch looks again, below.)"""
    stored = (graded["out"] / "keyring_store" / "output.txt").read_text()
    assert stored.count("errno 1") >= 3, stored  # add_key: EPERM, under the seccomp filter
    _assert_keyring_reader_found_nothing(graded["out"] / "keyring_read")


def _assert_keyring_reader_found_nothing(folder):
    seen = (folder / "output.txt").read_text() + "".join(
        t["output"] for t in json.loads((folder / "results.json").read_text())["tests"])
    assert "KEYRING" in seen and "search -4: errno 1" in seen, "the reader should have run"
    assert KEYRING_SECRET not in seen and "harness-leak" not in seen


@requires_bwrap
@requires_bwrap
def test_machine_wide_counters_read_empty_and_open_files_are_bounded(graded):
    """/proc's machine-wide counters would carry a neighbour's activity; open files per process
    times processes per submission stays far below the kernel's shared file table."""
    said = next(t["output"] for t in _results_json(graded, "reads_machine")["tests"] if "MACHINE" in t["output"])
    seen = ast.literal_eval(re.search(r"MACHINE (\{.*?\})", said).group(1))
    assert seen and all(v == 0 for v in seen.values()), said
    soft, hard = ast.literal_eval(re.search(r"NOFILE (\(\d+, \d+\))", said).group(1))
    assert hard <= NOFILE and PIDS * NOFILE < int(Path("/proc/sys/fs/file-max").read_text()) // 4, said


@requires_bwrap
def test_no_file_lock_or_file_watch_reaches_a_neighbour(graded):
    """Locks are machine-wide and work on the read-only files every sandbox shares (torch's own): a
    submission locking them in its hidden phase told its neighbour 64 bits of a hidden input, through
    bubblewrap's namespaces. The seccomp filter denies every lock and watch it tried."""
    said = next(t["output"] for t in _results_json(graded, "locks_shared_files")["tests"] if "LOCKS" in t["output"])
    tried = dict(item.split(":") for item in re.search(r"LOCKS ([\w: ]+)", said).group(1).split())
    assert len(tried) == 8 and "WORKED" not in tried.values(), tried


@pytest.mark.parametrize("name", RESOURCE_ATTACKS)
def test_an_attack_on_the_machine_costs_only_its_own_submission(graded, name):
    """A disk fill, a 3,000-deep folder, 60 processes of 50 MB, 200 spinning processes and a reply
    that trickles in byte by byte: each scores 0 with status ok, honest work graded beside them
    keeps full marks, and no sandbox folder is left behind."""
    assert graded["results"][name].status == "ok" and graded["results"][name].score == 0
    for honest in ("reference", "zipped"):
        assert graded["results"][honest].score == pytest.approx(FULL), honest
    left = [p.name for p in Path(tempfile.gettempdir()).glob("sandbox-*-*")
            if p.name.split("-")[1].isdigit() and not Path(f"/proc/{p.name.split('-')[1]}").exists()]
    assert not left, left


@requires_bwrap
def test_a_reply_that_trickles_in_is_cut_at_one_deadline(graded):
    messages = [t["output"] for t in _results_json(graded, "slow_drip")["tests"]]
    assert any("began its reply but did not finish it within" in m for m in messages)


@requires_bwrap
def test_a_reply_too_large_for_the_driver_is_refused_with_its_reason(graded):
    """Red team 9: a module of one huge parameter is refused from its length, and the test says why."""
    messages = [t["output"] for t in _results_json(graded, "huge_module")["tests"]]
    assert any("the reply was too large to accept" in m and "67,108,864-byte limit" in m for m in messages)


@requires_bwrap
def test_malformed_replies_fail_their_tests_without_the_graders_traceback(graded):
    """Replies valid on the wire but not what was asked for: each fails its own test, and no
    published message holds the grader's traceback or paths."""
    messages = [t["output"] for t in _results_json(graded, "malformed_reply")["tests"]]
    assert any("malformed reply" in m for m in messages)
    # red team 6: an infinite handle said the grader failed; red team 8: a buffer listing of strings
    for name in ("malformed_reply", "infinite_reply", "lists_non_tensors"):
        assert not [t for t in _results_json(graded, name)["tests"] if "the grader failed" in t["output"]]
    assert any("malformed reply" in t["output"] for t in _results_json(graded, "lists_non_tensors")["tests"])
    for name in graded["results"]:
        for t in _results_json(graded, name)["tests"]:
            assert str(PROJECT) not in t["output"] and "Traceback (most recent" not in t["output"], t["output"]


@requires_bwrap
def test_hidden_failures_say_only_what_kind_of_failure(graded):
    """Nothing the submission controls (message, exception name, returned shape) is published."""
    from harness.grading.grade import POINTS_NOTE, STATUS_NOTES
    for name in ATTACKS:
        for t in _results_json(graded, name)["tests"]:
            if t["name"].endswith(": points"):  # a function's points: one fixed sentence
                assert t["output"] == POINTS_NOTE
            elif t["name"] == "grading: status":  # a status a hidden case may cause: the grader's words
                assert t["output"] + "\n" in STATUS_NOTES.values(), t["output"]
            elif t["visibility"] != "visible" and t["status"] == "failed":
                assert re.fullmatch(r"Hidden test\. \w+, a hidden case: [a-z ,()]+\. Hidden cases show no "
                                    r"details: re-read the docstring's rules\.", t["output"]), t["output"]


# ---------------------------------------------------------------- points without the work

def _public_value_checks(result) -> list:
    return [t for t in result.tests if t.check in ("output", "gradient") and not t.hidden]


@pytest.mark.parametrize("name", ["looks_up_only", "looks_up_with_fakes"])
def test_answers_looked_up_in_the_public_fixtures_score_zero(graded, name):
    """The lookup passes every public output and gradient check (the fakes also pass softmax's,
    attention's and RoPE's properties), and earns nothing: no twin passes. A drill's public cases are
    no exception: there the contract's glue runs, not the lookup's, calling the stubs."""
    from harness.contract import drills
    result = graded["results"][name]
    public = [t for t in _public_value_checks(result) if t.adapter not in drills()]
    assert public and all(t.outcome == "passed" for t in public), [t.id for t in public if t.outcome != "passed"]
    ran = [t for t in _public_value_checks(result) if t.adapter in drills()]
    assert ran and all(t.outcome == "failed" for t in ran), [t.id for t in ran if t.outcome != "failed"]
    assert result.score == 0, f"{name} scored {result.score}"
    if name == "looks_up_with_fakes":
        assert any(t.outcome == "passed" and "test_rope_preserves_norms" in t.id for t in result.tests)


def test_a_lookup_over_buggy_code_scores_what_the_buggy_code_scores(graded):
    """Two known mistakes fail public tests on their own; laid under a lookup they pass every
    public test but a drill's (there the contract's glue runs the buggy pieces, as it does alone), and
    score exactly the same, function by function."""
    from harness.contract import drills
    alone, hidden = graded["results"]["two_bugs"], graded["results"]["looks_up_over_two_bugs"]
    assert any(t.outcome == "failed" for t in _public_value_checks(alone))
    looked_up = [t for t in _public_value_checks(hidden) if t.adapter not in drills()]
    assert looked_up and all(t.outcome == "passed" for t in looked_up), [t.id for t in looked_up if t.outcome != "passed"]
    drilled = {t.id: t.outcome for t in _public_value_checks(alone) if t.adapter in drills()}
    assert {t.id: t.outcome for t in _public_value_checks(hidden) if t.adapter in drills()} == drilled
    assert 0 < alone.score < FULL and hidden.score == alone.score, (alone.score, hidden.score)
    assert per_function(graded, "looks_up_over_two_bugs") == per_function(graded, "two_bugs")


def test_property_tests_draw_other_values_in_grading(graded):
    """A property test's inputs come from seeds in the public tests: in grading they are moved by a value
    only the grading seed gives, so answers looked up for the public draws answer nothing (red team A4:
    such a table over softmax and cross-entropy without the max earned 1.39 points)."""
    from harness.student_run.checks import generator
    result = graded["results"]["reports_its_draws"]
    said = [t.message for t in result.tests if "test_softmax_slices_sum_to_one[-1]" in t.id]
    assert said and "drawn [" in said[0], said
    drawn = [float(v) for v in said[0].split("drawn [")[1].split("]")[0].split(",")]
    public = torch.randn(4, 5, 6, generator=generator(0))[0, 0, :3].tolist()  # what a student's run draws
    assert len(drawn) == 3 and all(abs(a - b) > 1e-4 for a, b in zip(drawn, public)), (drawn, public)


@pytest.mark.parametrize("probe", ["test_lookup_allocates_no_one_hot[run_embedding]",
                                   "test_function_runs_on_meta_device[run_multihead_self_attention]",
                                   "test_sinusoidal_module_has_no_parameters"])
def test_lying_to_a_probe_in_the_worker_earns_nothing(graded, probe):
    """A one-hot embedding, a mask made on the CPU and a table stored as a Parameter fail these
    probes, which run in the submission's process; code that replaces the probes passes them.
    The verdict is reported, and carries no points either way."""
    honest, liar = graded["results"]["probe_mistakes"], graded["results"]["lies_to_probes"]
    [caught] = [t for t in honest.tests if t.id.endswith("::" + probe)]
    [fooled] = [t for t in liar.tests if t.id.endswith("::" + probe)]
    assert caught.outcome == "failed" and fooled.outcome == "passed", (caught.outcome, fooled.outcome, fooled.message)
    assert honest.scores()[caught.id] == liar.scores()[fooled.id] == (0.0, 0.0)
    assert liar.score == honest.score


def test_public_verdicts_move_no_score_on_any_term(graded):
    """The rule behind 'a lookup over buggy code scores what the buggy code scores', on every
    term: with the twins' outcomes fixed, no choice of public outcomes changes a score (a term
    built with grading seed 11 once gave the lookup 38.25 against the buggy code's 38.0)."""
    import random
    from harness.grading.grade import Graded
    honest = graded["results"]["two_bugs"]
    public = [i for i, t in enumerate(honest.tests) if not t.hidden and t.twin]
    assert len(public) > 100
    rng = random.Random(0)
    for _ in range(20):
        tests = list(honest.tests)
        for i in rng.sample(public, len(public) // 2):
            tests[i] = replace(tests[i], outcome="failed" if tests[i].outcome == "passed" else "passed")
        assert Graded("x", tests).score == honest.score


def test_scores_need_fresh_values():
    """The rule on its own: a public check's points are its twin's, earned on fresh values alone
    (whatever the public verdict), a property's once an output case passes on fresh values (a
    module builder: its own forward on fresh values)."""
    from harness.grading.grade import Graded, Test

    def score(outcomes: dict) -> float:
        tests = [Test("public", "run_silu", False, check="output", twin="twin"),
                 Test("twin", "run_silu", True, check="output", points=False),
                 Test("property", "run_silu", False),
                 Test("probe", "run_silu", False, points=False),
                 Test("module", "get_transformer_lm", False),
                 Test("forward", "get_transformer_lm", True, check="output"),  # a forward_values test
                 Test("lm", "run_transformer_lm", True, check="output")]
        for t in tests:
            t.outcome = outcomes.get(t.id, "failed")
        return Graded("x", tests).scores()

    passed = "passed"
    assert score({"public": passed, "property": passed, "probe": passed}) == {
        "public": (0.0, 0.0), "twin": (0.0, 0.5), "property": (0.0, 0.5), "probe": (0.0, 0.0),
        "module": (0.0, 2.0), "forward": (0.0, 2.0), "lm": (0.0, 5.0)}
    every = score(dict.fromkeys(["public", "twin", "property", "probe", "module", "forward", "lm"], passed))
    assert every["twin"] == every["property"] == (0.5, 0.5) and every["module"] == (2.0, 2.0)
    assert every["public"] == (0.0, 0.0)  # a public verdict moves no score: it is shown before publication
    twin_only = score({"twin": passed, "property": passed, "module": passed})
    assert twin_only["property"] == twin_only["twin"] == (0.5, 0.5)
    assert score({"module": passed})["module"] == (0.0, 2.0)
    # the function's values prove nothing about the module: only its own forward does (a lazy builder)
    assert score({"lm": passed, "module": passed})["module"] == (0.0, 2.0)
    assert score({"forward": passed, "module": passed})["module"] == (2.0, 2.0)


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
    digests = {True: set(), False: set()}
    for case in term.cases:
        for value in term.inputs(case).values():
            if isinstance(value, torch.Tensor):
                data = value.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
                digests[case.hidden].add(hashlib.sha256(data).hexdigest()[:16])
    hidden = digests[True] - digests[False]  # a twin keeps a given input no shuffle can change, e.g. ids [-1]
    assert len(hidden) > 100
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


@pytest.mark.parametrize("name", ["traversal", "absolute", "symlink", "bomb", "crowded", "symlinked_adapters",
                                  "symlinked_folder"])
def test_a_bad_archive_gets_a_status_and_the_batch_goes_on(graded, name):
    result = graded["results"][name]
    assert result.status == "bad-submission" and result.score == 0
    assert _results_json(graded, name)["output"]
    assert not (graded["subs"].parent / "escaped.py").exists()


@pytest.mark.parametrize("name", ["ast_bomb", "largest_folder"])
def test_code_the_grader_must_not_parse_costs_the_batch_nothing(graded, name):
    """Three 16 MiB list literals (ast.parse once took the grader's own process, and the whole
    batch's grades, with them) and a submission of the largest size allowed: each is graded
    as the stubs it holds, and grades.csv holds every row (the honest ones keep full marks)."""
    result = graded["results"][name]
    assert result.status == "ok" and result.score == 0 and result.code_hash, (result.status, result.output[-500:])
    with (graded["out"] / "grades.csv").open() as f:
        assert {r["submission"] for r in csv.DictReader(f)} == set(graded["results"])


def test_visible_results_do_not_depend_on_hidden_outcomes(graded):
    """What a student sees before publication is the same whether the hidden tests pass or
    fail: a submission that fails chosen twins on purpose signals nothing (it once carried 178
    bits a submission in the visible scores)."""
    from harness.grading.grade import LATE_STATUSES, Graded, results_json
    honest = graded["results"]["reference"]
    flipped = Graded(honest.name, [replace(t, outcome="failed") if t.hidden else t for t in honest.tests])
    assert flipped.score < honest.score

    def visible(g):
        data = results_json(g, TERM)
        return data["output"], [t for t in data["tests"] if t["visibility"] == "visible"]
    assert visible(flipped) == visible(honest) and visible(honest)[1]
    assert results_json(honest, TERM)["visibility"] == "after_published"
    # a hidden case that runs out of time, or whose worker cannot start (its uid's processes
    # filled on purpose), once changed the top-level output (the red team's 1.6 bits a submission)
    for status in LATE_STATUSES:
        assert visible(replace(flipped, status=status)) == visible(honest), status


def test_every_submission_has_results_and_junit(graded):
    for name in graded["results"]:
        data = _results_json(graded, name)
        assert {"score", "output", "tests"} <= set(data)
        for t in data["tests"]:
            assert {"name", "status", "output", "visibility"} <= set(t)
            # before grades are published, nothing shown depends on a hidden outcome: no points
            assert t["visibility"] != "visible" or "score" not in t, t
        assert (graded["out"] / name / "junit.xml").read_text().startswith("<?xml")


def test_hidden_tests_publish_later_and_leak_nothing(graded):
    tests = _results_json(graded, "no_scale")["tests"]
    hidden = [t for t in tests if "/hidden-" in t["name"]]
    assert hidden and all(t["visibility"] == "after_published" for t in hidden)
    for t in hidden:
        assert "inputs:" not in t["output"] and "first mismatches" not in t["output"]


def test_the_class_report_names_the_mistakes_and_flags_identical_code(graded):
    """harness/grading/report.py on this batch: the missing scale under its own function, no mistake for
    honest work; the reference and the zip of the same code are one identical pair (from the
    hashes the grader wrote)."""
    from harness.grading.report import analyse, known_mistakes, load, write_report
    write_report(graded["out"], PROJECT)
    with (graded["out"] / "mistakes.csv").open() as f:
        named = {(r["variant"], r["function"]): r["submissions"] for r in csv.DictReader(f)}
    assert set(named[("attention_missing_scale", "run_scaled_dot_product_attention")].split(";")) == {
        "no_scale", "two_bugs"}  # two_bugs leaves out the scale too (TWO_BUGS)
    assert not {"reference", "zipped"} & {n for names in named.values() for n in names.split(";")}
    assert analyse(*load(graded["out"]), known_mistakes()).identical == [["reference", "zipped"]]


def test_a_rewritten_drill_earns_nothing(graded):
    """A drill's glue checks the student's pieces, and students have it in their adapters.py: rewritten,
    an AdamW drill that never resumes hid step counts kept outside the state_dict, and a checkpoint drill
    that never checkpointed earned its points from the stubs (2 points each). In grading the contract's
    own glue runs, and the checkpoint drill's state crosses between two workers as the checkpoint's bytes
    alone: pieces that keep it in memory instead (which the glue's check cannot see in one process) earn
    nothing either."""
    for name in ("skips_drills", "skips_drills_over_a_bug"):
        assert per_function(graded, name)["run_resume_training"] == 0, name
    scores = per_function(graded, "skips_drills_over_a_bug")
    assert scores["run_adamw_resumed"] < GRADED["run_adamw_resumed"]
    drills = ("run_adamw_resumed", "run_resume_training")
    assert all(scores[fn] == pytest.approx(points) for fn, points in GRADED.items() if fn not in drills), scores


def test_a_forged_diagnosis_names_no_mistake_in_the_class_report(graded):
    """A result whose class name was a `Likely cause:` line once reached the report unfiltered (the
    unsendable-result path), and the class report counted a correct submission under 154 (mistake,
    function) pairs; a returned dict keyed by a check's bare phrase (no label) was counted under that
    mistake (red team). Every text the worker sends is disarmed, whatever path it takes."""
    from harness.grading.report import MATCHED, write_report
    write_report(graded["out"], PROJECT)
    with (graded["out"] / "mistakes.csv").open() as f:
        named = [(r["variant"], r["function"]) for r in csv.DictReader(f)
                 if "forges_diagnosis" in r["submissions"].split(";")]
    assert not named, named
    visible = [t["output"] for t in _results_json(graded, "forges_diagnosis")["tests"] if t["visibility"] == "visible"]
    assert any("cannot be checked" in m for m in visible) and any("Likely cause (the code's words):" in m for m in visible)
    assert not [m for m in visible if MATCHED in m or "\nWhat differs: subtract" in m]


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


def test_load_costs_honest_code_nothing(loaded, reached):
    """Per-call limits count CPU time: with both cores busy, every function but the one that
    hangs and crashes keeps full marks."""
    scores = points_per_function(loaded)
    assert loaded.status == "ok"
    exposed = can_lose(reached, ACCOUNTING_PIECES)  # run_transformer_accounting and the tests that use it
    assert all(scores[fn] == pytest.approx(points) for fn, points in GRADED.items() if fn not in exposed)


@pytest.mark.parametrize("said", ["did not finish within 1 s of CPU time", "the worker process died during this call"])
def test_a_hang_or_a_crash_costs_only_the_tests_it_touches(loaded, said):
    """Under load too; the next test runs in a fresh worker."""
    assert points_per_function(loaded)["run_transformer_accounting"] < GRADED["run_transformer_accounting"]
    assert any(said in t.message for t in loaded.tests)


def test_without_bubblewrap_the_worker_still_runs_apart_and_limited(tmp_path, reached):
    """Where namespaces are forbidden: a plain subprocess (as root, under its own uid) still grades. Where
    no worker uid can reach this Python either (it lives under /root), grading refuses: the submission
    would run as root (the red team read the hidden cases and rewrote a neighbour's grade that way)."""
    from harness.grading.grade import BadSetup
    exits = reference_as_student(tmp_path / "subs" / "exits")
    edit(exits / "student" / EXITS[0], *EXITS[1:])
    plain = Protections.detect(bubblewrap=False)
    if os.geteuid() == 0 and not plain.uid_drop:
        with pytest.raises(BadSetup, match="the submissions would run as root"):
            grade_all(PROJECT, [exits], TERM, tmp_path / "out", jobs=1, case_timeout=5, protections=plain)
        assert "uid drop" in plain.describe().split("OFF:")[1]
        return  # the uid drop itself is graded in selftest/test_gradescope.py, from a system Python's venv
    if plain.uid_drop and readable_by_workers(PROJECT, [exits]):  # the worker's uid could read this checkout
        with pytest.raises(BadSetup, match="can read"):
            grade_all(PROJECT, [exits], TERM, tmp_path / "out", jobs=1, case_timeout=5, protections=plain)
        return  # a closed project is graded in selftest/test_gradescope.py
    [result] = grade_all(PROJECT, [exits], TERM, tmp_path / "out", jobs=1, case_timeout=5, protections=plain)
    scores = points_per_function(result)
    assert result.status == "ok" and 0 < result.score < FULL and not survivors()
    exposed = can_lose(reached, ACCOUNTING_PIECES)
    assert all(scores[fn] == pytest.approx(points) for fn, points in GRADED.items() if fn not in exposed)
    assert "filesystem allow-list" in plain.describe().split("OFF:")[1]


def test_a_sandbox_that_cannot_run_python_stops_grading_before_it_starts(tmp_path):
    from harness.grading.grade import BadSetup
    broken = Protections(bwrap="/bin/false", uid_drop=False)
    with pytest.raises(BadSetup, match="cannot start a worker"):
        grade_all(PROJECT, [], TERM, tmp_path / "out", protections=broken)


def test_require_confinement_refuses_to_grade_without_the_sandbox(tmp_path, monkeypatch):
    """Before anything starts: no sandbox check left running, no submission graded. The
    grader's temporary folders go to a folder of this test's own (under -n, other workers
    make sandboxes in the shared one meanwhile)."""
    from harness.grading.grade import BadSetup
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    with pytest.raises(BadSetup, match="--require-confinement: .*OFF: .*filesystem allow-list"):
        grade_all(PROJECT, [], TERM, tmp_path / "out", protections=Protections(bwrap=None, uid_drop=False),
                  require_confinement=True)
    assert not list((tmp_path / "tmp").iterdir())


@requires_bwrap
def test_two_graders_at_once_and_a_later_batch_finds_no_key(graded, tmp_path):
    """A TA's batch (another process) beside this one: each claims its own block of worker uids,
    and both grade in full. Both come after keyring_store's batch, one of them under its uids,
    and the keyring reader in each finds nothing."""
    for batch in ("ours", "theirs"):
        with_attack(tmp_path / batch / "keyring_read", *ATTACKS["keyring_read"], {"KEYRING_SECRET": KEYRING_SECRET})
        reference_as_student(tmp_path / batch / "reference")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "HARNESS"))}
    theirs = subprocess.Popen([sys.executable, "-m", "harness", "grade", *sorted((tmp_path / "theirs").iterdir()),
                               "--out", str(tmp_path / "theirs-out"), "--term", TERM, "--jobs", "2",
                               "--case-timeout", "5"],
                              cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        grade_all(PROJECT, sorted((tmp_path / "ours").iterdir()), TERM, tmp_path / "ours-out", jobs=2,
                  case_timeout=5)
    finally:
        said = theirs.communicate(timeout=600)[0]
    assert theirs.returncode == 0, said[-2000:]
    for out in (tmp_path / "ours-out", tmp_path / "theirs-out"):
        with (out / "grades.csv").open() as f:
            scores = {r["submission"]: float(r["score"]) for r in csv.DictReader(f)}
        assert scores == {"keyring_read": 0, "reference": pytest.approx(FULL)}, said[-2000:]
        _assert_keyring_reader_found_nothing(out / "keyring_read")


@pytest.mark.skipif(os.geteuid() != 0, reason="a copy of its own needs root to give away")
def test_a_submissions_copy_is_its_slots_uid_alone(tmp_path):
    """Without bubblewrap a worker sees the host's /tmp: a neighbour's worker once read the
    reference's copy there and a stub scored 85. With the uid drop each copy is readable by its uid's
    group alone (0750/0640), and owned by the grader: the submission cannot change its own files."""
    from harness.grading.grade import _copy_code
    reference_as_student(tmp_path / "sub")
    _copy_code(tmp_path / "sub", tmp_path / "copy", 61999)
    for path in [tmp_path / "copy", *(tmp_path / "copy").rglob("*")]:
        info = path.stat()
        mode = stat.S_IMODE(info.st_mode)
        assert info.st_uid == os.geteuid() and info.st_gid == 61999, path
        assert mode & 0o007 == 0 and mode & 0o020 == 0 and mode & 0o040, (path, oct(mode))


def test_the_uid_locks_are_the_graders_own(tmp_path, monkeypatch):
    """A lock planted by someone else (a FIFO once hung the next grader; a folder others can
    write) is refused with a message, never opened and waited on."""
    from harness.grading import grade
    monkeypatch.setattr(grade, "LOCKS", tmp_path / "locks")
    grade._lock_file(0).close()
    os.mkfifo(tmp_path / "locks" / "uids-1.lock")
    with pytest.raises(grade.BadSetup, match="not a regular file"):
        grade._lock_file(1)
    os.chmod(tmp_path / "locks", 0o777)
    with pytest.raises(grade.BadSetup, match="only it can write"):
        grade._lock_file(0)


def test_grades_csv_is_written_whatever_one_submission_does(tmp_path, monkeypatch):
    """A crash in one submission's preparation (here: an OSError, as a full disk gives) becomes
    its status; the rest are graded and grades.csv is written."""
    from harness.grading import grade
    prepare = grade.Grader.prepare

    def breaks(self, submission, name, *uid):
        if submission.name == "breaks":
            raise OSError(28, "No space left on device")
        return prepare(self, submission, name, *uid)

    monkeypatch.setattr(grade.Grader, "prepare", breaks)
    copy_stubs(tmp_path / "breaks")
    copy_stubs(tmp_path / "stubs")
    results = grade_all(PROJECT, [tmp_path / "breaks", tmp_path / "stubs"], TERM, tmp_path / "out", case_timeout=5)
    assert [r.status for r in results] == ["grader-error", "ok"]
    with (tmp_path / "out" / "grades.csv").open() as f:
        assert [r["status"] for r in csv.DictReader(f)] == ["grader-error", "ok"]
    assert "No space left" not in _results_json({"out": tmp_path / "out"}, "breaks")["output"]


# ---------------------------------------------------------------- a batch's results: shards, merge, regrading

FORMULA_NAMES = {"+cmd": "+cmd", "=1+1": "_1+1", "@x": "@x", "-x": "-x"}  # file name -> submission name


def _harness(*args: str, **kw) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "HARNESS"))}
    return subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=PROJECT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def _said(process: subprocess.Popen) -> tuple[str, str]:
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, (out[-2000:], err[-2000:])
    return out, err


def _grades(out: Path) -> list[list[str]]:
    with (out / "grades.csv").open(newline="") as f:
        return list(csv.reader(f))


def _without_seconds(rows: list[list[str]]) -> list[list[str]]:
    at = rows[0].index("seconds")
    return [r[:at] + r[at + 1:] for r in rows]


@pytest.fixture(scope="module")
def batches(tmp_path_factory):
    """Four submissions (the reference, two stubs, one without adapters.py) whose names a
    spreadsheet would read as formulas: graded as one batch; as two shards, side by side, through
    the command line (stderr a pipe, as under nohup), then merged; then one of them graded again
    into the one batch's folder, as the reference this time."""
    tmp = tmp_path_factory.mktemp("batches")
    subs = tmp / "subs"
    reference_as_student(subs / "-x")
    copy_stubs(subs / "+cmd")
    copy_stubs(subs / "=1+1")
    copy_stubs(subs / "@x")
    (subs / "@x" / "adapters.py").unlink()
    given = sorted(subs.iterdir())
    one = grade_all(PROJECT, given, TERM, tmp / "one", jobs=2, case_timeout=5)
    shards = [_harness("grade", *map(str, given), "--term", TERM, "--out", str(tmp / f"shard{k}"),
                       "--shard", f"{k}/2", "--case-timeout", "5") for k in (1, 2)]
    logs = [_said(s)[1] for s in shards]
    merged = _said(_harness("merge", str(tmp / "shard1"), str(tmp / "shard2"), "--out", str(tmp / "merged")))[0]
    before = _grades(tmp / "one")
    regraded = reference_as_student(tmp / "again" / "+cmd")
    again = _said(_harness("grade", str(regraded), "--term", TERM, "--out", str(tmp / "one"), "--case-timeout", "5"))
    return {"tmp": tmp, "one": {g.name: g for g in one}, "logs": logs, "merged": merged, "before": before,
            "again": again}


def test_two_shards_merged_give_the_rows_of_one_batch(batches):
    tmp = batches["tmp"]
    shards = [{r[0] for r in _grades(tmp / f"shard{k}")[1:]} for k in (1, 2)]
    assert shards[0] and shards[1] and not shards[0] & shards[1], "each shard grades its own slice"
    assert _without_seconds(_grades(tmp / "merged")) == _without_seconds(batches["before"])
    assert len(batches["before"]) == 5 and "4 results" in batches["merged"]
    assert batches["one"]["-x"].score == pytest.approx(FULL) and batches["one"]["@x"].status == "no-adapters"


def test_a_log_gets_a_line_per_submission_as_it_finishes(batches):
    lines = [re.findall(r"^graded (\d+)/(\d+) (\S+) ([\d.]+) (\S+)$", log, re.M) for log in batches["logs"]]
    assert sorted(name for found in lines for _, _, name, _, _ in found) == sorted(FORMULA_NAMES.values())
    for found in lines:
        assert [(int(done), int(total)) for done, total, *_ in found] == [(i + 1, len(found)) for i in range(len(found))]
    assert "\r" not in "".join(batches["logs"]), "no progress bar in a log"


def test_regrading_one_submission_replaces_its_row_only(batches):
    """Graded again into the batch's folder (now the reference): its row changes, the other three stay,
    and the class report still counts four."""
    tmp = batches["tmp"]
    rows = {r[0]: r for r in _grades(tmp / "one")[1:]}
    before = {r[0]: r for r in batches["before"][1:]}
    assert rows.keys() == before.keys() and len(rows) == 4
    assert float(rows["'+cmd"][1]) == pytest.approx(FULL) and float(before["'+cmd"][1]) == 0
    assert all(rows[name] == before[name] for name in rows if name != "'+cmd")
    assert "<p>4 submissions (" in (tmp / "one" / "report.html").read_text()
    assert re.search("^" + re.escape(f"graded 1/1 +cmd {FULL:.2f} ok") + "$", batches["again"][1], re.M)


def test_names_that_look_like_formulas_are_text_in_grades_csv(batches):
    names = [r[0] for r in _grades(batches["tmp"] / "one")[1:]]
    assert sorted(names) == sorted("'" + n if n[0] in "+-@=" else n for n in FORMULA_NAMES.values())
    assert "=1+1" not in names


def test_a_batch_killed_half_way_keeps_the_grades_it_finished(tmp_path):
    """The grader dies (SIGKILL: no cleanup, no last rewrite) as it starts the second submission:
    grades.csv already holds the first."""
    copy_stubs(tmp_path / "first")
    copy_stubs(tmp_path / "second")
    dies = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from harness.grading import grade
        one = grade._grade_one

        def dies(grader, driver, submission, name):
            if name == "second":
                grade.remove_tree(grader.work)
                os.kill(os.getpid(), signal.SIGKILL)
            return one(grader, driver, submission, name)

        grade._grade_one = dies
        grade.grade_all(Path({str(PROJECT)!r}), [Path({str(tmp_path / 'first')!r}), Path({str(tmp_path / 'second')!r})],
                        {TERM!r}, Path({str(tmp_path / 'out')!r}), case_timeout=5)
        """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "HARNESS"))}
    killed = subprocess.run([sys.executable, "-c", dies], cwd=PROJECT, env=env, capture_output=True, text=True,
                            timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert [(r[0], r[3]) for r in _grades(tmp_path / "out")[1:]] == [("first", "ok")]
    assert (tmp_path / "out" / "first" / "graded.json").is_file() and not (tmp_path / "out" / "second").exists()


def test_hidden_cases_a_submission_keeps_from_importing_are_its_own_failure(tmp_path):
    """Red team 6: a submission that fails its second import (a marker left in its scratch folder) made
    every grade say the grader failed, and so asked the staff for a regrade. Its files are unchanged:
    its hidden cases fail, and its status stays ok."""
    sub = reference_as_student(tmp_path / "second_import_fails")
    with (sub / "adapters.py").open("a") as f:  # the worker's scratch folder outlives the visible phase
        f.write("\nimport os as _os\nif _os.path.exists('imported-once'):\n    raise ImportError('gone')\n"
                "open('imported-once', 'w').close()\n")
    [graded] = grade_all(PROJECT, [sub], TERM, tmp_path / "out", case_timeout=20)
    assert graded.status == "ok", (graded.status, graded.output[-2000:])
    assert all(t.outcome == "passed" for t in graded.tests if not t.hidden)
    assert {t.outcome for t in graded.tests if t.hidden} == {"failed"}


def test_hidden_cases_that_cannot_import_files_changed_since_the_visible_ones_are_the_graders_error(tmp_path):
    """Red team 5: another slot's submission deleted this one's copy between its phases; its hidden-case
    worker could not import, and an honest reference scored 0 on them with status ok. Files that changed
    between the phases (a submission's own uid cannot write them) are the grader's error: a regrade."""
    sub = reference_as_student(tmp_path / "copy_harmed")
    script = textwrap.dedent(f"""
        from pathlib import Path
        from harness.grading import drive, grade, sandbox
        seal = sandbox.Sandbox.seal_for_hidden_cases

        def seal_and_harm(self):  # what red team 5's neighbour did, from outside this submission
            seal(self)
            (self.submission / "adapters.py").write_text("raise ImportError('gone')\\n")

        sandbox.Sandbox.seal_for_hidden_cases = seal_and_harm
        grader = grade.Grader(Path({str(PROJECT)!r}), {TERM!r}, 300, 20, 2048)
        try:
            grader.ready()
            uid = grade.Driver(grader.first_slot).uid if grader.protections.uid_drop else None
            graded, copy = grader.prepare(Path({str(sub)!r}), "copy_harmed", uid)
            grade.Grader.record(graded, drive.grade(grader.project, {TERM!r}, copy, grader.first_slot, grader.settings))
            print("STATUS", graded.status, all(t.outcome == "passed" for t in graded.tests if not t.hidden))
        finally:
            grader.close()
        """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "HARNESS"))}
    done = subprocess.run([sys.executable, "-c", script], cwd=PROJECT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert "STATUS grader-error True" in done.stdout, (done.stdout[-2000:], done.stderr[-3000:])


@requires_bwrap
def test_a_kept_sandbox_carries_nothing_to_the_slots_next_submission(tmp_path):
    """A slot's sandbox, whose zygote has imported torch, serves the slot's next submission only once every
    process of the last one is dead, its scratch folder is empty and nothing the last one could change
    about the zygote (priority, CPUs, limits, OOM score, its output pipe's flags) changed; else the next
    one gets a fresh sandbox. Red team 7: a worker whose leader thread exited alone outlived the kill and
    printed into, and killed the workers of, the next submission; a SIGIO owner set on the shared stdout
    stopped the zygote once the grader drained it."""
    subs = tmp_path / "subs"
    everything = ["nice", "affinity", "nofile", "oom"]
    honest = [f"{letter}_honest" for letter in "acegi"]
    attacks = {"b_leaves_a_file": ("taints_zygote.py", {"CHANGES": []}),
               "d_taints": ("taints_zygote.py", {"CHANGES": everything}),
               "f_survives_the_kill": ("survives_kill.py", {}), "h_taints_its_output": ("taints_output.py", {})}
    order = sorted([with_attack(subs / name, "reference", "finds_taint.py", {}) for name in honest]
                   + [with_attack(subs / name, "stubs", attack, {"MARK": "6061", **constants})
                      for name, (attack, constants) in attacks.items()])
    results = {r.name: r for r in grade_all(PROJECT, order, TERM, tmp_path / "out", jobs=1, timeout=300)}
    # the zygote's OOM score is root's file (it is not dumpable): refused; the other three changes are made
    assert "TAINTED ['nice', 'affinity', 'nofile', 'file']" in results["d_taints"].output, results["d_taints"].output
    assert "TAINTED ['file']" in results["b_leaves_a_file"].output
    found = {name: ast.literal_eval(re.search(r"FOUND (\{.*\})", results[name].output).group(1)) for name in honest}
    first = found["a_honest"]
    for name in honest[1:]:
        assert results[name].score == FULL, (name, results[name].score, results[name].output[-1000:])
        assert "SURVIVOR" not in results[name].output, results[name].output[-1000:]
        assert {k: found[name][k] for k in ("nice", "cpus", "nofile", "scratch", "stdout")} == \
            {"nice": first["nice"], "cpus": first["cpus"], "nofile": first["nofile"], "scratch": [], "stdout": [0, 0]}, found
    assert found["c_honest"]["zygote"] == first["zygote"], "a file left in scratch is removed, the zygote kept"
    assert found["c_honest"]["scratch_mtime"] == 0, "scratch's own times are set back (red team 14's mtime channel)"
    assert found["e_honest"]["zygote"] != first["zygote"], "a zygote that was changed is not kept"
    assert found["i_honest"]["zygote"] == found["g_honest"]["zygote"], "the output pipe's flags are reset, the zygote kept"


@requires_bwrap
def test_fresh_sandboxes_give_each_submission_its_own(tmp_path):
    """`harness grade --fresh-sandboxes`: no sandbox is kept, so two honest submissions in one slot meet two zygotes."""
    order = [with_attack(tmp_path / "subs" / name, "reference", "finds_taint.py", {}) for name in ("a", "b")]
    results = grade_all(PROJECT, order, TERM, tmp_path / "out", jobs=1, timeout=300, reuse_sandboxes=False)
    zygotes = [ast.literal_eval(re.search(r"FOUND (\{.*\})", r.output).group(1))["zygote"] for r in results]
    assert [r.score for r in results] == [FULL, FULL] and zygotes[0] != zygotes[1], zygotes


def test_a_driver_reads_its_term_once_and_hands_it_to_each_submission_unsealed():
    """A driver grades a slot's submissions one after another against one term: its files are read, hashed
    and parsed once (70 ms a submission before), and each submission's visible tests seal it again."""
    from harness.grading import drive
    first = drive.Grading.term(PROJECT, TERM, True)
    first.sealed = True  # as the last visible test of the previous submission left it
    again = drive.Grading.term(PROJECT, TERM, True)
    assert again is first and not again.sealed
    assert drive.Grading.term(PROJECT, TERM, False) is not first  # without hidden cases: another term
    hidden = next(case for case in first.cases if case.hidden)
    first.sealed = True
    with pytest.raises(Exception, match="a visible test read the hidden case"):
        first.tensors(hidden)


def test_a_submission_moves_nothing_the_next_one_in_its_slot_draws(tmp_path):
    """Red team 8: one driver serves a slot's submissions in turn, and its global torch generator went on from
    one to the next. A submission whose hidden checkpoint drill returned bytes or not made the driver run its
    own training run or not, and so moved the draws of the next submission's visible lookup tests, which its
    code could read back (3 hidden bits, and the previous student's result). Each starts from the same state."""
    subs = tmp_path / "subs"
    copy_stubs(subs / "c_stub")  # its checkpoint drills fail their first half: the driver runs no training run
    order = [reference_as_student(subs / "a_honest"), with_attack(subs / "b_reads", "reference", "reports_driver_draws.py", {}),
             subs / "c_stub",
             with_attack(subs / "d_reads", "reference", "reports_driver_draws.py", {})]
    results = {r.name: r for r in grade_all(PROJECT, order, TERM, tmp_path / "out", jobs=1, timeout=300)}
    draws = {name: re.findall(r"DRAWS (\w+)", results[name].output) for name in ("b_reads", "d_reads")}
    assert draws["b_reads"] and draws["b_reads"] == draws["d_reads"], draws
    assert results["b_reads"].score == results["d_reads"].score == FULL


def test_one_function_that_never_returns_costs_its_own_points_and_its_callers(tmp_path):
    """A TA's student: correct code but for a `while True` in silu scored 0/123, status timeout. Each test of
    silu and of everything calling it spent the whole per-call limit until the submission's 600 s ran out,
    and no hidden case ran. A function that ran out of time twice is not called again."""
    sub = with_edits(tmp_path / "loops", [("attention.py", "    wide = widen(x)\n    return (wide * torch.sigmoid",
                                           "    while True:\n        pass\n    wide = widen(x)\n    return (wide * torch.sigmoid")])
    [graded] = grade_all(PROJECT, [sub], TERM, tmp_path / "out", timeout=240, case_timeout=2)
    assert graded.status == "ok", (graded.status, graded.output[-1000:])
    silu = [t for t in graded.tests if t.adapter == "run_silu" and t.points]
    assert silu and all(t.outcome == "failed" for t in silu)
    assert any("is not called again in this submission" in t.message for t in silu), [t.message for t in silu]
    # where it was stuck, as the student's own run says it (TA trial 10: the grader named no line)
    stuck = [t.message for t in silu if "did not finish within 2 s of CPU time" in t.message]
    assert stuck and all("It was running student/attention.py:" in m for m in stuck), [t.message for t in silu]
    # a module's forward is charged to the function that built it (TA trial 9: get_transformer_lm's model
    # ran out of time on 5 tests, its forward charged to no function)
    built = [t for t in graded.tests if t.adapter == "get_transformer_lm"]
    timed_out = [t for t in built if "did not finish within" in t.message]
    assert 1 <= len(timed_out) <= 2 and any("is not called again" in t.message for t in built), \
        [t.message[:120] for t in built]
    scores = points_per_function(graded)
    untouched = ["run_embedding", "run_softmax", "run_cross_entropy", "run_layernorm", "run_lr_schedule"]
    assert all(scores[fn] == pytest.approx(GRADED[fn]) for fn in untouched), {fn: scores[fn] for fn in untouched}


def test_without_bubblewrap_submissions_are_graded_one_at_a_time():
    """Red team 12: without bubblewrap two slots share /tmp, and a file one made readable carried its hidden
    inputs into the other's visible message; one slot at a time leaves a neighbour nothing to read."""
    from harness.grading.grade import slots
    said = []
    assert slots(2, 5, Protections(bwrap=None, uid_drop=True), said.append) == 1
    assert said and "one submission at a time" in said[0] and "install bubblewrap" in said[0]
    assert slots(2, 5, Protections(bwrap="/usr/bin/bwrap", uid_drop=True)) == 2
    assert slots(4, 1, Protections(bwrap="/usr/bin/bwrap", uid_drop=True)) == 1
