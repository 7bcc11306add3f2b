"""The untrusted side of grading: the only process that imports a submission's code.

It runs inside the sandbox (harness/grading/sandbox.py) and sees nothing but Python, its
packages, a read-only copy of the submission and a scratch folder. It never receives
expected values, fixture files or case metadata: only the arguments of one call.

    zygote  imports torch once, then forks a fresh worker on request. A worker that
            crashed or timed out is replaced the same way, so no half-imported module
            outlives a timeout. Hidden-case workers are forked once every visible-test
            process is dead (the "kill" request); the zygote is never told the phase, and
            its stdout is the same pipe, which the grader then drops. With bubblewrap it
            serves the slot's next submission too ("recycle"), once every other process is
            dead, its scratch folder empty and nothing about itself changed.
    worker  answers requests from the grader: call an adapter, the gradient of a
            result (vector-Jacobian product), a method of a module it returned, or a
            probe (allocation size, meta device) run over one of those.

Only harness.paths, harness.torch_imports, harness.grading.wire and harness.student_run.probes are
importable here; they are copied into the sandbox on their own, without the rest of the harness.
"""

import contextlib
import ctypes
import fcntl
import gc
import linecache
import os
import platform
import resource
import shutil
import signal
import socket
import sys
import time
import traceback

import torch

from harness.grading import wire

SUBMISSION = "/submission"  # where the sandbox mounts it; main() may say otherwise
SCRATCH = "/scratch"        # the sandbox's one writable folder (a tmpfs)


# ---------------------------------------------------------------- zygote

def zygote(control_fd: int, namespace: bool) -> None:
    """Fork workers on request. Non-dumpable, so a worker cannot read or patch its memory."""
    _set_dumpable(False)
    control = socket.socket(fileno=control_fd)
    warm = False
    born = _own_state()
    while True:
        try:
            request = wire.recv(control)
        except wire.WireError:
            return  # the grader hung up
        _reap()
        if request["op"] == "fork":
            if not warm and request.get("warm_up", True):  # not for the grader's start-up check
                _warm_up()
                warm = True
            gc.freeze()  # a worker's collections then neither walk nor copy the zygote's objects
            ours, theirs = socket.socketpair()
            try:
                pid = os.fork()
            except OSError:  # the uid's processes fill its limit: no worker now, and the zygote lives on
                ours.close()
                theirs.close()
                socket.send_fds(control, [b"n"], [])
                continue
            if pid == 0:
                control.close()
                ours.close()
                os.closerange(3, theirs.fileno())  # nothing else the zygote holds
                os.closerange(theirs.fileno() + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
                _become_worker()
                serve(theirs)
                os._exit(0)
            theirs.close()
            socket.send_fds(control, [b"w"], [ours.fileno()])
            ours.close()
        elif request["op"] == "kill":
            wire.send(control, {"killed": _kill_all_but_me(namespace)})
        elif request["op"] == "recycle":  # the next submission's output pipe comes with it
            _, fds, _, _ = socket.recv_fds(control, 1, 1)
            wire.send(control, {"clean": namespace and len(fds) == 1 and _recycled(born, fds[0])})


def _warm_up() -> None:
    """What every worker would set up on its first gradient, done once, before the first fork: autograd.grad
    with a cotangent asks torch.fx's symbolic shapes, whose stand-in (as in a student's run) spares
    sympy's import, 0.5 s of each submission's CPU. Tiny tensors, one thread (OMP_NUM_THREADS=1): no
    thread pool for a fork to inherit. With them, what every worker imports before a submission's code
    runs (the rendered adapters.py's imports, the contract's drills): a fresh worker (a phase, a
    timeout, the checkpoint drill's second half) then costs its fork and the submission's own files."""
    from harness.torch_imports import concrete_symbolic_shapes
    concrete_symbolic_shapes()
    x = torch.ones(2, requires_grad=True)
    torch.autograd.grad(x * 2, [x], torch.ones(2))
    # The meta-device probe's first ops set up torch's Python meta kernels (refs, prims): a second of CPU
    # under load, which a worker's case_timeout would charge to the submission.
    from harness.torch_imports import meta_kernels_lean
    with meta_kernels_lean():
        q = torch.ones(1, 2, 3, 4, device="meta")
        scores = (q @ q.transpose(-1, -2) * 0.5).masked_fill(torch.ones(3, 3, dtype=torch.bool, device="meta"), 0)
        torch.softmax(scores + torch.arange(3, device="meta"), dim=-1).sum(-1).sqrt()
    from harness.grading import contract_drills  # noqa: F401  (no submission code: it imports student/ lazily)
    from harness.torch_imports import optimizers_without_dynamo
    optimizers_without_dynamo()
    try:
        import jaxtyping  # noqa: F401
        import numpy.typing  # noqa: F401
    except ImportError:  # not in this Python: a submission that needs them says so itself
        pass


def _become_worker() -> None:
    _set_dumpable(True)
    os.setsid()
    # No open file description shared with the zygote but stdout (the submission's own pipe): flags set on
    # one (O_NONBLOCK, a SIGIO owner) would reach the slot's next submission through it.
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:  # the OOM killer's first choice, before the zygote and long before the grader
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass
    # A worker is killed, not closed: each line goes out as it is printed.
    sys.stdout.reconfigure(write_through=True, line_buffering=True)
    sys.stderr.reconfigure(write_through=True, line_buffering=True)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    torch.manual_seed(0)  # a deterministic start; calls are not reseeded (dropout must still vary)


def _kill_all_but_me(namespace: bool) -> bool:
    """Every other process of the sandbox; True once they are gone. In its PID namespace, kill(-1) does it
    in one pass of the kernel's own (fork-blocking) loop, so a process that keeps forking cannot slip
    through, and it runs at least once, whatever /proc says; elsewhere only this zygote's descendants
    are ours to kill."""
    me = os.getpid()
    for attempt in range(200):
        _reap()
        victims = [p for p in _pids() if p != me and (p != 1 if namespace else _descends_from(p, me))]
        if not victims and (attempt or not namespace):
            return True
        if namespace:
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in victims if not namespace else []:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.01)  # a killed process takes a moment to die
    return False


def _pids() -> list[int]:
    """Live processes: a zombie is already dead, and waits only for its parent."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and not _zombie(p)]


def _zombie(pid: str) -> bool:
    """Dead: every thread of it. A leader that ended by the thread-only exit syscall reads as a zombie while
    its other threads run on (red team 7: such a worker outlived the kill and served the next submission)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True  # gone already
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] not in "ZX":
                    return False
        except (OSError, IndexError):
            continue
    return True


def _descends_from(pid: int, ancestor: int) -> bool:
    for _ in range(64):
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
    return False


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _set_dumpable(on: bool) -> None:
    try:
        ctypes.CDLL(None).prctl(4, int(on), 0, 0, 0)  # PR_SET_DUMPABLE
    except (OSError, AttributeError):
        pass


# What a process of the same uid can change about another without ptrace (which non-dumpable
# denies): its limits (prlimit), priority, CPUs, scheduling class, I/O priority and OOM score.
# Every worker inherits them, so a submission that changed one would reach the next.
_IOPRIO_GET = {"x86_64": 252, "aarch64": 31}.get(platform.machine())


_F_SETSIG = 10  # Linux's, which the fcntl module does not name
_SCHED_GETATTR = {"x86_64": 315, "aarch64": 275}.get(platform.machine())  # runtime slice, util clamps (red team 7)


def _own_state() -> tuple:
    limits = [resource.getrlimit(getattr(resource, r)) for r in dir(resource) if r.startswith("RLIMIT_")]
    with open("/proc/self/oom_score_adj") as f:
        oom = f.read()
    libc = ctypes.CDLL(None, use_errno=True)
    io = libc.syscall(_IOPRIO_GET, 1, 0) if _IOPRIO_GET else None
    attr = ctypes.create_string_buffer(128)
    sched = attr.raw if _SCHED_GETATTR and libc.syscall(_SCHED_GETATTR, 0, attr, 128, 0) == 0 else None
    return (limits, os.getpriority(os.PRIO_PROCESS, 0), sorted(os.sched_getaffinity(0)),
            os.sched_getscheduler(0), os.sched_getparam(0).sched_priority, oom, io, sched)


def _recycled(born: tuple, output: int) -> bool:
    """Ready for the slot's next submission: every other process of the sandbox dead, the scratch folder
    (its one writable place) emptied, this zygote as it started, and its stdout the next submission's own
    pipe (flags a worker set on the old one's shared description, O_NONBLOCK or a SIGIO owner, went with
    it: red team 7). Anything else, or any error, says no: the grader then starts a fresh sandbox, and
    the next submission meets nothing of this one."""
    try:
        if not _kill_all_but_me(True):
            return False
        for fd in (0, 1, 2):  # descriptions bwrap holds too: off with O_NONBLOCK, O_APPEND and O_ASYNC's SIGIO
            fcntl.fcntl(fd, fcntl.F_SETFL, 0)  # (whose owner and signal a worker chose: a SIGSTOP for this
            fcntl.fcntl(fd, fcntl.F_SETOWN, 0)  # zygote once the grader drains the old pipe, red team 7)
            fcntl.fcntl(fd, _F_SETSIG, 0)
        os.dup2(output, 1)
        os.dup2(output, 2)
        for entry in os.scandir(SCRATCH):
            _remove(entry.path)
        return not os.listdir(SCRATCH) and _own_state() == born
    except BaseException:  # noqa: BLE001 - a tree too deep or too odd to remove, a vanished /proc entry
        return False
    finally:
        os.close(output)


def _remove(path: str) -> None:
    """A file or a whole tree, folders the submission closed to itself included (it owns them)."""
    if not os.path.isdir(path) or os.path.islink(path):
        os.unlink(path)
        return
    folders = [path]
    while folders:  # opened first, top down and without recursion; removal then fails loudly on what is left
        folder = folders.pop()
        os.chmod(folder, 0o700)
        folders += [e.path for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)]
    shutil.rmtree(path)


# ---------------------------------------------------------------- worker

class AdaptersImportFailed(ImportError):
    """adapters.py itself does not import: the submission's status (import-error), said once, as it is."""


class Captured(Exception):
    """The first half of a split checkpoint drill ends here, the checkpoint's bytes in hand."""


class Worker:
    def __init__(self):
        self.adapters = None
        self.drills = None  # the contract's own drills (contract_drills.py, rendered by the grader)
        self.import_error = None
        self.graphs: dict[int, tuple] = {}    # handle -> (output, tensors it may be differentiated by)
        self.modules: dict[int, torch.nn.Module] = {}
        self.next_handle = 0

    # -- requests

    def hello(self):
        """Import the submission: its cost and its failure belong to no single test."""
        return {"functions": sorted(n for n in dir(self._adapters()) if n.startswith(("run_", "get_")))}

    def call(self, name: str, kwargs: dict, resume: dict | None = None):
        fn = self._function(name)
        before = {path: t.detach().clone() for path, t in wire.tensors(kwargs)}
        out = fn(**kwargs) if resume is None else self._half(fn, kwargs, **resume)
        mutated = {path: t.detach() for path, t in wire.tensors(kwargs) if not _same(before[path], t.detach())}
        return {**self._result(out, [t for _, t in wire.tensors(kwargs) if t.requires_grad]), "mutated": mutated}

    def vjp(self, handle: int, cotangent):
        out, wrt = self.graphs[handle]
        grads = torch.autograd.grad(out, wrt, cotangent, allow_unused=True, retain_graph=True)
        return {"grads": [None if g is None else g.detach() for g in grads]}

    def module(self, handle: int, method: str, args: list):
        module = self.modules[handle]
        if method == "forward":
            params = {n: p.detach().requires_grad_() for n, p in module.named_parameters()}
            out = torch.func.functional_call(module, params, tuple(args))
            return self._result(out, list(params.values()))
        if method in ("named_parameters", "named_buffers"):
            return {"value": {n: t.detach() for n, t in getattr(module, method)()}}
        if method == "state_dict":
            return {"value": {n: t.detach() for n, t in module.state_dict().items()}}
        if method == "load_state_dict":
            module.load_state_dict(args[0])
            return {"value": None}
        if method == "train":
            module.train(bool(args[0]))
            return {"value": None}
        if method == "to":
            module.to(args[0])
            return {"value": None}
        raise ValueError(f"unknown module method {method!r}")

    def probe(self, kind: str, target: dict, args: list, kwargs: dict):
        from harness.student_run import probes
        fn = self.modules[target["module"]] if "module" in target else self._function(target["function"])
        if kind == "meta":
            return {"value": probes.run_on_meta(fn, *args, **kwargs)}
        if kind == "allocation":
            with torch.no_grad():
                out, largest = probes.largest_allocation(fn, *args, **kwargs)
            return {"value": out, "largest": _allocation(largest)}
        if kind == "footprint":
            with torch.no_grad():
                out, largest, peak = probes.footprint(fn, *args, **kwargs)
            return {"value": out, "largest": _allocation(largest), "peak": peak}
        if kind == "allocations":
            with torch.no_grad():
                out, found = probes.allocations(fn, *args, **kwargs)
            return {"value": out, "found": [_allocation(a) for a in found[:64]]}
        if kind == "tables":
            with torch.no_grad():
                return {"value": sorted(probes.tables_indexed(fn, *args, **kwargs))}
        if kind == "roles":
            return {"value": sorted(probes.parameter_roles(fn, *args, **kwargs).items())}
        raise ValueError(f"unknown probe {kind!r}")

    # -- helpers

    def _function(self, name: str):
        """The adapter `name`: a drill's is the contract's own (its glue checks the submission's pieces,
        which the submission's adapters.py must not rewrite); any other, the submission's."""
        adapters = self._adapters()  # imported first: its failure is every call's
        if self.drills is None:
            from harness.grading import contract_drills
            self.drills = contract_drills
        fn = getattr(self.drills if name in self.drills.__dict__ else adapters, name, None)
        if fn is None:
            raise AttributeError(f"adapters.py has no function {name}")
        return fn

    def _half(self, fn, kwargs: dict, save: str, load: str, checkpoint: torch.Tensor | None = None):
        """Half of a checkpoint drill split over two workers (remote.resume_training): the contract's glue
        with the student's `save` or `load` (module.function) stood in for. Without `checkpoint`: the
        glue up to the student's save, and the bytes it wrote, returned as uint8. With it: the glue with
        a save that writes those bytes, so that the student's load restores what crossed as them alone."""
        module, _, saver = save.partition(".")
        real = getattr(getattr(self.drills.impl, module), saver)

        def captured(model, optimizer, iteration, out):
            real(model, optimizer, iteration, out)
            if isinstance(out, (str, os.PathLike)):
                with open(out, "rb") as f:
                    data = f.read()
            else:
                data = out.getvalue()
            raise Captured(torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.zeros(0, dtype=torch.uint8))

        def replayed(model, optimizer, iteration, out):
            data = checkpoint.numpy().tobytes()
            if isinstance(out, (str, os.PathLike)):
                with open(out, "wb") as f:
                    f.write(data)
            else:
                out.write(data)

        def unused(*args, **kwargs):
            raise RuntimeError("a split drill's first half ends at save_checkpoint")

        stand_ins = {save: captured, load: unused} if checkpoint is None else {save: replayed}
        impl = self.drills.impl
        self.drills.impl = _Standing(impl, stand_ins)
        try:
            return fn(**kwargs)
        except Captured as e:
            return e.args[0]
        finally:
            self.drills.impl = impl

    def _adapters(self):
        if self.adapters is None:
            if self.import_error:
                raise AdaptersImportFailed(self.import_error)
            sys.path.insert(0, SUBMISSION)
            from harness.torch_imports import optimizers_without_dynamo
            optimizers_without_dynamo()  # an AdamW built by a drill costs milliseconds, not a 1.8 s import
            torch.set_num_threads(1)  # one CPU per submission (its cgroup): more threads only wait on each other
            try:
                import adapters
            except BaseException as e:  # a SyntaxError or a crash at import: every call reports it
                self.import_error = f"importing adapters.py raised {type(e).__name__}{_where(e)}: {e}"
                raise AdaptersImportFailed(self.import_error) from None
            self.adapters = adapters
        return self.adapters

    def _result(self, out, wrt: list):
        if isinstance(out, torch.nn.Module):
            self.next_handle += 1
            self.modules[self.next_handle] = out
            return {"module": self.next_handle}
        if isinstance(out, torch.Tensor) and out.requires_grad and wrt:
            self.next_handle += 1
            self.graphs[self.next_handle] = (out, wrt)
            return {"value": out.detach(), "graph": self.next_handle}
        return {"value": out.detach() if isinstance(out, torch.Tensor) else out}


class _Standing:
    """The student's package (`impl`) with some of its functions (module.function) stood in for."""

    def __init__(self, impl, stand_ins: dict):
        self._impl, self._stand_ins = impl, stand_ins

    def __getattr__(self, module: str):
        real, own = getattr(self._impl, module), {f.partition(".")[2]: fn for f, fn in self._stand_ins.items()
                                                  if f.partition(".")[0] == module}
        return type("Module", (), {"__getattr__": lambda _, name: own[name] if name in own else getattr(real, name)})()


class CallTimedOut(BaseException):
    """The call used the CPU seconds the grader gave it (a BaseException: `except Exception` in the
    submission does not swallow it). Its message is where the submission's code was."""


@contextlib.contextmanager
def stopped_after(cpu_seconds: float | None):
    """Stop a call that spends `cpu_seconds` of this process's CPU, saying which line of the submission it
    was running (TA trial 10: a grader's timeout named no line where the student's own run did). The
    grader's own limit, over every process of the submission, stays the backstop."""
    if not cpu_seconds or cpu_seconds <= 0:
        yield
        return

    def stop(signum, frame):
        raise CallTimedOut(_running(frame))
    previous = signal.signal(signal.SIGPROF, stop)
    signal.setitimer(signal.ITIMER_PROF, cpu_seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def _running(frame) -> str:
    """`student/x.py:3 (`line`)`: the innermost frame of the submission's own code, or ""."""
    while frame is not None and not frame.f_code.co_filename.startswith(SUBMISSION + "/"):
        frame = frame.f_back
    if frame is None:
        return ""
    path, line = frame.f_code.co_filename, frame.f_lineno
    text = linecache.getline(path, line).strip()
    return f"{path[len(SUBMISSION) + 1:]}:{line}" + (f" (`{text[:120]}`)" if text else "")


def serve(sock: socket.socket) -> None:
    worker = Worker()
    while True:
        try:
            request = wire.recv(sock)
        except wire.WireError:
            return
        op = request.pop("op")
        alarm = request.pop("alarm", None)
        try:
            with stopped_after(alarm if isinstance(alarm, (int, float)) else None):
                reply = getattr(worker, op)(**request)
        except BaseException as e:  # noqa: BLE001 - every failure of student code is reported
            reply = {"error": _describe(e)}
        try:
            wire.send(sock, reply)
        except TypeError as e:  # a value that cannot cross (a Tensor subclass, a complex tensor, ...)
            wire.send(sock, {"error": {"type": "UnsendableResult", "message": str(e), "traceback": ""}})


def _allocation(a) -> dict | None:
    return None if a is None else {"op": a.op, "shape": a.shape, "dtype": str(a.dtype).removeprefix("torch.")}


def _from_import(e: BaseException) -> bool:
    """Raised by the import system: a SyntaxError or a failing module of the submission (runtime._raised_by_import)."""
    return isinstance(e, (ImportError, SyntaxError)) or any(
        f.filename.startswith("<frozen importlib") for f in traceback.extract_tb(e.__traceback__))


def _where(e: BaseException) -> str:
    """' at student/x.py:3 (`line`)': the submission's own file and line that failed to import."""
    if isinstance(e, SyntaxError) and str(e.filename or "").startswith(SUBMISSION + "/"):
        path, line, text = e.filename, e.lineno, e.text or ""
    else:
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename.startswith(SUBMISSION + "/")]
        if not frames:
            return ""
        path, line, text = frames[-1].filename, frames[-1].lineno, frames[-1].line or ""
    return f" at {path[len(SUBMISSION) + 1:]}:{line}" + (f" (`{text.strip()[:120]}`)" if text.strip() else "")


def _describe(e: BaseException) -> dict:
    """The exception as data, with only the submission's own frames in its traceback. A module of the
    submission that does not import is said as the student's own run says it, at its file and line (TA
    trial 10 read a SyntaxError with a traceback through adapters.py's __getattr__)."""
    if not isinstance(e, (CallTimedOut, AdaptersImportFailed)) and _from_import(e):
        return {"type": "StudentImportError", "traceback": "",
                "message": f"cannot run: its code does not import{_where(e)}: {type(e).__name__}: {str(e)[:2000]}. "
                           "Only the functions whose code is in that file are stopped; fix it and they run again"}
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename.startswith(SUBMISSION)]
    return {"type": type(e).__name__, "message": str(e)[:4000], "bases": [c.__name__ for c in type(e).__mro__][:16],
            "traceback": "".join(traceback.format_list(frames[-8:]))[:4000]}


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.is_meta or b.is_meta:  # no values to compare (a test asks for batches on meta): shape and dtype
        return a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a, b) or bool(((a == b) | (a != a) & (b != b)).all())  # one op unless a NaN is in it


def main() -> None:
    global SUBMISSION
    control_fd, mode, SUBMISSION = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    zygote(control_fd, namespace=mode == "namespace")


if __name__ == "__main__":
    main()
