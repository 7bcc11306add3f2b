"""A batch's files, on results written by the grader's own writers (no grading here:
test_grading.py grades real batches, shards and merges them): each result folder's graded.json,
grades.csv rebuilt from every result folder, what an unusable graded.json does, shards, merge."""

import csv
import json
import subprocess
import sys

import pytest

from conftest import PROJECT
from harness import cli
from harness.grading import grade
from harness.grading.grade import Graded, Results, Test as Run, _write_results, merge, parse_shard, shard_of


def _graded(name: str, outcome: str = "passed", seconds: float = 1.5) -> Graded:
    return Graded(name, [Run("tests/test_x.py::test_a", "run_silu", False, outcome, "", "output", True, ""),
                         Run("tests/test_x.py::test_b", None, True, "failed", "said", "", False, "twin")],
                  output="printed", tampered=["tests/test_x.py"], seconds=seconds, code_hash="a" * 64)


def _folder(out, *graded: Graded):
    out.mkdir(exist_ok=True)
    for g in graded:
        _write_results(out / g.name, g, "term")
    return out


def _rows(out) -> dict[str, dict]:
    with (out / "grades.csv").open(newline="") as f:
        return {r["submission"]: r for r in csv.DictReader(f)}


def test_a_result_folder_records_every_field_of_its_result(tmp_path):
    g = _graded("alice")
    _folder(tmp_path, g)
    [back], problems = Results(tmp_path).read()
    assert back == g and not problems
    assert set(json.loads((tmp_path / "alice" / "graded.json").read_text())) == set(vars(g))


def test_grades_csv_is_built_from_every_result_folder_and_a_rewrite_replaces_one(tmp_path):
    """Rows by name, whoever wrote them; a result written again replaces its row and its files
    (a code.sha256 it no longer has goes). Folders that hold no result are no rows."""
    _folder(tmp_path, _graded("bob"), _graded("alice"))
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes.txt").write_text("x")
    results = Results(tmp_path)
    results.write()
    assert list(_rows(tmp_path)) == ["alice", "bob"]
    _write_results(tmp_path / "bob", Graded("bob", status="bad-submission", seconds=0.1), "term")
    _, problems = results.write()
    assert not problems
    rows = _rows(tmp_path)
    assert rows["bob"]["status"] == "bad-submission" and rows["alice"]["status"] == "ok"
    assert not (tmp_path / "bob" / "code.sha256").exists()


MISSING = object()


def _spoiled(field: str, value, test: bool = False):
    """Spoil one field of the record (of its first test, with `test`): a value, or MISSING."""
    def spoil(path):
        record = json.loads(path.read_text())
        part = record["tests"][0] if test else record
        if value is MISSING:
            del part[field]
        else:
            part[field] = value
        path.write_text(json.dumps(record))
    return spoil


BAD_RECORDS = {  # what is wrong -> how graded.json is spoiled
    "not JSON": lambda path: path.write_text("{"),
    "cut short": lambda path: path.write_bytes(path.read_bytes()[:40]),
    "not UTF-8": lambda path: path.write_bytes(b'{"name": "\xff"}'),
    "too deep": lambda path: path.write_text("[" * 100_000 + "]" * 100_000),
    "a list": lambda path: path.write_text("[]"),
    "a field missing": _spoiled("seconds", MISSING),
    "a field more": _spoiled("score", 58),
    "another name": _spoiled("name", "mallory"),
    "an unknown status": _spoiled("status", "excellent"),
    "seconds as text": _spoiled("seconds", "1.5"),
    "seconds NaN": _spoiled("seconds", float("nan")),
    "seconds negative": _spoiled("seconds", -1),
    "tests not a list": _spoiled("tests", {"a": 1}),
    "a test not an object": _spoiled("tests", ["x"]),
    "tampered not text": _spoiled("tampered", [1]),
    "a bad code hash": _spoiled("code_hash", "../../x"),
    "an output too long": _spoiled("output", "x" * (grade.MAX_OUTPUT + 1)),
    "a test's bool as a number": _spoiled("hidden", 1, test=True),
    "a test's field missing": _spoiled("twin", MISSING, test=True),
    "a test's message too long": _spoiled("message", "x" * (grade.MAX_TEXT + 1), test=True),
}


@pytest.mark.parametrize("spoil", list(BAD_RECORDS))
def test_a_graded_json_that_cannot_be_used_is_reported_and_left_out(tmp_path, spoil):
    _folder(tmp_path, _graded("alice"), _graded("bob"))
    path = tmp_path / "bob" / "graded.json"
    BAD_RECORDS[spoil](path)
    graded, problems = Results(tmp_path).write()
    assert [g.name for g in graded] == ["alice"] and list(_rows(tmp_path)) == ["alice"]
    [problem] = problems
    assert str(path) in problem and "cannot be used" in problem and "grade bob again" in problem, problem


def test_a_graded_json_too_large_or_not_a_file_is_not_read(tmp_path, monkeypatch):
    _folder(tmp_path, _graded("alice"), _graded("bob"), _graded("carol"))
    monkeypatch.setattr(grade, "MAX_RECORD", (tmp_path / "alice" / "graded.json").stat().st_size - 1)
    (tmp_path / "bob" / "graded.json").unlink()
    (tmp_path / "bob" / "graded.json").symlink_to(tmp_path / "carol" / "graded.json")
    (tmp_path / "carol" / "graded.json").write_text("{}")
    _, problems = Results(tmp_path).read()
    assert len(problems) == 3 and "over" in problems[0] and "not a regular file" in problems[1], problems


def test_a_folder_with_results_but_no_graded_json_is_reported(tmp_path):
    """Cut short between its files, or written by a grader from before graded.json."""
    _folder(tmp_path, _graded("alice"), _graded("bob"))
    (tmp_path / "bob" / "graded.json").unlink()
    graded, [problem] = Results(tmp_path).read()
    assert [g.name for g in graded] == ["alice"] and "bob" in problem and "no graded.json" in problem


# ---------------------------------------------------------------- shards

@pytest.mark.parametrize("text, said", [("0/2", "K counts the slices from 1 to N, here 1 to 2"),
                                         ("3/2", "K counts the slices from 1 to N, here 1 to 2"),
                                         ("1/0", "N, the number of slices, must be at least 1"),
                                         ("x", "'x' is not K/N"), ("2", "'2' is not K/N"),
                                         ("-1/2", "'-1/2' is not K/N"), ("1/2/3", "is not K/N")])
def test_a_bad_shard_is_refused_with_what_is_wrong(text, said, capsys):
    with pytest.raises(ValueError, match=said):
        parse_shard(text)
    with pytest.raises(SystemExit) as stopped:
        cli.parser(True).parse_args(["grade", "sub", "--out", "out", "--shard", text])
    assert stopped.value.code == 2 and "argument --shard: " in capsys.readouterr().err


@pytest.mark.parametrize("count", [0, 1, 5, 12])
@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_shards_cover_each_submission_once_in_any_order(count, n):
    names = [f"s{i:02d}" for i in range(count)]
    slices = [shard_of(names, k, n) for k in range(1, n + 1)]
    assert sorted(x for s in slices for x in s) == names
    assert max(map(len, slices)) - min(map(len, slices)) <= 1
    assert [shard_of(names[::-1], k, n) for k in range(1, n + 1)] == slices
    assert parse_shard(f"{n}/{n}") == (n, n)


# ---------------------------------------------------------------- merge

def test_merged_shards_write_what_one_folder_of_them_all_writes(tmp_path):
    """Into a folder that holds results already: a shard's result replaces the one of its name,
    the others stay. The same result in two shards (a shard given twice, a result whose run took
    longer) is fine."""
    a, b, c = _graded("alice"), _graded("bob", "failed"), _graded("carol")
    _folder(tmp_path / "s1", a, c)
    _folder(tmp_path / "s2", b)
    Results(_folder(tmp_path / "one", a, b, c, _graded("dave"))).write()
    _folder(tmp_path / "merged", _graded("alice", "failed"), _graded("dave"))
    _folder(tmp_path / "s3", _graded("carol", seconds=7.0))  # carol again, graded more slowly: the same grade
    graded, problems = merge([tmp_path / "s1", tmp_path / "s2", tmp_path / "s1", tmp_path / "s3"], tmp_path / "merged",
                             PROJECT)
    assert not problems and [g.name for g in graded] == ["alice", "bob", "carol", "dave"]
    assert (tmp_path / "merged" / "grades.csv").read_text() == (tmp_path / "one" / "grades.csv").read_text()
    assert (tmp_path / "merged" / "report.html").is_file() and (tmp_path / "merged" / "mistakes.csv").is_file()
    for name in ("alice", "bob", "carol"):
        assert (tmp_path / "merged" / name / "results.json").read_bytes() == \
            (tmp_path / "one" / name / "results.json").read_bytes()


@pytest.mark.parametrize("trouble, said", [
    ("two results of one name", "alice is in .*s1 and in .*s2 with different results"),
    ("a result that cannot be used", "s2/bob/graded.json cannot be used"),
    ("not a folder", "is not a folder"),
    ("no results", "holds no results and no grades.csv"),
])
def test_merge_refuses_and_copies_nothing(tmp_path, trouble, said):
    _folder(tmp_path / "s1", _graded("alice"), _graded("carol"))
    _folder(tmp_path / "s2", _graded("bob"))
    if trouble == "two results of one name":
        _folder(tmp_path / "s2", _graded("alice", "failed"))
    elif trouble == "a result that cannot be used":
        (tmp_path / "s2" / "bob" / "graded.json").write_text("{")
    elif trouble == "not a folder":
        (tmp_path / "s2").rename(tmp_path / "s2.away")
        (tmp_path / "s2").write_text("")
    else:
        (tmp_path / "s2" / "bob" / "graded.json").unlink()
        (tmp_path / "s2" / "bob" / "results.json").unlink()
    with pytest.raises(ValueError, match=said):
        merge([tmp_path / "s1", tmp_path / "s2"], tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


def test_merge_command(tmp_path):
    _folder(tmp_path / "s1", _graded("alice"))
    _folder(tmp_path / "s2", _graded("alice", "failed"))
    run = [sys.executable, "-m", "harness", "merge", str(tmp_path / "s1"), str(tmp_path / "s2"),
           "--out", str(tmp_path / "merged")]
    refused = subprocess.run(run, cwd=PROJECT, capture_output=True, text=True)
    assert refused.returncode == 2 and "nothing merged" in refused.stderr and "different results" in refused.stderr
    (tmp_path / "s2" / "alice").rename(tmp_path / "s2" / "bob")
    (tmp_path / "s2" / "bob" / "graded.json").write_text(
        (tmp_path / "s2" / "bob" / "graded.json").read_text().replace('"alice"', '"bob"'))
    merged = subprocess.run(run, cwd=PROJECT, capture_output=True, text=True)
    assert merged.returncode == 0 and "2 results" in merged.stdout, merged.stderr
    assert list(_rows(tmp_path / "merged")) == ["alice", "bob"]


def test_a_submission_path_that_does_not_exist_grades_nothing(tmp_path, capsys):
    """A TA's typo (submissions/zoe) was graded as a 0 row, status bad-submission, exit 0, beside the real ones."""
    real = tmp_path / "alice"
    real.mkdir()
    code = cli.main(["grade", str(real), str(tmp_path / "zoe"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and f"no such file or folder: {tmp_path / 'zoe'}; nothing was graded" in err, err
    assert not (tmp_path / "out").exists()


def test_a_result_replaced_by_a_later_grading_is_kept_and_said(tmp_path):
    """A TA graded another batch into an --out that held results: a stub named bob replaced bob's 123 with 0,
    exit 0, no trace. The old result is kept under .replaced/ and the batch says so; grades.csv holds the new."""
    out = tmp_path / "out"
    out.mkdir()
    _write_results(out / "bob", Graded("bob", status="timeout", output="the first grading"), "t")
    kept = grade.set_aside(out, "bob")
    assert kept is not None and kept[1] == "0.00, timeout" and kept[0].parent == out / grade.REPLACED
    assert json.loads((kept[0] / "graded.json").read_text())["output"] == "the first grading"
    _write_results(out / "bob", Graded("bob", status="ok"), "t")
    graded, problems = Results(out).write()
    assert [g.status for g in graded] == ["ok"] and not problems  # .replaced/ is not a result folder
    assert grade.set_aside(out, "carol") is None


def test_the_error_column_says_why_a_row_was_not_graded_normally(tmp_path):
    """A TA: bad-submission and timeout rows had an empty error column; the reason was only in results.json."""
    out = tmp_path / "out"
    out.mkdir()
    _write_results(out / "mallory", Graded("mallory", status="bad-submission",
                                           output="archive entry '../../x' points outside the submission"), "t")
    _write_results(out / "erin", Graded("erin", status="timeout", output="printed by the submission"), "t")
    _write_results(out / "bob", Graded("bob", status="ok", output="printed by the submission"), "t")
    held = "no adapters.py at the top of the submission, which holds alice, notes.txt: submit adapters.py ..."
    _write_results(out / "alice", Graded("alice", status="no-adapters", output=held), "t")
    Results(out).write()
    with (out / "grades.csv").open(newline="") as f:
        rows = {r["submission"]: r["error"] for r in csv.DictReader(f)}
    assert rows == {"bob": "", "erin": "The submission ran out of time; unfinished tests score 0.",
                    "mallory": "archive entry '../../x' points outside the submission", "alice": held}, rows


def test_one_out_folder_holds_one_terms_grades(tmp_path):
    """TA trial 13 regraded a student on a new term into the old term's --out: one grades.csv mixed two terms'
    scores, with no warning. Grading into it and merging with it are refused, naming both terms; results
    written before terms were recorded are read as before."""
    out = tmp_path / "out"
    out.mkdir()
    _write_results(out / "alice", Graded("alice", status="ok"), "old-term")
    assert json.loads((out / "alice" / "graded.json").read_text())["term"] == "old-term"
    with pytest.raises(ValueError, match=r"graded on term old-term \(alice among them\), and this batch grades "
                                         r"term new-term: one grades.csv would mix"):
        grade.grade_all(PROJECT, [tmp_path / "bob"], "new-term", out)
    shard = tmp_path / "shard"
    shard.mkdir()
    _write_results(shard / "bob", Graded("bob", status="ok"), "new-term")
    with pytest.raises(ValueError, match=r"nothing merged:\n.*graded on term \S+-term .*, and others on term") as said:
        merge([shard], out)
    assert "old-term" in str(said.value) and "new-term" in str(said.value), said.value
    record = json.loads((out / "alice" / "graded.json").read_text())
    del record["term"], record["source"]  # as an older grader wrote it
    (out / "alice" / "graded.json").write_text(json.dumps(record))
    graded, problems = merge([shard], out)
    assert sorted(g.name for g in graded) == ["alice", "bob"] and not problems


def test_a_submission_two_folders_deep_is_told_where_its_adapters_are(tmp_path):
    """TA trial 13: a zip of hw/repo/adapters.py was told only "which holds hw"; it is still not graded there."""
    import zipfile
    archive = tmp_path / "deep.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("hw/repo/adapters.py", "")
        z.writestr("hw/repo/student/__init__.py", "")
    with pytest.raises(grade.BadSubmission, match=r"which holds hw: .* \(it has hw/repo/adapters.py, two folders down\)"):
        grade._unpack(archive, tmp_path / "into")
