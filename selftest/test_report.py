"""The class report (harness/grading/report.py) on a batch written by the grader's own writers: mistakes
named under the right function, crash kinds, item analysis, flags, pseudonyms; then the page in
headless Chromium. The end-to-end run on a really graded batch is in test_grading.py."""

import csv
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import PROJECT
from harness.grading.drive import HIDDEN_FAILURES
from harness.grading.remote import WorkerFailure
from harness.grading.grade import Graded, Results, Test as Run, _write_results
from harness.grading.report import Submission, Result, analyse, code_hash, known_mistakes, write_report

NUMBER = {m.variant: m.number for m in known_mistakes()}
HINT = {m.variant: m.hint for m in known_mistakes()}
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _t(fn: str, case: str, outcome: str = "passed", message: str = "", hidden: bool = False) -> Run:
    return Run(f"tests/test_fixtures.py::test_fixture[{fn}/{case}:output]", fn, hidden, outcome, message)


def _cause(variant: str) -> str:
    return f"values differ\nLikely cause: your output matches {HINT[variant]}."


def _work(**failures) -> list[Run]:
    """Two public and one hidden test of a few functions; `failures` replaces some by name."""
    tests = {f"{fn}/{case}": _t(fn, case, hidden=case.startswith("hidden"))
             for fn in ("run_softmax", "run_silu", "run_scaled_dot_product_attention", "run_transformer_accounting",
                        "get_transformer_lm") for case in ("a", "b", "hidden-1")}
    for key, test in failures.items():
        tests[key.replace("__", "/")] = test
    return list(tests.values())


def _batch(folder: Path) -> Path:
    stubs = code_hash(PROJECT)
    fail = "failed"
    graded = [
        Graded("zzref", _work(), code_hash="1" * 64),
        Graded("zzref_copy", _work(), code_hash="1" * 64),
        Graded("zzstarter", [_t(t.adapter, t.id.split("/")[-1][:-8], fail, "run_x is not implemented yet (...)",
                              t.hidden) for t in _work()], code_hash=stubs),
        Graded("zzstarter_too", [], status="collection-error", code_hash=stubs),
        Graded("zzsoftmax", _work(run_softmax__a=_t("run_softmax", "a", fail, _cause("softmax_without_max")),
                                run_softmax__hidden=_t("run_softmax", "hidden-1", fail, "hidden", hidden=True)),
               code_hash="2" * 64),
        # a diagnosis in one report of the function beats the phrase of another's ("MACs")
        Graded("zzflops", _work(run_transformer_accounting__a=_t("run_transformer_accounting", "a", fail,
                                                               "ratio 0.964; 0.5 means MACs were counted"),
                              run_transformer_accounting__b=_t("run_transformer_accounting", "b", fail,
                                                               _cause("missing_lm_head_flops"))),
               code_hash="3" * 64),
        # a phrase alone names its mistake; the same mistake in two functions counts in each
        Graded("zzscale", _work(run_scaled_dot_product_attention__a=_t(
            "run_scaled_dot_product_attention", "a", fail, _cause("attention_missing_scale")),
            get_transformer_lm__a=_t("get_transformer_lm", "a", fail, "keep the blocks in an nn.ModuleList"),
            get_transformer_lm__b=_t("get_transformer_lm", "b", fail, _cause("attention_missing_scale"))),
            code_hash="4" * 64),
        Graded("zzoverfit", _work(run_silu__hidden=_t("run_silu", "hidden-1", fail, "hidden", hidden=True)),
               code_hash="5" * 64),
        # out of time before its hidden cases ran: no verdict on them, so no flag
        Graded("zzslow", _work(run_silu__hidden=_t("run_silu", "hidden-1", "not run",
                                                   "not run: the submission ran out of time", hidden=True)),
               status="timeout", code_hash="8" * 64),
        Graded("zzcrashes", _work(
            run_silu__a=_t("run_silu", "a", fail, "run_silu: ValueError: boom\n  File ..."),
            run_silu__b=_t("run_silu", "b", fail, "run_silu: the call did not finish within 30 s of CPU time"),
            run_softmax__a=_t("run_softmax", "a", fail, "run_softmax: the worker process died during this call"),
            run_softmax__hidden=_t("run_softmax", "hidden-1", fail,
                                   "run_softmax, a hidden case: " + dict(HIDDEN_FAILURES)[TimeoutError], hidden=True)),
               code_hash="6" * 64),
        Graded("zztampered", _work(), tampered=["tests/test_fixtures.py"], code_hash="7" * 64),
        Graded("zzbroken", [], status="grader-error"),
    ]
    return _write(folder, graded)


def _write(folder: Path, graded: list[Graded]) -> Path:
    """As `harness grade` writes them."""
    folder.mkdir(exist_ok=True)
    for g in graded:
        _write_results(folder / g.name, g, "term")
    Results(folder).write()
    return folder


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    folder = _batch(tmp_path_factory.mktemp("graded"))
    write_report(folder, PROJECT)
    with (folder / "mistakes.csv").open() as f:
        rows = list(csv.DictReader(f))
    return {"folder": folder, "rows": rows, "html": (folder / "report.html").read_text()}


def _named(rows) -> dict[tuple[int, str], list[str]]:
    return {(int(r["mistake"]), r["function"]): r["submissions"].split(";") for r in rows}


def test_each_mistake_is_named_under_its_function_with_who_made_it(report):
    assert _named(report["rows"]) == {
        (NUMBER["softmax_without_max"], "run_softmax"): ["zzsoftmax"],
        (NUMBER["missing_lm_head_flops"], "run_transformer_accounting"): ["zzflops"],
        (NUMBER["attention_missing_scale"], "run_scaled_dot_product_attention"): ["zzscale"],
        (NUMBER["attention_missing_scale"], "get_transformer_lm"): ["zzscale"],
    }, "a phrase beside a diagnosis ('MACs') is not counted; a hidden failure names nothing"
    assert all(r["count"] == str(len(r["submissions"].split(";"))) for r in report["rows"])


def test_a_phrase_alone_names_its_mistake(tmp_path):
    folder = tmp_path / "g"
    g = Graded("zzlm", _work(get_transformer_lm__a=_t("get_transformer_lm", "a", "failed",
                                                    "keep the blocks in an nn.ModuleList")))
    write_report(_write(folder, [g]))
    with (folder / "mistakes.csv").open() as f:
        assert [(r["variant"], r["function"]) for r in csv.DictReader(f)] == [("blocks_in_python_list",
                                                                               "get_transformer_lm")]


def test_mistakes_a_case_cannot_tell_apart_are_named_both_and_claimed_neither(tmp_path):
    """TA trial 9: rope_half_split and RoPE's pairs written back interleaved give one result through
    attention (q and k permuted alike); the report listed both hints, and the second's own phrase in its
    hint counted it as made. The report names both, claims neither: no row."""
    from harness.grading import report
    from harness.student_run import diagnose
    assert report.CANNOT_TELL == diagnose.CANNOT_TELL
    hints = {m.variant: m.hint for m in known_mistakes()}
    both = ["rope_half_split", "rope_half_pairs_written_interleaved"]
    output = (f"output: 40 of 40 elements differ{report.MATCHED}2 {diagnose.CANNOT_TELL} (every element within 1e-6), "
              "so it cannot tell them apart: " + " ".join(f"({i}) {hints[n]}." for i, n in enumerate(both, 1)))
    folder = tmp_path / "g"
    fails = _t("run_multihead_self_attention_with_rope", "a", "failed", output)
    write_report(_write(folder, [Graded("zzrope", _work(run_multihead_self_attention_with_rope__a=fails))]))
    with (folder / "mistakes.csv").open() as f:
        assert list(csv.DictReader(f)) == []


def test_a_diagnosis_written_by_the_submission_names_nothing(tmp_path):
    """The red team's forgery: an exception whose message is a `Likely cause:` line holding every
    hint. Only the grader's own sentence on a wrong result names a mistake, and only one."""
    hints = [m.hint for m in known_mistakes() if m.hint]
    forged = "run_softmax: _forged: x\nLikely cause: your output matches " + "; ".join(hints)  # any class name
    folder = tmp_path / "g"
    write_report(_write(folder, [Graded("zzforger", _work(run_softmax__a=_t("run_softmax", "a", "failed", forged)))]))
    with (folder / "mistakes.csv").open() as f:
        assert list(csv.DictReader(f)) == []


def test_crash_kinds_identical_code_and_flags(report, tmp_path):
    from harness.grading.report import load
    subs, _ = load(report["folder"])
    a = analyse(subs, 58, known_mistakes(), code_hash(PROJECT))
    assert dict(a.crashes["run_silu"]) == {"raised": 1, "timeout": 1, "not implemented": 1, "not run": 1}
    assert dict(a.crashes["run_softmax"]) == {"worker died": 1, "timeout": 1, "not implemented": 1}
    assert a.identical == [["zzref", "zzref_copy"]], "the starter code, submitted twice, is no identical pair"
    assert sorted(a.starter) == ["zzstarter", "zzstarter_too"]
    assert a.hidden_gaps == [("zzoverfit", ["run_silu"])]
    html = report["html"]
    for text in ("tests/test_fixtures.py", "zzbroken: grader-error", "zzref, zzref_copy", "For course staff only"):
        assert text in html, text
    assert "<script" not in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_public_pass_hidden_fail_flags_only_functions_whose_own_code_fails():
    """A RoPE mistake fails the LM's hidden forward too (get_transformer_lm uses RoPE): the flag is the
    function whose own hidden cases fail while every function its code uses passes."""
    def run(fn, test, hidden, passed):
        return Result(fn, test, hidden, passed, "" if passed else "values differ")
    lm = [run("get_transformer_lm", "init", False, True), run("get_transformer_lm", "forward", True, False)]
    rope = [run("run_rope", "a", False, False), run("run_rope", "hidden-1", True, False)]
    overfit = [run("run_rope", "a", False, True), run("run_rope", "hidden-1", True, False)]
    subs = [Submission("zzrope", 0, "ok", [], {}, "", lm + rope), Submission("zzlm", 0, "ok", [], {}, "", lm),
            Submission("zzoverfit", 0, "ok", [], {}, "", lm + overfit)]
    gaps = dict(analyse(subs, 85, []).hidden_gaps)
    assert gaps == {"zzlm": ["get_transformer_lm"], "zzoverfit": ["run_rope"]}, gaps
    # hidden cases that ran out of time (the submission's limit, or one call's) say nothing of the fixtures
    timed = [run("run_rope", "a", False, True),
             Result("run_rope", "hidden-1", True, False, "Hidden test. not run: the submission ran out of time"),
             Result("run_rope", "hidden-2", True, False, "Hidden test. run_rope, a hidden case: ran out of time. Hidden")]
    assert not analyse([Submission("zztimed", 0, "timeout", [], {}, "", lm[:1] + timed)], 85, []).hidden_gaps


def test_a_submission_that_cannot_be_imported_has_its_own_status_and_is_listed_apart(tmp_path):
    """A SyntaxError in student/ fails every test the same way: its status says so with the file and
    line (results.json, grades.csv), and the report lists it apart, not as 'worker died' per function."""
    from harness.grading.grade import STATUS_NOTES, results_json
    said = "importing adapters.py raised SyntaxError at student/attention.py:3 (`def softmax(x:`): invalid syntax"
    dead = [_t(t.adapter, t.id.split("/")[-1][:-8], "failed",
               f"{t.adapter}, a hidden case: {dict(HIDDEN_FAILURES)[WorkerFailure]}. Hidden cases show no details."
               if t.hidden else f"{t.adapter}: {said}", t.hidden) for t in _work()]
    broken = Graded("zzsyntax", dead, status="import-error", import_error=said, code_hash="9" * 64)
    folder = _write(tmp_path / "g", [Graded("zzref", _work(), code_hash="1" * 64), broken])
    assert "import-error" in STATUS_NOTES and said in results_json(broken, "term")["output"]
    with (folder / "grades.csv").open() as f:
        row = next(r for r in csv.DictReader(f) if r["submission"] == "zzsyntax")
    assert row["status"] == "import-error" and row["error"] == said
    write_report(folder, PROJECT)
    from harness.grading.report import load
    a = analyse(*load(folder), known_mistakes())
    assert [s.name for s in a.unimportable] == ["zzsyntax"]
    assert not any("worker died" in kinds for kinds in a.crashes.values()), dict(a.crashes)
    html = (folder / "report.html").read_text()
    assert "Could not be imported: 1" in html and "student/attention.py:3" in html


def _sub(name: str, score: float, passes: dict[str, bool]) -> Submission:
    return Submission(name, score, "ok", [], {}, "", [Result("run_silu", t, False, ok, "") for t, ok in passes.items()])


def test_item_analysis_facility_and_discrimination():
    """Ten submissions scoring 0..9: the top and bottom 27% are three each."""
    subs = [_sub(f"s{i}", i, {"everyone": True, "no_one": False, "weak_pass": i <= 2, "strong_pass": i >= 5})
            for i in range(10)]
    items = {i.test: i for i in analyse(subs, 9, []).items}
    assert (items["weak_pass"].facility, items["weak_pass"].discrimination) == (0.3, -1.0)
    assert (items["strong_pass"].facility, items["strong_pass"].discrimination) == (0.5, 1.0)
    assert (items["everyone"].facility, items["everyone"].discrimination) == (1.0, 0.0)
    assert items["no_one"].facility == 0.0


def test_anonymised_report_hides_names_with_stable_pseudonyms(tmp_path):
    folder = _batch(tmp_path / "g")
    write_report(folder, PROJECT)
    named = (folder / "report.html").read_text()
    write_report(folder, PROJECT, anonymise=True)
    first = (folder / "report-anonymised.html").read_text(), (folder / "mistakes-anonymised.csv").read_text()
    assert "zz" not in first[0] and "zz" not in first[1], "a submission's name is on the page"
    assert "student-" in first[0] and "student-" in first[1]
    write_report(folder, PROJECT, anonymise=True)
    assert ((folder / "report-anonymised.html").read_text(), (folder / "mistakes-anonymised.csv").read_text()) == first
    assert (folder / "report.html").read_text() == named  # TA trial 10: the pseudonyms overwrote the named one


def test_report_command(report, tmp_path):
    out = subprocess.run([sys.executable, "-m", "harness", "report", str(report["folder"])], cwd=PROJECT,
                         capture_output=True, text=True)
    assert out.returncode == 0 and "report.html" in out.stdout, out.stderr
    missing = subprocess.run([sys.executable, "-m", "harness", "report", str(tmp_path)], cwd=PROJECT,
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "no grades.csv" in missing.stderr


# ---------------------------------------------------------------- in a real browser

PAGE_CHECK = """(() => {
  const shown = e => { if (!e) return false; const r = e.getBoundingClientRect(), s = getComputedStyle(e);
                       return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.display !== 'none'; };
  return {table: shown(document.getElementById('function-table')),
          rows: document.querySelectorAll('#function-table tbody tr').length,
          plots: [...document.querySelectorAll('svg.plot')].filter(e => shown(e) && e.querySelector('rect')).length,
          counts: [...document.querySelectorAll('[data-mistake][data-function]')].map(
                     e => [e.dataset.mistake, e.dataset.function, e.textContent.trim(), shown(e)]),
          totals: [...document.querySelectorAll('[data-mistake-total]')].map(
                     e => [e.dataset.mistakeTotal, e.textContent.trim()])};
})()"""


def _above_4(fd: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return moved


class Chromium:
    """Headless Chromium driven over the DevTools protocol on a pipe (fds 3 and 4)."""

    def __init__(self, profile: Path):
        to_chrome, self._out = os.pipe()
        self._in, from_chrome = os.pipe()
        to_chrome, from_chrome = (_above_4(fd) for fd in (to_chrome, from_chrome))  # remapping cannot clash
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage",
                 f"--user-data-dir={profile}", "--remote-debugging-pipe", "--window-size=1280,2000", "about:blank"]
        # the protocol's pipe is fds 3 (commands in) and 4 (replies out) of the browser
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{to_chrome} 4>&{from_chrome} {to_chrome}<&- {from_chrome}>&-',
             CHROMIUM, *flags], pass_fds=(to_chrome, from_chrome),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome)
        os.close(from_chrome)
        self._buffer, self._id, self.events = b"", 0, []

    def call(self, method: str, session: str | None = None, **params) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params, **({"sessionId": session} if session else {})}
        os.write(self._out, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._next()
            if reply.get("id") == self._id:
                assert "error" not in reply, f"{method}: {reply['error']}"
                return reply["result"]
            self.events.append(reply)

    def wait_for(self, method: str) -> dict:
        while True:
            event = self._next()
            self.events.append(event)
            if event.get("method") == method:
                return event

    def _next(self, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            assert left > 0 and select.select([self._in], [], [], left)[0], "Chromium did not answer"
            chunk = os.read(self._in, 1 << 20)
            assert chunk, "Chromium exited"
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def close(self):
        try:
            os.write(self._out, json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0")
            self.proc.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        os.close(self._in)
        os.close(self._out)


def render_in_chromium(page: Path, profile: Path, screenshot: Path | None = None) -> tuple[dict, list[str]]:
    """What PAGE_CHECK finds on the loaded page, and every console error or uncaught exception."""
    browser = Chromium(profile)
    try:
        target = next(t["targetId"] for t in browser.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        session = browser.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            browser.call(f"{domain}.enable", session)
        browser.call("Page.navigate", session, url=page.resolve().as_uri())
        browser.wait_for("Page.loadEventFired")
        found = browser.call("Runtime.evaluate", session, expression=PAGE_CHECK, returnByValue=True)["result"]["value"]
        if screenshot is not None:
            import base64
            shot = browser.call("Page.captureScreenshot", session, format="png", captureBeyondViewport=True)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
        return found, [error for e in browser.events if (error := _error(e))]
    finally:
        browser.close()


def _error(event: dict) -> str | None:
    """A console error or an uncaught exception, in a line; None for any other event."""
    method, params = event.get("method"), event.get("params", {})
    if method == "Runtime.exceptionThrown":
        details = params["exceptionDetails"]
        return details.get("exception", {}).get("description") or details.get("text", "exception")
    if method == "Runtime.consoleAPICalled" and params.get("type") == "error":
        return " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
    if method == "Log.entryAdded" and params["entry"].get("level") == "error":
        return params["entry"].get("text", "error")
    return None


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed here (.ci/run installs Debian's chromium)")
def test_report_in_headless_chromium(report, tmp_path):
    page = report["folder"] / "report.html"
    found, errors = render_in_chromium(page, tmp_path / "profile", tmp_path / "report.png")
    assert errors == [], errors
    assert found["table"] and found["rows"] >= 5, found
    assert found["plots"] >= 1, "no plot with bars is visible"
    on_page = {(int(m), fn): int(count) for m, fn, count, shown in found["counts"] if shown}
    in_csv = {(int(r["mistake"]), r["function"]): int(r["count"]) for r in report["rows"]}
    assert on_page == in_csv and in_csv
    totals = {}
    for r in report["rows"]:
        totals.setdefault(int(r["mistake"]), set()).update(r["submissions"].split(";"))
    assert {int(m): int(c) for m, c in found["totals"]} == {m: len(s) for m, s in totals.items()}
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_the_browser_check_can_fail(report, tmp_path):
    """A page with a script error and a count that differs from mistakes.csv is caught."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed here (.ci/run installs Debian's chromium)")
    broken = tmp_path / "broken.html"
    broken.write_text(report["html"].replace('data-function="run_softmax">1<', 'data-function="run_softmax">2<')
                      .replace("</body>", "<script>undefinedFunction()</script></body>"))
    found, errors = render_in_chromium(broken, tmp_path / "profile")
    assert errors and "undefinedFunction" in " ".join(errors)
    assert ["%d" % NUMBER["softmax_without_max"], "run_softmax", "2", True] in found["counts"]


@pytest.mark.parametrize("cell, text", [("+cmd", "'+cmd"), ("-x", "'-x"), ("@x", "'@x"), ("=1+1", "'=1+1"),
                                        ("\tx", "'\tx"), ("\rx", "'\rx"), ("x=1", "x=1"), ("'x", "'x"), ("", "")])
def test_a_cell_a_spreadsheet_would_run_is_written_as_text(cell, text):
    from harness.grading.report import from_text_cell, text_cell
    assert text_cell(cell) == text and from_text_cell(text) == cell


def test_submission_names_that_look_like_formulas_are_text_in_both_csv_files(tmp_path):
    """Names may start with +, - or @ (harness.grading.grade.submission_name); the report still
    finds each one's folder; the numbers the grader writes stay numbers."""
    from harness.grading.report import load
    names = ["+cmd", "-x", "@x"]
    folder = _write(tmp_path / "g", [Graded(n, _work(run_softmax__a=_t("run_softmax", "a", "failed",
                                                                        _cause("softmax_without_max"))))
                                     for n in names])
    write_report(folder)
    with (folder / "grades.csv").open(newline="") as f:
        rows = list(csv.reader(f))[1:]
    assert [r[0] for r in rows] == ["'" + n for n in names]
    assert all(not cell.startswith("'") for r in rows for cell in r[1:]) and float(rows[0][2]) > 0
    with (folder / "mistakes.csv").open(newline="") as f:
        [row] = list(csv.DictReader(f))
    assert row["submissions"] == "'+cmd;-x;@x" and row["mistake"] == str(NUMBER["softmax_without_max"])
    subs, _ = load(folder)
    assert [s.name for s in subs] == names and all(s.results for s in subs)


def test_the_grader_parses_a_bounded_total_of_a_submissions_code(tmp_path, monkeypatch):
    """Red team 12: 250 files of 256 KiB each ("a" repeated) took 7 minutes of the trusted grader's
    CPU in code_hash, before the submission's own timeout started. Past PARSED_TOTAL bytes, files are
    hashed by their lines, unparsed; a change in one still changes the hash."""
    from harness.grading import report
    parsed = []
    real = report._syntax_tree
    monkeypatch.setattr(report, "_syntax_tree", lambda source: parsed.append(len(source)) or real(source))
    monkeypatch.setattr(report, "PARSED_TOTAL", 64 << 10)  # the rule, at a size that parses in milliseconds
    (tmp_path / "student").mkdir()
    (tmp_path / "adapters.py").write_text("x = 1\n")
    for i in range(12):
        (tmp_path / "student" / f"p{i:02}.py").write_bytes(b"a\n" * (8 << 10))
    before = report.code_hash(tmp_path)
    assert sum(parsed) <= report.PARSED_TOTAL and len(parsed) >= 2, parsed
    (tmp_path / "student" / "p11.py").write_bytes(b"b\n" * (8 << 10))  # an unparsed file
    assert report.code_hash(tmp_path) != before
