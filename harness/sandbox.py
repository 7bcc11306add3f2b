"""Confinement for a submission's worker processes.

With bubblewrap (Debian's `bubblewrap`), the worker sees an allow-list filesystem:
the system libraries, Python and its packages read-only (an installed copy of the
harness hidden), the submission read-only at /submission, the worker's own harness
modules read-only, and one writable scratch folder at /scratch ($TMPDIR, $HOME). The
project, its fixtures, reference/, the grader's output and other sandboxes do not
exist there. It has no network, its own PID namespace (nothing it
starts outlives it), a scrubbed environment and resource limits; when the grader
runs as root it also drops to an unprivileged uid of its own.

Without bubblewrap only the limits, the scrubbed environment, a new session and
(as root) the uid drop remain; `Protections` says which are active, and
`harness grade --require-confinement` refuses to grade without the full set.
"""

import os
import resource
import shutil
import signal
import site
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HARNESS = Path(__file__).resolve().parent
WORKER_MODULES = ("__init__.py", "paths.py", "wire.py", "probes.py", "worker.py")
BASE_UID = 61000  # one uid per parallel grading slot, so slots cannot signal or starve each other
NPROC = 256       # processes and threads per uid
FILE_LIMIT = 64 << 20


@dataclass
class Protections:
    bwrap: str | None
    uid_drop: bool

    @classmethod
    def detect(cls, bubblewrap: bool = True) -> "Protections":
        bwrap = shutil.which("bwrap") if bubblewrap else None
        if bwrap and subprocess.run([bwrap, "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "true"],
                                    capture_output=True).returncode != 0:
            bwrap = None  # installed but unusable here (no user namespaces, seccomp)
        # Without bwrap's mounts, another uid must be able to reach Python and its packages itself.
        return cls(bwrap, os.geteuid() == 0 and (bwrap is not None or _readable_by_others(_system_paths())))

    @property
    def confined(self) -> bool:
        return self.bwrap is not None

    def describe(self) -> str:
        on = ["resource limits (memory, file size, processes, CPU)", "scrubbed environment",
              "CPU-time limit per call"]
        if self.bwrap:
            on += ["filesystem allow-list", "no network", "PID namespace"]
        if self.uid_drop:
            on.append("unprivileged uid per slot")
        off = [] if self.bwrap else ["filesystem allow-list", "no network", "PID namespace (install bubblewrap)"]
        if not self.uid_drop:
            off.append("uid drop (needs root, and Python readable by other users)")
        return "protections on: " + ", ".join(on) + ("; OFF: " + ", ".join(off) if off else "")


class Sandbox:
    """One submission's confined zygote. `fork(phase)` gives a connected worker socket."""

    def __init__(self, submission: Path, protections: Protections, slot: int, memory_mb: int,
                 cpu_seconds: float):
        self.protections, self.slot = protections, slot
        self.root = Path(tempfile.mkdtemp(prefix="sandbox-"))
        self.lib = self.root / "lib" / "harness"
        self.lib.mkdir(parents=True)
        for name in WORKER_MODULES:  # copyfile: readable by the worker even where the source is root-only
            shutil.copyfile(HARNESS / name, self.lib / name)
        for folder in (self.root, self.lib.parent, self.lib):
            os.chmod(folder, 0o755)
        self.scratch = self.root / "scratch"
        self.scratch.mkdir()
        self.output = self.root / "output.txt"
        self.uid = BASE_UID + slot if protections.uid_drop else None
        if self.uid is not None:
            os.chown(self.scratch, self.uid, self.uid)
        self.submission = submission
        self.memory, self.cpu_seconds = memory_mb << 20, int(cpu_seconds) + 1
        self.process: subprocess.Popen | None = None
        self.control: socket.socket | None = None
        self.hidden = False  # once set: fresh scratch, output discarded

    def seal_for_hidden_cases(self) -> None:
        """Before hidden cases: every visible-test process dead, an empty scratch folder, and
        later workers' output discarded. The zygote is kept (it never ran submission code)
        when the host sees it is the slot uid's only process left; otherwise the sandbox goes
        whole and the next one gets a new scratch folder."""
        if self.kill_workers() and self.uid is not None and _settles(self.uid, 1):
            for entry in self.scratch.iterdir():
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        else:
            self.stop()
            self.scratch = Path(tempfile.mkdtemp(prefix="scratch-", dir=self.root))
            if self.uid is not None:
                os.chown(self.scratch, self.uid, self.uid)
        self.hidden = True

    # -- lifecycle

    def start(self) -> None:
        ours, theirs = socket.socketpair()
        with open(os.devnull, "wb") if self.hidden else self.output.open("ab") as out:
            self.process = subprocess.Popen(
                self._command(theirs.fileno()), pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, env=self._environment(), cwd=self.scratch,
                preexec_fn=self._limits, start_new_session=True)
        theirs.close()
        self.control = ours

    def fork(self, phase: str) -> socket.socket:
        from harness import wire
        if self.process is None or self.process.poll() is not None:
            self.start()
        try:
            wire.send(self.control, {"op": "fork", "phase": phase})
            _, fds, _, _ = socket.recv_fds(self.control, 1, 1)
        except OSError as e:
            raise ConnectionError(f"the sandbox did not start: {e}; its output says: "
                                  f"{self.output.read_bytes()[-500:].decode('utf-8', 'replace')}") from None
        if not fds:
            raise ConnectionError("the sandbox did not start a worker")
        return socket.socket(fileno=fds[0])

    def kill_workers(self) -> bool:
        """Kill every process but the zygote; True once they are gone."""
        from harness import wire
        if self.process is None or self.process.poll() is not None:
            return True
        try:
            self.control.settimeout(10)
            wire.send(self.control, {"op": "kill"})
            wire.recv(self.control)
            self.control.settimeout(None)
            return True
        except (OSError, wire.WireError):
            self.stop()
            return False

    def stop(self) -> None:
        """Kill everything the submission started; return only when it is gone."""
        if self.process is not None:
            kill_group(self.process)
            self.process = None
        if self.control is not None:
            self.control.close()
            self.control = None
        if self.uid is not None:
            kill_uid(self.uid)

    def close(self, visible_bytes: int | None = None) -> str:
        """Stop, remove the sandbox folder, and return the end of what visible-test workers printed
        (the first `visible_bytes` of the output: after them, hidden-case workers ran)."""
        self.stop()
        data = self.output.read_bytes()[:visible_bytes] if self.output.exists() else b""
        shutil.rmtree(self.root, ignore_errors=True)
        return data[-20_000:].decode("utf-8", "replace")

    def cpu_seconds_used(self) -> float:
        """CPU time of every process in the sandbox, read from the host's /proc."""
        return tree_cpu(self.process.pid) if self.process else 0.0

    def output_size(self) -> int:
        return self.output.stat().st_size if self.output.exists() else 0

    # -- the command

    def _command(self, control_fd: int) -> list[str]:
        python = [sys.executable, "-I", "-c",
                  "import sys; sys.path[:0] = [sys.argv.pop(1)]; from harness.worker import main; main()"]
        if not self.protections.bwrap:
            return [*python, str(self.lib.parent), str(control_fd), "tree", str(self.submission)]
        # Inside the sandbox, the submission and the worker's modules sit at fixed places.
        args = [self.protections.bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
                "--die-with-parent", "--new-session", "--proc", "/proc", "--dev", "/dev"]
        for path in _system_paths():
            args += _mount(path, path)
        for packages in site.getsitepackages():  # an installed harness holds the catalogue: hide it
            if (Path(packages) / "harness").is_dir():
                args += ["--tmpfs", str(Path(packages) / "harness")]
        args += _mount(self.submission, Path("/submission"))
        args += _mount(self.lib.parent, Path("/opt/harness-worker"))
        # Not at /tmp: Python itself may live there (a venv in /tmp), read-only.
        args += ["--bind", str(self.scratch), "/scratch", "--chdir", "/scratch"]
        drop = []
        if self.uid is not None:
            setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
            drop = [setpriv, f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
                    "--inh-caps=-all", "--bounding-set=-all"]
        return [*args, *drop, *python, "/opt/harness-worker", str(control_fd), "namespace", "/submission"]

    def _environment(self) -> dict[str, str]:
        scratch = "/scratch" if self.protections.bwrap else str(self.scratch)
        return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8",
                "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONHASHSEED": "0"}

    def _limits(self) -> None:
        resource.setrlimit(resource.RLIMIT_AS, (self.memory, self.memory))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_CPU, (self.cpu_seconds, self.cpu_seconds))
        if self.uid is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (NPROC, NPROC))
            if not self.protections.bwrap:  # bwrap drops it inside, after building the mounts
                os.setgroups([])
                os.setgid(self.uid)
                os.setuid(self.uid)


def _system_paths() -> list[Path]:
    """What Python needs, read-only: system libraries, the interpreter, its packages."""
    paths = [Path(p) for p in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc/ld.so.cache",
                               "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime")]
    paths += [Path(sys.prefix), Path(sys.base_prefix), Path(os.path.realpath(sys.executable)).parent.parent]
    paths += [Path(p) for p in site.getsitepackages() + [site.getusersitepackages()]]
    paths = sorted({p for p in paths if p.exists() or p.is_symlink()})
    return [p for p in paths if not any(q != p and p.is_relative_to(q) and not q.is_symlink() for q in paths)]


def _readable_by_others(paths: list[Path]) -> bool:
    for path in paths:
        for folder in [path.resolve(), *path.resolve().parents]:
            if folder.exists() and not folder.stat().st_mode & 0o001:
                return False
    return True


def _mount(source: Path, target: Path) -> list[str]:
    """A read-only bind, its parent folders traversable (bwrap makes them 0700 otherwise)."""
    args = []
    for parent in reversed(target.parents[:-1]):
        args += ["--perms", "0755", "--dir", str(parent)]
    if source.is_symlink():
        return args + ["--symlink", os.readlink(source), str(target)]
    return args + ["--ro-bind", str(source), str(target)]


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds incl. reaped children) of a host process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    ticks = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return int(fields[1]), ticks / os.sysconf("SC_CLK_TCK")


def tree_cpu(root: int) -> float:
    stats = {int(p): s for p in os.listdir("/proc") if p.isdigit() and (s := _stat(int(p)))}
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += stats[pid][1]
        todo += children.get(pid, [])
    return total


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL a process started with start_new_session=True, and its group; reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def uid_processes(uid: int) -> list[int]:
    """Live processes of a uid (a zombie is dead already: it waits only for its parent)."""
    found = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if os.stat(f"/proc/{p}").st_uid == uid and Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX":
                    found.append(int(p))
            except (OSError, IndexError):
                pass
    return found


def _settles(uid: int, count: int, seconds: float = 2.0) -> bool:
    """Whether the uid is down to `count` processes within `seconds` (killed ones take a moment)."""
    deadline = time.monotonic() + seconds
    while len(uid_processes(uid)) > count:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def kill_uid(uid: int, seconds: float = 10.0) -> bool:
    """SIGKILL every process of a slot's uid (used as root, where the uid is the slot's alone),
    until none is left: a PID namespace's teardown is asynchronous. False if some outlived it."""
    deadline = time.monotonic() + seconds
    while victims := uid_processes(uid):
        if time.monotonic() > deadline:
            return False
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.01)
    return True
