"""pytest --jobs: a `pytest` command splits its tests across forked processes, and reports exactly
what one process reports; a process that dies fails the test it was in and nothing else; every
case where it must not fork (a few tests, -x, -s, --jobs 1, an in-process run) runs in one."""

import contextlib
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import pytest

from conftest import PROJECT, reference_as_student
from harness.student_run import parallel
from reference.submission import variant_as_student

# Appended to a submission's adapters.py: every call writes its process id to $PID_LOG; run_silu warns;
# with CRASH, a call in a process that pytest forked (not the one this selftest started) dies of SIGSEGV.
WATCH = """
import functools as _functools, os as _os, signal as _signal, warnings as _warnings
def _watched(fn):
    @_functools.wraps(fn)
    def call(*args, **kwargs):
        with open(_os.environ["PID_LOG"], "a") as f:
            f.write(f"{{_os.getpid()}}\\n")
        if {crash!r} and _os.getppid() != {selftest}:
            _os.kill(_os.getpid(), _signal.SIGSEGV)
        if fn.__name__ == "run_silu":
            _warnings.warn("a warning from the code under test")
        return fn(*args, **kwargs)
    return call
for _name in [n for n in dir() if n.startswith(("run_", "get_"))]:
    globals()[_name] = _watched(globals()[_name])
"""


def watched(sub, crash: bool = False):
    with (sub / "adapters.py").open("a") as f:
        f.write(WATCH.format(crash=crash, selftest=os.getpid()))
    return sub


def pytest_command(sub, *args, log, junit=None):
    """A student's `pytest` in its own process: (exit code, output, {test id: outcome})."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--adapters={sub / 'adapters.py'}",
               *args, *(["--junitxml", str(junit)] if junit else [])]
    done = subprocess.run(command, cwd=PROJECT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PID_LOG": str(log)})
    outcomes = {}
    if junit:
        for case in ET.parse(junit).getroot().iter("testcase"):
            kind = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
            outcomes[f"{case.get('classname')}::{case.get('name')}"] = kind
    return done.returncode, done.stdout + done.stderr, outcomes


def pids(log) -> set[int]:
    return {int(line) for line in log.read_text().split()} if log.exists() else set()


def table(out: str) -> str:
    return out[out.index("Progress:"):out.index("Total:")]


def test_a_split_run_reports_what_one_process_reports(tmp_path):
    sub = watched(variant_as_student("rope_half_split", tmp_path / "sub"))
    one_log, two_log = tmp_path / "one.pids", tmp_path / "two.pids"
    one = pytest_command(sub, "--jobs", "1", log=one_log, junit=tmp_path / "one.xml")
    cache = tmp_path / "cache"
    two = pytest_command(sub, "--jobs", "2", "-p", "cacheprovider", "-o", f"cache_dir={cache}",
                         log=two_log, junit=tmp_path / "two.xml")
    assert len(pids(one_log)) == 1 and len(pids(two_log)) == 2, (pids(one_log), pids(two_log))
    assert one[0] == two[0] == 1, two[1][-3000:]
    assert one[2] == two[2] and "failure" in one[2].values() and len(one[2]) > 300
    assert table(one[1]) == table(two[1]), two[1][-4000:]
    for _, out, _ in (one, two):  # the child's warnings reach the summary, once per test that warned
        assert out.count("a warning from the code under test") == one[1].count("a warning from the code under test") > 0
    # The run recorded each group's seconds: the next run deals the longest first.
    recorded = json.loads((cache / "v" / "harness" / "group-seconds").read_text())
    assert "together:meta device" in recorded and "run_silu" in recorded, recorded
    again = pytest_command(sub, "--jobs", "2", "-p", "cacheprovider", "-o", f"cache_dir={cache}",
                           log=tmp_path / "again.pids", junit=tmp_path / "again.xml")
    assert again[2] == one[2], again[1][-3000:]


def test_a_skip_reported_by_a_child_reads_as_a_skip_made_here(pytestconfig):
    """Which process runs a skip depends on timing: one replayed from a child once crashed junitxml
    (CI, a split run) because JSON had made its (file, line, reason) a list."""
    skip = pytest.TestReport("tests/t.py::t", ("tests/t.py", 4, "t"), {}, "skipped",
                             ("tests/t.py", 5, "Skipped: not run: fix run_rope on the CPU first"), "call")
    data = pytestconfig.hook.pytest_report_to_serializable(config=pytestconfig, report=skip)
    relayed = parallel.report_from_wire(pytestconfig, json.loads(json.dumps(data, default=str)))
    assert isinstance(relayed.longrepr, tuple) and relayed.longrepr == skip.longrepr, relayed.longrepr
    # ...and the parent's relay reads every report so (TA trial 14: it called the hook itself, and a split run
    # crashed on a child's skip in 3 of 6 runs)
    logged = []
    hook = SimpleNamespace(pytest_report_from_serializable=pytestconfig.hook.pytest_report_from_serializable,
                           pytest_runtest_logreport=lambda report: logged.append(report))
    read, write = os.pipe()
    message = json.dumps([{"kind": "report", "group": "g", "report": data}], default=str).encode()
    os.write(write, parallel.LENGTH.pack(len(message)) + message)
    os.close(write)
    parallel._Relay(read, SimpleNamespace(config=SimpleNamespace(hook=hook), items=[])).replay()
    os.close(read)
    assert len(logged) == 1 and logged[0].longrepr == skip.longrepr, logged


def test_a_process_that_dies_fails_the_test_it_was_in_and_the_run_goes_on(tmp_path):
    sub = watched(reference_as_student(tmp_path / "sub"), crash=True)  # a call in a forked process crashes it
    log = tmp_path / "run.pids"
    code, out, outcomes = pytest_command(sub, "--jobs", "2", "-rf", log=log, junit=tmp_path / "run.xml")
    failed = [test for test, outcome in outcomes.items() if outcome == "failure"]
    assert code == 1 and len(failed) == 1, out[-3000:]
    assert "the test process running this test ended inside it (signal SIGSEGV)" in out, out[-3000:]
    assert f"pytest --jobs 1 {failed[0].split('::')[0]}" not in out  # the node id, not a file, is named
    assert len(pids(log)) == 2 and len(outcomes) > 300  # the parent ran what the dead one left


@pytest.mark.parametrize("args", [["--jobs", "1"], ["-x"], ["-s"], ["--function", "run_silu,run_softmax"]],
                         ids=["jobs-1", "exitfirst", "no-capture", "few-tests"])
def test_runs_that_must_not_fork_run_in_one_process(tmp_path, args):
    sub = watched(reference_as_student(tmp_path / "sub"))
    log = tmp_path / "run.pids"
    code, out, _ = pytest_command(sub, *args, log=log)
    assert code == 0 and len(pids(log)) == 1, out[-2000:]


def test_code_that_starts_a_thread_runs_in_one_process(tmp_path):
    """A fork copies only the forking thread: a lock the other one held would stay held."""
    sub = watched(reference_as_student(tmp_path / "sub"))
    with (sub / "adapters.py").open("a") as f:
        f.write("import threading, time\nthreading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n")
    log = tmp_path / "run.pids"
    code, out, _ = pytest_command(sub, log=log)
    assert code == 0 and len(pids(log)) == 1, out[-2000:]


def test_an_in_process_run_never_forks(tmp_path, forget_other_repositories):
    """A notebook's kernel (or any pytest.main in a process that lives on) runs the tests itself."""
    sub = watched(reference_as_student(tmp_path / "sub"))
    log = tmp_path / "run.pids"
    for name in [m for m in sys.modules if m.split(".")[0] in ("adapters", "student")]:
        del sys.modules[name]
    with pytest.MonkeyPatch.context() as patch, contextlib.chdir(PROJECT):
        patch.setenv("PID_LOG", str(log))
        code = pytest.main(["-q", "-p", "no:cacheprovider", f"--adapters={sub / 'adapters.py'}", "--jobs", "2"])
    assert code == 0 and pids(log) == {os.getpid()}
