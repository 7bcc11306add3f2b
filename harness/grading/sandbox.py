"""Confinement for a submission's worker processes.

With bubblewrap (Debian's `bubblewrap`), the worker sees an allow-list filesystem:
the system libraries, Python and its packages read-only (an installed copy of the
harness hidden), the submission read-only at /submission, the worker's own harness
modules read-only, and one writable scratch folder at /scratch ($TMPDIR, $HOME). The
project, its fixtures, reference/, the grader's output and other sandboxes do not
exist there. It has no network, its own PID namespace (nothing it
starts outlives it), a scrubbed environment and resource limits; when the grader
runs as root it also drops to an unprivileged uid of its own, from a block of uids
this grader alone holds. Its scratch folder is a size-limited tmpfs that vanishes with
it; a seccomp filter denies the kernel keyring (add_key, keyctl, request_key: the one
store that outlives processes), file locks and watches, and new user namespaces. Each
submission gets a control group (memory, processes, one CPU, and the CPU time of its whole
process tree).

Without bubblewrap only the limits, the scrubbed environment, a new session and
(as root) the uid drop remain, and the worker sees the host's files: the grader then refuses
while its uid could read the answers (readable_by_workers, scan_host) and removes what it
left wherever others may write; without cgroups the limits are per process (rlimits).
`Protections` says which are active, and `harness grade --require-confinement` refuses
to grade without bubblewrap and the uid drop.
"""

import errno
import functools
import os
import platform
import re
import resource
import shutil
import signal
import site
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

HARNESS = Path(__file__).resolve().parent.parent
# All the harness the worker gets (harness/grading/worker.py says why these alone).
WORKER_MODULES = ("__init__.py", "paths.py", "torch_imports.py", "student_run/__init__.py", "student_run/probes.py",
                  "grading/__init__.py", "grading/wire.py", "grading/worker.py")
BASE_UID = 61000  # one uid per parallel grading slot, so slots cannot signal or starve each other
UID_BLOCK = 16    # slots (uids) per grader: `harness grade` claims a free block, so graders run side by side
UID_BLOCKS = 64
NPROC = 256       # processes and threads per uid
PIDS = 512        # processes and threads per submission (cgroup)
FILE_LIMIT = 64 << 20
SCRATCH_BYTES = 256 << 20  # the scratch tmpfs
OUTPUT_CAP = 1 << 20       # bytes of visible-phase output kept
CGROUP_ROOT = Path("/sys/fs/cgroup")
OOM_DRIVER, OOM_SANDBOX, OOM_WORKER = -900, 500, 1000  # who the OOM killer takes first: workers
# /proc files that count for the whole machine (processes forked, memory, load, interrupts, the
# CPUs' idle time in uptime): a submission reading one while another makes it move is a channel
# between them. Empty in a sandbox (sysinfo(2), the same counters by syscall, is denied).
HOST_COUNTERS = ("stat", "loadavg", "meminfo", "vmstat", "interrupts", "softirqs", "diskstats", "schedstat",
                 "zoneinfo", "buddyinfo", "pagetypeinfo", "slabinfo", "pressure/cpu", "pressure/memory",
                 "pressure/io", "locks", "uptime", "swaps", "sys/fs/file-nr", "sys/fs/inode-nr", "sys/fs/inode-state",
                 "sys/fs/dentry-state", "sys/fs/aio-nr", "sys/kernel/pty/nr", "sys/kernel/random/entropy_avail")
# Open files per process: with PIDS processes, at most PIDS x NOFILE of the kernel's file table
# (fs.file-max, shared by the machine), so one submission cannot starve every other of files.
NOFILE = 256
FORK_SECONDS = 60  # for the zygote to hand over a worker (its first fork imports what a gradient needs)
RECYCLE_SECONDS = 10  # for the zygote to end one submission and be ready for the slot's next
MAX_USES = 50  # submissions one sandbox serves before a fresh one (its zygote's CPU-time limit is per process)


@dataclass
class Protections:
    bwrap: str | None
    uid_drop: bool
    seccomp: bool = False      # the filter of seccomp_filter() (keyring, sysinfo, sockets, ...)
    cgroup: str | None = None  # "v1" or "v2": per-submission limits; None: rlimits per process

    @classmethod
    def detect(cls, bubblewrap: bool = True) -> "Protections":
        bwrap = shutil.which("bwrap") if bubblewrap else None
        if bwrap and subprocess.run([bwrap, "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "true"],
                                    capture_output=True).returncode != 0:
            bwrap = None  # installed but unusable here (no user namespaces, seccomp)
        # Without bwrap's mounts, another uid must be able to reach Python and its packages itself.
        uid_drop = os.geteuid() == 0 and (bwrap is not None or _readable_by_others(system_paths()))
        return cls(bwrap, uid_drop, _seccomp_works(bwrap), Cgroup.detect())

    @property
    def confined(self) -> bool:
        return self.bwrap is not None

    def describe(self) -> str:
        on = ["resource limits (memory, file size, processes, CPU)", "scrubbed environment",
              "CPU-time limit per call"]
        off = []
        if self.cgroup:
            on.append(f"per-submission cgroup ({self.cgroup}: memory, processes, one CPU, CPU time of the "
                      "whole process tree)")
        else:
            off.append("per-submission cgroup (limits are per process: rlimits)")
        if self.bwrap:
            on += ["filesystem allow-list", "no network", "PID namespace",
                   f"scratch on a {SCRATCH_BYTES >> 20} MiB tmpfs"]
        else:
            why = ("bubblewrap is installed but cannot make namespaces here" if shutil.which("bwrap")
                   else "install bubblewrap")
            off += ["filesystem allow-list", "no network", f"PID namespace ({why})"]
        if self.seccomp:
            unix = "" if self.bwrap else ", nor Unix ones without a network namespace"
            on.append("seccomp (no kernel keyring, no System V or POSIX-queue IPC, no sysinfo, no internet, netlink "
                      f"or vsock sockets{unix}, no page-cache probes, no file locks or file watches, no user namespaces)")
        else:
            off.append("seccomp filter (needs x86_64 or aarch64, and prctl allowed)")
        if self.uid_drop:
            on.append("unprivileged uid per slot")
        else:
            off.append("uid drop (needs root, and Python readable by other users)")
        return "protections on: " + ", ".join(on) + ("; OFF: " + ", ".join(off) if off else "")


@functools.cache
def drills_source() -> str:
    """The contract's drills, which the worker runs instead of the submission's (worker._function)."""
    from harness.contract import render_drills
    return render_drills("student")


class Sandbox:
    """One submission's confined zygote. `fork()` gives a connected worker socket.

    Every worker, visible phase or hidden, is forked by the same zygote, with stdout the
    same pipe to the driver; in the hidden phase the driver drops what comes through it.
    Nothing the visible phase reports can depend on a hidden value: its verdicts and output
    are final before the first hidden call.

    `reusable` (bubblewrap only): the zygote, which has imported torch, serves the slot's next
    submission too, a sixth of a submission's CPU spared (its import of torch). The submission's folder is then the slot's
    own (its parent is mounted, so the next copy appears in it), and `finish()` keeps the sandbox
    only once the zygote has recycled cleanly (worker.py: `_recycled`)."""

    def __init__(self, submission: Path, protections: Protections, slot: int, memory_mb: int,
                 cpu_seconds: float, writable: list[Path] | None = None, reusable: bool = False):
        self.protections, self.slot = protections, slot
        self.reusable, self.uses = reusable and protections.bwrap is not None, 0
        self.writable = SHARED_TEMP if writable is None else writable  # without bubblewrap: cleaned after it
        self.writable_times = {f: (st.st_atime_ns, st.st_mtime_ns) for f in self.writable if f.is_dir() for st in [f.stat()]}
        # Named after the driver, so a grader can remove the sandboxes of drivers that died.
        self.root = Path(tempfile.mkdtemp(prefix=f"sandbox-{os.getpid()}-"))
        self.lib = self.root / "lib" / "harness"
        (self.lib / "grading").mkdir(parents=True)
        (self.lib / "student_run").mkdir()
        for name in WORKER_MODULES:  # copyfile: readable by the worker even where the source is root-only
            shutil.copyfile(HARNESS / name, self.lib / name)
        (self.lib / "grading" / "contract_drills.py").write_text(drills_source())
        os.chmod(self.root, 0o711)  # traversable to the worker's modules; its other files are not listed
        for folder in (self.lib.parent, self.lib, self.lib / "grading", self.lib / "student_run"):
            os.chmod(folder, 0o755)
        self.uid = BASE_UID + slot if protections.uid_drop else None
        self.scratch: Path | None = None  # a host folder only without bubblewrap (otherwise a tmpfs)
        self.output = self.root / "output.txt"
        self.output.touch(mode=0o600)  # what this submission printed: no other slot's to read
        self.empty = self.root / "empty"  # bound over the host-wide counters in /proc
        self.empty.touch(mode=0o444)
        self.kept = 0  # visible-phase output bytes written to self.output
        self.submission = submission
        self.memory, self.cpu_seconds = memory_mb << 20, int(cpu_seconds) + 1
        self.process: subprocess.Popen | None = None
        self.zygote: int | None = None  # its host pid, once it has forked a worker
        self.control: socket.socket | None = None
        self.stdout: int | None = None  # the read end of the sandbox's stdout pipe
        self.hidden = False  # once set: output dropped
        self._seccomp: SeccompLoader | None = None  # without bubblewrap: the filter the worker loads itself
        try:
            self.cgroup = Cgroup.create(protections.cgroup, f"{slot}-{self.root.name}", self.memory) \
                if protections.cgroup else None
        except BaseException:
            remove_tree(self.root)
            raise

    def seal_for_hidden_cases(self) -> None:
        """Before hidden cases: every visible-test process dead and all they printed read;
        from then on the sandbox's output is dropped. The zygote, which never ran the
        submission's code, forks the hidden-case workers: one start (torch's import) per
        submission, not two. Should it not answer, the hidden cases get a fresh sandbox."""
        if self.kill_workers() and self.stdout is not None:
            self.pump(everything=True)  # the writers are dead: what they wrote is in the pipe
        self.hidden = True

    # -- lifecycle

    def start(self) -> None:
        self.stop()
        if not self.protections.bwrap:
            self.scratch = Path(tempfile.mkdtemp(prefix="scratch-", dir=self.root))
            if self.uid is not None:
                os.chown(self.scratch, self.uid, self.uid)
        ours, theirs = socket.socketpair()
        read, write = os.pipe()
        filter_fd = self._seccomp_fd()
        self._seccomp = SeccompLoader() if self.protections.seccomp and not self.protections.bwrap else None
        fds = [theirs.fileno()] + ([filter_fd] if filter_fd is not None else [])
        try:
            self.process = subprocess.Popen(
                self._command(theirs.fileno(), filter_fd), pass_fds=fds, stdin=subprocess.DEVNULL,
                stdout=write, stderr=write, env=self._environment(), cwd=self.scratch or self.root,
                preexec_fn=self._limits, start_new_session=True)
        except BaseException:
            os.close(read)
            ours.close()
            raise
        finally:
            os.close(write)
            theirs.close()
            if filter_fd is not None:
                os.close(filter_fd)
        os.set_blocking(read, False)
        self.stdout, self.control, self.zygote = read, ours, None

    def fork(self, warm_up: bool = True) -> socket.socket:
        """A new worker; warm_up=False spares a start-up check the imports a grading worker needs."""
        from harness.grading import wire
        if self.process is None or self.process.poll() is not None:
            self.start()
        try:
            self.control.settimeout(FORK_SECONDS)  # a zygote that never answers costs one worker, not the batch
            wire.send(self.control, {"op": "fork", "warm_up": warm_up})
            _, fds, _, _ = socket.recv_fds(self.control, 1, 1)
            self.control.settimeout(None)
        except OSError as e:
            self.pump()
            raise ConnectionError(f"the sandbox did not start: {e}; its output says: "
                                  f"{self.output.read_bytes()[-500:].decode('utf-8', 'replace')}") from None
        if not fds:
            raise ConnectionError("the sandbox did not start a worker")
        if self.zygote is None and self.protections.bwrap:  # before any worker could fork: bwrap's init has one child
            tree = _tree(self.process.pid)
            init = [pid for pid, (parent, _) in tree.items() if parent == self.process.pid]
            children = [pid for pid, (parent, _) in tree.items() if init and parent == init[0]]
            self.zygote = children[0] if len(children) == 1 else -1
        return socket.socket(fileno=fds[0])

    def kill_workers(self) -> bool:
        """Kill every process but the zygote; True once they are gone."""
        from harness.grading import wire
        if self.process is None or self.process.poll() is not None:
            return True
        try:
            self.control.settimeout(10)
            wire.send(self.control, {"op": "kill"})
            reply = wire.recv(self.control)
            self.control.settimeout(None)
        except (OSError, wire.WireError):
            reply = None
        if not (isinstance(reply, dict) and reply.get("killed") is True) or self._others_alive():
            self.stop()
            return False
        return True

    def _others_alive(self) -> bool:
        """The host's own look, not the zygote's word: a process of the sandbox other than bwrap's two and the
        zygote with a thread still running (red team 7: a worker whose leader thread exited alone read as a
        zombie inside, outlived the kill and served the next submission), or the zygote stopped."""
        if not self.protections.bwrap:
            # The zygote's kill reaches its descendants only: red team 10's daemon (a double fork and setsid) ran
            # on from the visible tests into the hidden cases. Any other process of the worker uid is one.
            return self.uid is not None and any(pid != self.process.pid for pid in uid_processes({self.uid}))
        tree = _tree(self.process.pid)
        if self.zygote not in tree:
            return True
        return _stopped(self.zygote) or any(
            _running(pid) for pid, (parent, _) in tree.items()
            if pid not in (self.process.pid, self.zygote) and parent != self.process.pid)

    def stop(self) -> None:
        """Kill everything the submission started; return only when it is gone."""
        if self.process is not None:
            kill_group(self.process)
            self.process = None
        if self.control is not None:
            self.control.close()
            self.control = None
        if self.cgroup is not None:
            self.cgroup.kill()
        if self.uid is not None:
            kill_uid(self.uid)
            if not self.protections.bwrap:  # no private /tmp: what the uid left there would meet the next submission
                remove_files_of(self.uid, self.writable)
                for folder, times in self.writable_times.items():
                    _reset_times(folder, times)
        if self.stdout is not None:
            self.pump(everything=True)  # every writer is dead: read up to the end
            if self.stdout is not None:
                os.close(self.stdout)
                self.stdout = None
        if self.scratch is not None:
            remove_tree(self.scratch)
            self.scratch = None

    def finish(self, reuse: bool = True) -> str:
        """End one submission: every process it started dead, and the end of what its visible-test workers
        printed. A reusable sandbox stays for the next one if `reuse` and its zygote recycles cleanly;
        else it is closed, and the next submission starts a fresh one."""
        self.uses += 1
        if not (reuse and self.reusable and self.uses < MAX_USES and self._recycle()):
            return self.close()
        data = self.output.read_bytes()
        self.output.write_bytes(b"")
        self.kept, self.hidden = 0, False
        return data[-20_000:].decode("utf-8", "replace")

    def _recycle(self) -> bool:
        """The zygote kills, empties and checks itself, and takes the next submission's own output pipe;
        then the host checks, from outside, that nothing else of the sandbox runs."""
        from harness.grading import wire
        if self.process is None or self.process.poll() is not None or self.stdout is None or not self.zygote:
            return False
        read, write = os.pipe()
        try:
            self.control.settimeout(RECYCLE_SECONDS)  # a stopped or busy zygote: a fresh sandbox instead
            wire.send(self.control, {"op": "recycle"})
            socket.send_fds(self.control, [b"p"], [write])
            reply = wire.recv(self.control)
            self.control.settimeout(None)
        except (OSError, wire.WireError):
            reply = None
        finally:
            os.close(write)
        if not (isinstance(reply, dict) and reply.get("clean") is True) or not _reset_times(
                Path(f"/proc/{self.zygote}/root/scratch")):
            os.close(read)
            return False
        self.pump(everything=True)  # the old pipe's writers in the sandbox are dead: all they wrote is in it
        if self.stdout is not None:
            os.close(self.stdout)
        os.set_blocking(read, False)
        self.stdout = read
        return not self._others_alive()

    def close(self) -> str:
        """Stop, remove the sandbox folder and its cgroup, and return the end of what
        visible-test workers printed."""
        try:
            self.stop()
        finally:
            if self.cgroup is not None:
                self.cgroup.remove()
        data = self.output.read_bytes() if self.output.exists() else b""
        remove_tree(self.root)
        return data[-20_000:].decode("utf-8", "replace")

    def pump(self, everything: bool = False) -> None:
        """Move what the sandbox printed into output.txt: in the visible phase, up to OUTPUT_CAP
        bytes; in the hidden phase nothing (the pipe is emptied all the same)."""
        for _ in range(1 << 30 if everything else 64):
            try:
                data = os.read(self.stdout, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:  # every writer closed it
                os.close(self.stdout)
                self.stdout = None
                return
            if not self.hidden and self.kept < OUTPUT_CAP:
                data = data[:OUTPUT_CAP - self.kept]
                with self.output.open("ab") as f:
                    f.write(data)
                self.kept += len(data)

    def cpu_seconds_used(self) -> float:
        """CPU time of every process of the submission: its cgroup's, or else the sandbox's
        process tree read from the host's /proc."""
        if self.cgroup is not None:
            return self.cgroup.cpu_seconds()
        return tree_cpu(self.process.pid) if self.process else 0.0

    # -- the command

    def _seccomp_fd(self) -> int | None:
        if not (self.protections.bwrap and self.protections.seccomp):
            return None
        read, write = os.pipe()
        os.write(write, seccomp_filter())  # a few hundred bytes: fits the pipe's buffer
        os.close(write)
        return read

    def _command(self, control_fd: int, filter_fd: int | None) -> list[str]:
        python = [sys.executable, "-I", "-c",
                  "import sys; sys.path[:0] = [sys.argv.pop(1)]; from harness.grading.worker import main; main()"]
        if not self.protections.bwrap:
            return [*python, str(self.lib.parent), str(control_fd), "tree", str(self.submission)]
        # Inside the sandbox, the submission and the worker's modules sit at fixed places.
        args = [self.protections.bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
                "--die-with-parent", "--new-session", "--proc", "/proc", "--dev", "/dev"]
        for name in HOST_COUNTERS:  # machine-wide, so two sandboxes could signal through them
            if Path("/proc", name).exists():
                args += ["--ro-bind", str(self.empty), f"/proc/{name}"]
        if filter_fd is not None:
            args += ["--seccomp", str(filter_fd)]
        for path in system_paths():
            args += _mount(path, path)
        for packages in site.getsitepackages():  # an installed harness holds the catalogue: hide it
            if (Path(packages) / "harness").is_dir():
                args += ["--tmpfs", str(Path(packages) / "harness")]
        if self.reusable:  # the slot's folder, where each of its submissions is copied in turn
            args += _mount(self.submission.parent, Path("/submissions"))
            args += ["--symlink", f"/submissions/{self.submission.name}", "/submission"]
        else:
            args += _mount(self.submission, Path("/submission"))
        args += _mount(self.lib.parent, Path("/opt/harness-worker"))
        # Not at /tmp: Python itself may live there (a venv in /tmp), read-only. A tmpfs of its
        # own: bounded, and gone with the sandbox (no deep tree or full disk left behind).
        args += ["--perms", "01777", "--size", str(SCRATCH_BYTES), "--tmpfs", "/scratch", "--chdir", "/scratch"]
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
        if self.cgroup is not None:
            self.cgroup.join()
        set_oom_score(OOM_SANDBOX)
        resource.setrlimit(resource.RLIMIT_AS, (self.memory, self.memory))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))
        resource.setrlimit(resource.RLIMIT_CPU, (self.cpu_seconds, self.cpu_seconds))
        if self.uid is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (NPROC, NPROC))
            if not self.protections.bwrap:  # bwrap drops it inside, after building the mounts
                os.setgroups([])
                os.setgid(self.uid)
                os.setuid(self.uid)
        if self._seccomp is not None:
            self._seccomp.load()


class Cgroup:
    """One submission's control group: memory, processes and one CPU for all its processes
    together, and the CPU time of its whole process tree (reaped and killed ones too)."""

    CONTROLLERS = ("memory", "pids", "cpu", "cpuacct")

    def __init__(self, version: str, folders: list[Path]):
        self.version, self.folders = version, folders

    @staticmethod
    def _bases(version: str) -> list[Path]:
        """Where this process's groups are, per controller (v1), or its one group (v2)."""
        own = {}
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, names, path = line.split(":", 2)
            for name in names.split(",") if names else [""]:
                own[name] = path.lstrip("/")
        if version == "v2":
            return [CGROUP_ROOT / own.get("", "")]
        bases = {(CGROUP_ROOT / c).resolve() / own[c] for c in Cgroup.CONTROLLERS if c in own}
        return sorted(bases) if len(bases) >= 3 else []

    @classmethod
    def detect(cls) -> str | None:
        """The version whose groups this process can make and fill (as root, usually), or None."""
        if os.geteuid() != 0:
            return None
        version = "v2" if (CGROUP_ROOT / "cgroup.controllers").exists() else "v1"
        try:
            probe = cls.create(version, f"probe-{os.getpid()}", 256 << 20)
        except (OSError, ValueError, KeyError):
            return None
        probe.remove()
        return version

    @classmethod
    def create(cls, version: str, name: str, memory: int) -> "Cgroup":
        bases = cls._bases(version)
        if not bases:
            raise OSError(errno.ENOENT, "no cgroup controllers found")
        if version == "v2":
            (bases[0] / "cgroup.subtree_control").write_text("+memory +pids +cpu")
        group = cls(version, [base / f"harness-{os.getpid()}-{name}" for base in bases])
        try:
            for folder in group.folders:
                folder.mkdir()
            group._set("memory.limit_in_bytes" if version == "v1" else "memory.max", memory)
            if version == "v1":
                group._set("memory.memsw.limit_in_bytes", memory, optional=True)  # no swap either
                group._set("cpu.cfs_period_us", 100_000)
                group._set("cpu.cfs_quota_us", 100_000)  # one CPU: a storm of processes takes one core
            else:
                group._set("memory.swap.max", 0, optional=True)
                group._set("cpu.max", "100000 100000")
            group._set("pids.max", PIDS)
        except BaseException:
            group.remove()
            raise
        return group

    def _set(self, name: str, value, optional: bool = False) -> None:
        for folder in self.folders:
            if (folder / name).exists():
                (folder / name).write_text(str(value))
                return
        if not optional:
            raise OSError(errno.ENOENT, f"no {name} in {self.folders}")

    def join(self) -> None:
        """Move this process (a sandbox about to exec) into the group; its children follow."""
        for folder in self.folders:
            (folder / "cgroup.procs").write_text(str(os.getpid()))

    def cpu_seconds(self) -> float:
        try:
            for folder in self.folders:
                if (folder / "cpuacct.usage").exists():
                    return int((folder / "cpuacct.usage").read_text()) / 1e9
                if (folder / "cpu.stat").exists() and self.version == "v2":
                    stat_lines = dict(line.split() for line in (folder / "cpu.stat").read_text().splitlines())
                    return int(stat_lines["usage_usec"]) / 1e6
        except (OSError, ValueError, KeyError):
            pass
        return 0.0

    def pids(self) -> list[int]:
        found = set()
        for folder in self.folders:
            try:
                found |= {int(p) for p in (folder / "cgroup.procs").read_text().split()}
            except (OSError, ValueError):
                pass
        return sorted(found)

    def kill(self, seconds: float = 10.0) -> bool:
        """SIGKILL every process in the group until none is left."""
        return kill_until_none(self.pids, seconds)

    def remove(self) -> None:
        self.kill()
        for folder in self.folders:
            for _ in range(100):  # a killed process leaves its group a moment later
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)

    @classmethod
    def remove_orphans(cls, version: str | None) -> None:
        """The groups of graders' drivers that died without removing them."""
        if not version:
            return
        for base in cls._bases(version):
            for folder in base.glob("harness-*-*"):
                pid = folder.name.split("-")[1]
                if pid.isdigit() and not _alive(int(pid)):
                    cls(version, [folder]).remove()


def remove_orphan_sandboxes(tmp: Path | None = None) -> None:
    """Sandbox folders whose driver died (a killed driver cannot clean up after itself)."""
    for folder in (tmp or Path(tempfile.gettempdir())).glob("sandbox-*-*"):
        pid = folder.name.split("-")[1]
        if pid.isdigit() and not _alive(int(pid)) and folder.is_dir() and not folder.is_symlink():
            remove_tree(folder)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def set_oom_score(value: int) -> None:
    """This process's place in the OOM killer's order (lowering it needs root: then it stays)."""
    try:
        Path("/proc/self/oom_score_adj").write_text(str(value))
    except OSError:
        pass


OPEN_DEPTH = 64  # folders remove_tree holds open at once; a deeper one is moved up to the root first
REMOVE_BUDGET = 2_000_000  # entries remove_tree handles before it gives up on a tree that keeps growing


def remove_tree(root: Path) -> bool:
    """Remove a folder and everything in it, iteratively: no recursion limit, no path-length
    limit (every step is relative to an open folder), folders made unreadable or unwritable
    are opened up first, symbolic links are removed and never followed. False if something
    could not be removed (it is left, and the rest goes).

    It never climbs with "..": a process still alive (another slot's submission) could rename the
    folder it is in, and ".." would then lead root into a folder of the attacker's choosing (red team
    5 emptied a root-owned folder so). It keeps each folder's handle from the root down instead, and
    a folder deeper than OPEN_DEPTH is moved up into the root and taken from there."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        if root.is_symlink() or not root.is_dir():
            root.unlink(missing_ok=True)
            return True
        os.chmod(root, 0o700)
        stack = [os.open(root, flags)]
    except OSError:
        return False
    entered, clean, budget = set(), True, REMOVE_BUDGET
    try:
        while stack:
            fd, child = stack[-1], None
            try:
                with os.scandir(fd) as entries:
                    for entry in entries:
                        budget -= 1
                        if budget < 0:
                            return False
                        try:
                            if entry.is_dir(follow_symlinks=False):
                                st = entry.stat(follow_symlinks=False)
                                if (st.st_dev, st.st_ino) in entered:  # emptied already: remove it now
                                    os.rmdir(entry.name, dir_fd=fd)
                                    continue
                                if len(stack) >= OPEN_DEPTH:
                                    os.rename(entry.name, f".deep-{st.st_ino}", src_dir_fd=fd, dst_dir_fd=stack[0])
                                    continue
                                entered.add((st.st_dev, st.st_ino))  # entered once only, whatever happens
                                if stat.S_IMODE(st.st_mode) & 0o700 != 0o700:
                                    os.chmod(entry.name, 0o700, dir_fd=fd, follow_symlinks=False)
                                child = os.open(entry.name, flags, dir_fd=fd)
                                break
                            os.unlink(entry.name, dir_fd=fd)
                        except OSError:
                            clean = False
            except OSError:
                clean = False
            if child is not None:
                stack.append(child)
            else:  # emptied: its parent removes it when it scans again
                os.close(stack.pop())
    finally:
        for fd in stack:
            os.close(fd)
    try:
        os.rmdir(root)
    except OSError:
        return False
    return clean


_SYSCALLS = {  # audit arch, and the syscall numbers the filter needs
    "x86_64": (0xC000003E, {"add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272,
                            "sysinfo": 99, "clone": 56, "clone3": 435, "socket": 41, "preadv2": 327,
                            "pwritev2": 328, "io_uring_setup": 425, "cachestat": 451,
                            "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65,
                            "semctl": 66, "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70,
                            "msgctl": 71, "mq_open": 240, "mq_unlink": 241, "mq_timedsend": 242,
                            "mq_timedreceive": 243, "mq_notify": 244, "mq_getsetattr": 245, "flock": 73,
                            "fcntl": 72, "inotify_init": 253, "inotify_init1": 294, "inotify_add_watch": 254,
                            "fanotify_init": 300, "fanotify_mark": 301}),
    "aarch64": (0xC00000B7, {"add_key": 217, "request_key": 218, "keyctl": 219, "unshare": 97,
                             "sysinfo": 179, "clone": 220, "clone3": 435, "socket": 198, "preadv2": 286,
                             "pwritev2": 287, "io_uring_setup": 425, "cachestat": 451,
                             "shmget": 194, "shmat": 196, "shmctl": 195, "shmdt": 197, "semget": 190,
                             "semop": 193, "semctl": 191, "semtimedop": 192, "msgget": 186, "msgsnd": 189,
                             "msgrcv": 188, "msgctl": 187, "mq_open": 180, "mq_unlink": 181, "mq_timedsend": 182,
                             "mq_timedreceive": 183, "mq_notify": 184, "mq_getsetattr": 185, "flock": 32,
                             "fcntl": 25, "inotify_init1": 26, "inotify_add_watch": 27, "fanotify_init": 262,
                             "fanotify_mark": 263}),  # no inotify_init here: inotify_init1 only
}
# System V IPC and POSIX message queues outlive their process and are shared by a uid (without an IPC
# namespace, a later submission under the same uid read a hidden input left in a message queue).
IPC = ("shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semctl", "semtimedop", "msgget", "msgsnd",
       "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr")
DENIED = ("add_key", "request_key", "keyctl", "unshare", "sysinfo", *IPC)  # EPERM
# ENOSYS, as a kernel without them says: clone3 (the C library falls back to clone, whose flags a
# filter can read); preadv2/pwritev2 (RWF_NOWAIT tells whether a page is cached: a store that
# outlives the submission; the C library falls back to preadv without flags); io_uring (its
# operations pass no filter); cachestat (the page cache again).
# inotify and fanotify too: a watch on a file every sandbox reads (torch's own) sees a neighbour's reads.
UNSUPPORTED = ("clone3", "preadv2", "pwritev2", "io_uring_setup", "cachestat", "inotify_init", "inotify_init1",
               "inotify_add_watch", "fanotify_init", "fanotify_mark")
# AF_INET, AF_INET6, AF_PACKET: no network, even without a network namespace; AF_NETLINK and AF_VSOCK:
# the kernel's and the hypervisor's channels (red team 11 reached the host's vsock from a sandbox).
NO_SOCKETS = (2, 10, 16, 17, 40)
# Without bubblewrap there is no network namespace: an abstract AF_UNIX name (\0name) is the whole
# machine's, and red team 11 sent a neighbour's hidden inputs through one. socket() then refuses AF_UNIX
# too; socketpair, another syscall, still works (multiprocessing's pipes, the worker's own channel).
AF_UNIX = 1
# File locks are machine-wide and work on read-only files: a sandbox that locked torch's own files
# while it ran hidden cases told a neighbour 64 bits of a hidden input. flock, and fcntl's lock, lease
# and dnotify commands (F_GETLK, F_SETLK, F_SETLKW, their 64-bit and OFD forms, F_SETLEASE,
# F_GETLEASE, F_NOTIFY), fail with ENOLCK, as where a file system keeps no locks.
LOCK_COMMANDS = (5, 6, 7, 12, 13, 14, 36, 37, 38, 1024, 1025, 1026)


def seccomp_filter(unix_sockets: bool = True) -> bytes:
    """A classic BPF program (bwrap's --seccomp, or loaded by `_limits` without bubblewrap): the
    kernel keyring (the one store that outlives every process and is shared by a uid), sysinfo
    (its process count and free memory are the whole machine's: a channel between neighbours),
    NO_SOCKETS (no network, with or without a network namespace), AF_UNIX sockets unless
    `unix_sockets` (a network namespace of its own keeps their names apart) and new user
    namespaces (unshare, clone with CLONE_NEWUSER) fail with EPERM; file locks (flock, fcntl's
    LOCK_COMMANDS) with ENOLCK; UNSUPPORTED with ENOSYS; a foreign ABI (i386, x32) gets EPERM for
    everything."""
    arch, nr = _SYSCALLS[platform.machine()]
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS
    enolck = 0x00050000 | errno.ENOLCK
    load, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    program = [(load, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, eperm),
               (load, 0, 0, 0), (jge, 0, 1, 0x40000000), (ret, 0, 0, eperm)]
    for name in DENIED:
        program += [(jeq, 0, 1, nr[name]), (ret, 0, 0, eperm)]
    for name in UNSUPPORTED:
        if name in nr:  # aarch64 has no inotify_init
            program += [(jeq, 0, 1, nr[name]), (ret, 0, 0, enosys)]
    program += [(jeq, 0, 1, nr["flock"]), (ret, 0, 0, enolck)]
    refused = NO_SOCKETS if unix_sockets else (AF_UNIX, *NO_SOCKETS)
    program += _one_of(nr["socket"], 16, refused, eperm)  # the socket's domain
    program += _one_of(nr["fcntl"], 24, LOCK_COMMANDS, enolck)  # fcntl's command (its low 32 bits, as the kernel reads it)
    program += [(jeq, 1, 0, nr["clone"]), (ret, 0, 0, allow),
                (load, 0, 0, 16), (jset, 0, 1, 0x10000000), (ret, 0, 0, eperm), (ret, 0, 0, allow)]
    return b"".join(struct.pack("=HBBI", *op) for op in program)


def _one_of(call: int, offset: int, values: tuple[int, ...], refused: int) -> list[tuple]:
    """BPF: for syscall `call`, `refused` when the 32-bit argument at `offset` (16: the first, 24:
    the second) is one of `values`, else allowed; any other syscall goes on past these lines."""
    load, jeq, ret, allow = 0x20, 0x15, 0x06, 0x7FFF0000
    n = len(values)
    return ([(jeq, 0, n + 3, call), (load, 0, 0, offset)]
            + [(jeq, n - 1 - i, 0, value) for i, value in enumerate(values[:-1])]
            + [(jeq, 0, 1, values[-1]), (ret, 0, 0, refused), (ret, 0, 0, allow)])


def _seccomp_works(bwrap: str | None) -> bool:
    """The filter loads (through bwrap, or else by prctl in the worker's own start), and with it
    keyctl and sysinfo fail while Python runs."""
    if platform.machine() not in _SYSCALLS:
        return False
    nr = _SYSCALLS[platform.machine()][1]
    check = ("import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); "
             f"sys.exit(0 if libc.syscall({nr['keyctl']}, 0, -3, 0) == -1 and ctypes.get_errno() == 1 "
             f"and libc.syscall({nr['sysinfo']}, ctypes.create_string_buffer(256)) == -1 "
             f"and libc.socket(2, 1, 0) == -1 and libc.socket(40, 1, 0) == -1 "
             f"and (libc.socket(1, 1, 0) {'>= 0' if bwrap else '== -1'}) else 1)")
    if bwrap is None:
        loader = SeccompLoader()
        return subprocess.run([sys.executable, "-I", "-c", check], capture_output=True,
                              preexec_fn=loader.load).returncode == 0
    read, write = os.pipe()
    os.write(write, seccomp_filter())
    os.close(write)
    try:
        args = [bwrap, "--seccomp", str(read)]
        for path in system_paths():
            args += _mount(path, path)
        return subprocess.run([*args, sys.executable, "-I", "-c", check], pass_fds=[read],
                              capture_output=True).returncode == 0
    finally:
        os.close(read)


class SeccompLoader:
    """The filter for a child without bubblewrap: built before the fork, loaded by `load()` in
    the child just before exec (no new privileges first, so any uid may load it)."""

    def __init__(self):
        import ctypes

        class Program(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
        self._ctypes = ctypes
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._code = ctypes.create_string_buffer(seccomp_filter(unix_sockets=False))  # no network namespace
        self._program = Program(len(self._code.raw) // 8, ctypes.addressof(self._code))

    def load(self) -> None:
        c = self._ctypes
        if self._libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            raise OSError(c.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if self._libc.prctl(22, 2, c.byref(self._program), 0, 0) != 0:  # PR_SET_SECCOMP, MODE_FILTER
            raise OSError(c.get_errno(), "prctl(PR_SET_SECCOMP) failed")


def system_paths() -> list[Path]:
    """What Python needs, read-only: system libraries, the interpreter, its packages."""
    paths = [Path(p) for p in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc/ld.so.cache",
                               "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime")]
    paths += [Path(sys.prefix), Path(sys.base_prefix), Path(os.path.realpath(sys.executable)).parent.parent]
    paths += [Path(p) for p in site.getsitepackages() + [site.getusersitepackages()]]
    paths = sorted({p for p in paths if p.exists() or p.is_symlink()})
    return [p for p in paths if not any(q != p and p.is_relative_to(q) and not q.is_symlink() for q in paths)]


def _readable_by_others(paths: list[Path]) -> bool:
    """Whether another uid can use every path: a file readable, a folder listable (Python's
    import system lists the folders on sys.path), every folder above it traversable."""
    for path in paths:
        target = path.resolve()
        if not target.exists():
            continue
        need = 0o005 if target.is_dir() else 0o004
        if target.stat().st_mode & need != need:
            return False
        if any(not folder.stat().st_mode & 0o001 for folder in target.parents):
            return False
    return True


def exposed(root: Path, keep: list[Path] = ()) -> list[Path]:
    """What under `root` another uid can read, as the entries to close (`chmod o= ENTRY`), outermost
    first: a file others may read, or a folder they may enter with such a file below it; [] where
    nothing is (a folder on the way that others cannot enter closes everything below it). `keep`:
    paths the worker must reach (its Python), left open with the folders on the way to them."""
    root, keep = Path(os.path.realpath(root)), [Path(os.path.realpath(k)) for k in keep]
    if any(not folder.stat().st_mode & 0o001 for folder in root.parents if folder.exists()):
        return []
    found, todo = [], [root]
    while todo:
        path = todo.pop()
        try:
            mode = path.lstat().st_mode
        except OSError:
            continue
        if stat.S_ISREG(mode) and mode & 0o004:
            found.append(path)
        elif stat.S_ISDIR(mode) and mode & 0o001 and path not in keep:
            if not any(k.is_relative_to(path) for k in keep):
                found += [path] if _holds_readable(path) else []
            else:
                try:
                    todo += sorted(path.iterdir(), reverse=True)
                except OSError:
                    continue
    return found


def readable_by_workers(project: Path, submissions: list[Path] = (), out: Path | None = None) -> list[Path]:
    """What a worker's uid could read of the grader's without bubblewrap (a uid of its own keeps it from
    root's files, not from what every user may read): the project (the reference, hidden cases and
    grading seed, the catalogue), its git folders (their history holds the same), an installed copy of
    the harness, the submissions and --out (earlier results). The way to the worker's own Python is
    left open where the project holds it."""
    keep = system_paths()
    roots = [project, *_git_folders(project), *submissions, *([out] if out is not None and out.exists() else [])]
    roots += [Path(p) / "harness" for p in site.getsitepackages() if (Path(p) / "harness").is_dir()]
    found = []
    for root in roots:
        found += [p for p in exposed(root, keep) if p not in found]
    return found


def _git_folders(project: Path) -> list[Path]:
    """The git folders of a worktree (or submodule) whose .git is a file: they lie outside it."""
    dot = project / ".git"
    try:
        text = dot.read_text().strip() if dot.is_file() else ""
    except OSError:
        return []
    if not text.startswith("gitdir:"):
        return []
    own = (project / text.removeprefix("gitdir:").strip()).resolve()
    common = own / "commondir"
    return [own] + ([(own / common.read_text().strip()).resolve()] if common.is_file() else [])


def _holds_readable(folder: Path) -> bool:
    """Whether another uid can read some file below `folder`, which it can enter."""
    todo = [str(folder)]
    while todo:
        try:
            with os.scandir(todo.pop()) as entries:
                for entry in entries:
                    mode = entry.stat(follow_symlinks=False).st_mode
                    if stat.S_ISREG(mode) and mode & 0o004:
                        return True
                    if stat.S_ISDIR(mode) and mode & 0o001:
                        todo.append(entry.path)
        except OSError:
            continue
    return False


def _mount(source: Path, target: Path) -> list[str]:
    """A read-only bind, its parent folders traversable (bwrap makes them 0700 otherwise)."""
    args = []
    for parent in reversed(target.parents[:-1]):
        args += ["--perms", "0755", "--dir", str(parent)]
    if source.is_symlink():
        return args + ["--symlink", os.readlink(source), str(target)]
    return args + ["--ro-bind", str(source), str(target)]


def _tree(root: int) -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds) of `root` and every host process under it."""
    stats = {int(p): s for p in os.listdir("/proc") if p.isdigit() and (s := _stat(int(p)))}
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    tree, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            tree[pid] = stats[pid]
        todo += children.get(pid, [])
    return tree


def _task_states(pid: int) -> list[str]:
    states = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return states
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
        except (OSError, IndexError):
            pass
    return states


def _running(pid: int) -> bool:
    """Any thread of it not dead (a zombie leader's other threads count)."""
    return any(state not in "ZX" for state in _task_states(pid))


def _stopped(pid: int) -> bool:
    return any(state in "Tt" for state in _task_states(pid))


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
    return sum(cpu for _, cpu in _tree(root).values())


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL a process started with start_new_session=True, and its group; reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def uid_processes(uids) -> list[int]:
    """Live processes of these uids: any thread of it running (a zombie is dead already, it waits only for its
    parent; but red team 10's leader thread ended alone by the thread-only exit syscall and read as one, while
    its second thread outlived grading and killed the next submission's workers)."""
    found = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if os.stat(f"/proc/{p}").st_uid in uids and _running(int(p)):
                    found.append(int(p))
            except OSError:
                pass
    return found


# Kernel file systems: no folder there takes a file (/dev/mqueue does, and is scanned).
PSEUDO_FS = {"proc", "sysfs", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs", "bpf", "pstore", "configfs",
             "fusectl", "binfmt_misc", "autofs", "efivarfs", "hugetlbfs", "devpts", "nsfs"}
SCAN_LIMIT = 2_000_000  # folders: a scan that would go on longer stops grading without bubblewrap


# A project's answers, as paths inside it: a readable copy anywhere (another checkout, an unpacked
# upload, an installed harness) gives a worker without bubblewrap what closing the project keeps from it.
SECRETS = ("reference/adapters.py", "harness/term/catalogue.py", "fixtures/*/hidden/manifest.json")


def answer_files(project: Path) -> dict[str, dict[int, set[int]]]:
    """The reference solution's modules, as reference/ holds them and as a student submits them
    (reference.submission: `reference` renamed `student`): file name -> size -> CRC-32s. A readable
    copy of these is a submission's full marks, whatever folder or archive holds it (red team 13: a
    sample alice.zip of the reference). Empty where the project has no reference/ (Gradescope's)."""
    answers: dict[str, dict[int, set[int]]] = {}
    for module in sorted((project / "reference").glob("*.py")):
        if module.name in ANSWERLESS:
            continue
        text = module.read_bytes()
        for version in (text, re.sub(rb"\breference\b", b"student", text)):
            answers.setdefault(module.name, {}).setdefault(len(version), set()).add(zlib.crc32(version))
    return answers


ANSWERLESS = {"__init__.py", "submission.py", "variants.py"}  # no answers in them (adapters.py: SECRETS has it)


def _holds_answer(name: str, size: int, crc: int | None, answers: dict) -> bool:
    crcs = answers.get(name.rsplit("/", 1)[-1], {}).get(size)
    return bool(crcs) and (crc is None or crc in crcs)


def _file_crc(path: str) -> int:
    with open(path, "rb") as f:
        return zlib.crc32(f.read(MAX_ANSWER))


MAX_ANSWER = 1 << 20  # bytes: a reference module is tens of KiB


def scan_host(root: Path = Path("/"), copies_under: Path = Path("/"),
              answers: dict | None = None) -> tuple[list[Path], list[Path]]:
    """One walk of every folder other uids can enter (links not followed, kernel file systems and
    folders others cannot enter skipped), for the grader without bubblewrap, where a worker sees the
    host's files. Returns the folders others can write to (sticky or not: /tmp, /var/tmp, /dev/shm,
    /run/lock, ...), where what a worker leaves would meet a later submission (a hidden input left in
    /run/lock reached a later batch), and the copies of a project's answers (SECRETS, and files or archive
    entries with a reference module's name and content: `answers`, from answer_files) others can read,
    those under `copies_under` (a rehearsal on a machine with checkouts of its own: its tree)."""
    answers = answers or {}
    skip = set()
    try:
        for line in Path("/proc/self/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) > 2 and fields[2] in PSEUDO_FS:
                skip.add(fields[1].replace("\\040", " "))
    except OSError:
        pass
    names = {secret.rsplit("/", 1)[1] for secret in SECRETS}
    writable, copies, todo, seen = [], [], [str(root)], 0
    while todo:
        folder = todo.pop()
        seen += 1
        if seen > SCAN_LIMIT:
            raise OSError(errno.E2BIG, f"more than {SCAN_LIMIT:,} folders others can enter: the scan for folders "
                                       "a worker could write to, and for copies of the answers, stopped")
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    try:
                        if entry.name.endswith(".zip") and entry.is_file(follow_symlinks=False):
                            if entry.stat(follow_symlinks=False).st_mode & 0o004 and \
                                    Path(entry.path).is_relative_to(copies_under) and \
                                    _zip_holds_answers(entry.path, answers):
                                copies.append(Path(entry.path))  # an upload's archive (the autograder zip)
                            continue
                        if entry.name == "objects" and os.path.isfile(os.path.join(folder, "HEAD")) and \
                                entry.is_dir(follow_symlinks=False) and entry.stat().st_mode & 0o001 and \
                                Path(folder).is_relative_to(copies_under) and _git_holds_answers(folder):
                            copies.append(Path(folder))  # a repository's history (a bare clone, a .git)
                            continue
                        if entry.name in names and entry.is_file(follow_symlinks=False):
                            if entry.stat(follow_symlinks=False).st_mode & 0o004 and \
                                    _is_answer(entry.path) and \
                                    Path(entry.path).is_relative_to(copies_under):
                                copies.append(Path(entry.path))
                            continue
                        if entry.name in answers and entry.is_file(follow_symlinks=False):
                            info = entry.stat(follow_symlinks=False)
                            if info.st_mode & 0o004 and _holds_answer(entry.name, info.st_size, None, answers) and \
                                    Path(entry.path).is_relative_to(copies_under) and \
                                    _holds_answer(entry.name, info.st_size, _file_crc(entry.path), answers):
                                copies.append(Path(entry.path))
                            continue
                        if not entry.is_dir(follow_symlinks=False) or entry.path in skip:
                            continue
                        mode = entry.stat(follow_symlinks=False).st_mode
                    except OSError:
                        continue
                    if mode & 0o001:  # others can enter it: what is inside is in reach
                        if mode & 0o002:
                            writable.append(Path(entry.path))
                        todo.append(entry.path)
        except OSError:
            continue
    return sorted(writable), sorted(copies)


def _is_answer(name: str) -> bool:
    return any(Path(name).match(secret) for secret in SECRETS)


def _zip_holds_answers(path: str, answers: dict | None = None) -> bool:
    """Whether an archive others can read lists a file of a project's answers, by its path or by a
    reference module's name, size and CRC-32 (the central directory alone is read; an archive that
    cannot be read as one is not a copy)."""
    import zipfile
    try:
        with zipfile.ZipFile(path) as archive:
            return any(_is_answer(info.filename) or _holds_answer(info.filename, info.file_size, info.CRC, answers or {})
                       for info in archive.infolist())
    except (OSError, zipfile.BadZipFile, ValueError, RuntimeError):
        return False


def _git_holds_answers(git_dir: str) -> bool:
    """Whether a repository's history (any ref) holds a file of a project's answers. One that git cannot
    read here counts as a copy: it cannot be shown not to be one, and the refusal names it to close."""
    try:
        # every path any commit on any ref added or changed (rev-list --objects names a blob once, under
        # whichever path it met first)
        listed = subprocess.run(["git", "-c", "safe.directory=*", "--git-dir", git_dir, "log", "--all", "--root",
                                 "--no-renames", "--name-only", "--format="],
                                capture_output=True, text=True, timeout=120, errors="replace")
    except (OSError, subprocess.TimeoutExpired):
        return True
    if listed.returncode != 0:
        return "does not have any commits" not in listed.stderr and bool(listed.stderr.strip())
    return any(_is_answer(line) for line in listed.stdout.splitlines() if line)


def copy_root(secret: Path) -> Path:
    """The folder that holds a copy of the answers whole (a checkout, with its .git), to close; where
    that folder holds Python itself (an installed harness in site-packages), the copy's own folder. An
    archive or a repository's git folder found whole is its own root."""
    if secret.suffix == ".zip" or (secret / "HEAD").is_file():
        return secret
    depth = next(len(s.split("/")) for s in SECRETS if secret.match(s))
    root = secret.parents[depth - 1]
    python = [Path(os.path.realpath(p)) for p in system_paths()]
    return secret.parents[depth - 2] if any(p.is_relative_to(root) for p in python) else root


SHARED_TEMP = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"))


def _reset_times(folder: Path, times: tuple[int, int] = (0, 0)) -> bool:
    """A writable folder's own access and modification times set back (as root, or as its owner): a submission
    may set them to now at a moment it chooses, a number for the next one under its uid or in its kept
    sandbox to read (red team 14 sent hidden inputs through /scratch's and /var/tmp's mtimes)."""
    try:
        os.utime(folder, ns=times, follow_symlinks=False)
        return True
    except OSError:
        return False


def remove_files_of(uid: int, folders=SHARED_TEMP) -> None:
    """Remove what a worker uid left in the folders it could write to (its scratch folder aside;
    `folders`: writable_folders()): the next submission under that uid must find nothing of this one's."""
    for folder in folders:
        try:
            entries = list(folder.iterdir())
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.lstat().st_uid == uid:
                    remove_tree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
            except OSError:
                pass


def kill_uid(uid: int, seconds: float = 10.0) -> bool:
    """SIGKILL every process of a slot's uid (used as root, where the uid is the slot's alone),
    until none is left: a PID namespace's teardown is asynchronous. False if some outlived it."""
    return kill_until_none(lambda: uid_processes((uid,)), seconds)


def kill_until_none(find, seconds: float) -> bool:
    """SIGKILL the processes `find()` lists until it lists none; False if some outlived `seconds`."""
    deadline = time.monotonic() + seconds
    while victims := find():
        if time.monotonic() > deadline:
            return False
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.01)
    return True
