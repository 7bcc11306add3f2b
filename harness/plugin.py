"""The pytest plugin: options, fixture-case parametrisation, readable failures, progress.

Registered as a `pytest11` entry point so `--adapters` and `--term` are known
before pytest looks at the command line for test paths.
"""

import json
import os
import signal
import tomllib
from pathlib import Path

import pytest

from harness.checks import checks_for
from harness.compare import Mismatch
from harness.diagnose import diagnose
from harness.contract import ADAPTERS
from harness.probes import AllocationTooLarge, DeviceMismatch
from harness.progress import Progress
from harness.runtime import Adapters, AdaptersError, ContractViolation
from harness.store import FixtureError, Term

ADAPTER = pytest.StashKey[str]()
PROGRESS = pytest.StashKey[Progress]()
STATE = pytest.StashKey[dict]()
# Failures whose message is the whole report: no traceback needed.
REPORTED = (Mismatch, ContractViolation, DeviceMismatch, AllocationTooLarge, AdaptersError, TimeoutError)
HARNESS = Path(__file__).parent


def pytest_addoption(parser):
    group = parser.getgroup("harness", "assignment harness")
    group.addoption("--adapters", default=None,
                    help="adapters to test: dotted module, path to a .py file, or module:attribute "
                         "(default: $HARNESS_ADAPTERS or the top-level adapters.py)")
    group.addoption("--term", default=None,
                    help="fixture term (default: $HARNESS_TERM or [tool.harness] term in pyproject.toml)")
    group.addoption("--hidden", action="store_true", help="also run hidden cases (instructors)")
    group.addoption("--case-timeout", type=float, default=60.0,
                    help="seconds one test may run before it fails as hanging (default 60)")
    group.addoption("--results-log", default=None,
                    help="append one JSON line per test event here, flushed as it happens (the grader's record)")


def pytest_configure(config):
    config.addinivalue_line("markers", "adapter(name): the contract function a test checks")
    settings = _settings(config)
    if settings is None:
        return  # not inside an assignment repository: stay out of the way
    project, pinned = settings
    term_name = config.getoption("--term") or os.environ.get("HARNESS_TERM") or pinned
    target = config.getoption("--adapters") or os.environ.get("HARNESS_ADAPTERS") or "adapters"
    try:
        term = Term(project, term_name, hidden=config.getoption("--hidden"))
    except FixtureError as e:
        raise pytest.UsageError(str(e)) from None
    config.stash[STATE] = {"project": project, "term": term, "target": target, "pinned": pinned}
    config.stash[PROGRESS] = Progress(term, target, pinned)
    config.pluginmanager.register(config.stash[PROGRESS], "harness-progress")
    if config.getoption("--results-log"):
        config.pluginmanager.register(ResultsLog(config.getoption("--results-log")), "harness-results-log")


class ResultsLog:
    """A line per event, flushed at once, so a run that dies still leaves what it did."""

    def __init__(self, path: str):
        self.file = open(path, "a", encoding="utf-8")

    def write(self, **record) -> None:
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def pytest_collection_finish(self, session):
        self.write(event="collected", tests=[
            {"id": item.nodeid, "adapter": item.stash.get(ADAPTER, None), "hidden": "/hidden-" in item.nodeid}
            for item in session.items])

    def pytest_runtest_logstart(self, nodeid, location):
        self.write(event="start", id=nodeid)

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.failed:
            message = str(report.longrepr) if report.failed else ""
            self.write(event="result", id=report.nodeid, outcome=report.outcome, message=message[:4000])

    def pytest_sessionfinish(self, session):
        self.write(event="finished")
        self.file.close()


def _settings(config):
    """(project root, pinned term) from the pyproject.toml that has [tool.harness]."""
    for folder in [config.rootpath, *config.rootpath.parents][:3]:
        path = folder / "pyproject.toml"
        if path.is_file():
            term = tomllib.loads(path.read_text()).get("tool", {}).get("harness", {}).get("term")
            if term:
                return folder, term
    return None


def _state(config) -> dict:
    if STATE not in config.stash:
        raise pytest.UsageError("the harness fixtures need an assignment repository "
                                "(a pyproject.toml with [tool.harness] term)")
    return config.stash[STATE]


@pytest.fixture(scope="session")
def term(request) -> Term:
    return _state(request.config)["term"]


@pytest.fixture(scope="session")
def _adapters_or_error(request):
    remote = request.config.pluginmanager.get_plugin("harness-remote")  # grading: a confined worker
    try:
        return remote.adapters() if remote else Adapters(_state(request.config)["target"])
    except AdaptersError as e:
        return e


@pytest.fixture
def adapters(_adapters_or_error):
    """The adapters under test, every call checked against the contract."""
    if isinstance(_adapters_or_error, Exception):
        raise _adapters_or_error
    return _adapters_or_error


def pytest_generate_tests(metafunc):
    if "fixture_check" in metafunc.fixturenames:
        term = _state(metafunc.config)["term"]
        params = [(case, check) for case in term.cases for check in checks_for(case)]
        metafunc.parametrize("fixture_check", params, ids=[f"{_public_id(term, c)}:{k}" for c, k in params])


def _public_id(term, case) -> str:
    """Hidden cases are numbered, so even their test ids say nothing about their inputs."""
    if not case.hidden:
        return case.id
    hidden = [c for c in term.cases if c.hidden and c.function == case.function]
    return f"{case.function}/hidden-{hidden.index(case) + 1}"


def pytest_collection_modifyitems(config, items):
    progress = config.stash.get(PROGRESS, None)
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec and "fixture_check" in callspec.params:
            item.stash[ADAPTER] = callspec.params["fixture_check"][0].function
        elif (marker := item.get_closest_marker("adapter")) is not None:
            name = marker.args[0]
            if name not in ADAPTERS:
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.adapter({name!r}) is not in the contract")
            item.stash[ADAPTER] = name
        if progress is not None and ADAPTER in item.stash:
            progress.adapter_of[item.nodeid] = item.stash[ADAPTER]
    # Course order (Unit 2.1 first, as the contract lists functions), so failures read top-down.
    order = {name: i for i, name in enumerate(ADAPTERS)}
    items.sort(key=lambda item: order.get(item.stash.get(ADAPTER, None), len(order)))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """Fail a hanging test instead of hanging the run."""
    seconds = item.config.getoption("--case-timeout")
    if not seconds or not hasattr(signal, "setitimer"):
        return (yield)

    def timeout(signum, frame):
        name = item.stash.get(ADAPTER, item.name)
        raise TimeoutError(f"{name} did not finish within {seconds:g} s: look for an infinite loop, "
                           "or work that grows far faster than the input.")
    previous = signal.signal(signal.SIGALRM, timeout)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return (yield)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Our own short report for failures the harness can explain.

    Built here, before pytest's default, because formatting a full traceback for
    every failure costs up to 0.2 s each (pytest parses the source of every frame).
    """
    name = item.stash.get(ADAPTER, None)
    if not name or call.excinfo is None or call.excinfo.errisinstance(pytest.skip.Exception):
        return None
    text = _explain(item, name, call.excinfo)
    if text is None:
        return None
    sections = [(f"Captured {key} {when}", content) for when, key, content in item._report_sections]
    return pytest.TestReport(item.nodeid, item.location, {k: 1 for k in item.keywords}, "failed", text,
                             call.when, sections, call.duration, call.start, call.stop,
                             user_properties=item.user_properties,
                             not_implemented=call.excinfo.errisinstance(NotImplementedError))


def _explain(item, name, excinfo) -> str | None:
    """A short report instead of a traceback wall, where the error says it all."""
    if excinfo.errisinstance(NotImplementedError):
        entry = excinfo.traceback[-1]
        where = f"{_short(entry.path)}:{entry.lineno + 1}"
        return f"{name or 'this function'} is not implemented yet ({where}: {excinfo.value})"
    if excinfo.errisinstance(ContractViolation):
        return str(excinfo.value) + diagnose(item.config.stash[STATE]["term"], None, error=excinfo.value)
    if excinfo.errisinstance(REPORTED):
        return str(excinfo.value)
    tests = item.config.rootpath / "tests"
    if excinfo.errisinstance(AssertionError) and _is_ours(excinfo.traceback[-1].path, tests):
        # A property test's own assertion: its message is the explanation.
        message = str(excinfo.value).split("\nassert ")[0]
        return f"{item.name}: {message}"
    # Student code raised: keep only the frames of the student's own files.
    tb = excinfo.traceback.filter(lambda e: not _is_ours(e.path, tests))
    if len(tb) == 0:
        return None
    excinfo.traceback = tb
    case = getattr(item, "callspec", None) and item.callspec.params.get("fixture_check", (None,))[0]
    about = f", case {case.name!r} ({case.note})" if case and not case.hidden else ""
    cause = diagnose(item.config.stash[STATE]["term"], case or None, error=excinfo.value)
    if cause:  # a named crash: where it happened and the error's first line say enough
        error = str(excinfo.value).strip().splitlines()[0][:300]
        return (f"{name or 'the code under test'} raised {excinfo.typename}{about} at "
                f"{_short(tb[-1].path)}:{tb[-1].lineno + 1}: {error}{cause}")
    return f"{name or 'the code under test'} raised {excinfo.typename}{about}:\n{excinfo.getrepr(style='short')}"


def _is_ours(path, tests: Path) -> bool:
    """Frames of the harness, the tests, torch or the adapter wrapper, not the student's."""
    text = str(path)
    return (text.startswith("<") or "site-packages" in text
            or HARNESS in Path(text).parents or tests in Path(text).parents)


def _short(path) -> str:
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return str(path)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter, config):
    """The progress table, after pytest's own short summary: the last thing a student reads."""
    result = yield
    progress = config.stash.get(PROGRESS, None)
    if progress is not None and progress.results:
        terminalreporter.write("\n" + progress.render() + "\n")
    return result
