"""Gradescope: the upload zip, and the grading of one submission inside Gradescope's container.

`python -m harness gradescope autograder.zip` writes the zip an instructor uploads: `setup.sh`
and `run_autograder` at its root, the harness the grader needs, the student tests, and the term
with its hidden cases. Gradescope unpacks it to /autograder/source and runs `setup.sh` once
(as root, with network): it makes a Python >= 3.11 of the grader's own in a venv, never touching
the system `python3` that Gradescope's own harness runs on. Then for each submission
`run_autograder` calls `python -m harness.grading.gradescope run /autograder`, which:

- closes /autograder (source/ with the answers and hidden cases, Gradescope's submission_metadata.json
  with earlier results) and results/ to every other uid;
- grades only where the submission's code can run apart from them: in bubblewrap, or else (a
  container whose namespaces are forbidden) under an unprivileged uid with the per-submission
  limits; where neither can be had the code is not run, and results.json says so, with 0;
- runs the worker under a block of uids drawn at random (containers on one kernel share uids);
- kills every process of those uids before it writes results.json, which it writes
  atomically into the root-only results/: nothing the submission started can touch it after.
"""

import json
import os
import random
import re
import shutil
import stat
import sys
import tempfile
import tomllib
import traceback
import zipfile
from pathlib import Path

from harness.grading.sandbox import BASE_UID, UID_BLOCK, UID_BLOCKS, Protections, system_paths
from harness.scoring import points_text
from harness.store import HIDDEN, Term, pinned_term

TEMPLATES = Path(__file__).resolve().parent.parent.parent / "gradescope"  # setup.sh, run_autograder
# The harness grading needs: the term's builders (and the catalogue that makes the hidden cases) stay out.
NOT_SHIPPED = "term"
TIMEOUT, CASE_TIMEOUT = 540, 30  # Gradescope stops everything at 10 minutes: stop a little earlier
RANDOM_BLOCKS = ((1 << 31) - BASE_UID) // UID_BLOCK  # worker uids stay below 2^31
REFUSED = ("The autograder could not run your code apart from its answers on this machine, so it did not "
           "run it. Your score is 0 for now; the course staff can see why. Please tell them.")


def build_zip(project: Path, out: Path, term: str) -> list[str]:
    """Write the upload zip; returns its file names. The term must verify, hidden cases included."""
    Term(project, term, hidden=True)  # hashes and schema, hidden cases included: refuse a broken term
    if not (project / "fixtures" / term / HIDDEN).is_dir():
        raise ValueError(f"term {term} has no hidden cases here: build the zip from the instructor's copy")
    pyproject = (project / "pyproject.toml").read_text()
    dependencies = tomllib.loads(pyproject)["project"]["dependencies"]
    files: dict[str, tuple[bytes, int]] = {}  # zip name -> (data, mode)
    for name in ("setup.sh", "run_autograder"):
        files[name] = ((TEMPLATES / name).read_bytes(), 0o755)
    files["pyproject.toml"] = (re.sub(r'(?m)^term = ".*"$', f'term = "{term}"', pyproject).encode(), 0o644)
    files["requirements.txt"] = ("".join(f"{d}\n" for d in dependencies).encode(), 0o644)
    for folder, keep in (("harness", _shipped), ("tests", _source), (f"fixtures/{term}", lambda p: True)):
        for path in sorted((project / folder).rglob("*")):
            rel = path.relative_to(project)
            if path.is_file() and "__pycache__" not in rel.parts and keep(rel):
                files[rel.as_posix()] = (path.read_bytes(), 0o644)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.touch(mode=0o600)
    os.chmod(out, 0o600)  # it holds the hidden cases and the grading seed: its owner's alone
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, (data, mode) in files.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))  # same term, same bytes
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return list(files)


def _source(rel: Path) -> bool:
    return rel.suffix in (".py", ".toml", ".json", ".txt", ".md")


def _shipped(rel: Path) -> bool:
    return _source(rel) and rel.parts[1] != NOT_SHIPPED


# ---------------------------------------------------------------- inside the container

def safe_enough(protections: Protections) -> str | None:
    """Why the submission must not run here, or None: its code needs bubblewrap's allow-list, or
    (as root) a uid of its own, so that it cannot read the answers or write the results."""
    if protections.confined or protections.uid_drop:
        return None
    if os.geteuid() == 0:
        return ("bubblewrap cannot run here (namespaces are forbidden) and the uid drop is off: the "
                f"submission would run as root. {protections.describe()}")
    return f"bubblewrap cannot run here and the grader is not root: {protections.describe()}"


def close_to_others(folder: Path) -> None:
    """Every file and folder under `folder` readable by its owner (root) alone."""
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, stat.S_IMODE(path.stat().st_mode) & 0o700)


def close_autograder(autograder: Path) -> None:
    """/autograder closed to every other uid: source/ (answers, hidden cases) whole, and beside it what
    Gradescope writes (submission_metadata.json holds earlier results, hidden verdicts included). The
    worker needs nothing there (its copy of the submission is the grader's); only the way to this
    Python stays open, where the venv lies inside."""
    close_to_others(autograder / "source")
    python = [Path(os.path.realpath(p)) for p in system_paths()]
    home = Path(os.path.realpath(autograder))
    inside = [p for p in python if p.is_relative_to(home)]
    if not inside:
        os.chmod(home, stat.S_IMODE(home.stat().st_mode) & 0o700)
        return
    os.chmod(home, stat.S_IMODE(home.stat().st_mode) & 0o711)  # enterable on the way, not listable
    for entry in home.iterdir():
        if not entry.is_symlink() and not any(p.is_relative_to(entry) for p in inside):
            os.chmod(entry, stat.S_IMODE(entry.lstat().st_mode) & 0o700)


def write_results(results: Path, data: dict) -> None:
    """results.json, atomically, in a folder only root can write: a file put there (or a link)
    by anyone else is replaced, never followed."""
    from harness.grading.grade import replace_file
    results.mkdir(parents=True, exist_ok=True)
    os.chmod(results, 0o700)
    replace_file(results / "results.json", json.dumps(data, indent=1).encode())


def refused(why: str) -> dict:
    print(f"harness gradescope: not graded: {why}")  # stdout: the staff's only (stdout_visibility)
    return {"score": 0.0, "output": REFUSED, "stdout_visibility": "hidden", "tests": []}


def run(autograder: Path, protections: Protections | None = None) -> dict:
    """Grade /autograder/submission; always leaves results/results.json. Returns what it wrote."""
    from harness.grading.grade import BadSetup, grade_all, kill_leftover_workers, results_json
    source, results = autograder / "source", autograder / "results"
    data: dict | None = None
    # Containers on one kernel share its uids (and each uid's process limit): a fixed worker uid
    # would let a submission in another container starve this one's worker. A block at random.
    block = random.SystemRandom().randrange(UID_BLOCKS, RANDOM_BLOCKS)
    try:
        if os.geteuid() == 0:
            close_autograder(autograder)
        results.mkdir(parents=True, exist_ok=True)
        os.chmod(results, 0o700)
        protections = protections or Protections.detect()
        print(f"harness gradescope: {protections.describe()}")
        why = safe_enough(protections)
        if why:
            data = refused(why)
        else:
            out = Path(tempfile.mkdtemp(prefix="harness-gradescope-"))  # 0700: the grader's alone
            term = pinned_term(source)
            try:
                [graded] = grade_all(source, [autograder / "submission"], term, out, jobs=1, timeout=TIMEOUT,
                                     case_timeout=CASE_TIMEOUT, protections=protections, uid_block=block,
                                     disposable_host=True)  # this container grades one submission
                data = results_json(graded, term)
                print(f"harness gradescope: {graded.status}, {points_text(graded.score)}\n{graded.output[-4000:]}")
            finally:
                shutil.rmtree(out, ignore_errors=True)
    except BadSetup as e:  # it will not grade here (what the worker could read, say): the reason is the staff's
        data = refused(str(e))
    except Exception:  # noqa: BLE001 - whatever failed, the student gets a results.json
        traceback.print_exc(file=sys.stdout)
        data = refused("the grader failed (traceback above)")
    finally:
        if not kill_leftover_workers([block]):
            data = refused("a process of the submission could not be killed")
        data = data or refused("the grader stopped before it graded")
        write_results(results, data)
    return data


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "run":
        print("usage: python -m harness.grading.gradescope run AUTOGRADER_FOLDER", file=sys.stderr)
        return 2
    run(Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
