"""A console run of the student suite in several processes: a laptop's second core halves the test loop.

After collection the run forks. Every process, the parent too, takes whole groups of tests from one
queue (a pipe of group numbers) until it is empty: a function's tests form a group, so a probe that
reuses its fixture tests' outcomes finds them, and tests marked `together(name)` form one (the device
probes: torch's meta kernels, written in Python, warm up in one process, not in each). A child runs its tests
without a terminal and sends each report, as JSON, to the parent, which reports it as its own, as
pytest-xdist's controller does: the dots, the failures, the progress table and --junitxml see one run.
Forking skips what xdist's fresh workers pay first: importing torch again.

A child that dies (a segfault in the code under test, os._exit) fails the test it was running, with
the signal or exit status; the parent runs the tests it left.

Only where forking is safe and pays: Linux (macOS's system frameworks are not fork-safe), a `pytest`
command (not a notebook's kernel, which lives on), enough tests, no -x, --pdb, -s or xdist, not
grading, and no Python thread besides the main one (a fork copies only the thread that forks: a lock
another thread held stays held). `pytest --jobs 1` runs in one process.
"""

import fcntl
import gc
import json
import os
import select
import signal
import struct
import sys
import threading
import time
import warnings

import pytest

MIN_TESTS = 60  # fewer (a --function run) finish before a fork pays for itself
LENGTH = struct.Struct("<I")
PIPE_SIZE = 1 << 20  # a whole run's reports (Linux's default limit for a pipe's buffer)
QUEUE = struct.Struct("<H")  # a group's number: 2 bytes, read whole from a pipe (< PIPE_BUF)
DURATIONS = "harness/group-seconds"  # pytest's cache: each group's seconds in the last run, to deal the longest first


def jobs(config, console: bool) -> int:
    """How many processes this run uses: --jobs, else up to 4 where forking is safe and pays."""
    asked = config.getoption("--jobs")
    usable = (sys.platform == "linux" and console and not config.option.collectonly
              and not config.getoption("usepdb", False) and not config.getoption("trace", False)
              and config.getoption("capture", "fd") != "no" and not config.option.maxfail
              and not config.getoption("stepwise", False) and not config.getoption("numprocesses", None)
              and not hasattr(config, "workerinput") and threading.active_count() == 1
              and config.pluginmanager.get_plugin("harness-remote") is None)
    if not usable:
        return 1
    if asked is not None:
        return max(asked, 1)
    return min(4, len(os.sched_getaffinity(0)))


def group_key(item, adapter: str | None) -> str:
    together = item.get_closest_marker("together")
    if together is not None:
        return f"together:{together.args[0]}"
    return adapter or item.nodeid.split("::")[0]


def run(session, processes: int, key) -> None:
    """Run session.items in `processes` processes; `key(item)` names an item's group."""
    config = session.config
    groups: dict[str, list] = {}
    for item in session.items:
        groups.setdefault(key(item), []).append(item)
    names = _longest_first(config, list(groups))
    queue = _queue(len(names))
    children = {}
    gc.freeze()  # a collection in either process would touch, and so copy, every object of the other's
    for _ in range(processes - 1):
        read, write = os.pipe()
        try:
            fcntl.fcntl(read, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        except OSError:
            pass  # a smaller pipe only makes the child wait for the parent's next read
        pid = os.fork()
        if pid == 0:
            os.close(read)
            os.close(queue[1])  # the queue ends when no process holds its writing end
            _child(session, names, groups, queue[0], write)  # never returns
        os.close(write)
        children[pid] = _Relay(read, session)
    os.close(queue[1])
    seconds: dict[str, float] = {}
    ran: set[str] = set()
    try:
        for name, item, nextitem in _claimed(queue[0], names, groups):
            _run_one(item, nextitem, seconds, name)
            ran.add(item.nodeid)
            for relay in children.values():
                relay.replay()
            _stop_if_asked(session)
        for pid, relay in children.items():
            relay.finish(pid)
    finally:
        for pid, relay in children.items():  # an interrupted run leaves no process behind
            if not relay.reaped:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        os.close(queue[0])
    for relay in children.values():
        ran |= relay.finished
        for name, s in relay.seconds.items():
            seconds[name] = seconds.get(name, 0.0) + s
    left = [item for item in session.items if item.nodeid not in ran]
    for item, nextitem in zip(left, [*left[1:], None]):  # a dead child's unrun tests: run here
        _run_one(item, nextitem, seconds, key(item))
        _stop_if_asked(session)
    if getattr(config, "cache", None) is not None and not left:
        config.cache.set(DURATIONS, {name: round(s, 4) for name, s in seconds.items()})


def _run_one(item, nextitem, seconds: dict, name: str) -> None:
    start = time.perf_counter()
    item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
    seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - start


def _stop_if_asked(session) -> None:
    if session.shouldfail:
        raise session.Failed(session.shouldfail)
    if session.shouldstop:
        raise session.Interrupted(session.shouldstop)


def _longest_first(config, names: list[str]) -> list[str]:
    """The queue's order: by the last run's seconds, longest first, so that no process is left with a
    long group at the end; without a record, `together` groups first, then the course backwards (its
    later units build and train whole models)."""
    last = config.cache.get(DURATIONS, {}) if getattr(config, "cache", None) is not None else {}
    if last and all(name in last for name in names):
        return sorted(names, key=lambda name: -last[name])
    together = [name for name in names if name.startswith("together:")]
    return together + [name for name in reversed(names) if name not in together]


def _queue(count: int) -> tuple[int, int]:
    read, write = os.pipe()
    data = b"".join(QUEUE.pack(i) for i in range(count))
    if len(data) > 60_000:  # over a pipe's buffer the write would block before any reader exists
        raise pytest.UsageError(f"{count} test groups are too many to share between processes; use --jobs 1")
    os.write(write, data)
    return read, write


def _claimed(queue: int, names: list[str], groups: dict):
    """(group, item, the next item this process runs) for each test of each group taken from the queue.
    The next group is taken before a group's last test runs: its next item decides which fixtures end."""
    current = _take(queue, names)
    while current is not None:
        following = _take(queue, names)
        items = groups[current]
        after = groups[following][0] if following is not None else None
        for item, nextitem in zip(items, [*items[1:], after]):
            yield current, item, nextitem
        current = following


def _take(queue: int, names: list[str]) -> str | None:
    data = os.read(queue, QUEUE.size)
    return names[QUEUE.unpack(data)[0]] if len(data) == QUEUE.size else None


def _child(session, names, groups, queue: int, out: int) -> None:
    """A forked process: run the groups it takes, send every report to the parent, then exit without
    running anything of the parent's (atexit, session teardown)."""
    code = 0
    try:
        config = session.config
        _own_capture(config)
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            config.pluginmanager.unregister(reporter)
        sender = _Sender(out, config)
        config.pluginmanager.register(sender, "harness-parallel-sender")
        sender.live = True  # warnings recorded before the fork are the parent's already
        for name, item, nextitem in _claimed(queue, names, groups):
            sender.group = name
            # The last test keeps its fixtures: ending the session's would run the parent's teardown code.
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem or item)
    except BaseException:  # noqa: BLE001 - the parent names the test this process died in
        code = 3
    finally:
        os._exit(code)


def _own_capture(config) -> None:
    """After fork, the parent's capture files are shared: a child reading them would take the parent's
    output. Put them aside unread and capture into files of its own."""
    capman = config.pluginmanager.get_plugin("capturemanager")
    if capman is None or capman._global_capturing is None:
        return
    capman._global_capturing.suspend_capturing(in_=True)
    capman._global_capturing = None
    capman.start_global_capturing()


def report_from_wire(config, data: dict):
    """A child's test report as pytest made it: JSON turned a skip's (file, line, reason) into a
    list, and junitxml, the skip summary and the plugin's own skip reading expect a tuple."""
    report = config.hook.pytest_report_from_serializable(config=config, data=data)
    if isinstance(report.longrepr, list):
        report.longrepr = tuple(report.longrepr)
    return report


class _Sender:
    """The child's end: the log events of each test, sent as one length-prefixed JSON message when
    the test is done (a message per event woke the parent a thousand times a run)."""

    def __init__(self, out: int, config):
        self.out, self.config, self.live, self.group, self.events = out, config, False, "", []

    def flush(self) -> None:
        data = json.dumps(self.events, default=str).encode()
        data = LENGTH.pack(len(data)) + data
        self.events = []
        while data:
            data = data[os.write(self.out, data):]

    def pytest_runtest_logstart(self, nodeid, location):
        self.events.append({"kind": "start", "nodeid": nodeid})
        self.flush()  # the parent knows which test this process is in, should it die there

    def pytest_runtest_logreport(self, report):
        data = self.config.hook.pytest_report_to_serializable(config=self.config, report=report)
        self.events.append({"kind": "report", "group": self.group, "report": data})

    def pytest_runtest_logfinish(self, nodeid, location):
        self.events.append({"kind": "finish", "nodeid": nodeid})
        self.flush()

    def pytest_warning_recorded(self, warning_message, when, nodeid, location):
        if self.live:
            category = warning_message.category
            self.events.append({"kind": "warning", "when": when, "nodeid": nodeid,
                                "message": str(warning_message.message),
                                "category": f"{category.__module__}.{category.__qualname__}",
                                "filename": str(warning_message.filename), "lineno": warning_message.lineno})


class _Relay:
    """The parent's end of one child: between its own tests the parent reads what has come (never
    waiting) and reports it; the pipe holds a run's worth, so the child seldom waits on the parent."""

    def __init__(self, read: int, session):
        self.read, self.session, self.config = read, session, session.config
        self.items = {item.nodeid: item for item in session.items}
        self.buffer = b""
        self.running: str | None = None  # the test the child has started and not finished
        self.finished: set[str] = set()
        self.seconds: dict[str, float] = {}
        self.reaped = False
        os.set_blocking(read, False)

    def replay(self, wait: bool = False) -> bool:
        """Report what the child has sent; with `wait`, block until it sends or ends. False at its end."""
        if wait:
            select.select([self.read], [], [])
        open_ = True
        while True:
            try:
                chunk = os.read(self.read, 1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                open_ = False
                break
            self.buffer += chunk
        while len(self.buffer) >= LENGTH.size:
            size = LENGTH.unpack_from(self.buffer)[0]
            if len(self.buffer) < LENGTH.size + size:
                break
            events = json.loads(self.buffer[LENGTH.size:LENGTH.size + size])
            self.buffer = self.buffer[LENGTH.size + size:]
            for event in events:
                self._report(event)
        return open_

    def _report(self, event: dict) -> None:
        hook = self.config.hook
        kind = event["kind"]
        item = self.items.get(event.get("nodeid"))
        if kind == "start" and item is not None:
            self.running = item.nodeid
            hook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        elif kind == "report":
            report = report_from_wire(self.config, event["report"])
            group = event["group"]
            self.seconds[group] = self.seconds.get(group, 0.0) + (report.duration or 0.0)
            hook.pytest_runtest_logreport(report=report)
        elif kind == "finish" and item is not None:
            self.running = None
            self.finished.add(item.nodeid)
            hook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        elif kind == "warning":
            hook.pytest_warning_recorded.call_historic(kwargs=dict(
                warning_message=_warning(event), when=event["when"], nodeid=event["nodeid"], location=None))

    def finish(self, pid: int) -> None:
        """Report the rest as it comes, wait for the child, and fail the test it died in, if it died."""
        while self.replay(wait=True):
            pass
        os.close(self.read)
        _, status = os.waitpid(pid, 0)
        self.reaped = True
        if self.running is not None:
            item = self.items[self.running]
            why = (f"signal {signal.Signals(os.WTERMSIG(status)).name}" if os.WIFSIGNALED(status)
                   else f"exit status {os.WEXITSTATUS(status)}")
            _report_death(item, why)
            self.finished.add(item.nodeid)
            self.running = None


class TestProcessDied(RuntimeError):
    """The process running a test ended inside it (the suite ran in several: pytest --jobs)."""


def _report_death(item, why: str) -> None:
    from _pytest.runner import CallInfo

    def died():
        raise TestProcessDied(f"the test process running this test ended inside it ({why}): the code under test "
                              "crashed the interpreter or called os._exit/sys.exit. `pytest --jobs 1 "
                              f"{item.nodeid}` runs it alone, where a crash shows its own traceback")
    call = CallInfo.from_call(died, when="call")
    report = item.ihook.pytest_runtest_makereport(item=item, call=call)
    item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)


def _warning(message: dict) -> warnings.WarningMessage:
    module, _, name = message["category"].rpartition(".")
    category = getattr(sys.modules.get(module), name, None)
    if not (isinstance(category, type) and issubclass(category, Warning)):
        category = UserWarning
    return warnings.WarningMessage(category(message["message"]), category, message["filename"], message["lineno"])
