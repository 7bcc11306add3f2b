"""The trusted grading driver: the official suite, run here, against a confined worker.

`python -m harness.grading.drive` is started by `harness grade`, one process per parallel
slot. It reads one JSON line per submission on stdin, runs the student suite in its
own process with the adapters served by that submission's sandboxed worker
(harness/grading/remote.py), and writes one JSON line of results on stdout. It holds the
term, compares, diagnoses and reports; it never imports the submission's code.
Visible tests run first, then hidden cases in a fresh worker whose output is dropped.
"""

import contextlib
import gc
import io
import json
import os
import sys
import time
from pathlib import Path

import pytest
import torch

from harness.student_run.compare import Mismatch
from harness.student_run.plugin import ADAPTER, STATE, scoring_facts, short_report
from harness.grading.forward import transformer_lm
from harness.grading.remote import Link, RemoteFunctions, StudentCodeError, WorkerFailure
from harness.runtime import Adapters, AdaptersError, ContractViolation
from harness.grading.sandbox import Protections, Sandbox
from harness.store import Term


HIDDEN_FAILURES = [(NotImplementedError, "not implemented"), (Mismatch, "wrong values"),
                   (ContractViolation, "a result outside the contract (shape, dtype or type)"),
                   (TimeoutError, "ran out of time"), (WorkerFailure, "the worker died or could not import"),
                   (StudentCodeError, "raised an exception")]
# What a test may fail with and report itself: anything else is the grader's own failure, and
# its traceback is not the student's to read.
REPORTED = (AssertionError, StudentCodeError, AdaptersError, NotImplementedError, TimeoutError,
            pytest.fail.Exception, pytest.skip.Exception)


# pytest plugins the official suite does not use here: each wraps every test phase (warnings
# capture, say) or every fixture's setup (--setup-only's), and the driver's CPU is a share of the
# batch's: with these off, pytest's own cost per test fell by a third (0.78 to 0.55 s for 800 empty tests).
QUIET = [arg for plugin in ("warnings", "faulthandler", "doctest", "junitxml", "pastebin", "stepwise",
                            "legacypath", "tmpdir", "monkeypatch", "capture", "threadexception", "subtests",
                            "setuponly", "setupplan", "unittest", "recwarn")
         for arg in ("-p", f"no:{plugin}")]


class Grading:
    """A pytest plugin: serves the remote adapters and records every verdict."""

    __name__ = "harness-remote"  # how harness.student_run.plugin finds it

    def __init__(self, link: Link):
        self.link = link
        self.tests: dict[str, dict] = {}
        self.functions: dict[str, dict] = {}  # what the term covers, with its own points (Term.functions)

    # A training run's returned weights are judged with the driver's own forward (check_training)
    trusted_forward = staticmethod(transformer_lm)

    def adapters(self) -> Adapters:
        return Adapters("the submission's adapters.py", module=RemoteFunctions(self.link))

    @staticmethod
    def term(project: Path, name: str, hidden: bool) -> Term:
        """The term, read, verified and parsed once for every submission this driver grades: its tensors
        are the driver's alone (a worker gets copies over the wire) and no check writes to them."""
        key = (str(project), name, hidden)
        if key not in _terms:
            _terms[key] = Term(project, name, hidden=hidden)
        term = _terms[key]
        term.sealed = False  # as a new one starts: each test's setup seals it or not (pytest_runtest_setup)
        return term

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        self.functions = config.stash[STATE]["term"].functions
        for test_id, facts in scoring_facts(items).items():
            self.tests[test_id] = {"id": test_id, **facts, "outcome": "not run", "message": ""}
        items.sort(key=lambda item: self.tests[item.nodeid]["hidden"])  # stable: course order within each

    def _published(self, item, excinfo) -> str | None:
        """The submission's own error in one line, without the grader's traceback. On a hidden
        case a fixed sentence chosen by the kind of failure: nothing the submission controls
        (a message, an exception's name, a returned shape) reaches the report."""
        name = item.stash.get(ADAPTER, None) or "the code under test"
        if self.tests[item.nodeid]["hidden"]:
            kind = next((said for cls, said in HIDDEN_FAILURES if excinfo.errisinstance(cls)), "failed")
            return f"{name}, a hidden case: {kind}. Hidden cases show no details: re-read the docstring's rules."
        if excinfo.errisinstance((StudentCodeError, WorkerFailure)):
            return f"{name}: {excinfo.value}"
        if excinfo.errisinstance(NotImplementedError):  # its frame is the grader's, not the student's
            return f"{name} is not implemented yet ({excinfo.value})"
        if not excinfo.errisinstance(REPORTED):
            return (f"{name}: the grader failed on this test ({excinfo.typename}); the course staff can "
                    "see the details in the grading log.")
        return None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_makereport(self, item, call):
        """Where the report is replaced anyway, skip pytest's traceback formatting: it parses
        the source of every frame, tens of ms a failure, seconds for code that always raises."""
        if call.excinfo is None or call.excinfo.errisinstance(pytest.skip.Exception):
            return None
        text = self._published(item, call.excinfo)
        return None if text is None else short_report(item, call, text)

    @pytest.hookimpl(hookwrapper=True, specname="pytest_runtest_makereport")
    def pytest_runtest_makereport_replace(self, item, call):
        """...and where harness.student_run.plugin built its own report first."""
        report = (yield).get_result()
        if call.excinfo is not None and report.failed:
            text = self._published(item, call.excinfo)
            report.longrepr = report.longrepr if text is None else text

    def pytest_runtest_setup(self, item):
        hidden = self.tests[item.nodeid]["hidden"]
        item.config.stash[STATE]["term"].sealed = not hidden  # a visible test cannot read hidden data
        self.link.enter("hidden" if hidden else "public")

    def pytest_runtest_logreport(self, report):
        test = self.tests.get(report.nodeid)
        if test is not None and (report.when == "call" or report.failed):
            test["outcome"] = report.outcome
            test["message"] = str(report.longrepr)[:4000] if report.failed else ""
            if report.skipped and isinstance(report.longrepr, tuple):  # a skip scores 0 (only "passed" earns)
                test["message"] = str(report.longrepr[2]).removeprefix("Skipped: ")[:4000]


_terms: dict[tuple, Term] = {}
_kept: tuple[Sandbox, tuple] | None = None  # this slot's sandbox, for its next submission (Sandbox.finish)


def _sandbox(submission: Path, slot: int, settings: dict, reuse: bool) -> Sandbox:
    """The slot's kept sandbox where it serves this folder under the same settings, else a new one.
    `reuse`: the submission's folder is its slot's own (Grader.prepare with a slot), whose parent the
    sandbox may mount."""
    global _kept
    key = (submission, slot, json.dumps(settings, sort_keys=True))
    if _kept is not None:
        sandbox, kept_for = _kept
        if kept_for == key and sandbox.process is not None:
            return sandbox
        close_kept()
    writable = [Path(p) for p in settings["writable"]] if settings.get("writable") is not None else None
    sandbox = Sandbox(submission, Protections(**settings["protections"]),  # detected once, by `harness grade`
                      slot, settings["memory_mb"], settings["timeout"], writable,
                      reusable=reuse)
    if sandbox.reusable:
        _kept = (sandbox, key)
    return sandbox


def close_kept() -> None:
    global _kept
    if _kept is not None:
        _kept[0].close()
        _kept = None


@contextlib.contextmanager
def same_random_start():
    """Every submission's tests draw from torch's global generator as the first one's did, and leave it as it
    was: what one submission made the driver draw (red team 8: its hidden phase ran the driver's own training
    run in the checkpoint drill, or not) would otherwise reach the inputs of the next one's visible tests."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        yield


def grade(project: Path, term: str, submission: Path, slot: int, settings: dict, reuse: bool = False) -> dict:
    deadline = time.monotonic() + settings["timeout"]
    sandbox = _sandbox(submission, slot, settings, reuse)
    link = Link(sandbox, settings["case_timeout"], deadline=deadline)
    plugin = Grading(link)
    # The plugin by module, not by the installed package's entry point: Gradescope's venv holds
    # only the dependencies (the harness stays in the root-only source folder).
    argv = [str(project / "tests"), "-q", "-p", "no:cacheprovider", "-p", "no:harness", "-p", "harness.student_run.plugin",
            "--rootdir", str(project),
            "--hidden", "--term", term, "--case-timeout", "0", *QUIET]
    log, code = io.StringIO(), None
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log), same_random_start():
            code = pytest.main(argv, plugins=[plugin])
    finally:  # every process of the submission is dead after this; a sandbox in doubt is not kept
        output = sandbox.finish(reuse=code is not None and not (link.timed_out or link.sandbox_failed))
    return {"exit": int(code), "tests": list(plugin.tests.values()), "output": output,
            "timed_out": link.timed_out, "sandbox_failed": link.sandbox_failed, "log": log.getvalue()[-4000:] if not plugin.tests else "",
            "import_error": link.import_error, "functions": plugin.functions}


def main() -> None:
    # Replies go on the real stdout; anything else that writes to fd 1 goes to stderr.
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    gc.freeze()  # torch's, pytest's and the harness's objects: no collection walks them again
    try:
        serve(replies)
    finally:
        close_kept()


def serve(replies) -> None:
    for line in sys.stdin:
        job = json.loads(line)
        try:
            result = grade(Path(job["project"]), job["term"], Path(job["submission"]), job["slot"],
                           job["settings"], job.get("reuse", False))
        except Exception as e:  # noqa: BLE001 - the batch records it as this submission's status
            result = {"exit": -1, "tests": [], "output": "", "timed_out": False, "sandbox_failed": True,
                      "log": f"the grading driver failed: {type(e).__name__}: {e}"}
        replies.write(json.dumps(result) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
