"""Batch grading: a trusted driver per slot, a confined worker per submission.

Each submission is first checked and copied (archives are vetted entry by entry
before anything is extracted; only `adapters.py` and `student/`, regular files only,
are kept). `--jobs N` driver processes (harness/grading/drive.py) then take submissions one
at a time and run the official suite against the submission's sandboxed worker
(harness/grading/sandbox.py, harness/grading/worker.py). The driver holds the answers, compares and
writes the verdicts; the submission's code never shares a process with them. One bad
submission gets a status and a results.json, and the rest of the batch is graded.
Each result is written as it finishes (its folder's graded.json last); `grades.csv` is rebuilt
from every result folder in --out after each one, so a batch that is killed keeps what it
finished, a regrade of one submission replaces its row only, and shards graded apart
(`--shard K/N`) merge into what one batch would have written (`merge`).
Each grader claims a block of worker uids of its own, so graders run side by side.
"""

import contextlib
import csv
import fcntl
import hashlib
import io
import json
import math
import os
import queue
import re
import resource
import select
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
import unicodedata
import zipfile
import zlib
from collections.abc import Collection
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from harness.contract import ADAPTERS
from harness.grading import wire
from harness.grading.report import POINTS_ENTRY, STATUS_ENTRY, code_hash, text_cell, write_report
from harness.scoring import Result, contract_points, points_text, scores
from harness.grading.sandbox import (BASE_UID, OOM_DRIVER, UID_BLOCK, UID_BLOCKS, Cgroup, Protections,
                                     Sandbox, answer_files, copy_root, exposed, kill_group, kill_uid, kill_until_none,
                                     readable_by_workers, remove_orphan_sandboxes, remove_tree, set_oom_score,
                                     scan_host, system_paths, uid_processes)
from harness.store import Term

MAX_ENTRIES = 2000          # files in one submission
MAX_FILE = 16 << 20         # bytes in one file
MAX_TOTAL = 64 << 20        # bytes in one submission, unpacked
# Held by the grader that uses that block of worker uids; in a folder of root's own, so that no
# worker (in an earlier batch without bubblewrap, say) can plant a FIFO or a link there.
LOCKS = Path("/run/harness-grade") if os.access("/run", os.W_OK) else Path(tempfile.gettempdir()) / "harness-grade-locks"
STATUS_NOTES = {
    "ok": "",
    "timeout": "The submission ran out of time; unfinished tests score 0.\n",
    "no-adapters": "No adapters.py was found at the top of the submission.\n",
    "bad-submission": "The submission could not be graded as sent: see the output.\n",
    "collection-error": "The tests could not start: see the output.\n",
    "import-error": "Your code could not be imported, so no test could run it: ",
    "grader-error": "The grader failed on this submission; please tell the course staff.\n",
}


class BadSetup(ValueError):
    """The grader cannot run as asked (no sandbox, no free uids, ...): the command says why and stops."""


class BadSubmission(Exception):
    """A submission that is refused before any of its code runs."""


@dataclass
class Test:
    id: str
    adapter: str | None
    hidden: bool
    outcome: str = "not run"
    message: str = ""
    check: str = ""       # a fixture case's check ("output", "gradient", "raises"); "" for a property or probe
    points: bool = True   # False: a twin (its public case holds the points) or a report-only verdict
    twin: str = ""        # a public case's check: the id of the same check on its hidden twin

@dataclass
class Graded:
    name: str
    tests: list[Test] = field(default_factory=list)
    status: str = "ok"          # a key of STATUS_NOTES
    output: str = ""
    tampered: list[str] = field(default_factory=list)
    seconds: float = 0.0
    code_hash: str = ""         # of its normalised adapters.py and student/: the report finds identical code
    import_error: str = ""      # status import-error: what failed, with the submission's file and line
    points: dict[str, float] = field(default_factory=dict)  # per function, the term's own (Term.functions)
    source: str = ""            # the file or folder name it was graded from: a later one of another source
    #                             under the same safe name is another student's, never its regrade
    term: str = ""              # the term it was graded on: one --out folder holds one term's grades

    def scores(self) -> dict[str, tuple[float, float]]:
        """Per test id: (score, max_score), by the rule in harness/scoring.py (the progress table's too)."""
        return scores([Result(t.id, t.adapter, t.outcome, t.check, t.hidden, t.points, t.twin) for t in self.tests],
                      points=self.points or None)

    @property
    def score(self) -> float:
        return round(sum(s for s, _ in self.scores().values()), 4)


class Grader:
    def __init__(self, project: Path, term: str, timeout: float, case_timeout: float, memory_mb: int,
                 require_confinement: bool = False, protections: Protections | None = None,
                 uid_block: int | None = None, submissions: list[Path] = (), out: Path | None = None,
                 disposable_host: bool = False, reuse_sandboxes: bool = True):
        self.project, self.term_name = project, term
        Term(project, term, hidden=True)  # verify hashes before grading anything
        self.protections = protections or Protections.detect()
        if require_confinement and not (self.protections.confined and
                                        (self.protections.uid_drop or os.geteuid() != 0)):
            raise BadSetup(f"--require-confinement: {self.protections.describe()}")
        if os.geteuid() == 0 and not self.protections.confined and not self.protections.uid_drop:
            raise BadSetup("the submissions would run as root, free to read the hidden cases and rewrite other "
                           "submissions' grades: bubblewrap cannot run here, and no worker uid can reach this "
                           f"Python (it lives under a folder only root may enter, such as /root). {SAFE_SETUP} "
                           f"{or_bubblewrap()} {self.protections.describe()}")
        # Without bubblewrap the worker sees the host's files: its uid must find none of the grader's
        # open, and what it leaves in any folder it can write to is removed after it.
        self.writable = None
        if self.protections.uid_drop and not self.protections.confined:
            refuse_readable(project, submissions, out)  # first: its advice needs no scan
            try:
                writable, copies = scan_host(copies_under=Path(os.environ.get("HARNESS_COPIES_UNDER") or "/"),
                                             answers=answer_files(project))
            except OSError as e:
                raise BadSetup(f"without bubblewrap, the host's folders must be scanned first: {e}") from None
            refuse_readable(project, submissions, out, copies)
            refuse_unsticky(writable, fix=disposable_host)
            self.writable = [str(p) for p in writable]
        self.reuse_sandboxes = reuse_sandboxes  # a slot's sandbox serves its next submission (Sandbox.finish)
        self.settings = {"timeout": timeout, "case_timeout": case_timeout, "memory_mb": memory_mb,
                         "protections": asdict(self.protections), "writable": self.writable}
        blocks = range(UID_BLOCKS) if uid_block is None else [uid_block]
        self._uids, self.first_slot = _claim_uid_block(blocks) if self.protections.uid_drop else (None, 0)
        remove_orphan_sandboxes()  # left by drivers that were killed
        Cgroup.remove_orphans(self.protections.cgroup)
        folder = project / "fixtures" / term
        self.official = {p.relative_to(project): p.read_bytes()
                         for p in [*folder.rglob("*"), *(project / "tests").rglob("*.py"), project / "pyproject.toml"]
                         if p.is_file() and "__pycache__" not in p.parts}
        self.work = Path(tempfile.mkdtemp(prefix="grading-"))
        os.chmod(self.work, 0o711)  # the workers reach their own copies; no one lists the others
        self._check = self._start_sandbox_check(memory_mb)  # last: nothing after it can fail and leave it running

    def close(self) -> None:
        if self._check is not None:  # grading stopped before ready()
            self._end_check()
        remove_tree(self.work)
        if self._uids is not None:
            self._uids.close()  # releases the lock

    def _start_sandbox_check(self, memory_mb: int) -> tuple[Sandbox, Path]:
        """Start one sandbox now: it imports torch while the drivers start. `ready()` asks it
        for a worker."""
        empty = Path(tempfile.mkdtemp(prefix="sandbox-check-"))
        os.chmod(empty, 0o755)
        sandbox = Sandbox(empty, self.protections, self.first_slot, memory_mb, 60,
                          None if self.writable is None else [Path(p) for p in self.writable])
        try:
            sandbox.start()
        except OSError as e:
            sandbox.close()
            raise BadSetup(f"the sandbox cannot start: {e}") from None
        return sandbox, empty

    def ready(self) -> None:
        """Before grading anything, one worker must start: a sandbox that cannot run Python
        would otherwise give every submission 0 with status ok."""
        sandbox, _ = self._check
        try:
            worker = sandbox.fork(warm_up=False)
            wire.send(worker, {"op": "hello"})
            worker.settimeout(60)
            wire.recv(worker)  # an ImportError reply (no adapters.py) is fine: Python and torch ran
            worker.close()
        except (OSError, wire.WireError) as e:
            raise BadSetup(f"the sandbox cannot start a worker: {e}") from None
        finally:
            self._end_check()

    def _end_check(self) -> None:
        sandbox, empty = self._check
        self._check = None
        sandbox.close()
        remove_tree(empty)

    def prepare(self, submission: Path, name: str, uid: int | None = None,
                slot: int | None = None) -> tuple[Graded, Path | None]:
        """Vet and copy one submission; the copy holds only adapters.py and student/, and with
        the uid drop it is that slot's uid's alone (a neighbour's worker cannot read it). With a
        `slot`, the copy is that slot's folder's one entry, where its sandbox finds each in turn."""
        graded = Graded(name, source=source_of(submission))
        unpacked = self.work / f"unpacked-{graded.name}"
        copy = self.work / f"submission-{graded.name}"
        if slot is not None:
            folder = self.work / f"slot-{slot}"
            folder.mkdir(mode=0o711, exist_ok=True)
            copy = folder / "submission"
        try:
            root = _unpack(submission, unpacked)
            graded.tampered = self._tampered(root)
            _copy_code(root, copy, uid)
            graded.code_hash = code_hash(copy)
        except BadSubmission as e:
            graded.status = "no-adapters" if "no adapters.py" in str(e) else "bad-submission"
            graded.output = str(e)
            remove_tree(copy)
            return graded, None
        except (OSError, ValueError, UnicodeError, MemoryError) as e:  # a full disk, an unreadable file: this one only
            graded.status, graded.output = "grader-error", f"the submission could not be copied: {e}"
            remove_tree(copy)
            return graded, None
        finally:
            remove_tree(unpacked)
        return graded, copy

    def _tampered(self, root: Path) -> list[str]:
        """Official files the submission carries with other contents (reported, never used)."""
        changed = []
        for rel, data in self.official.items():
            theirs = root / rel
            if theirs.is_file() and not theirs.is_symlink() and theirs.stat().st_size <= MAX_FILE \
                    and theirs.read_bytes() != data:
                changed.append(str(rel))
        return changed

    @staticmethod
    def record(graded: Graded, result: dict) -> None:
        unrun = "not run: the submission ran out of time" if result.get("timed_out") else "not run"
        graded.tests = [Test(t["id"], t["adapter"], t["hidden"], t["outcome"],
                             printable(t["message"]) or (unrun if t["outcome"] == "not run" else ""),
                             t["check"], t["points"], t["twin"])
                        for t in result["tests"]]
        graded.output = printable(result["output"])
        graded.points = {fn: record["points"] for fn, record in result.get("functions", {}).items()}
        if result.get("sandbox_failed"):
            graded.status = "grader-error"
        elif result.get("timed_out"):
            graded.status = "timeout"
        elif result.get("import_error"):  # every test failed for it: one status, with its file and line
            graded.status = "import-error"
            graded.import_error = " ".join(printable(result["import_error"]).split())[:500]
        elif not graded.tests:
            graded.status = "collection-error"
            graded.output += result.get("log", "")


# Where bubblewrap cannot run: a Python every uid can reach, outside the project, which is then closed.
SAFE_SETUP = ("Grade from a venv of the system's Python outside the project and outside folders only root may "
              "enter, then close the project to other users: /usr/bin/python3 -m venv /opt/harness-venv && "
              "/opt/harness-venv/bin/pip install -e PROJECT && chmod o= PROJECT (as gradescope/setup.sh and "
              "run_autograder do).")


def or_bubblewrap() -> str:
    """The other way out, said as it is here (TA trial 11 read "installed but cannot make namespaces" and then
    "install bubblewrap"): a submission under bubblewrap sees none of the host's files."""
    if shutil.which("bwrap"):
        return ("(or grade where bubblewrap can make its namespaces: it is installed here, but this machine or "
                "container refuses them; a submission under it sees none of the host's files)")
    return "(or install bubblewrap: a submission then sees none of the host's files)"


def refuse_unsticky(writable: list[Path], fix: bool = False) -> None:
    """BadSetup naming the folders every user may write to that lack the sticky bit: in one, a worker
    may rename or delete files that are not its own, and set extended attributes on the folder itself,
    which no removal of its files takes away (red team 6 left hidden inputs there for a later submission).
    `fix`: a host graded once and thrown away (Gradescope's container): set the bit instead."""
    unsticky = []
    for folder in writable:
        try:
            mode = folder.lstat().st_mode
            if not mode & stat.S_ISVTX:
                if fix:
                    os.chmod(folder, stat.S_IMODE(mode) | stat.S_ISVTX)
                else:
                    unsticky.append(folder)
        except OSError:
            pass
    if unsticky:
        raise BadSetup(
            "bubblewrap cannot run here, so each submission's code would run under a uid of its own with the host's "
            "files in view, and folders every user may write to lack the sticky bit (" + ", ".join(map(str, unsticky))
            + "): there a "
            "submission could delete others' files, and leave what it read for a later one in the folder's "
            "extended attributes. Set it, then grade again:\n    chmod +t "
            + " ".join(shlex.quote(str(f)) for f in unsticky) + "\n" + or_bubblewrap())


def refuse_readable(project: Path, submissions: list[Path] = (), out: Path | None = None,
                    copies: list[Path] = ()) -> None:
    """BadSetup naming what a worker's uid could read (of the grader's, and `copies` of the answers
    found elsewhere: scan_host), and the command that closes it."""
    found = readable_by_workers(project, submissions, out)
    elsewhere = [c for c in copies if not Path(os.path.realpath(c)).is_relative_to(os.path.realpath(project))]
    roots = list(dict.fromkeys(copy_root(c) for c in elsewhere))
    if elsewhere and not found:
        raise BadSetup(
            "bubblewrap cannot run here, so each submission's code would run under a uid of its own with the host's "
            f"files in view, and that uid can read {len(elsewhere)} copies of a project's answers outside this one: "
            + ", ".join(map(str, elsewhere)) + ". Close what holds them to other users, then grade again (where they "
            "are not yours, ask their owners, or grade on a machine without them):\n    chmod o= "
            + " ".join(shlex.quote(str(r)) for r in roots) + "\n" + or_bubblewrap())
    if not found:
        return
    inside = Path(os.path.realpath(sys.prefix)).is_relative_to(os.path.realpath(project))
    secrets = [p for p in (project / "reference", *sorted(project.glob("fixtures/*/hidden")), project / "harness" / "term",
                           project / ".git") if p.exists() and exposed(p, system_paths())]
    raise BadSetup(
        "bubblewrap cannot run here, so each submission's code would run under a uid of its own with the host's "
        f"files in view, and that uid can read {len(found)} of the grader's: "
        + ", ".join(str(p) + ("/" if p.is_dir() else "") for p in found)
        + (" (" + ", ".join(f"{p.relative_to(project)}" + ("/" if p.is_dir() else "") for p in secrets)
           + " among them)" if secrets else "")
        + ". Close them to other users, then grade again:\n    chmod o= "
        + " ".join(shlex.quote(str(p)) for p in found)
        + ("\n(this Python's venv lies inside the project, which must then stay open on the way to it. "
           if inside else "\n(") + SAFE_SETUP.replace("PROJECT", shlex.quote(str(project))) + ")\n" + or_bubblewrap())


class Driver:
    """One trusted driver process (a grading slot), fed one submission at a time."""

    def __init__(self, slot: int):
        self.slot = slot
        self.process = None

    @property
    def uid(self) -> int:
        """Its workers' uid, where the grader drops to one (the sandbox's own: BASE_UID + slot)."""
        return BASE_UID + self.slot

    def start(self, grader: Grader) -> None:
        if self.process is None or self.process.poll() is not None:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("HARNESS_", "PYTEST"))}
            memory = (2 * grader.settings["memory_mb"] + 4096) << 20  # what a worker sends it is bounded too

            def limits():
                resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
                set_oom_score(OOM_DRIVER)  # the OOM killer takes a submission's processes, not its grader

            self.process = subprocess.Popen(
                [sys.executable, "-m", "harness.grading.drive"], cwd=grader.project, env=env, text=True,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True, preexec_fn=limits)

    def grade(self, grader: Grader, copy: Path) -> dict:
        self.start(grader)
        job = {"project": str(grader.project), "term": grader.term_name, "submission": str(copy),
               "slot": self.slot, "settings": grader.settings,
               "reuse": grader.reuse_sandboxes and copy.parent.name == f"slot-{self.slot}"}
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        # A watchdog over the whole submission: whatever it does, the batch goes on.
        if not select.select([self.process.stdout], [], [], grader.settings["timeout"] + 120)[0]:
            self.kill(grader)
            raise TimeoutError(f"the submission was stopped after {grader.settings['timeout']:g} s")
        line = self.process.stdout.readline()
        if not line:
            self.kill(grader)
            raise RuntimeError("the grading driver exited")
        return json.loads(line)

    def kill(self, grader: Grader) -> None:
        if self.process is not None:
            kill_group(self.process)
        self.process = None
        if grader.protections.uid_drop:
            kill_uid(self.uid)
        remove_orphan_sandboxes()  # the dead driver's sandbox, and its cgroup
        Cgroup.remove_orphans(grader.protections.cgroup)

    def close(self, grader: Grader) -> None:
        if self.process is not None:
            try:
                self.process.stdin.close()
                self.process.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.kill(grader)


def _lock_file(block: int):
    """The lock of a block of worker uids: a regular file of this uid's, in a folder of its own."""
    LOCKS.mkdir(mode=0o700, exist_ok=True)
    info = LOCKS.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o022:
        raise BadSetup(f"{LOCKS} is not a folder of this user's that only it can write: remove it")
    fd = os.open(LOCKS / f"uids-{block}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BadSetup(f"{LOCKS / f'uids-{block}.lock'} is not a regular file: remove it")
    return os.fdopen(fd, "r+")


def _locked(block: int):
    """The block's lock, held now, or None where another grader holds it."""
    lock = _lock_file(block)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return None
    return lock


def _claim_uid_block(blocks=range(UID_BLOCKS)):
    """A block of worker uids (BASE_UID + slot) for this grader alone, held (an flock) until the
    returned file is closed: each sandbox's teardown kills every process of its uid, so two
    graders must never share one. Returns (the lock, the block's first slot)."""
    for block in blocks:
        if (lock := _locked(block)) is not None:
            return lock, block * UID_BLOCK
    raise BadSetup(f"all {UID_BLOCKS} blocks of worker uids are in use by other `harness grade` runs: "
                   "wait for one to finish")


def kill_leftover_workers(blocks=range(UID_BLOCKS)) -> bool:
    """Kill every process of a worker uid whose block no grader holds (graders beside this one
    keep theirs): after grading, nothing a submission started may live on. False if one did."""
    by_block = {b: range(BASE_UID + b * UID_BLOCK, BASE_UID + (b + 1) * UID_BLOCK) for b in blocks}
    if os.geteuid() != 0 or not uid_processes({uid for uids in by_block.values() for uid in uids}):
        return True  # (no uid drop without root)
    killed = True
    for block, uids in by_block.items():
        if (lock := _locked(block)) is not None:
            with lock:
                killed &= kill_until_none(lambda: uid_processes(uids), 30)
    return killed


BATCH_FILES = ("grades.csv", "report.html", "mistakes.csv",  # beside the submissions' folders in --out
               "report-anonymised.html", "mistakes-anonymised.csv")


NAME_CHARS = 80  # a folder name fits the file system's 255 bytes with room for the grader's prefixes
NAME_BYTES = 255  # of a file name: the source recorded in graded.json
APART = "~"  # joins a safe name and a digest: the safe names never hold it, so none can pose as another's


def submission_name(submission: Path) -> str:
    """The name a submission's results go under: one safe folder name inside --out. A name whose letters
    mix scripts takes a digest too: red team 13's Cyrillic-e `rеference` made a row that read as another's."""
    name = re.sub(r"[^\w.@+-]", "_", submission.name.removesuffix(".zip"))
    if len(name.encode()) > NAME_CHARS:
        name = name.encode()[:NAME_CHARS - 9].decode(errors="ignore") + APART + _digest(submission.name)
    elif len(scripts(name)) > 1:
        name += APART + _digest(submission.name)
    return "_" + name if name.startswith(".") or name in ("", *BATCH_FILES) else name


# Scripts that one writing system uses together (Japanese, Korean, Chinese): one script, as Unicode's
# confusable-detection rules (UTS #39) count them
_ONE_WRITING = {"HIRAGANA": "CJK", "KATAKANA": "CJK", "HANGUL": "CJK", "BOPOMOFO": "CJK"}


def scripts(name: str) -> set[str]:
    """The scripts of a name's letters, by the first word of their Unicode names (LATIN, CYRILLIC, ...)."""
    found = set()
    for c in name:
        if c.isalpha():
            first = unicodedata.name(c, "UNKNOWN").split()[0]
            found.add(_ONE_WRITING.get(first, first))
    return found


def submission_names(submissions: list[Path], earlier: dict[str, str] | Collection[str] = ()) -> list[str]:
    """One distinct name per submission: where two make the same safe name ("a b" and "a_b"),
    each takes a short digest of its own file name too, so neither overwrites the other. A name
    that took its digest in an earlier batch (`earlier`: the result folders in --out, each with the
    source its graded.json records) keeps it when graded alone, so that a regrade replaces its row
    (TA trial 11 got a third row instead). A result of another source under the plain name is
    another student's: this one takes its digest (red team 13's `a_b` replaced `a b`'s row)."""
    names = [submission_name(s) for s in submissions]
    taken = {n for n in names if names.count(n) > 1}
    sources = earlier if isinstance(earlier, dict) else dict.fromkeys(earlier, "")

    def apart(n: str, s: Path) -> bool:
        return n in taken or f"{n}{APART}{_digest(s.name)}" in sources or \
            sources.get(n, "") not in ("", source_of(s))
    return [f"{n}{APART}{_digest(s.name)}" if apart(n, s) else n for n, s in zip(names, submissions)]


def source_of(submission: Path) -> str:
    """What graded.json records of where a result came from: the submission's file or folder name."""
    return printable(submission.name)[:NAME_BYTES]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode(errors="surrogateescape")).hexdigest()[:8]


def _unpack(submission: Path, into: Path) -> Path:
    """The folder of the student's repository: the submission itself, or its zip, vetted then unpacked."""
    if submission.is_symlink():
        raise BadSubmission(f"{submission.name} is a symbolic link")
    if submission.is_dir():
        root = submission
    elif zipfile.is_zipfile(submission):
        _extract(submission, into)
        root = into
    else:
        raise BadSubmission(f"{submission.name} is neither a folder nor a zip archive")
    if not (root / "adapters.py").exists() and not (root / "adapters.py").is_symlink():
        nested = [p.parent for p in root.glob("*/adapters.py")]
        if len(nested) == 1 and nested[0].is_symlink():  # red team 10: a link to another's folder scored its marks
            raise BadSubmission(f"{nested[0].name} is a symbolic link; submit the folder itself")
        root = nested[0] if len(nested) == 1 else root
    adapters = root / "adapters.py"
    if adapters.is_symlink():
        raise BadSubmission("adapters.py is a symbolic link; submit the file itself")
    if not adapters.is_file():
        top = sorted(p.name for p in root.iterdir())
        held = ", ".join(printable(n)[:60] for n in top[:8]) + (", ..." if len(top) > 8 else "") if top else "nothing"
        zipped = " (a .zip inside it is not opened)" if any(n.endswith(".zip") for n in top) else ""
        # deeper, only to say where (TA trial 13's hw/repo/adapters.py was told "which holds hw"): never graded there
        deeper = sorted(str(p.relative_to(root)) for p in root.glob("*/*/adapters.py"))[:1]
        zipped += f" (it has {printable(deeper[0])[:200]}, two folders down)" if deeper and not zipped else ""
        raise BadSubmission(f"no adapters.py at the top of the submission, which holds {held}: submit adapters.py "
                            f"and student/ themselves, or one folder that holds them{zipped}")
    return root


def _extract(archive: Path, into: Path) -> None:
    """Check every entry before extracting any: no traversal, absolute paths, links, bombs."""
    if archive.stat().st_size > MAX_TOTAL:
        raise BadSubmission(f"the archive is {archive.stat().st_size:,} bytes (at most {MAX_TOTAL:,})")
    _check_directory_size(archive)
    try:
        with zipfile.ZipFile(archive) as z:
            infos = z.infolist()
            if len(infos) > MAX_ENTRIES:
                raise BadSubmission(f"the archive has {len(infos):,} entries (at most {MAX_ENTRIES:,})")
            total = 0
            for info in infos:
                name = info.filename
                parts = Path(name).parts
                if name.startswith(("/", "\\")) or ".." in parts or (len(name) > 1 and name[1] == ":"):
                    raise BadSubmission(f"archive entry {name!r} points outside the submission")
                if stat.S_ISLNK(info.external_attr >> 16):
                    raise BadSubmission(f"archive entry {name!r} is a symbolic link")
                if info.file_size > MAX_FILE:
                    raise BadSubmission(f"archive entry {name!r} is {info.file_size:,} bytes (at most {MAX_FILE:,})")
                total += info.file_size
            if total > MAX_TOTAL:
                raise BadSubmission(f"the archive unpacks to {total:,} bytes (at most {MAX_TOTAL:,})")
            into.mkdir(parents=True, mode=0o700)  # the grader's alone: no worker needs it
            for info in infos:
                target = into / info.filename
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, target.open("wb") as dst:
                    data = src.read(info.file_size + 1)  # sizes in headers can lie: read one byte more
                    if len(data) > info.file_size:
                        raise BadSubmission(f"archive entry {info.filename!r} is larger than its header says")
                    dst.write(data)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, UnicodeError, RuntimeError,
            NotImplementedError) as e:
        raise BadSubmission(f"the archive could not be read: {type(e).__name__}: {e}") from None


def _check_directory_size(archive: Path) -> None:
    """zipfile holds every central-directory entry in memory, about 12 bytes of RAM per byte of
    directory: its size, from the end record, is checked before it is parsed."""
    with archive.open("rb") as f:
        end = zipfile._EndRecData(f)  # noqa: SLF001 - the standard library's own end-record reader
    if end is None:
        raise BadSubmission("the archive could not be read: no end of central directory")
    if end[zipfile._ECD_SIZE] > MAX_ENTRIES * 1024 or end[zipfile._ECD_ENTRIES_TOTAL] > MAX_ENTRIES:
        raise BadSubmission(f"the archive lists {end[zipfile._ECD_ENTRIES_TOTAL]:,} entries in a "
                            f"{end[zipfile._ECD_SIZE]:,}-byte directory (at most {MAX_ENTRIES:,} entries)")


def _copy_code(root: Path, copy: Path, uid: int | None = None) -> None:
    """adapters.py and student/, regular files only, readable by the worker's uid: by its group alone
    where it has one (owned by the grader: the submission cannot change its own files between phases),
    else by everyone."""
    copy.mkdir(parents=True)
    files = [root / "adapters.py"]
    if (root / "student").is_dir() and not (root / "student").is_symlink():
        for path in sorted((root / "student").rglob("*")):
            if "__pycache__" in path.parts:
                continue
            if path.is_symlink():
                raise BadSubmission(f"{path.relative_to(root)} is a symbolic link; submit the file itself")
            if path.is_file():
                files.append(path)
    if len(files) > MAX_ENTRIES or sum(f.stat().st_size for f in files) > MAX_TOTAL:
        raise BadSubmission("adapters.py and student/ are too large to grade")
    for path in files:
        target = copy / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        os.chmod(target, 0o644 if uid is None else 0o640)
    for path in [copy, *copy.rglob("*")]:
        if path.is_dir():
            os.chmod(path, 0o755 if uid is None else 0o750)
        if uid is not None:
            os.chown(path, os.geteuid(), uid)


# ---------------------------------------------------------------- outputs

# Terminal escapes (colours, cursor moves) and characters XML 1.0 forbids: a message from the
# submission must neither fake a verdict on a terminal nor make junit.xml unreadable.
_ESCAPES = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|.)?")
_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ufffe\uffff]")


def printable(text: str) -> str:
    """What the submission made the grader say, safe to show and to write: lone surrogates
    become "?", terminal escapes and control characters (other than newline and tab) go."""
    text = text.encode("utf-8", "replace").decode("utf-8", "replace")
    return _UNPRINTABLE.sub("", _ESCAPES.sub("", text))


def results_json(graded: Graded, term: str) -> dict:
    """Gradescope's results format. Nothing a student sees before grades are published depends
    on a hidden outcome: visible tests show the public verdict and no points; the hidden cases,
    the twins and the points (one entry per function) are published with the grades, and so is
    the total (Gradescope hides it while any test is unpublished)."""
    scores = graded.scores()
    status_note = STATUS_NOTES[graded.status]
    if graded.status == "no-adapters":  # its output says it, with what the submission held (TA trial 11: twice)
        said = graded.output[:2000]
        status_note = said[:1].upper() + said[1:] + ".\n"
    elif graded.status == "bad-submission":  # a grader-error's details are the staff's
        status_note += graded.output[:2000] + "\n"
    if graded.status == "import-error":
        status_note += graded.import_error + "\n"
    tests, points = [], {}
    if graded.status in LATE_STATUSES:  # may come from the hidden phase: published with the grades
        tests.append({"name": STATUS_ENTRY, "status": "failed", "output": status_note.strip(),
                      "visibility": "after_published"})
        status_note = ""
    unit = {fn: [a.unit] for fn, a in ADAPTERS.items()}  # Gradescope's tags
    for t in graded.tests:
        fn = t.adapter or "other"
        earned, most = points.get(fn, (0.0, 0.0))
        points[fn] = (earned + scores[t.id][0], most + scores[t.id][1])
        tests.append({
            "name": f"{fn}: {t.id.split('::')[-1]}",
            "status": "passed" if t.outcome == "passed" else "failed",
            "output": (("Hidden test. " if t.hidden else "") + (t.message or _about(t)))[:4000],
            "visibility": "after_published" if t.hidden else "visible",
            "tags": unit.get(fn, []),
        })
    for fn, (earned, most) in points.items():
        if most:
            tests.append({"name": f"{fn}: {POINTS_ENTRY}", "score": round(earned, 4), "max_score": round(most, 4),
                          "status": "passed" if earned == most else "failed", "output": POINTS_NOTE,
                          "visibility": "after_published", "tags": unit.get(fn, [])})
    hidden = sum(t.hidden for t in graded.tests)
    ran = (f"The tests below show what your code did on the public cases; they carry no points. {hidden} of "
           f"{len(graded.tests)} tests are hidden, and they, the points and the total appear when grades are "
           "published." if graded.tests else "No test could run, so the score is 0: fix the above and submit again.")
    return {
        "score": round(graded.score, 4),
        "output": f"{status_note}Term {term}. {ran}",
        "visibility": "after_published",
        "stdout_visibility": "hidden",
        "tests": tests,
    }


# Statuses that a hidden case can cause (it ran out of time, or its worker could not start): said
# only with the grades, so that the submission cannot signal a hidden outcome through them.
LATE_STATUSES = ("timeout", "grader-error")
POINTS_NOTE = ("Points are earned on values you have not seen: each public case's share goes to its hidden "
               "twin (the same check on fresh values), and a must-raise or property test earns once an output "
               "case passes on fresh values. A report-only check carries none.")


def _about(t: Test) -> str:
    """What a test without a message is for (a passed one says nothing of its points: they
    depend on the hidden outcomes)."""
    if t.outcome == "passed" and not t.points and not t.check and not t.hidden:
        return "Passed. Reported only: this verdict rests on what the code says about itself."
    return ""


def junit_xml(graded: Graded) -> str:
    scores = graded.scores()
    failures = sum(t.outcome != "passed" for t in graded.tests)
    cases = []
    for t in graded.tests:
        score, max_score = scores[t.id]
        body = ("" if t.outcome == "passed"
                else f"<failure message={quoteattr(t.message[:200])}>{escape(t.message)}</failure>")
        cases.append(f'  <testcase classname={quoteattr(t.adapter or "other")} name={quoteattr(t.id)} '
                     f'time="0">{body}<properties><property name="score" value="{score:.4f}/{max_score:.4f}"/>'
                     f'</properties></testcase>')
    return (f'<?xml version="1.0" encoding="utf-8"?>\n<testsuite name={quoteattr(graded.name)} '
            f'tests="{len(graded.tests)}" failures="{failures}" time="{graded.seconds:.2f}">\n'
            + "\n".join(cases) + "\n</testsuite>\n")


def grade_all(project: Path, submissions: list[Path], term: str, out: Path, jobs: int = 1,
              timeout: float = 600.0, case_timeout: float = 30.0, memory_mb: int = 4096,
              progress=None, require_confinement: bool = False, announce=None,
              protections: Protections | None = None, shard: tuple[int, int] | None = None,
              uid_block: int | None = None, disposable_host: bool = False,
              reuse_sandboxes: bool = True) -> list[Graded]:
    """Grade `submissions` (with `shard` (K, N): only the K-th of N slices of them) into `out`, and
    rebuild its grades.csv and class report from every result folder there. `uid_block`: the
    block of worker uids to use (default: the first free one of UID_BLOCKS). `disposable_host`: a container
    that grades one submission and is thrown away (Gradescope's), whose shared folders the grader may
    fix rather than refuse. `reuse_sandboxes`: a slot's sandbox serves its next submission once clean
    (Sandbox.finish). Returns this run's results, in the order given."""
    results = Results(out)  # its records are read once: the batch's grades.csv is rebuilt from the same cache
    before, _ = results.read()
    refuse_other_terms({g.name: g.term for g in before}, term, f"{out} holds results")
    earlier = {p.name: "" for p in out.iterdir() if (p / RECORD).is_file()} if out.is_dir() else {}
    earlier |= {g.name: g.source for g in before}  # '' where unreadable: its regrade replaces it, as before
    names = submission_names(submissions, earlier)  # over the whole list, so that every shard names alike
    if len(set(names)) != len(names):  # the same file given twice
        raise ValueError("a submission is given twice: " + ", ".join(sorted({n for n in names if names.count(n) > 1})))
    if shard is not None:
        mine = shard_of(names, *shard)
        submissions, names = [s for s, n in zip(submissions, names) if n in mine], [n for n in names if n in mine]
    with _bounded_grader():
        grader = Grader(project, term, timeout, case_timeout, memory_mb, require_confinement, protections, uid_block,
                        submissions, out, disposable_host, reuse_sandboxes)
        try:
            return _grade_with(grader, submissions, names, results, jobs, progress, announce)
        finally:
            grader.close()


GRADER_MEMORY = 4 << 30  # the grader's own address space (torch imported: ~0.7 GB)


@contextlib.contextmanager
def _bounded_grader():
    """While grading, this process has a memory limit and the drivers' OOM priority: whatever a
    submission makes it read, it fails with a MemoryError for that submission alone, and the OOM
    killer takes a submission's processes first. Both are restored after (an in-process caller)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    score = Path("/proc/self/oom_score_adj")
    before = score.read_text().strip() if score.exists() else "0"
    limit = GRADER_MEMORY if hard == resource.RLIM_INFINITY else min(GRADER_MEMORY, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit if soft == resource.RLIM_INFINITY else min(soft, limit), hard))
    set_oom_score(OOM_DRIVER)
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        set_oom_score(int(before))


def parse_shard(text: str) -> tuple[int, int]:
    """`--shard K/N`: the K-th (from 1) of N slices."""
    match = re.fullmatch(r"\s*([0-9]+)\s*/\s*([0-9]+)\s*", text)
    if not match:
        raise ValueError(f"{text!r} is not K/N (the K-th of N slices, e.g. 1/4)")
    k, n = int(match[1]), int(match[2])
    shard_of([], k, n)
    return k, n


def shard_of(names: list[str], k: int, n: int) -> set[str]:
    """The names of the K-th of N slices: every N-th of the sorted names, from the K-th. The
    order given does not matter, so N machines given the same submissions grade each once."""
    if n < 1:
        raise ValueError(f"shard {k}/{n}: N, the number of slices, must be at least 1")
    if not 1 <= k <= n:
        raise ValueError(f"shard {k}/{n}: K counts the slices from 1 to N, here 1 to {n}")
    return set(sorted(names)[k - 1::n])


def slots(jobs: int, count: int, protections: Protections, announce=None) -> int:
    """How many submissions are graded at once. Without bubblewrap, one: slots side by side share
    /tmp, /var/tmp and /dev/shm, where a file made readable by others carried a neighbour's hidden
    inputs into a visible message (red team 12), and file names and sizes would carry them too."""
    wanted = max(1, min(jobs, count, UID_BLOCK))
    if wanted > 1 and not protections.bwrap:
        if announce:
            announce(f"harness grade: without bubblewrap, one submission at a time (not --jobs {jobs}): side by side "
                     "they would share /tmp and could pass hidden inputs to each other; install bubblewrap "
                     "for --jobs")
        return 1
    return wanted


def _grade_with(grader: Grader, submissions: list[Path], names: list[str], results: "Results", jobs: int, progress,
                announce) -> list[Graded]:
    term, out = grader.term_name, results.out
    if announce:
        announce(grader.protections.describe())
    out.mkdir(parents=True, exist_ok=True, mode=0o777 if grader.writable is None else 0o700)  # see readable_by_workers
    todo: queue.Queue = queue.Queue()
    for submission, name in zip(submissions, names):
        todo.put((submission, name))
    graded: dict[str, Graded] = {}
    lock = threading.Lock()

    drivers = [Driver(grader.first_slot + slot) for slot in range(slots(jobs, len(submissions), grader.protections,
                                                                        announce))]
    try:
        for driver in drivers:  # they import torch and the suite while the sandbox check runs
            driver.start(grader)
        grader.ready()
    except BaseException:
        for driver in drivers:
            driver.kill(grader)
        raise

    def work(driver: Driver) -> None:
        try:
            while True:
                try:
                    submission, name = todo.get_nowait()
                except queue.Empty:
                    return
                start = time.monotonic()
                result = _grade_one(grader, driver, submission, name)
                result.seconds = time.monotonic() - start
                try:
                    kept = set_aside(out, result.name)
                    if kept and announce:
                        announce(f"{result.name} had a result in {out} already ({kept[1]}): replaced; the old "
                                 f"one is kept in {kept[0]}")
                    _write_results(out / result.name, result, term)
                except (OSError, ValueError) as e:
                    result.status, result.output = "grader-error", f"its results could not be written: {e}"
                    try:
                        _write_record(out / result.name, result)
                    except (OSError, ValueError):
                        pass  # the line the command prints for it is what is left
                with lock:
                    graded[result.name] = result
                    try:  # now: a batch killed later keeps this grade
                        results.write()
                    except OSError:
                        pass  # a full disk: the batch goes on; the rewrite at its end raises it
                    if progress:
                        progress(len(graded), len(submissions), result)
        finally:
            driver.close(grader)

    threads = [threading.Thread(target=work, args=(driver,)) for driver in drivers]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:  # every driver is done: no submission process is left
        for name in names:  # in what this returns only: an earlier result of the name stays in --out
            graded.setdefault(name, Graded(name, status="grader-error", output="not graded"))
        _, problems = results.write(grader.project, report=True)
        for problem in problems if announce else ():
            announce(problem)
    return [graded[name] for name in names]


def _grade_one(grader: Grader, driver: Driver, submission: Path, name: str) -> Graded:
    """One submission's result: whatever goes wrong becomes its status, never the batch's."""
    result, copy = Graded(name, source=source_of(submission)), None
    try:
        uid = driver.uid if grader.protections.uid_drop else None
        result, copy = grader.prepare(submission, name, uid, driver.slot)
        if copy is not None:
            grader.record(result, driver.grade(grader, copy))
    except TimeoutError as e:
        result.status, result.output = "timeout", str(e)
    except Exception as e:  # noqa: BLE001 - a crash, a bad reply, a full disk: this submission's status
        result.status, result.output = "grader-error", f"{type(e).__name__}: {e}"
        driver.kill(grader)  # in an unknown state: the next submission gets a fresh driver
    finally:
        if copy is not None:
            remove_tree(copy)
    return result


# ---------------------------------------------------------------- result folders and the batch files

RECORD = "graded.json"  # a result folder's Graded, written last: a folder without one holds no result
RESULT_FILES = ("results.json", "junit.xml", "output.txt", "code.sha256")  # beside it
MAX_RECORD = 64 << 20   # bytes of one graded.json
MAX_TESTS = 100_000
MAX_TEXT = 1 << 14      # characters of one test's field (the driver cuts messages at 4,000)
MAX_OUTPUT = 4 << 20    # characters of a submission's output (the sandbox keeps 1 MiB)
MAX_FUNCTIONS = 1_000   # functions in a term's table of points
_NAME = re.compile(r"[\w@+-][\w.@+-]*(~[0-9a-f]{8})?")  # what submission_name and submission_names make
_CODE_HASH = re.compile(r"(?:[0-9a-f]{64})?")


class BadResult(ValueError):
    """A result folder whose graded.json cannot be used."""


def _write_results(folder: Path, graded: Graded, term: str) -> None:
    """One result folder. Its old graded.json goes first and the new one comes last, so a folder
    cut short (a kill, a full disk) holds no result rather than a stale or a partial one."""
    folder.mkdir(exist_ok=True)
    _clear_result(folder)
    graded.term = term
    (folder / "results.json").write_text(json.dumps(results_json(graded, term), indent=1))
    (folder / "junit.xml").write_text(junit_xml(graded))
    (folder / "output.txt").write_text(graded.output)
    if graded.code_hash:
        (folder / "code.sha256").write_text(graded.code_hash + "\n")
    _write_record(folder, graded)


REPLACED = ".replaced"  # in --out: results a later grading of the same name replaced, one folder each


def set_aside(out: Path, name: str) -> tuple[Path, str] | None:
    """Move a result of this name out of the way before a new one is written (a regrade, or a TA grading
    another batch into the same --out: a stub's 0 replaced a student's 123 with no trace). Returns where it
    went and what it was, or None where there was none."""
    folder = out / name
    if folder.is_symlink() or not (folder / RECORD).is_file():
        return None
    try:
        old = read_record(folder / RECORD, name)
        said = f"{points_text(old.score)}, {old.status}"
    except BadResult:
        said = "unreadable"
    (out / REPLACED).mkdir(exist_ok=True)
    stamp, n = time.strftime("%Y%m%d-%H%M%S"), 1
    kept = out / REPLACED / f"{name}.{stamp}"
    while kept.exists():  # graded twice within a second
        n += 1
        kept = out / REPLACED / f"{name}.{stamp}.{n}"
    kept.mkdir()
    for file in (RECORD, *RESULT_FILES):
        if (folder / file).is_file() and not (folder / file).is_symlink():
            shutil.copy2(folder / file, kept / file)
    return kept, said


def _write_record(folder: Path, graded: Graded) -> None:
    folder.mkdir(exist_ok=True)
    replace_file(folder / RECORD, json.dumps(asdict(graded)).encode())


def _clear_result(folder: Path) -> None:
    for name in (RECORD, *RESULT_FILES):  # the record first: see _write_results
        (folder / name).unlink(missing_ok=True)


def replace_file(path: Path, data: bytes) -> None:
    """Write `path` whole or not at all: a temporary file beside it, then a rename."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(temporary, 0o644)  # as write_text makes it; mkstemp's is 0o600
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def read_record(record: Path, name: str) -> Graded:
    """A result folder's graded.json, checked field by field: the grader wrote it, but a folder can
    be cut short, edited or copied from another machine (merge), so nothing in it is used unchecked."""
    try:
        if record.is_symlink() or not record.is_file():
            raise ValueError("not a regular file")
        with record.open("rb") as f:
            data = f.read(MAX_RECORD + 1)
        if len(data) > MAX_RECORD:
            raise ValueError(f"over {MAX_RECORD:,} bytes")
        return _graded_from(json.loads(data), name)
    except (OSError, ValueError, RecursionError) as e:  # bad JSON and bad UTF-8 are ValueErrors
        raise BadResult(f"{record} cannot be used ({e}): left out of grades.csv; grade {name} again") from None


def refuse_other_terms(terms: dict[str, str], term: str | None, what: str) -> None:
    """ValueError where results of another term would join these in one grades.csv (TA trial 13 regraded a
    student on a new term into the old term's --out, with no warning): `terms` maps result names to the
    terms they were graded on ('' where unknown); `term` is the batch's, or None to require one term."""
    known = {t for t in terms.values() if t}
    other = sorted(known - {term}) if term is not None else sorted(known)[1:] if len(known) > 1 else []
    if other:
        example = next(n for n, t in sorted(terms.items()) if t == other[0])
        raise ValueError(f"{what} graded on term {other[0]} ({example} among them)"
                         + (f", and this batch grades term {term}" if term is not None else
                            f", and others on term {sorted(known)[0]}")
                         + ": one grades.csv would mix two terms' scores. Grade into another --out folder, or move "
                           "those results aside and grade every submission again on one term")


def _graded_from(data, name: str) -> Graded:
    data = {"source": "", "term": "", **data} if isinstance(data, dict) else data  # written before they were recorded
    _has_fields(data, Graded, "the record")
    if not isinstance(data["source"], str) or len(data["source"]) > NAME_BYTES:
        raise ValueError(f"source: not a file name of at most {NAME_BYTES} characters")
    if not isinstance(data["term"], str) or len(data["term"]) > 100:
        raise ValueError("term: not a term's name")
    if data["name"] != name or not _NAME.fullmatch(name) or len(name.encode()) > 255 or name in BATCH_FILES:
        raise ValueError(f"its name is {str(data['name'])[:100]!r}, not its folder's")
    if data["status"] not in STATUS_NOTES:
        raise ValueError(f"status {str(data['status'])[:100]!r} is none of {', '.join(STATUS_NOTES)}")
    if not isinstance(data["output"], str) or len(data["output"]) > MAX_OUTPUT:
        raise ValueError(f"output: not a text of at most {MAX_OUTPUT:,} characters")
    tampered = data["tampered"]
    if not (isinstance(tampered, list) and len(tampered) <= MAX_TESTS
            and all(isinstance(t, str) and len(t) <= MAX_TEXT for t in tampered)):
        raise ValueError("tampered: not a list of file names")
    seconds = data["seconds"]
    if not (isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and math.isfinite(seconds)
            and seconds >= 0):
        raise ValueError(f"seconds: {repr(seconds)[:100]} is not a number of seconds")
    if not (isinstance(data["code_hash"], str) and _CODE_HASH.fullmatch(data["code_hash"])):
        raise ValueError("code_hash: not a sha256 in hex")
    if not isinstance(data["import_error"], str) or len(data["import_error"]) > MAX_TEXT:
        raise ValueError(f"import_error: not a text of at most {MAX_TEXT:,} characters")
    points = data["points"]
    if not (isinstance(points, dict) and len(points) <= MAX_FUNCTIONS and all(
            isinstance(fn, str) and len(fn) <= 100 and isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v) and v >= 0 for fn, v in points.items())):
        raise ValueError("points: not a table of functions and their points")
    tests = data["tests"]
    if not isinstance(tests, list) or len(tests) > MAX_TESTS:
        raise ValueError(f"tests: not a list of at most {MAX_TESTS:,}")
    for test in tests:
        _has_fields(test, Test, "a test")
        for f in fields(Test):  # str, str | None or bool
            value = test[f.name]
            if not isinstance(value, f.type) or isinstance(value, str) and len(value) > MAX_TEXT:
                kind = getattr(f.type, "__name__", str(f.type))
                raise ValueError(f"a test's {f.name}: {repr(value)[:100]} is not a {kind}"
                                 + (f" of at most {MAX_TEXT:,} characters" if isinstance(value, str) else ""))
    return Graded(**{**data, "tests": [Test(**t) for t in tests]})


def _has_fields(data, cls, what: str) -> None:
    expected = {f.name for f in fields(cls)}
    if not isinstance(data, dict):
        raise ValueError(f"{what} is not an object")
    if set(data) != expected:
        missing, unknown = sorted(expected - set(data)), sorted(map(str, set(data) - expected))
        raise ValueError(f"{what} has {'missing fields ' + ', '.join(missing) if missing else ''}"
                         f"{' and ' if missing and unknown else ''}"
                         f"{'unknown fields ' + ', '.join(unknown) if unknown else ''}"[:300])


class Results:
    """The result folders of an --out folder (those with a graded.json) and the batch files built
    from them: grade_all and merge both write grades.csv, report.html and mistakes.csv here, and
    never from a list of their own. A graded.json is read again only when it changes: grades.csv
    is rewritten after each submission of a batch of thousands."""

    def __init__(self, out: Path):
        self.out = out
        self._read: dict[str, tuple[tuple, Graded | None, dict | str]] = {}  # name -> key, result, points earned

    def read(self) -> tuple[list[Graded], list[str]]:
        """Every usable result, by name; and a line for each folder that holds none it can use."""
        graded, problems, read = [], [], {}
        for folder in sorted(self.out.iterdir(), key=lambda p: p.name) if self.out.is_dir() else []:
            record = folder / RECORD
            try:
                if folder.is_symlink() or not folder.is_dir():
                    continue
                if not record.exists() and not record.is_symlink():
                    if (folder / "results.json").exists():
                        problems.append(f"{folder} has no {RECORD} (cut short, or written by an older grader): "
                                        f"left out of grades.csv; grade {folder.name} again")
                    continue  # not a result folder
                info = record.lstat()
            except OSError as e:
                problems.append(f"{folder} cannot be read ({e}): left out of grades.csv")
                continue
            key = (info.st_ino, info.st_mtime_ns, info.st_size)
            entry = self._read.get(folder.name)
            if entry is None or entry[0] != key:
                try:
                    result = read_record(record, folder.name)
                    entry = (key, result, earned(result))
                except BadResult as e:
                    entry = (key, None, str(e))
            read[folder.name] = entry
            if entry[1] is None:
                problems.append(entry[2])
            else:
                graded.append(entry[1])
        self._read = read
        return graded, problems

    def write(self, project: Path | None = None, report: bool = False) -> tuple[list[Graded], list[str]]:
        """grades.csv, and with `report` the class report (`project`: the starter code), from every
        result folder. Returns the results, and the lines to tell (a folder left out, a report
        that failed)."""
        graded, problems = self.read()
        _write_csv(self.out / "grades.csv", graded, [self._read[g.name][2] for g in graded])
        if report:
            try:
                write_report(self.out, project)
            except Exception as e:  # noqa: BLE001 - the grades stand; `harness report` can be run again
                problems.append(f"the class report failed ({type(e).__name__}: {e}); grades.csv is written")
        return graded, problems


def merge(shards: list[Path], out: Path, project: Path | None = None) -> tuple[list[Graded], list[str]]:
    """Copy the shards' result folders into `out` (a result of the same name there is replaced)
    and rebuild its batch files, as one batch of them all would have written them. Refuses, with
    nothing copied, when a shard cannot be read or two hold different results under one name.
    Returns every result in `out`, and the lines to tell."""
    found: dict[str, tuple[Path, Graded]] = {}
    refused = []
    for shard in shards:
        if not shard.is_dir():
            raise ValueError(f"{shard} is not a folder: give the --out folders of `harness grade --shard`")
        if out.is_dir() and shard.resolve() == out.resolve():
            continue  # its results are in place
        graded, problems = Results(shard).read()
        refused += problems
        if not graded and not problems and not (shard / "grades.csv").is_file():
            refused.append(f"{shard} holds no results and no grades.csv: is it an --out folder of `harness grade`?")
        for g in graded:
            if g.name in found and not _same_result(found[g.name][1], g):
                refused.append(f"{g.name} is in {found[g.name][0]} and in {shard} with different results: "
                               "remove the one to drop, then merge again")
            found.setdefault(g.name, (shard, g))
    results = Results(out)  # read once: what it caches is reread only where a copy below changed it
    terms = {g.name: g.term for g in results.read()[0]} | {n: g.term for n, (_, g) in found.items()}
    try:
        refuse_other_terms(terms, None, "the results are")
    except ValueError as e:
        refused.append(str(e))
    if refused:
        raise ValueError("nothing merged:\n  " + "\n  ".join(refused))
    out.mkdir(parents=True, exist_ok=True)
    for name, (shard, _) in sorted(found.items()):
        _copy_result(shard / name, out / name)
    return results.write(project, report=True)


def _same_result(a: Graded, b: Graded) -> bool:
    """The same grade, however long each run took (a shard merged with the batch it came from)."""
    return replace(a, seconds=0.0) == replace(b, seconds=0.0)


def _copy_result(source: Path, target: Path) -> None:
    """A result folder's files, its graded.json last (see _write_results)."""
    target.mkdir(exist_ok=True)
    _clear_result(target)
    for name in (*RESULT_FILES, RECORD):
        path = source / name
        if path.is_file() and not path.is_symlink():
            replace_file(target / name, path.read_bytes())


def earned(g: Graded) -> dict[str, float]:
    """Per function of the term it was graded on, the points it earned."""
    per = dict.fromkeys(g.points or contract_points(), 0.0)
    scores = g.scores()
    for t in g.tests:
        if t.adapter in per:
            per[t.adapter] += scores[t.id][0]
    return per


def _error(g: Graded) -> str:
    """The error column: what kept a submission from a normal grading (a TA had to open results.json to learn
    why a row was bad-submission or timeout). A bad submission's output is the grader's own reason (for no-adapters,
    with what the submission held: TA trial 12); any other status's output may be the submission's, so its note
    stands there."""
    if g.status == "import-error":
        return g.import_error
    if g.status in ("bad-submission", "no-adapters"):
        return (g.output.strip().splitlines() or [STATUS_NOTES[g.status]])[0][:300]
    return STATUS_NOTES.get(g.status, "").strip()


def _write_csv(path: Path, graded: list[Graded], earned_by: list[dict[str, float]]) -> None:
    """One row per result. The term's functions and points (every result holds them), else the
    contract's: an old term's maximum stays its own, and a function it does not cover gets no column."""
    points = next((g.points for g in graded if g.points), None) or contract_points()
    functions = [fn for fn in ADAPTERS if fn in points]
    total = sum(points[fn] for fn in functions)
    text = io.StringIO(newline="")
    writer = csv.writer(text)
    writer.writerow(["submission", "score", "max_score", "status", "seconds", "tampered", "error", *functions])
    for g, per in zip(graded, earned_by):
        writer.writerow([text_cell(g.name), points_text(g.score), points_text(total), text_cell(g.status), f"{g.seconds:.1f}",
                         text_cell(";".join(g.tampered)), text_cell(_error(g)),
                         *[points_text(per.get(fn, 0.0)) for fn in functions]])
    replace_file(path, text.getvalue().encode())
