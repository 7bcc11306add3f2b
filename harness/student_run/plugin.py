"""The pytest plugin: options, fixture-case parametrisation, readable failures, progress.

Registered as a `pytest11` entry point, so it is active for `pytest` from any folder.
"""

import atexit
import copy
import difflib
import gc
import hashlib
import inspect
import os
import re
import signal
import sys
import sysconfig
import time
import tomllib
from collections import Counter
from pathlib import Path

import pytest


def _rewrite_tests_only() -> None:
    """pytest rewrites the asserts of every module of every installed plugin's package.
    Library code (the harness, jaxtyping, ...) raises its own messages, and without a
    bytecode cache each rewrite is a parse and compile on every run: keep it for tests."""
    for finder in sys.meta_path:
        marked = getattr(finder, "_must_rewrite", None)
        if type(finder).__name__ == "AssertionRewritingHook" and isinstance(marked, set):
            marked.difference_update({"harness", "jaxtyping", "xdist", "platformdirs", "beartype"})


_rewrite_tests_only()  # before the imports below

from harness.store import checks_for
from harness.student_run.checks import PROPERTY_DRAWS
from harness.student_run.compare import Mismatch
from harness.student_run.diagnose import diagnose
from harness.contract import ADAPTERS
from harness.student_run import parallel
from harness.student_run.probes import AllocationTooLarge, DeviceMismatch
from harness.student_run.progress import Progress
from harness.runtime import Adapters, AdaptersError, ContractViolation, StudentImportError, shown_path
from harness.store import FixtureError, Term
from harness.torch_imports import concrete_symbolic_shapes, optimizers_without_dynamo

ADAPTER = pytest.StashKey[str]()
COURSE_INDEX = pytest.StashKey[int]()
PROGRESS = pytest.StashKey[Progress]()
STATE = pytest.StashKey[dict]()
SESSION = pytest.StashKey[pytest.Session]()  # its exit status, for a console run's last step
HANGS = pytest.StashKey[dict]()  # what timed out in this run: functions, and the code they were stuck in
# (function, public case) -> whether its output check passed in this run
CPU_OUTCOMES = pytest.StashKey[dict]()
# Failures whose message is the whole report: no traceback needed.
REPORTED = (Mismatch, ContractViolation, DeviceMismatch, AllocationTooLarge, AdaptersError, TimeoutError)
HARNESS = Path(__file__).parents[1]  # the harness package: its frames are not the student's code


def pytest_addoption(parser):
    group = parser.getgroup("harness", "assignment harness")
    group.addoption("--adapters", default=None,
                    help="adapters to test: dotted module, path to a .py file, or module:attribute "
                         "(default: $HARNESS_ADAPTERS or the top-level adapters.py)")
    group.addoption("--term", default=None,
                    help="fixture term (default: $HARNESS_TERM or [tool.harness] term in pyproject.toml)")
    group.addoption("--function", action="append", default=[], metavar="NAME",
                    help="run exactly the tests of this contract function (repeat or comma-separate for more), "
                         "e.g. --function run_softmax")
    group.addoption("--hidden", action="store_true", help="also run hidden cases (instructors)")
    group.addoption("--case-timeout", type=float, default=60.0,
                    help="seconds one test may run before it fails as hanging (default 60)")
    group.addoption("--jobs", type=int, default=None, metavar="N",
                    help="processes to run the tests in (default: one per CPU, up to 4, on Linux for a run of "
                         f"{parallel.MIN_TESTS}+ tests; 1 runs them in this process)")


def pytest_configure(config):
    config.addinivalue_line("markers", "adapter(name): the contract function a test checks")
    config.addinivalue_line("markers", "forward_values: a returned module's forward against a function's fixtures, "
                                       "their hidden twins too when hidden cases are loaded: an output check")
    config.addinivalue_line("markers", "together(name): tests that share a costly first step run in one process "
                                       "(pytest --jobs)")
    config.addinivalue_line("markers", "reports_only: the verdict rests on what the code reports about itself "
                                       "(a probe in its own process, its own parameter listing): no points")
    settings = _settings(config)
    if settings is None:
        return  # not inside an assignment repository: stay out of the way
    project, pinned = settings
    term_name = config.getoption("--term") or os.environ.get("HARNESS_TERM") or pinned
    target = config.getoption("--adapters") or os.environ.get("HARNESS_ADAPTERS") or "adapters"
    remote = config.pluginmanager.get_plugin("harness-remote")  # grading: a driver grades many against one term
    try:
        term = (remote.term if remote is not None else Term)(project, term_name, hidden=config.getoption("--hidden"))
    except FixtureError as e:
        raise pytest.UsageError(str(e)) from None
    state = {"project": project, "term": term, "target": target, "pinned": pinned,
             "explicit": bool(config.getoption("--adapters") or os.environ.get("HARNESS_ADAPTERS")),
             "functions": _functions(config, term), **_scope(config, project)}
    config.stash[STATE] = state
    progress = Progress(term, target, pinned, complete=state["filters"] is not None,
                        hidden_asked=config.getoption("--hidden"))
    config.stash[PROGRESS] = progress
    config.pluginmanager.register(progress, "harness-progress")
    state["threads"] = _one_thread()
    if remote is not None and term.grading_seed is not None:
        # Grading: property tests draw from seeds only the grading seed gives (their public draws are known).
        # Keyed by the hidden files' digests too: the public draws fix the offset's low 32 bits (torch seeds
        # its CPU generator with those), and from the seed alone 32 bits left a 40-bit seed 256 guesses.
        digest = hashlib.sha256(f"property draws {term.grading_seed} {term.hidden_digest}".encode()).hexdigest()
        PROPERTY_DRAWS["offset"] = int(digest[:12], 16)


def _one_thread() -> int | None:
    """Fixture tensors are tiny: a second thread only waits on the first, and on a busy machine
    (xdist's other worker, another grader) the waiting cost 3x the whole run (5 s against 16 s).
    Returns the count to restore (an in-process run, a notebook's kernel, lives on); None where
    OMP_NUM_THREADS chose."""
    import torch
    if "OMP_NUM_THREADS" in os.environ:
        return None
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    return before


def _asked(config) -> list[str]:
    """The functions --function names, repeated or comma-separated."""
    return [n.strip() for value in config.getoption("--function") for n in value.split(",") if n.strip()]


def _functions(config, term) -> list[str]:
    names = _asked(config)
    for name in names:
        if name not in ADAPTERS:
            close = difflib.get_close_matches(name, ADAPTERS, n=1)
            raise pytest.UsageError(f"--function {name}: no such contract function"
                                    + (f"; did you mean {close[0]}?" if close else ""))
        if ADAPTERS[name].entry_point:  # no tests of its own (CS336's get_adamw_cls, say)
            raise pytest.UsageError(f"--function {name}: it has no tests of its own; it is tested through "
                                    + ", ".join(ADAPTERS[name].drills) + ": run --function "
                                    + ",".join(ADAPTERS[name].drills))
        if name not in term.functions:
            raise pytest.UsageError(f"--function {name}: term {term.name} does not cover it (it was built "
                                    "before the contract had it); build a new term to test it")
    return names


def _scope(config, project: Path) -> dict:
    """Collect the whole student suite whenever the run is about it, and keep narrower
    path arguments as filters, so the table knows each function's full test count.

    `filters` is None when the run is not (only) about the student suite: then the
    command line is left as it is. An empty list means the whole suite.
    """
    tests = project / "tests"
    selftest = project / "selftest"
    here = config.invocation_params.dir
    paths = [((here / a.split("::")[0]).resolve(), a) for a in config.args]
    named_selftest = any(p == selftest or selftest in p.parents for p, _ in paths)
    scope = {"filters": None, "selftest_named": named_selftest}
    if config.getoption("pyargs") or named_selftest or not tests.is_dir():
        return scope
    from_folder = config.args_source == pytest.Config.ArgsSource.INVOCATION_DIR
    filters = []
    for path, arg in paths:
        if from_folder or path == tests or (path in tests.parents and project in (path, *path.parents)):
            continue  # the whole suite: from any folder of the repository, `.` or the root
        if tests not in path.parents or not path.exists():
            return scope  # something else: pytest's own rules apply
        rest = arg.split("::", 1)[1] if "::" in arg else ""
        filters.append(path.relative_to(project).as_posix() + (f"::{rest}" if rest else ""))
    if filters and len(filters) < len(paths):
        filters = []  # the whole suite was named too
    config.args[:] = [str(tests)]
    scope["filters"] = filters
    return scope


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """`--adapters /elsewhere/x.py` (a space, a path outside the repository): pytest read
    the path as a test path while it chose its rootdir, before any plugin could say that
    it is an option's value, and left the repository. Run again as `--adapters=PATH`."""
    args = list(config.invocation_params.args)
    if "--adapters" not in args[:-1] or _settings(config) is not None \
            or _find_project(config.invocation_params.dir) is None:
        return None
    where = args.index("--adapters")
    args[where:where + 2] = [f"--adapters={args[where + 1]}"]
    return pytest.main(args)


def _settings(config):
    """(project root, pinned term) from the pyproject.toml that has [tool.harness]."""
    return _find_project(config.rootpath, levels=3)


def _find_project(start: Path, levels: int | None = None):
    for folder in [start, *start.parents][:levels]:
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
    return _load_adapters(request.config)


def _load_adapters(config):
    state = _state(config)
    if "adapters" not in state:
        concrete_symbolic_shapes()  # the first torch._check would import sympy (0.5 s)
        optimizers_without_dynamo()  # and the first optimizer a test builds would import torch._dynamo (1.8 s)
        remote = config.pluginmanager.get_plugin("harness-remote")  # grading: a confined worker
        try:
            state["adapters"] = remote.adapters() if remote else Adapters(state["target"], explicit=state["explicit"])
        except Exception as e:  # noqa: BLE001  (any failure to load is the same story)
            state["adapters"] = e if isinstance(e, AdaptersError) else AdaptersError(
                f"loading adapters {state['target']!r} raised {type(e).__name__}: {e}")
    return state["adapters"]


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    """A target that cannot load is one usage error, not one identical failure per test.
    The grader (harness/grading/drive.py) still records every test, so each gets its row."""
    config = session.config
    config.stash[SESSION] = session
    if STATE not in config.stash:
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and config.stash[STATE]["filters"] is not None and reporter.verbosity == 0:
        # Course order interleaves files: a "tests/x.py FFF" line at every switch is noise.
        reporter.showfspath = False
    grading = config.pluginmanager.get_plugin("harness-remote") is not None
    if grading or hasattr(config, "workerinput") or config.option.collectonly:
        return
    error = _load_adapters(config)
    if isinstance(error, Exception):
        target = config.stash[STATE]["target"]
        command = f"python {target}" if target.endswith(".py") else f"python -c 'import {target.split(':')[0]}'"
        hint = f" ({command} shows the traceback)" if str(error).startswith("importing") else ""
        raise pytest.UsageError(str(error).splitlines()[0] + hint)


def pytest_ignore_collect(collection_path, config):
    """The harness's own tests run only when named: `pytest .` means the student suite."""
    state = config.stash.get(STATE, None)
    if state and not state["selftest_named"] and collection_path == state["project"] / "selftest":
        return True
    return None


@pytest.fixture(scope="session")
def held_out_forward(request):
    """The forward that judges a training run's returned weights (check_training). In grading, the
    driver's own (the grading plugin's `trusted_forward`): the submission's code, in its worker, never
    computes the loss it is judged by. In a student's own run, None: their run_transformer_lm, which its
    fixtures check."""
    remote = request.config.pluginmanager.get_plugin("harness-remote")
    return remote.trusted_forward if remote is not None else None


@pytest.fixture(scope="session")
def cpu_outcomes(request) -> dict:
    """How each public output case fared in this run's fixture tests: a probe that needs a case the
    code passes on the CPU takes one from here, instead of running one again. Tests that use it run
    after their function's fixture tests."""
    return request.config.stash.setdefault(CPU_OUTCOMES, {})


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
    return f"{case.function}/hidden-{term.hidden_numbers[case.id]}"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Attribute every test to its function, count each function's tests in the whole
    suite (before -k and friends narrow it), apply path filters and --function, and
    put the tests in course order."""
    progress = config.stash.get(PROGRESS, None)
    state = config.stash.get(STATE, {})
    covered = set(state["term"].functions) if "term" in state else set(ADAPTERS)
    uncovered = []  # tests of functions the term does not cover: no cases and no points on it
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec and "fixture_check" in callspec.params:
            item.stash[ADAPTER] = callspec.params["fixture_check"][0].function
        elif (marker := item.get_closest_marker("adapter")) is not None:
            name = marker.args[0]
            if name not in ADAPTERS:
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.adapter({name!r}) is not in the contract")
            item.stash[ADAPTER] = name
        if item.stash.get(ADAPTER, None) not in (None, *covered):
            uncovered.append(item)
    if uncovered:
        config.hook.pytest_deselected(items=uncovered)
        items[:] = [item for item in items if item.stash.get(ADAPTER, None) in (None, *covered)]
    if progress is not None and state.get("filters") is not None:
        progress.totals = dict(Counter(item.stash[ADAPTER] for item in items if ADAPTER in item.stash))
        progress.unscored = dict(Counter(item.stash[ADAPTER] for item in items
                                         if ADAPTER in item.stash and not carries_points(item)))
        progress.scored = dict(Counter(item.stash[ADAPTER] for item in items
                                       if ADAPTER in item.stash and carries_points(item)))
    keep = [item for item in items if _selected(item, state)]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in set(keep)])
        items[:] = keep
    # Course order (Unit 2.1 first, as the contract lists functions), so failures read top-down; within
    # a function, the probes that reuse its fixture tests' outcomes after them.
    order = {name: i for i, name in enumerate(ADAPTERS)}
    items.sort(key=lambda item: (order.get(item.stash.get(ADAPTER, None), len(order)),
                                 "cpu_outcomes" in getattr(item, "fixturenames", ())))
    for index, item in enumerate(items):
        item.stash[COURSE_INDEX] = index


def fixture_check(item) -> tuple:
    """(case, check) of a fixture test ("output", "gradient", "raises"); (None, "") for any other."""
    callspec = getattr(item, "callspec", None)
    return callspec and callspec.params.get("fixture_check") or (None, "")


def check_of(item) -> str:
    """The check a test makes, as scoring counts it: a fixture test's ("output", "gradient",
    "raises"); "output" for a module's forward against fixtures; "" for a property or probe."""
    return "output" if item.get_closest_marker("forward_values") else fixture_check(item)[1]


def carries_points(item) -> bool:
    """Whether a test has a share of its function's points: a hidden twin's points are its
    public case's, and a report-only verdict has none (harness/scoring.py)."""
    case, _ = fixture_check(item)
    return item.get_closest_marker("reports_only") is None and not (case and case.twin_of)


def scoring_facts(items) -> dict[str, dict]:
    """Per test id, what the scoring rule (harness/scoring.py) needs beside the outcome: the
    function, whether the test is hidden, its fixture check, whether it carries points, and,
    for a public fixture test, its twin's id."""
    facts, twins = {}, {}  # twins: (function, public case name, check) -> the twin's test id
    for item in items:
        case, check = fixture_check(item)
        facts[item.nodeid] = {"adapter": item.stash.get(ADAPTER, None), "hidden": bool(case and case.hidden),
                              "check": check_of(item), "points": carries_points(item), "twin": ""}
        if item.get_closest_marker("forward_values"):  # against the twins too, where they are loaded
            term = _state(item.config).get("term")
            facts[item.nodeid]["hidden"] = bool(term and term.hidden_loaded)
        if case and case.twin_of:
            twins[case.function, case.twin_of, check] = item.nodeid
    for item in items:
        case, check = fixture_check(item)
        if case and not case.hidden:
            facts[item.nodeid]["twin"] = twins.get((case.function, case.name, check), "")
    return facts


def _selected(item, state) -> bool:
    if state.get("functions") and item.stash.get(ADAPTER, None) not in state["functions"]:
        return False
    filters = state.get("filters")
    if not filters:
        return True
    node = item.nodeid
    return any(node == f or node.startswith((f + "::", f + "[", f + "/")) for f in filters)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    """Several processes where they pay (harness/student_run/parallel.py); else pytest's own loop."""
    config = session.config
    if STATE not in config.stash or session.testsfailed or len(session.items) < parallel.MIN_TESTS:
        return None
    processes = parallel.jobs(config, _console(config))
    if processes < 2:
        return None
    parallel.run(session, processes, key=lambda item: parallel.group_key(item, item.stash.get(ADAPTER, None)))
    return True


class NotRunAfterTimeout(TimeoutError):
    """A function that already timed out in this run is not run again: one timeout per function."""


TICK = 0.2  # seconds between stack samples once some code is known to hang


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """Fail a hanging test instead of hanging the run, say where the code was stuck, and
    charge each hang once: the function's later tests are not run, and a later test of
    another function that sits in the same stuck code for a tick fails at once."""
    seconds = item.config.getoption("--case-timeout")
    if not seconds or not hasattr(signal, "setitimer"):
        return (yield)
    hangs = item.config.stash.setdefault(HANGS, {"functions": {}, "code": {}})
    name = item.stash.get(ADAPTER, item.name)
    if name in hangs["functions"]:
        raise NotRunAfterTimeout(f"not run: {name} {hangs['functions'][name]}")
    root = item.config.rootpath
    start, seen = time.monotonic(), {}

    def timeout(signum, frame):
        stuck = _student_frame(frame, root)
        known = stuck is not None and hangs["code"].get(stuck.f_code)
        if tick and time.monotonic() - start < seconds and not (known and seen.get("frame") is stuck):
            seen["frame"] = stuck if known else None  # the same call still there next tick: stuck again
            return
        hangs["functions"][name] = f"{'hung' if known else 'timed out'} in test {item.name}"
        where = ""
        if stuck is not None:
            info = inspect.getframeinfo(stuck, context=1)
            line = (info.code_context or [""])[0].strip()
            where = f" It was running {shown_path(stuck.f_code.co_filename)}:{stuck.f_lineno}" + \
                    (f" (`{line}`)" if line else "") + " when stopped."
        if known:
            raise TimeoutError(f"{name} stopped: it is stuck in the code where {known}.{where} "
                               f"Fix that first; its other tests are not run in this run.")
        if stuck is not None:
            hangs["code"][stuck.f_code] = f"{name} timed out (test {item.name})"
        raise TimeoutError(f"{name} did not finish within {seconds:g} s.{where} Look for an infinite loop, "
                           "or work that grows far faster than the input. Its other tests are not run in this "
                           "run. (`pytest --case-timeout SECONDS` changes the limit.)")
    previous = signal.signal(signal.SIGALRM, timeout)
    tick = min(TICK, seconds) if hangs["code"] else 0
    signal.setitimer(signal.ITIMER_REAL, tick or seconds, tick)
    try:
        return (yield)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


STDLIB = Path(sysconfig.get_paths()["stdlib"])


def _student_frame(frame, root: Path):
    """The innermost frame of the code under test (not the harness, tests, libraries or Python's own)."""
    tests = root / "tests"
    while frame is not None and (_is_ours(frame.f_code.co_filename, tests)
                                 or STDLIB in Path(frame.f_code.co_filename).parents):
        frame = frame.f_back
    return frame


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
    return None if text is None else short_report(item, call, text)


def short_report(item, call, text: str) -> pytest.TestReport:
    """A failed test's report that says `text`, built without pytest's traceback formatting."""
    sections = [(f"Captured {key} {when}", content) for when, key, content in item._report_sections]
    return pytest.TestReport(item.nodeid, item.location, {k: 1 for k in item.keywords}, "failed", text,
                             call.when, sections, call.duration, call.start, call.stop,
                             user_properties=item.user_properties,
                             not_implemented=call.excinfo.errisinstance(NotImplementedError),
                             import_failed=call.excinfo.errisinstance(StudentImportError))


@pytest.hookimpl(wrapper=True, specname="pytest_runtest_makereport")
def pytest_runtest_makereport_tag(item, call):
    """Every report carries its function and course position, also across xdist workers."""
    report = yield
    case, check = fixture_check(item)
    if check == "output" and not case.hidden and call.when == "call":
        item.config.stash.setdefault(CPU_OUTCOMES, {})[case.function, case.name] = report.passed
    if ADAPTER in item.stash:
        report.adapter = item.stash[ADAPTER]
        report.course_index = item.stash.get(COURSE_INDEX, 0)
        report.sections = [(title, trimmed(text)) if title.startswith("Captured") else (title, text)
                           for title, text in report.sections]
        report.carries_points = carries_points(item)
        report.check = check_of(item)
        if report.skipped and isinstance(report.longrepr, tuple) and \
                (waits := WAITS_ON.search(str(report.longrepr[2]))) and waits[1] in ADAPTERS:
            report.waits_on = waits[1]  # a test that compares with another of the student's functions, failing
        if report.failed and item.get_closest_marker("reports_only") and call.excinfo is not None \
                and not call.excinfo.errisinstance(NotImplementedError):
            _label(report, REPORTS_ONLY)
    return report


WAITS_ON = re.compile(r"not run: fix (\w+) first")
REPORTS_ONLY = ("(report-only: the verdict rests on what your code reports about itself, so grading gives it "
                "no points; the mistake it names is still real)")


def _label(report, line: str) -> None:
    if isinstance(report.longrepr, str):
        report.longrepr = f"{report.longrepr}\n{line}"
    elif hasattr(report.longrepr, "addsection"):
        report.longrepr.addsection("report-only", line)


HEAD, TAIL, WIDTH = 10, 5, 300  # captured output kept per failure: lines from each end, characters a line


def trimmed(text: str) -> str:
    """Captured output, its first and last lines: a function that prints in a loop would
    otherwise bury the report under thousands of lines."""
    lines = [line if len(line) <= WIDTH else line[:WIDTH] + f" ... ({len(line) - WIDTH:,} more characters)"
             for line in text.splitlines()]
    if len(lines) > HEAD + TAIL + 1:
        lines[HEAD:-TAIL] = [f"... ({len(lines) - HEAD - TAIL:,} lines left out) ..."]
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def _explain(item, name, excinfo) -> str | None:
    """A short report instead of a traceback wall, where the error says it all."""
    if excinfo.errisinstance(NotImplementedError):
        entry = excinfo.traceback[-1]
        where = f"{_short(entry.path)}:{entry.lineno + 1}"
        # The adapter that raised it, which a test of another function may call (accounting in a model test).
        raiser = next((e.name for e in reversed(excinfo.traceback) if e.name in ADAPTERS), None) or name
        used_by = f", which {name}'s test calls" if name and raiser != name else ""
        return f"{raiser or 'this function'} is not implemented yet ({where}: {excinfo.value}){used_by}"
    if excinfo.errisinstance(ContractViolation):
        return str(excinfo.value) + diagnose(item.config.stash[STATE]["term"], None, error=excinfo.value)
    if excinfo.errisinstance(REPORTED):
        return str(excinfo.value)
    tests = item.config.rootpath / "tests"
    if excinfo.errisinstance(AssertionError) and _is_ours(excinfo.traceback[-1].path, tests):
        # A property test's own assertion: its message is the explanation.
        message = str(excinfo.value).split("\nassert ")[0] or str(excinfo.traceback[-1].statement).strip()
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
    return (text.startswith("<") or "site-packages" in text or not Path(text).is_absolute()  # a compiled
            # library's frame (numpy/random/_bounded_integers.pyx) names no file of the student's
            or HARNESS in Path(text).parents or tests in Path(text).parents)


def _short(path) -> str:
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return str(path)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter, config):
    """Failures in course order, an output and a gradient failure of one case as one report, and
    not-implemented functions as one line (the table names them: each function appears once);
    then the progress table, last."""
    progress = config.stash.get(PROGRESS, None)
    stats = terminalreporter.stats
    every = stats.get("failed", [])
    if progress is not None and every:
        missing, shown = _condense(every)
        # One function asked for by name: its own reports in full, whatever it uses. Of several, one that uses
        # another that fails is folded under it (blind trial 14: --function run_cross_entropy,run_training_steps
        # had the training steps blame clipping for the loss's mistake)
        if len(_asked(config)) != 1:
            shown = _cascades(shown, config.stash[STATE]["term"].uses)
        if missing:
            plural = "s" if len(missing) > 1 else ""
            terminalreporter.write_sep("=", f"not implemented yet: {len(missing)} function{plural}, marked in the "
                                            "table below (each one's docstring in adapters.py says what to write)")
        stats["failed"] = shown
    try:
        return (yield)
    finally:
        if every:
            stats["failed"] = every  # pytest's closing count is of every failure
        if progress is not None and progress.results:
            terminalreporter.write("\n" + progress.render() + "\n")


# Lines of a folded check's report that say more than numbers: kept under the case's first report
# (blind trial: "no gradient reaches `ln2.weight`" was folded away under an output check's numbers).
TELLING = ("no gradient reaches", "Likely cause:", "Non-finite:")
CASE_CHECK = re.compile(r"^(.*\[.+):(\w+)\]$")


def _cascades(shown: list, uses: dict[str, list[str]]) -> list:
    """A function that fails while a function it uses (by the reference's code) fails too: its reports
    become one line that says which to fix first, keeping a `Likely cause:` of its own."""
    failing = [n for n in ADAPTERS if any(getattr(r, "adapter", None) == n for r in shown)]
    out, folded = [], {}
    for report in shown:
        name = getattr(report, "adapter", None)
        first = [g for g in failing if g in uses.get(name, ())]
        if not first:
            out.append(report)
        elif name in folded:
            folded[name][1] += 1
        else:
            folded[name] = [copy.copy(report), 1, first]
            out.append(folded[name][0])
    for name, (report, count, first) in folded.items():
        # A run of the pieces (training steps) is fingerprinted with every piece right: beside a failing piece its
        # match says nothing (blind trial 8: clipping that always scales was told its loss was divided wrongly).
        composite = ADAPTERS[name].names_own_pieces_only or ADAPTERS[name].check == "train" if name in ADAPTERS else False
        own = [] if composite else [line for line in str(report.longrepr).splitlines()
                                    if line.startswith("Likely cause:")][:1]
        also = f" (as do {', '.join(first[1:3])}{' and more' if len(first) > 3 else ''})" if first[1:] else ""
        report.longrepr = "\n".join([
            f"{name}: {count} failing case{'s' if count > 1 else ''}; fix {first[0]} first: {name} uses it, and it "
            f"fails too{also}. `pytest --function {name}` shows these in full.", *own])
    return out


def _condense(reports: list) -> tuple[list, list]:
    """(the first not-implemented report of each function, the other failures grouped by case; a
    function whose code does not import, once)."""
    reports = sorted(reports, key=lambda r: getattr(r, "course_index", 1 << 30))
    missing, shown, by_case, seen = [], [], {}, set()
    for report in reports:
        name = getattr(report, "adapter", None)
        if getattr(report, "not_implemented", False) and name:
            if name not in seen:
                seen.add(name)
                missing.append(report)
            continue
        if getattr(report, "import_failed", False) and name:
            if ("import", name) not in seen:
                seen.add(("import", name))
                shown.append(report)
            continue
        match = CASE_CHECK.match(report.nodeid)
        if match and match[1] in by_case:
            first = by_case[match[1]]
            said = [line for line in str(report.longrepr).splitlines()
                    if line.startswith(TELLING) and line not in str(first.longrepr)]
            first.longrepr = f"{first.longrepr}\n(the {match[2]} check of this case fails too: " \
                             f"{report.nodeid.rsplit('[', 1)[-1].rstrip(']')})" + "".join(f"\n{line}" for line in said)
            continue
        if match:
            report = copy.copy(report)
            by_case[match[1]] = report
        shown.append(report)
    return missing, shown


def _exit_now(session) -> None:
    """The first exit handler (registered last): run the others (logging's flush, coverage's save, ...), flush
    the output and end the process with pytest's status, skipping the interpreter's teardown of torch's
    modules: 0.5 s of a bare `import torch` on this 2-core machine, about a tenth of the whole suite."""
    atexit.unregister(_exit_now)
    code = session.exitstatus if session is not None else None
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001 - a handler failed: let the interpreter end as it would
        return
    if isinstance(code, int):
        os._exit(int(code))


def _monitored() -> bool:
    """A tool watches this process (coverage on Python 3.12+), which might save its data after exit."""
    monitoring = getattr(sys, "monitoring", None)
    return monitoring is not None and any(monitoring.get_tool(i) for i in range(6))


def _console(config) -> bool:
    """Whether this is a `pytest` command, whose process ends with the run (not a notebook's kernel)."""
    return Path(sys.argv[0]).name in ("pytest", "py.test", "__main__.py") \
        and config.invocation_params.args == tuple(sys.argv[1:])


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """A `pytest` command is about to exit: freeze the heap, so that the interpreter's last
    garbage collection skips torch's hundreds of thousands of objects (0.4 s, about a
    sixth of a run), and end the process once every exit handler has run (see `_exit_now`).
    Not in-process runs (a notebook, the selftest), which live on."""
    if _console(config):
        gc.freeze()
        if not (sys.gettrace() or sys.getprofile() or _monitored()) and hasattr(atexit, "_run_exitfuncs"):
            session = config.stash.get(SESSION, None)
            atexit.register(_exit_now, session)
    elif STATE in config.stash and config.stash[STATE].get("threads"):
        import torch
        torch.set_num_threads(config.stash[STATE]["threads"])
    PROPERTY_DRAWS["offset"] = 0  # an in-process run after a grading one draws as a student's does
