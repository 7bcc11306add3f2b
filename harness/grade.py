"""Batch grading: each submission runs the official suite in its own subprocess.

A sandbox per submission holds the grader's own tests, pyproject and fixtures (public
and hidden, written from the copy verified when grading started), plus only the
student's `adapters.py` and `student/`. The subprocess gets a memory cap, a file-size
cap, a per-test and a per-submission timeout, and its own process group. Results are
logged test by test, so a run that hangs or dies (os._exit, a segfault) still scores
what it finished; the grader then resumes after the test that killed it.

What this does not do: it does not drop privileges or cut the network (a submission
runs as the grader's user, with the grader's network). Run `grade` inside a container
or as an unprivileged user, as the Gradescope templates in gradescope/ do per submission.
"""

import csv
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from harness.contract import ADAPTERS
from harness.store import Term

OUTPUT_LIMIT = 20_000   # characters of a submission's own output kept for the report
FILE_LIMIT = 64 << 20   # bytes any file the submission writes may reach
MAX_RESUMES = 200  # bounded in practice by the submission timeout
CRASHED = ("the test process died during this test (os._exit, a segfault, or the memory cap); "
           "the grader resumed with the tests after it")


@dataclass
class Test:
    id: str
    adapter: str | None
    hidden: bool
    outcome: str = "not run"
    message: str = ""


@dataclass
class Graded:
    name: str
    tests: list[Test] = field(default_factory=list)
    status: str = "ok"          # ok, timeout, crashed, no-adapters
    output: str = ""
    tampered: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def scores(self) -> dict[str, tuple[float, float]]:
        """Per test id: (score, max_score). Each function's points split evenly over its tests."""
        per_function: dict[str, int] = {}
        for t in self.tests:
            per_function[t.adapter] = per_function.get(t.adapter, 0) + 1
        out = {}
        for t in self.tests:
            share = ADAPTERS[t.adapter].points / per_function[t.adapter] if t.adapter in ADAPTERS else 0.0
            out[t.id] = (share if t.outcome == "passed" else 0.0, share)
        return out

    @property
    def score(self) -> float:
        return sum(s for s, _ in self.scores().values())


class Grader:
    def __init__(self, project: Path, term: str, timeout: float, case_timeout: float, memory_mb: int):
        self.project, self.term_name = project, term
        self.timeout, self.case_timeout, self.memory_mb = timeout, case_timeout, memory_mb
        Term(project, term, hidden=True)  # verify hashes before anything is copied
        folder = project / "fixtures" / term
        # The official bytes, read once: a submission that writes to files later changes nothing.
        self.official = {p.relative_to(project): p.read_bytes()
                         for p in [*folder.rglob("*"), *(project / "tests").rglob("*.py"), project / "pyproject.toml"]
                         if p.is_file() and "__pycache__" not in p.parts}

    def grade(self, submission: Path) -> Graded:
        graded = Graded(submission.name.removesuffix(".zip"))
        start = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
            root = _unpack(submission, Path(tmp) / "submission")
            graded.tampered = self._tampered(root)
            sandbox = Path(tmp) / "sandbox"
            if root is None or not (root / "adapters.py").is_file():
                graded.status = "no-adapters"
            self._run(root, sandbox, graded)
        graded.seconds = time.monotonic() - start
        return graded

    def _tampered(self, root: Path | None) -> list[str]:
        """Official files the submission carries with other contents (reported, never used)."""
        if root is None:
            return []
        changed = []
        for rel, data in self.official.items():
            theirs = root / rel
            if theirs.is_file() and theirs.read_bytes() != data:
                changed.append(str(rel))
        return changed

    def _fresh_sandbox(self, root: Path | None, sandbox: Path) -> None:
        shutil.rmtree(sandbox, ignore_errors=True)
        for rel, data in self.official.items():
            (sandbox / rel).parent.mkdir(parents=True, exist_ok=True)
            (sandbox / rel).write_bytes(data)
        if root is not None:
            if (root / "adapters.py").is_file():
                shutil.copy2(root / "adapters.py", sandbox / "adapters.py")
            if (root / "student").is_dir():
                shutil.copytree(root / "student", sandbox / "student",
                                ignore=shutil.ignore_patterns("__pycache__"))

    def _run(self, root: Path | None, sandbox: Path, graded: Graded) -> None:
        deadline = time.monotonic() + self.timeout
        done: dict[str, Test] = {}
        collected: list[Test] = []
        for _ in range(MAX_RESUMES + 1):
            self._fresh_sandbox(root, sandbox)  # fixtures are fresh for every resume too
            log = sandbox / "results.jsonl"
            cmd = [sys.executable, "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider", "--hidden",
                   "--term", self.term_name, "--adapters", "adapters", "--case-timeout", str(self.case_timeout),
                   "--results-log", str(log), *[f"--deselect={t}" for t in done]]
            remaining = deadline - time.monotonic()
            code, output = self._subprocess(cmd, sandbox, remaining)
            graded.output = (graded.output + output)[-OUTPUT_LIMIT:]
            events = _read_log(log)
            for e in events:
                if e["event"] == "collected" and not collected:
                    collected = [Test(t["id"], t["adapter"], t["hidden"]) for t in e["tests"]]
                elif e["event"] == "result":
                    done[e["id"]] = Test(e["id"], None, False, e["outcome"], e["message"])
            finished = any(e["event"] == "finished" for e in events)
            if code == "timeout":
                graded.status = "timeout"
                break
            if finished or not collected:
                break
            # The process died mid-test: the last test started without a result killed it.
            started = [e["id"] for e in events if e["event"] == "start" and e["id"] not in done]
            if not started:
                break
            graded.status = "crashed"
            done[started[-1]] = Test(started[-1], None, False, "failed", CRASHED)
        for t in collected:
            if t.id in done:
                t.outcome, t.message = done[t.id].outcome, done[t.id].message
            elif graded.status == "timeout":
                t.outcome, t.message = "failed", f"the submission ran out of its {self.timeout:g} s before this test"
            else:
                t.outcome, t.message = "failed", "not run: the test process ended before reaching this test"
        graded.tests = collected
        if not collected:
            graded.status = graded.status if graded.status != "ok" else "collection-error"

    def _subprocess(self, cmd: list[str], cwd: Path, seconds: float) -> tuple[str | int, str]:
        limit = self.memory_mb << 20

        def contain():
            os.setsid()  # its own process group, so a timeout kills children too
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

        env = {k: v for k, v in os.environ.items() if not k.startswith(("HARNESS_", "PYTEST"))}
        env.update(PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1", PYTHONPATH=str(cwd))
        with tempfile.TemporaryFile() as out:
            proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    preexec_fn=contain, stdin=subprocess.DEVNULL)
            try:
                code = proc.wait(timeout=max(seconds, 1))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                code = "timeout"
            out.seek(0, os.SEEK_END)
            size = out.tell()
            out.seek(max(0, size - OUTPUT_LIMIT))
            return code, out.read().decode("utf-8", "replace")


def _unpack(submission: Path, into: Path) -> Path | None:
    """The folder of the student's repository: the submission itself, or its zip, unpacked safely."""
    if submission.is_dir():
        into = submission
    elif zipfile.is_zipfile(submission):
        with zipfile.ZipFile(submission) as z:
            for member in z.namelist():
                target = (into / member).resolve()
                if not target.is_relative_to(into.resolve()):
                    raise ValueError(f"{submission}: zip entry {member!r} escapes the folder")
            z.extractall(into)
    else:
        return None
    if (into / "adapters.py").is_file():
        return into
    nested = [p.parent for p in into.glob("*/adapters.py")]
    return nested[0] if len(nested) == 1 else into


def _read_log(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    events = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line cut short by a crash
    return events


# ---------------------------------------------------------------- outputs

def results_json(graded: Graded, term: str) -> dict:
    """Gradescope's results format. Hidden tests show after grades are published."""
    scores = graded.scores()
    status_note = {"ok": "", "timeout": "The submission ran out of time; unfinished tests score 0.\n",
                   "crashed": "The test process died during a test (see that test); the rest were resumed.\n",
                   "no-adapters": "No adapters.py was found at the top of the submission.\n",
                   "collection-error": "The tests could not start: see the output.\n"}[graded.status]
    tests = []
    for t in graded.tests:
        score, max_score = scores[t.id]
        fn = t.adapter or "other"
        tests.append({
            "name": f"{fn}: {t.id.split('::')[-1]}",
            "score": round(score, 4), "max_score": round(max_score, 4),
            "status": "passed" if t.outcome == "passed" else "failed",
            "output": (("Hidden test. " if t.hidden else "") + t.message)[:4000],
            "visibility": "after_published" if t.hidden else "visible",
            "tags": [ADAPTERS[fn].unit] if fn in ADAPTERS else [],
        })
    hidden = sum(t.hidden for t in graded.tests)
    return {
        "score": round(graded.score, 4),
        "execution_time": round(graded.seconds, 2),
        "output": (f"{status_note}Term {term}. {hidden} of {len(graded.tests)} tests are hidden and appear "
                   "after grades are published."),
        "stdout_visibility": "hidden",
        "tests": tests,
    }


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
              progress=None) -> list[Graded]:
    grader = Grader(project, term, timeout, case_timeout, memory_mb)
    out.mkdir(parents=True, exist_ok=True)
    names = [s.name.removesuffix(".zip") for s in submissions]
    if len(set(names)) != len(names):
        raise ValueError("two submissions share a name; their results would overwrite each other")
    graded: list[Graded] = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for result in pool.map(grader.grade, submissions):
            folder = out / result.name
            folder.mkdir(exist_ok=True)
            (folder / "results.json").write_text(json.dumps(results_json(result, term), indent=1))
            (folder / "junit.xml").write_text(junit_xml(result))
            (folder / "output.txt").write_text(result.output)
            graded.append(result)
            if progress:
                progress(len(graded), len(submissions), result)
    _write_csv(out / "grades.csv", graded)
    return graded


def _write_csv(path: Path, graded: list[Graded]) -> None:
    functions = list(ADAPTERS)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["submission", "score", "max_score", "status", "seconds", "tampered", *functions])
        total = sum(a.points for a in ADAPTERS.values())
        for g in graded:
            per = {fn: 0.0 for fn in functions}
            scores = g.scores()
            for t in g.tests:
                if t.adapter in per:
                    per[t.adapter] += scores[t.id][0]
            writer.writerow([g.name, f"{g.score:.2f}", total, g.status, f"{g.seconds:.1f}",
                             ";".join(g.tampered), *[f"{per[fn]:.2f}" for fn in functions]])
