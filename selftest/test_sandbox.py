"""The sandbox's parts that need no grading run: cleanup that survives any tree, leftovers of
dead drivers, the report of a call stopped by the wall-clock backstop, the seccomp filter, and,
without bubblewrap, what a worker's uid could read or leave behind."""

import os
import re
import socket
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from harness.grading import remote
from harness.grading.sandbox import remove_orphan_sandboxes, remove_tree


@pytest.fixture
def fast_tmp(tmp_path):
    """A tmpfs where there is one (removing 1,500 folders from a loaded disk takes seconds)."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        folder = shm / f"harness-selftest-{os.getpid()}"
        folder.mkdir()
        yield folder
        remove_tree(folder)
    else:
        yield tmp_path


def test_cleanup_survives_a_deep_locked_tree_and_never_follows_links(fast_tmp, tmp_path):
    """1,500 levels (deeper than Python's recursion limit, longer than PATH_MAX), folders without
    any permission, and links out of the tree: all of it goes, and what the links point to stays."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    root = fast_tmp / "tree"
    root.mkdir()
    (root / "out").symlink_to(outside)
    fd = os.open(root, os.O_RDONLY)
    for level in range(1500):
        os.mkdir("d", dir_fd=fd)
        if level % 500 == 0:
            os.symlink(str(outside), "link", dir_fd=fd)
            os.close(os.open("f", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
        child = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.mkdir("locked", dir_fd=fd)
    os.chmod("locked", 0, dir_fd=fd)
    os.fchmod(fd, 0)
    os.close(fd)
    assert remove_tree(root) and not root.exists()
    assert (outside / "keep.txt").read_text() == "keep"
    assert remove_tree(root)  # already gone: nothing to do


def test_cleanup_is_not_led_out_of_its_tree_by_a_folder_renamed_under_it(tmp_path, monkeypatch):
    """Red team 5: while root emptied a worker's folder, another slot's live submission moved that
    folder into one of its own; climbing back with ".." then took root there, and up, emptying what
    it found. The cleanup keeps its folders' handles instead: what lies outside the tree stays."""
    from harness.grading import sandbox
    arena = tmp_path / "arena"
    deep = arena / "tree" / "d1" / "d2"
    deep.mkdir(parents=True)
    for i in range(5):
        (deep / f"f{i}").touch()
    elsewhere = arena / "attacker" / "inner"
    elsewhere.mkdir(parents=True)
    (arena / "CANARY").write_text("root's")
    (arena / "attacker" / "CANARY").write_text("anyone's")
    unlink, moved = os.unlink, []

    def unlink_then_move(path, *args, **kwargs):
        unlink(path, *args, **kwargs)
        if not moved:  # inside d2 now: move it away, as the racing process did
            moved.append(os.rename(deep, elsewhere / "d2"))
    monkeypatch.setattr(sandbox.os, "unlink", unlink_then_move)
    sandbox.remove_tree(arena / "tree")
    monkeypatch.undo()
    assert moved and (arena / "CANARY").read_text() == "root's"
    assert (arena / "attacker" / "CANARY").read_text() == "anyone's" and (elsewhere).is_dir()


def test_cleanup_of_a_tree_deeper_than_its_open_handles_moves_the_rest_up(tmp_path, monkeypatch):
    from harness.grading import sandbox
    monkeypatch.setattr(sandbox, "OPEN_DEPTH", 4)
    root = tmp_path / "tree"
    (root / "a" / "b" / "c" / "d" / "e" / "f").mkdir(parents=True)
    (root / "a" / "b" / "c" / "d" / "e" / "f" / "x").touch()
    assert sandbox.remove_tree(root) and not root.exists()


def test_sandboxes_of_dead_drivers_are_removed_and_live_ones_kept(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gone = tmp_path / f"sandbox-{dead.pid}-abc"
    (gone / "scratch").mkdir(parents=True)
    live = tmp_path / f"sandbox-{os.getpid()}-def"
    live.mkdir()
    remove_orphan_sandboxes(tmp_path)
    assert not gone.exists() and live.exists()


class _Idle:
    """A sandbox whose worker never answers and uses no CPU."""
    stdout = None
    hidden = False

    def cpu_seconds_used(self):
        return 0.0

    def kill_workers(self):
        return True


@pytest.mark.skipif(sys.platform != "linux", reason="/proc")
def test_a_process_whose_leader_thread_exited_alone_is_found_alive_and_killed():
    """Red team 10, without bubblewrap or cgroups: a worker's grandchild ended its main thread alone (the
    thread-only exit syscall), read as a zombie in /proc/PID/stat, outlived grading and killed the next
    submission's workers (the reference scored 117.89)."""
    import time
    from harness.grading.sandbox import kill_until_none, uid_processes
    code = ("import ctypes, threading, time\n"
            "threading.Thread(target=time.sleep, args=(60,)).start()\n"
            "ctypes.CDLL(None).syscall(60, 0)\n")  # SYS_exit (x86-64): this thread only
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        for _ in range(200):
            with open(f"/proc/{proc.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.02)
        else:
            pytest.fail("the leader thread did not exit")
        assert proc.pid in uid_processes({os.getuid()})
        assert kill_until_none(lambda: [p for p in uid_processes({os.getuid()}) if p == proc.pid], 10)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="worker uids need root")
def test_without_bubblewrap_a_process_of_the_worker_uid_beside_the_zygote_is_seen(tmp_path):
    """Red team 10: without bubblewrap the zygote's kill reached its descendants only, and a daemon (a double
    fork and setsid) of a visible-test worker ran on into the hidden cases. Any process of the worker uid
    but the zygote now counts: the hidden cases get a fresh sandbox."""
    from harness.grading.grade import _claim_uid_block
    from harness.grading.sandbox import BASE_UID, Protections, Sandbox, remove_tree
    lock, slot = _claim_uid_block()
    sandbox = Sandbox(tmp_path, Protections(bwrap=None, uid_drop=True), slot, 1024, 60)
    as_worker = lambda: os.setresuid(BASE_UID + slot, BASE_UID + slot, BASE_UID + slot)  # noqa: E731
    zygote = subprocess.Popen(["sleep", "60"], preexec_fn=as_worker)
    daemon = subprocess.Popen(["sleep", "60"], preexec_fn=as_worker)
    try:
        sandbox.process = zygote
        assert sandbox.uid == BASE_UID + slot and sandbox._others_alive()
        daemon.kill()
        daemon.wait()
        assert not sandbox._others_alive()
    finally:
        sandbox.process = None
        for p in (zygote, daemon):
            p.kill()
            p.wait()
        remove_tree(sandbox.root)
        lock.close()


def test_a_call_stopped_by_the_wall_clock_says_so(monkeypatch):
    monkeypatch.setattr(remote, "WALL_GRACE", 0.3)
    link = remote.Link(_Idle(), case_timeout=0.5)
    link.sock, theirs = socket.socketpair()
    with pytest.raises(TimeoutError, match="wall-clock time, though it used less than 0.5 s of CPU time"):
        link._wait(0.5)
    theirs.close()


def test_a_reply_that_trickles_in_has_one_deadline(monkeypatch):
    monkeypatch.setattr(remote, "REPLY_SECONDS", 0.5)
    link = remote.Link(_Idle(), case_timeout=5)
    link.sock, theirs = socket.socketpair()
    theirs.send(b"\0")  # the first byte of a header, and no more
    with pytest.raises(TimeoutError, match="began its reply but did not finish it within 0.5 s"):
        link._wait(5)
    theirs.close()


def test_a_worker_that_never_reads_a_request_is_stopped_like_a_hang(monkeypatch):
    """Red team 13: a worker that stopped reading left the driver blocked in sendall with no timeout, the slot
    held until the batch's watchdog (the submission's timeout + 120 s)."""
    monkeypatch.setattr(remote, "SEND_SECONDS", 0.3)
    link = remote.Link(_Idle(), case_timeout=5)
    link.sock, theirs = socket.socketpair()
    import torch
    big = {"x": torch.zeros(1 << 22)}  # 16 MB: more than a socket buffer holds
    with pytest.raises(TimeoutError, match="did not take the test's inputs within 0.3 s"):
        link._exchange(big, 5)
    assert link.sock is None  # dropped, as after any hang
    theirs.close()


def test_a_submission_cannot_take_the_name_of_a_batch_file():
    """A submission named report.html once made its results folder where the class report goes."""
    from harness.grading.grade import BATCH_FILES, submission_name
    assert {submission_name(Path(name)) for name in BATCH_FILES} == {"_" + name for name in BATCH_FILES}
    assert submission_name(Path("alice.zip")) == "alice" and submission_name(Path(".x")) == "_.x"
    # red team 12: the anonymised report's names too (a folder there broke `harness report --anonymise`)
    assert {submission_name(Path(f"{stem}-anonymised.{ext}")) for stem, ext in (("report", "html"), ("mistakes", "csv"))} \
        == {"_report-anonymised.html", "_mistakes-anonymised.csv"}


def test_submissions_whose_safe_names_collide_or_run_long_each_get_their_own():
    """"a b" and "a_b" make the same safe folder name; a 250-character name would not fit the
    file system with the grader's prefixes. Each gets a distinct name of bounded length."""
    from harness.grading.grade import NAME_CHARS, submission_names
    given = [Path("a b"), Path("a_b"), Path("a_b.zip"), Path("L" * 250), Path("L" * 249 + "M"), Path("bob")]
    names = submission_names(given)
    assert len(set(names)) == len(names) and names[-1] == "bob", names
    assert all(len(n.encode()) <= NAME_CHARS + 9 for n in names), names
    assert names == submission_names(given), "the same batch gets the same names"


def test_a_submission_named_apart_in_its_batch_keeps_that_name_when_regraded_alone():
    """TA trial 11 graded `reference` and `reference.zip` together (each took a digest of its file name),
    then regraded `reference` alone: it went under a third name, a third row. Alone, a submission takes
    the name its earlier grading gave it where --out holds a result under that name."""
    from harness.grading.grade import submission_names
    batch = submission_names([Path("subs/reference"), Path("subs/reference.zip"), Path("subs/bob")])
    assert batch[0] != batch[1] and batch[0].startswith("reference~") and batch[2] == "bob", batch
    assert submission_names([Path("elsewhere/reference")], earlier=set(batch)) == [batch[0]]
    assert submission_names([Path("subs/reference")]) == ["reference"]  # a first grading: its plain name
    assert submission_names([Path("subs/bob")], earlier=set(batch)) == ["bob"]


def test_a_name_that_mixes_scripts_takes_a_digest_so_it_cannot_pass_for_another():
    """Red team 13: `rеference`, its e Cyrillic, made a grades.csv row that read as `reference`'s. A name
    whose letters mix scripts is told apart by a digest; one script, any script, stays as it is."""
    from harness.grading.grade import APART, submission_names
    names = submission_names([Path("subs/reference"), Path("subs/r\u0435ference.zip")])
    assert names[0] == "reference" and names[1].startswith(f"r\u0435ference{APART}"), names
    single = ["Иван_Петров", "José-García", "山田たろう", "김민준", "Ζωή", "alice2"]
    assert submission_names([Path(n) for n in single]) == single


def test_a_submission_cannot_take_another_ones_result_by_its_name():
    """Red team 13: a folder named `ref-3ff6c057`, another batch's digest name for `ref`, replaced that
    student's 123 with its own 0 as if it were a regrade; so could `a_b` replace `a b` (one safe name).
    The digest joins with a character no safe name holds, and a result recorded from another source
    keeps its name: the newcomer takes a digest of its own."""
    from harness.grading.grade import APART, submission_name, submission_names
    batch = submission_names([Path("subs/ref"), Path("subs/ref.zip")])
    assert all(APART in n for n in batch) and submission_name(Path(batch[0])) != batch[0], batch
    earlier = {"a_b": "a b", "bob": "bob.zip", "old": ""}
    named = submission_names([Path("x/a_b"), Path("y/bob.zip"), Path("z/old.zip")], earlier)
    assert named[0].startswith("a_b" + APART) and named[1:] == ["bob", "old"], named


def test_the_seccomp_filter_denies_system_v_and_queue_ipc():
    """A message queue, a shared-memory segment or a semaphore set outlives its process and is shared
    by a uid: without an IPC namespace (no bubblewrap), a later submission under the same uid read a
    hidden input from one. Under the filter each call fails with EPERM; without it, msgget works."""
    import platform
    import subprocess
    import sys
    from harness.grading.sandbox import _SYSCALLS, IPC, SeccompLoader
    nr = _SYSCALLS[platform.machine()][1]
    check = ("import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); "
             f"calls = [libc.syscall({nr['msgget']}, 0, 0o1600), libc.syscall({nr['shmget']}, 0, 4096, 0o1600), "
             f"libc.syscall({nr['semget']}, 0, 1, 0o1600)]; errno = ctypes.get_errno(); "
             f"[libc.syscall(nr, i, 0, 0) for nr, i in zip(({nr['msgctl']}, {nr['shmctl']}, {nr['semctl']}), calls) "
             "if i >= 0]; "  # IPC_RMID: nothing outlives the check
             "sys.exit(0 if all(c == -1 for c in calls) and errno == 1 else 1)")
    assert "msgrcv" in IPC and "mq_open" in IPC
    denied = subprocess.run([sys.executable, "-I", "-c", check], preexec_fn=SeccompLoader().load)
    assert denied.returncode == 0
    allowed = subprocess.run([sys.executable, "-I", "-c", check.replace("sys.exit(0 if", "sys.exit(1 if")])
    assert allowed.returncode == 1  # the calls work without the filter: the check can fail


SOCKETS_CHECK = """
import socket, sys
def refused(*args):
    try:
        socket.socket(*args).close()
    except PermissionError:
        return True
    return False
a, b = socket.socketpair()  # the channel multiprocessing and the worker use: always allowed
a.sendall(b"x"); assert b.recv(1) == b"x"
print(refused(socket.AF_UNIX, socket.SOCK_STREAM), refused(socket.AF_INET, socket.SOCK_STREAM),
      refused(socket.AF_NETLINK, socket.SOCK_RAW, 0), refused(40, socket.SOCK_STREAM))  # 40: AF_VSOCK
"""


def test_without_a_network_namespace_no_socket_reaches_a_neighbour():
    """Red team 11: without bubblewrap an abstract AF_UNIX name is the whole machine's, and one submission
    sent another's hidden inputs through one; from a sandbox, AF_VSOCK reached the hypervisor. The filter a
    worker loads without bubblewrap refuses AF_UNIX, internet, netlink and vsock sockets (socketpair still
    works); bubblewrap's keeps AF_UNIX, whose names its network namespace keeps apart."""
    from harness.grading.sandbox import SeccompLoader, seccomp_filter
    denied = subprocess.run([sys.executable, "-I", "-c", SOCKETS_CHECK], preexec_fn=SeccompLoader().load,
                            capture_output=True, text=True)
    assert denied.stdout.split() == ["True", "True", "True", "True"], denied.stdout + denied.stderr
    allowed = subprocess.run([sys.executable, "-I", "-c", SOCKETS_CHECK], capture_output=True, text=True)
    assert allowed.stdout.split()[0] == "False", allowed.stderr  # AF_UNIX works without it: the check can fail
    assert len(seccomp_filter(unix_sockets=False)) > len(seccomp_filter()), "bubblewrap's filter keeps AF_UNIX"


def test_the_workers_harness_modules_import_on_their_own(tmp_path):
    """The sandbox holds only WORKER_MODULES of the harness: a module they import that is not among
    them (harness.torch_imports once) fails under bubblewrap, and every submission got import-error.
    Outside a sandbox the editable install would still find it, so where each came from is checked."""
    import shutil
    from harness.grading.sandbox import HARNESS, WORKER_MODULES
    lib = tmp_path / "lib"
    for name in WORKER_MODULES:
        (lib / "harness" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(HARNESS / name, lib / "harness" / name)
    check = ("import sys; sys.path[:0] = [sys.argv[1]]; import harness.grading.worker, harness.student_run.probes; "
             "outside = [n for n, m in sys.modules.items() if n.split('.')[0] == 'harness' "
             "and not (getattr(m, '__file__', None) or sys.argv[1]).startswith(sys.argv[1])]; "
             "print(outside); sys.exit(1 if outside else 0)")
    done = subprocess.run([sys.executable, "-I", "-c", check, str(lib)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]


LOCKS_CHECK = """
import ctypes, errno, fcntl, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(sys.argv[1], os.O_RDONLY)  # a file every sandbox reads: torch's own, read-only
denied = []
def tries(name, call):
    try:
        call()
    except OSError as e:
        denied.append(name)
tries("flock", lambda: fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB))
lock = struct.pack("hhqqi", fcntl.F_RDLCK, 0, 0, 1, 0)
for name, command in [("F_SETLK", fcntl.F_SETLK), ("F_SETLKW", fcntl.F_SETLKW), ("F_GETLK", fcntl.F_GETLK),
                      ("F_OFD_SETLK", 37), ("F_OFD_SETLKW", 38), ("F_OFD_GETLK", 36)]:
    tries(name, lambda: fcntl.fcntl(fd, command, lock))
folder = os.open(os.path.dirname(sys.argv[1]), os.O_RDONLY)  # dnotify: DN_ACCESS | DN_MULTISHOT on its folder
tries("F_NOTIFY", lambda: fcntl.fcntl(folder, 1026, 0x80000001))
def inotify():
    watcher = libc.inotify_init1(0)
    if watcher < 0 or libc.inotify_add_watch(watcher, sys.argv[1].encode(), 1) < 0:  # IN_ACCESS
        raise OSError(ctypes.get_errno(), "inotify")
tries("inotify", inotify)
os.set_blocking(fd, False)  # F_GETFL/F_SETFL, and F_GETFD/F_SETFD below, stay allowed: Python needs them
os.set_inheritable(fd, True)
print(" ".join(denied))
"""


def test_the_seccomp_filter_denies_file_locks_and_file_watches():
    """flock and fcntl locks work on read-only files and are machine-wide: a sandbox locking torch's
    own files in its hidden phase told a neighbour 64 bits of a hidden input (inotify on the same
    files would see a neighbour's reads). Under the filter each fails; without it, each works."""
    import torch
    from harness.grading.sandbox import SeccompLoader
    shared = torch.__file__
    every = "flock F_SETLK F_SETLKW F_GETLK F_OFD_SETLK F_OFD_SETLKW F_OFD_GETLK F_NOTIFY inotify"
    denied = subprocess.run([sys.executable, "-I", "-c", LOCKS_CHECK, shared], preexec_fn=SeccompLoader().load,
                            capture_output=True, text=True)
    assert denied.returncode == 0 and denied.stdout.split() == every.split(), denied.stdout + denied.stderr
    allowed = subprocess.run([sys.executable, "-I", "-c", LOCKS_CHECK, shared], capture_output=True, text=True)
    assert allowed.returncode == 0 and allowed.stdout.split() == [], allowed.stdout + allowed.stderr


def test_torch_and_numpy_work_under_the_seccomp_filter():
    """What the filter denies, the worker's own stack does not need: torch and numpy import and compute
    (a gradient, a matmul, a save and load through a file), threads start, and files open."""
    from harness.grading.sandbox import SeccompLoader
    work = ("import io, tempfile, threading, numpy, torch; x = torch.randn(64, 64, requires_grad=True); "
            "(x @ x).tanh().sum().backward(); assert x.grad.isfinite().all(); "
            "a = numpy.random.default_rng(0).normal(size=(32, 32)); assert numpy.isfinite(a @ a).all(); "
            "buffer = io.BytesIO(); torch.save({'x': x.detach()}, buffer); buffer.seek(0); "
            "assert torch.equal(torch.load(buffer)['x'], x.detach()); "
            "f = tempfile.NamedTemporaryFile(); numpy.save(f, a); f.flush(); "
            "t = threading.Thread(target=lambda: torch.ones(3).sum()); t.start(); t.join(); print('ok')")
    done = subprocess.run([sys.executable, "-I", "-c", work], preexec_fn=SeccompLoader().load, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


@pytest.fixture
def open_folder():
    """A folder every user may enter (pytest's own tmp_path lies in a folder only its user may)."""
    folder = Path(tempfile.mkdtemp(prefix="harness-selftest-", dir="/var/tmp" if os.access("/var/tmp", os.W_OK) else None))
    os.chmod(folder, 0o755)
    yield folder
    remove_tree(folder)


def _project(root: Path) -> Path:
    for name in ("reference/adapters.py", "fixtures/T/hidden/manifest.json", "fixtures/T/run_x.safetensors",
                 "harness/term/catalogue.py", "pyproject.toml", ".venv/bin/python"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x")
    for path in [root, *root.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)  # as git and a default umask leave a checkout
    return root


def test_without_bubblewrap_the_grader_names_what_a_worker_uid_could_read(open_folder):
    """A worker under a uid of its own read the reference, the hidden cases and the grading seed of a
    checkout anyone may read (123 points). What such a uid can read is found, and the refusal names it
    with the command that closes it; the way to a venv inside the project stays open, and a folder
    others cannot enter closes everything below it."""
    from harness.grading.grade import BadSetup, refuse_readable
    from harness.grading.sandbox import exposed, readable_by_workers
    project = _project(open_folder / "project")
    assert readable_by_workers(project) == [project]
    with pytest.raises(BadSetup, match=r"(?s)can read 1 .*reference/, fixtures/T/hidden/, harness/term/ among them"
                                       rf".*chmod o= {re.escape(str(project))}\n"):
        refuse_readable(project)
    venv = project / ".venv"
    assert exposed(project, [venv]) == [project / name for name in ("fixtures", "harness", "pyproject.toml", "reference")]
    os.chmod(project / "fixtures", 0o750)  # others cannot enter it: nothing below it is readable
    os.chmod(project / "harness" / "term", 0o700)  # all harness/ holds
    os.chmod(project / "reference" / "adapters.py", 0o640)  # all reference/ holds
    assert exposed(project, [venv]) == [project / "pyproject.toml"] and exposed(project / "reference") == []
    os.chmod(project / "pyproject.toml", 0o640)
    assert exposed(project, [venv]) == []
    os.chmod(project, 0o700)
    assert readable_by_workers(project) == []
    refuse_readable(project)  # closed: no refusal


def test_without_bubblewrap_copies_of_the_answers_elsewhere_are_found(open_folder):
    """Closing the project is not enough where another copy of its answers lies open (a second checkout,
    an unpacked upload, an installed harness): the grader's scan of the host finds each, and the refusal
    names it and the folder to close."""
    from harness.grading.grade import BadSetup, refuse_readable
    from harness.grading.sandbox import copy_root, scan_host
    other = _project(open_folder / "other")
    closed = _project(open_folder / "closed")
    os.chmod(closed, 0o700)
    _, copies = scan_host(open_folder)
    assert copies == [other / "fixtures/T/hidden/manifest.json", other / "harness/term/catalogue.py",
                      other / "reference/adapters.py"]
    assert {copy_root(c) for c in copies} == {other}
    with pytest.raises(BadSetup, match=rf"(?s)can read 3 copies of a project's answers.*chmod o= {re.escape(str(other))}\n"):
        refuse_readable(closed, copies=copies)
    with pytest.raises(BadSetup, match="can read 1 of the grader's"):  # its own copies are the project's
        refuse_readable(other, copies=copies)


def test_without_bubblewrap_a_folder_anyone_may_write_to_without_the_sticky_bit_is_refused(open_folder):
    """Red team 6: in a folder every user may write to, without the sticky bit, a worker set an extended
    attribute on the folder itself (no file of its uid to remove), and a later submission read the hidden
    inputs it held. The grader refuses such a folder, naming the command that closes it."""
    from harness.grading.grade import BadSetup, refuse_unsticky
    from harness.grading.sandbox import scan_host
    shared, sticky = open_folder / "shared", open_folder / "sticky"
    for folder in (shared, sticky):
        folder.mkdir()
    os.chmod(shared, 0o777)
    os.chmod(sticky, 0o1777)
    writable, _ = scan_host(open_folder)
    assert writable == [shared, sticky]
    with pytest.raises(BadSetup, match=rf"(?s)folders every user may write to lack the sticky bit \({re.escape(str(shared))}\).*\n    chmod \+t {re.escape(str(shared))}\n"):
        refuse_unsticky(writable)
    refuse_unsticky(writable, fix=True)  # Gradescope's container, graded once: the bit is set instead
    assert shared.stat().st_mode & 0o7777 == 0o1777
    refuse_unsticky(writable)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to make a repository")
def test_without_bubblewrap_packed_copies_of_the_answers_are_found_too(open_folder):
    """A bare clone and an autograder zip anyone may read hold the answers under no name the scan looked
    for (the red team's stubs scored 101 and printed the grading seed): their contents are read."""
    import zipfile
    from harness.grading.sandbox import copy_root, scan_host
    source = _project(open_folder / "source")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "safe.directory=*"]
    subprocess.run([*git, "init", "-q", str(source)], check=True)
    subprocess.run([*git, "-C", str(source), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(source), "commit", "-qm", "answers"], check=True)
    subprocess.run([*git, "clone", "-q", "--bare", str(source), str(open_folder / "bare.git")], check=True)
    shutil.rmtree(source)
    with zipfile.ZipFile(open_folder / "autograder.zip", "w") as archive:
        archive.writestr("source/fixtures/T/hidden/manifest.json", "{}")
    with zipfile.ZipFile(open_folder / "notes.zip", "w") as archive:
        archive.writestr("notes.txt", "nothing here")
    (open_folder / "empty.git" / "objects").mkdir(parents=True)
    (open_folder / "empty.git" / "HEAD").write_text("ref: refs/heads/main\n")
    subprocess.run([*git, "init", "-q", "--bare", str(open_folder / "empty.git")], check=True)
    for path in [open_folder, *open_folder.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    _, copies = scan_host(open_folder)
    assert copies == [open_folder / "autograder.zip", open_folder / "bare.git"], copies
    assert [copy_root(c) for c in copies] == copies
    os.chmod(open_folder / "autograder.zip", 0o600)
    os.chmod(open_folder / "bare.git" / "objects", 0o700)
    assert scan_host(open_folder)[1] == []


def test_without_bubblewrap_a_student_shaped_copy_of_the_reference_is_found(open_folder):
    """Red team 13: the README's sample alice.zip (the reference as a student submits it) lay readable, and a
    stub that found it scored 123: no file in it has an answer's path. Files and archive entries are known
    by a reference module's name and content; the same names with other content are not copies."""
    import zipfile
    from conftest import PROJECT
    from harness.grading.sandbox import answer_files, scan_host
    from reference.submission import reference_as_student
    answers = answer_files(PROJECT)
    sample = reference_as_student(open_folder / "sample")
    with zipfile.ZipFile(open_folder / "alice.zip", "w") as archive:
        for path in sorted(sample.rglob("*.py")):
            archive.write(path, path.relative_to(sample).as_posix())
    own = open_folder / "own" / "student"
    own.mkdir(parents=True)
    (own / "model.py").write_text("# a student's own model.py: another content\n")
    for path in [open_folder, *open_folder.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    _, copies = scan_host(open_folder, answers=answers)
    modules = sorted(p for p in (sample / "student").glob("*.py") if p.name in answers)
    assert modules and copies == sorted([open_folder / "alice.zip", *modules]), copies
    assert scan_host(open_folder)[1] == []  # by path alone, as before: nothing
    os.chmod(open_folder / "alice.zip", 0o600)
    os.chmod(sample / "student", 0o700)
    assert scan_host(open_folder, answers=answers)[1] == []


def test_without_bubblewrap_a_worktrees_git_folders_count_too(open_folder):
    """A worktree's .git is a file: its history lies in the main repository's git folder, outside it."""
    from harness.grading.sandbox import readable_by_workers
    common = open_folder / "main" / ".git"
    (common / "worktrees" / "wt").mkdir(parents=True)
    (common / "objects").mkdir()
    (common / "objects" / "pack").write_text("the reference, in history")
    (common / "worktrees" / "wt" / "commondir").write_text("../..\n")
    project = open_folder / "wt"
    project.mkdir()
    (project / ".git").write_text(f"gitdir: {common / 'worktrees' / 'wt'}\n")
    for path in [open_folder, *open_folder.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    os.chmod(project, 0o700)
    assert readable_by_workers(project) == [common / "worktrees" / "wt", common]


@pytest.mark.skipif(os.geteuid() != 0, reason="files of another uid need root to make")
def test_without_bubblewrap_what_a_worker_uid_leaves_anywhere_it_can_write_is_removed(open_folder):
    """A hidden input left in /run/lock (the grader cleaned only /tmp, /var/tmp and /dev/shm) reached a
    later batch. Every folder others may write to is found, and what the uid left in each is removed."""
    from harness.grading.sandbox import remove_files_of, scan_host
    uid = 60999  # no worker uid: another grader's workers may run under those
    nested = open_folder / "open"
    nested.mkdir()
    os.chmod(nested, 0o1777)
    folders, _ = scan_host()
    assert nested in folders and Path("/tmp") in folders and Path("/proc") not in folders
    assert not [f for f in folders if str(f).startswith(("/proc/", "/sys/"))]
    lock = Path("/run/lock")
    places = [nested] + ([lock] if lock.is_dir() and lock in folders else [])
    left = []
    for place in places:
        for name in (f"harness-selftest-{os.getpid()}", f"harness-selftest-{os.getpid()}-dir"):
            path = place / name
            path.mkdir() if name.endswith("-dir") else path.write_text("a hidden input")
            os.chown(path, uid, uid)
            left.append(path)
    kept = nested / "kept"
    kept.write_text("not the uid's")
    try:
        remove_files_of(uid, folders)
        assert not [p for p in left if p.exists()] and kept.exists()
    finally:
        for path in left:
            remove_tree(path)


def test_the_advice_without_bubblewrap_says_whether_it_is_installed(monkeypatch):
    """TA trial 11 read "bubblewrap is installed but cannot make namespaces here", then "(or install bubblewrap)"."""
    from harness.grading import grade
    monkeypatch.setattr(grade.shutil, "which", lambda name: "/usr/bin/bwrap")
    assert "it is installed here" in grade.or_bubblewrap() and "install bubblewrap" not in grade.or_bubblewrap()
    monkeypatch.setattr(grade.shutil, "which", lambda name: None)
    assert grade.or_bubblewrap().startswith("(or install bubblewrap")
