"""The grader's side of a submission's worker: adapter calls as data, across a socket.

`RemoteFunctions(link)` stands where the adapters module would: `runtime.Adapters`
wraps it exactly as it wraps a local module, so every test, contract check and
comparison runs unchanged, in the grader's process, on plain tensors that came back
over the wire. Gradients cross too: a result that needs them is tied into the
grader's autograd graph, and its backward asks the worker for the vector-Jacobian
product. A module the submission returns stays in the worker; `RemoteModule` is its
stand-in, and probes (allocation size, meta device) run in the worker over it.

Verdicts that rest on the worker's own report (parameter and buffer listings, the
meta-device, largest-allocation and table probes) carry no points: their tests are marked
`reports_only`. Values, gradients and counts are compared here.
"""

import collections
import contextlib
import functools
import hashlib
import re
import select
import time
import types
from pathlib import Path

import torch

from harness.grading import wire
from harness.grading.report import POSED, UNCHECKED
from harness.contract import ADAPTERS
from harness.student_run.probes import Allocation, DeviceMismatch
from harness.runtime import AdaptersError, ContractViolation, StudentImportError
from harness.grading.sandbox import Sandbox

FAST = 0.2           # seconds: a reply this quick needs no CPU accounting
IMPORT_CPU = 60.0    # CPU seconds a worker may take to import the submission
WALL_GRACE = 10.0    # the wall-clock backstop: 3 x the CPU limit, plus this
REPLY_SECONDS = 5.0  # a reply, once begun, arrives whole within this (a local socket moves 512 MB in less)
SEND_SECONDS = 10.0  # for a worker, idle between calls, to take a request (red team 13's never read one)
# The driver holds a reply several times over while it decodes and checks it, outside the submission's memory
# limit: red team 9's module of one 480 MB parameter took a driver to 2.5 GB. The suite's largest reply is
# 2 MB (a training run's weights); a reply over this is refused from its length, unread.
MAX_REPLY = 64 << 20
# One infinite loop in run_silu cost a TA's student 0/123 (timeout): every test of silu, and of everything that
# calls it, spent the whole per-call limit until the submission's ran out, and the hidden cases never ran. A
# function that ran out of time this many times is not called again, and once any call has, the others get
# at most AFTER_A_HANG CPU seconds (the reference's slowest call takes 0.2 s).
HUNG_AGAIN = 2
AFTER_A_HANG = 10.0
# The worker stops a call itself at this share of the limit, and says which line of the submission it was
# running; the grader's own count, over every process of the submission, stops what that misses.
ALARM = 0.8


class StudentCodeError(Exception):
    """The submission's code raised during a call (in its worker)."""


class WorkerFailure(AdaptersError):
    """The worker died, or could not import the submission: no test can count it as a result."""


class Link:
    """Requests to one submission's current worker, in one phase: "public", then "hidden"."""

    def __init__(self, sandbox: Sandbox, case_timeout: float, deadline: float | None = None):
        self.sandbox, self.case_timeout, self.deadline = sandbox, case_timeout, deadline
        self.timed_out = False  # the whole submission ran out of time
        self.sandbox_failed = False  # the grader's fault, not the submission's
        self.phase = "public"
        self.sock = None
        self.broken: str | None = None  # why this phase's workers cannot serve any call
        self.import_error = ""  # what the submission's import raised for its visible tests (a status of its own)
        self.imported = False  # a visible-test worker imported the submission
        self.hung: collections.Counter = collections.Counter()  # function -> its calls that ran out of time
        self.made_by: dict[tuple[str, int], str] = {}  # ("module" or "graph", handle) -> the function that made it
        self.files = ""  # the digest of the submission's files when it did
        self.cpu_limit = case_timeout  # the current call's
        self.phrase_chars = [PHRASE_CHARS]  # what disarm's phrase search may still read of the submission's replies

    def enter(self, phase: str) -> None:
        """Switch phase; a hidden-case worker starts only once every visible-test process is dead
        and all they printed is read."""
        if phase == self.phase:
            return
        self._drop_worker()
        if phase == "hidden" and not self.sandbox.hidden:
            self.sandbox.seal_for_hidden_cases()
        self.phase, self.broken = phase, None

    def request(self, **message) -> dict:
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.timed_out = True
            raise TimeoutError("the submission ran out of its time limit before this test")
        called = self._charged(message)
        if self.hung[called] >= HUNG_AGAIN and called:
            raise TimeoutError(f"{called} ran out of time on {self.hung[called]} earlier tests: it is not called again "
                               "in this submission, so that the tests of other functions still run. Look for a loop "
                               "that never ends in it, or in the code it calls.")
        if self.sock is None:
            self._start_worker()
        try:
            self.cpu_limit = min(self.case_timeout, AFTER_A_HANG) if self.hung else self.case_timeout
            reply = self._exchange({**message, "alarm": ALARM * self.cpu_limit}, self.cpu_limit)
        except TimeoutError:
            if not self.timed_out:  # its own limit, not the submission's
                self.hung[called] += 1
            raise
        if not isinstance(reply, dict):
            raise StudentCodeError("the worker sent a malformed reply")
        if "error" in reply:
            error = self._error(reply["error"])
            if isinstance(error, TimeoutError):  # the worker stopped it at its own alarm: a hang like any other
                self.hung[called] += 1
                self._drop_worker()
            raise error
        for kind in ("module", "graph"):
            if type(reply.get(kind)) is int:
                self.made_by[kind, reply[kind]] = called
        return reply

    def _charged(self, message: dict) -> str:
        """The contract function a request's time is charged to: the one it names, or for a module's method,
        a probe of a module or a gradient, the function that made that module or result (TA trial 9: a loop
        in silu timed out 5 tests of get_transformer_lm's module, each one's forward charged to no one)."""
        if message.get("name"):
            return str(message["name"])
        target = message.get("target")
        if isinstance(target, dict) and target.get("function"):
            return str(target["function"])
        handle = target.get("module") if isinstance(target, dict) else message.get("handle")
        return self.made_by.get(("graph" if message.get("op") == "vjp" else "module", handle), "")

    def _start_worker(self) -> None:
        """A fresh worker that has imported the submission, or WorkerFailure for this phase."""
        if self.broken:
            raise WorkerFailure(self.broken)
        try:
            self.sock = self.sandbox.fork()
        except OSError as e:  # it could not start, or died before forking
            self.sandbox_failed = True
            self.broken = f"the sandbox could not start a worker ({e})"
            raise WorkerFailure(self.broken) from None
        try:
            reply = self._exchange({"op": "hello"}, IMPORT_CPU)
        except (TimeoutError, WorkerFailure) as e:
            self.broken = f"importing adapters.py failed: {e}"  # died or ran out of time: no import-error status
            self._import_failed_after_importing()
            raise WorkerFailure(self.broken) from None
        if not isinstance(reply, dict) or "error" in reply:  # it fails the same way every time: no retry
            error = reply.get("error") if isinstance(reply, dict) else None
            message = error.get("message") if isinstance(error, dict) else None
            self.broken = str(message)[:4000] if self.phase == "public" and message else "importing adapters.py failed"
            self.import_error = self.import_error or (self.broken if self.phase == "public" else "")
            self._import_failed_after_importing()
            self._drop_worker()
            raise WorkerFailure(self.broken)
        if self.phase == "public" and not self.imported:
            self.imported, self.files = True, files_digest(self.sandbox.submission)

    def _import_failed_after_importing(self) -> None:
        """Hidden cases whose worker cannot import what the visible tests' worker imported. If the files
        changed in between (red team 5 had another slot's submission delete this one's copy, and an honest
        reference scored 0 with status ok), the grade is the grader's error: a regrade. If not, the
        submission failed by itself (a marker it left in its scratch folder, red team 6): its hidden cases
        fail, and no staff regrade is owed."""
        if self.phase == "hidden" and self.imported and files_digest(self.sandbox.submission) != self.files:
            self.sandbox_failed = True

    def _exchange(self, message: dict, cpu_limit: float) -> dict:
        """Every reply passes here, and so every text the worker chose (messages, values, names)."""
        try:
            self.sock.settimeout(SEND_SECONDS)
            try:
                wire.send(self.sock, message)
            except TimeoutError:  # a stall here escaped every limit: only the batch's watchdog ended it
                self._timeout(f"the worker did not take the test's inputs within {SEND_SECONDS:g} s: it stopped "
                              "reading them.")
            return disarm(self._wait(cpu_limit), self.phrase_chars)
        except wire.TooLarge as e:
            self._drop_worker()
            raise StudentCodeError(
                f"the reply was too large to accept ({e}): the test's inputs are "
                "small, so a result or a module's tensors far larger than they need (a buffer sized for a huge "
                "context?). The next test runs in a fresh worker.") from None
        except (ConnectionError, wire.WireError):
            self._drop_worker()
            raise WorkerFailure("the worker process died during this call (it exited, crashed, or hit the "
                                "memory limit); the next test runs in a fresh worker") from None

    def _wait(self, cpu_limit: float) -> dict:
        """The reply, within `cpu_limit` CPU seconds of the whole submission (every process of
        it), a wall-clock backstop (for sleeping and waiting), the submission's own deadline,
        and REPLY_SECONDS from its first byte to its last, however it trickles in."""
        start = time.monotonic()
        wall = 3 * cpu_limit + WALL_GRACE
        cpu_start, checked = None, start
        while True:
            output = self.sandbox.stdout
            ready = select.select([self.sock] + ([output] if output is not None else []), [], [], FAST)[0]
            if output is not None and output in ready:
                self.sandbox.pump()  # what the worker prints while it works
            if self.sock in ready:
                break
            now = time.monotonic()
            if now - checked < FAST:
                continue
            checked = now
            cpu = self.sandbox.cpu_seconds_used()
            cpu_start = cpu if cpu_start is None else cpu_start
            if cpu - cpu_start + FAST > cpu_limit:
                self._timeout(f"the call did not finish within {cpu_limit:g} s of CPU time (counted over all "
                              "its processes): look for an infinite loop, or work that grows far faster than "
                              "the input.")
            self._check_deadline()
            if now - start > wall:
                self._timeout(f"the call did not finish within {wall:g} s of wall-clock time, though it used "
                              f"less than {cpu_limit:g} s of CPU time: it was sleeping or waiting.")
        ends = time.monotonic() + REPLY_SECONDS
        try:
            return wire.recv(self.sock, deadline=ends if self.deadline is None else min(ends, self.deadline),
                             limit=MAX_REPLY)
        except TimeoutError:
            self._check_deadline()
            self._timeout(f"the worker began its reply but did not finish it within {REPLY_SECONDS:g} s.")
        finally:
            if self.sock is not None:
                self.sock.settimeout(None)

    def _check_deadline(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.timed_out = True
            self._drop_worker()
            raise TimeoutError("the submission ran out of its time limit during this test")

    def _timeout(self, why: str):
        self._drop_worker()
        raise TimeoutError(f"{why} The next test runs in a fresh worker.")

    def new_worker(self) -> None:
        """The next request goes to a fresh worker: every process of this one is killed first."""
        self._drop_worker()

    def _drop_worker(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self.sandbox.kill_workers()

    def _error(self, error: dict) -> Exception:
        """The worker's failure as the grader's exception: its kind decides how checks treat it
        (a plain raise, a device mix, a return value that is no answer); on a hidden case the
        submission's own words are dropped, since the case's inputs could be in them."""
        error = error if isinstance(error, dict) else {}
        kind = str(error.get("type", "Exception"))
        kind = kind if kind.isidentifier() else "Exception"  # the worker names it: a class name, nothing else
        hidden = self.phase == "hidden"  # even the exception's name is the submission's to choose
        message = "failed on a hidden case" if hidden else str(error.get("message", ""))
        if kind == "NotImplementedError":
            return NotImplementedError(message)
        if kind == "DeviceMismatch":
            return DeviceMismatch(message)
        if kind == "UnsendableResult":  # a return value, not a raise: it must not pass a must-raise case
            return ContractViolation(f"{UNCHECKED}{message}")
        if kind == "CallTimedOut":  # the message is where the code was: a file and line of its own, at most
            where = "" if hidden else f" It was running {message[:300]} when stopped." if message else ""
            return TimeoutError(f"the call did not finish within {self.cpu_limit:g} s of CPU time.{where} "
                                "Look for an infinite loop, or work that grows far faster than the input. The next "
                                "test runs in a fresh worker.")
        if hidden:
            return _raised(StudentCodeError(message), error)
        if kind == "StudentImportError":  # said as the student's own run says it, at the file and line: an import
            return StudentImportError(message)  # failure, not a raise that a must-raise case counts (TA trial 14)
        where = f"\n{str(error['traceback']).rstrip()}" if error.get("traceback") else ""
        return _raised(StudentCodeError(f"{kind}: {message}{where}"), error)


def _raised(e: StudentCodeError, error: dict) -> StudentCodeError:
    """With the class names the worker gave (`kinds`: the exception's and its bases'), by which a must-raise
    case asks for the docstring's exception (checks.check_raises). Names only, never shown on a hidden case."""
    bases = error.get("bases")
    kinds = [str(b) for b in bases[:16] if isinstance(b, str) and b.isidentifier()] if isinstance(bases, list) else []
    e.kinds = kinds or [str(error.get("type", "Exception"))]
    return e


# The labels of the grader's own diagnosis lines (the class report counts mistakes by them).
_LABELS = re.compile(r"(?i)(likely cause|what differs|non-finite)\s*:")


@functools.cache
def _phrases() -> re.Pattern | None:
    """The phrases by which the class report names a known mistake in a check's message (named_by)."""
    try:
        from harness.grading.report import Namer, known_mistakes
        phrases = [phrase for phrase, _ in Namer(known_mistakes()).phrases]
    except ImportError:  # no reference/ or catalogue here (Gradescope's upload): no class report is built here
        return None
    return re.compile("|".join(map(re.escape, phrases))) if phrases else None


# Characters of one submission's replies searched for a mistake's phrase (0.1 ms a KiB): past them every text is
# marked unread. Red team 14's replies of 950 strings of 4 KiB each kept a driver core busy 20x the submission's
# own CPU, outside its limits; the suite's honest replies hold a few KiB of names and messages in all.
PHRASE_CHARS = 1 << 20


def _posed(text: str, budget: list[int]) -> str:
    """The text with its labels defused; one that holds a mistake's phrase (a parameter or a key named
    'as far before it') is marked as the code's words, which the report counts for no mistake."""
    text = _LABELS.sub(rf"\1 {POSED}", text)
    if POSED in text:
        return text
    # past 4 KiB (no name or key is that long), or past the submission's budget, the search is not worth its
    # cost: marked unread
    unread = len(text) > 4096 or len(text) > budget[0]
    budget[0] -= 0 if unread else len(text)
    if unread or (phrases := _phrases()) is not None and phrases.search(text):
        text = f"{text} {POSED}"
    return text


def disarm(reply, budget: list[int] | None = None):
    """The reply with every string in it (dict keys too) rewritten so that none holds a label of the
    grader's diagnosis lines or a known mistake's phrase: text the submission chose (an exception's
    message, a class name, a returned string or parameter name) cannot pose as a `Likely cause:` or name
    a mistake in any report built from it. `budget`: the characters the phrase search may still read
    (PHRASE_CHARS a submission), spent here."""
    budget = [PHRASE_CHARS] if budget is None else budget
    todo = [reply]
    while todo:  # iterative: a reply may nest as deep as the wire allows
        node = todo.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in list(items):
            if isinstance(value, str):
                node[key] = _posed(value, budget)
            elif isinstance(value, (dict, list)):
                todo.append(value)
            if isinstance(key, str) and (posed := _posed(key, budget)) != key:
                node[posed] = node.pop(key)
    return _posed(reply, budget) if isinstance(reply, str) else reply


def files_digest(folder: Path) -> str:
    """Every file's path and bytes under the submission's copy (which its own uid cannot write to)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(folder)}\0{path.stat().st_size}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@contextlib.contextmanager
def _reading_reply():
    """A reply that is well-formed on the wire but not what was asked for fails its test with one
    line: never with the grader's own traceback."""
    try:
        yield
    except NotImplementedError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RuntimeError, ArithmeticError) as e:
        raise StudentCodeError(f"the worker sent a malformed reply ({type(e).__name__})") from None


class RemoteFunctions:
    """The adapters module, as seen from the grader."""

    def __init__(self, link: Link):
        self.link = link

    def __getattr__(self, name: str):
        if name not in ADAPTERS:
            raise AttributeError(name)
        return RemoteFunction(self.link, name)


class RemoteFunction:
    def __init__(self, link: Link, name: str):
        self.link, self.name = link, name
        self.signature = ADAPTERS[name].signature

    def __call__(self, *args, **kwargs):
        kwargs = self.signature.bind(*args, **kwargs).arguments
        if self.name == RESUMED and self.link.phase == "hidden":
            return resume_training(self.link, kwargs)
        reply = self.link.request(op="call", name=self.name, kwargs=kwargs)
        with _reading_reply(), torch.no_grad():  # mirror in-place writes, so the mutation check sees them
            leaves = dict(wire.tensors(kwargs))
            for path, value in reply.get("mutated", {}).items():
                if path in leaves and leaves[path].shape == value.shape:
                    leaves[path].copy_(value)
        wrt = [t for _, t in wire.tensors(kwargs) if t.requires_grad]
        with _reading_reply():
            return _result(self.link, reply, wrt)

    def remote_probe(self, kind: str, *args, **kwargs):
        return _probe(self.link, kind, {"function": self.name}, args, kwargs)


# The checkpoint drill, split over two workers on hidden cases: its points are earned there (a public
# verdict moves no score, and its properties earn only once a hidden case passes), and a visible case
# keeps one worker, as a student's own run does (a split costs a fresh worker: 40 ms of CPU).
RESUMED = "run_resume_training"


def _piece(entry: str) -> str:
    """The student's `module.function` that an entry point's glue calls (harness/contract.py)."""
    [symbol] = ADAPTERS[entry].symbols
    return symbol


def resume_training(link: Link, kwargs: dict) -> torch.Tensor:
    """run_resume_training on a hidden case. The run that never stopped is the driver's own: the contract's
    glue with no student piece in it. The resumed run is split over two workers: the first runs the
    glue up to the student's save_checkpoint and returns the bytes it wrote (the driver never reads
    them); a fresh one runs the glue again, its save writing those bytes, then the student's
    load_checkpoint and the rest of the training. Each gets only the steps on its side of save_at
    (the others zeroed), so the state at save_at crosses as the checkpoint alone: neither a rewritten
    drill nor state kept in memory can stand in for saving and loading it."""
    save_at = int(kwargs["save_at"])
    pieces = {"save": _piece("run_save_checkpoint"), "load": _piece("run_load_checkpoint")}
    before = {**kwargs, "inputs": _steps(kwargs["inputs"], 0, save_at), "targets": _steps(kwargs["targets"], 0, save_at)}
    checkpoint = link.request(op="call", name=RESUMED, kwargs=before, resume=pieces).get("value")
    with _reading_reply():
        if not (isinstance(checkpoint, torch.Tensor) and checkpoint.dtype == torch.uint8 and checkpoint.dim() == 1):
            raise TypeError("not the checkpoint's bytes")
    link.new_worker()
    after = {**kwargs, "inputs": _steps(kwargs["inputs"], save_at, None),
             "targets": _steps(kwargs["targets"], save_at, None)}
    runs = link.request(op="call", name=RESUMED, kwargs=after, resume={**pieces, "checkpoint": checkpoint}).get("value")
    straight = _straight_run(kwargs, pieces)
    with _reading_reply():
        if not (isinstance(runs, torch.Tensor) and runs.dim() == 2 and runs.shape[1:] == straight.shape
                and runs.dtype == straight.dtype):
            raise ValueError("not two runs' weights")
        return torch.stack([straight, runs[-1]])


def _steps(t: torch.Tensor, start: int, stop: int | None) -> torch.Tensor:
    """`t` with its steps outside [start, stop) zeroed."""
    kept = torch.zeros_like(t)
    kept[start:stop] = t[start:stop]
    return kept


@functools.cache
def _drills_code():
    from harness.contract import render_drills
    return compile(render_drills("student"), "<the contract's drills>", "exec")


def _straight_run(kwargs: dict, pieces: dict) -> torch.Tensor:
    """The checkpoint drill's run that never stopped, by the contract's glue run here with stand-ins for
    the student's pieces (a save that writes nothing, a load that restores nothing: its resumed row,
    then meaningless, is dropped)."""
    glue: dict = {}
    exec(_drills_code(), glue)  # the harness's own code, no submission's
    saved: dict = {}  # the load gives back the iteration the glue saved with, whatever the glue's convention
    stand_ins = {pieces["save"]: lambda model, optimizer, iteration, out: saved.update(iteration=iteration),
                 pieces["load"]: lambda *args: saved["iteration"]}
    modules: dict = {}
    for name, fn in stand_ins.items():
        module, _, function = name.partition(".")
        setattr(modules.setdefault(module, types.SimpleNamespace()), function, fn)
    glue["impl"] = types.SimpleNamespace(**modules)
    with torch.enable_grad():
        return glue[RESUMED](**kwargs)[0]


class RemoteModule(torch.nn.Module):
    """Stand-in for a module that lives in the worker. Parameters are fetched once as
    local leaves, so `.grad` fills in after a backward through `module(x)`."""

    def __init__(self, link: Link, handle: int):
        super().__init__()
        self._link, self._handle, self._params = link, handle, None

    def _ask(self, method: str, *args):
        return self._link.request(op="module", handle=self._handle, method=method, args=list(args))

    def forward(self, *args):
        params = list(self.parameters())
        reply = self._ask("forward", *args)
        with _reading_reply():
            return _result(self._link, reply, [p for p in params if p.requires_grad])

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        if self._params is None:
            fetched = self._ask("named_parameters")
            with _reading_reply():
                self._params = {n: t.detach().requires_grad_(t.is_floating_point())
                                for n, t in _tensors_named(fetched["value"]).items()}
        return iter((prefix + n, p) for n, p in self._params.items())

    def parameters(self, recurse: bool = True):
        return (p for _, p in self.named_parameters())

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        reply = self._ask("named_buffers")
        with _reading_reply():
            return iter([(prefix + str(n), b) for n, b in _tensors_named(reply["value"]).items()])

    def buffers(self, recurse: bool = True):
        return (b for _, b in self.named_buffers())

    def state_dict(self, *args, **kwargs):
        reply = self._ask("state_dict")
        with _reading_reply():
            return _tensors_named(reply["value"])

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        self._ask("load_state_dict", dict(state_dict))
        self._params = None
        return torch.nn.modules.module._IncompatibleKeys([], [])

    def train(self, mode: bool = True):
        self._ask("train", bool(mode))
        return self

    def to(self, *args, **kwargs):
        device = torch._C._nn._parse_to(*args, **kwargs)[0]
        if device is not None:
            self._ask("to", str(device))
            self._params = None
        return self

    def remote_probe(self, kind: str, *args, **kwargs):
        return _probe(self._link, kind, {"module": self._handle}, args, kwargs)

    def extra_repr(self) -> str:
        return f"in the worker, handle {self._handle}"


def _tensors_named(value) -> dict[str, torch.Tensor]:
    """A listing of a module's tensors, or a malformed reply: the tests read each as a tensor (red team 8: a
    string there made them say the grader failed)."""
    if not isinstance(value, dict) or not all(isinstance(t, torch.Tensor) for t in value.values()):
        raise TypeError("not a listing of tensors")
    return {str(n): t for n, t in value.items()}


class _FromWorker(torch.autograd.Function):
    """A worker's result as a node of the grader's graph; backward asks the worker."""

    @staticmethod
    def forward(ctx, link, handle, holder, *inputs):
        ctx.link, ctx.handle, ctx.shapes = link, handle, [t.shape for t in inputs]
        return holder[0]

    @staticmethod
    def backward(ctx, cotangent):
        reply = ctx.link.request(op="vjp", handle=ctx.handle, cotangent=cotangent.contiguous())
        grads = reply.get("grads")
        if not isinstance(grads, list) or len(grads) != len(ctx.shapes) or any(
                g is not None and (not isinstance(g, torch.Tensor) or g.shape != s) for g, s in zip(grads, ctx.shapes)):
            raise StudentCodeError("the worker returned gradients that do not match the inputs")
        return (None, None, None, *grads)


def _result(link: Link, reply: dict, wrt: list):
    if "module" in reply:
        return RemoteModule(link, int(reply["module"]))
    value = reply.get("value")
    if isinstance(value, torch.Tensor) and "graph" in reply and wrt:
        return _FromWorker.apply(link, int(reply["graph"]), [value], *wrt)
    return value


def _probe(link: Link, kind: str, target: dict, args: tuple, kwargs: dict):
    reply = link.request(op="probe", kind=kind, target=target, args=list(args), kwargs=kwargs)
    with _reading_reply():
        return _probe_value(kind, reply)


def _probe_value(kind: str, reply: dict):
    if kind in ("allocation", "footprint"):
        largest = reply.get("largest")
        found = None if largest is None else Allocation(
            str(largest["op"]), [int(s) for s in largest["shape"]], getattr(torch, str(largest["dtype"])))
        return (reply.get("value"), found) if kind == "allocation" else (reply.get("value"), found, int(reply["peak"]))
    if kind == "allocations":
        return reply.get("value"), [Allocation(str(a["op"]), [int(s) for s in a["shape"]], getattr(torch, str(a["dtype"])))
                                    for a in reply.get("found")]
    if kind == "tables":
        return [str(name) for name in reply.get("value")]
    if kind == "roles":
        return [(str(name), str(role)) for name, role in reply.get("value")]
    return reply.get("value")
