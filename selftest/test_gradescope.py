"""Grading on Gradescope, in a fake /autograder tree where bubblewrap cannot run (a `bwrap` that
fails first on PATH, as under Docker's default profile): the upload zip, setup.sh's venv of the
grader's own, and run_autograder on the reference, the stubs, a probe and a forger.

The tree sits in a folder other uids can traverse (the worker's uid runs the venv's Python)."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import pytest

from conftest import PROJECT, TERM, reference_as_student
from harness.grading.gradescope import REFUSED, build_zip, run
from harness.grading.sandbox import BASE_UID, UID_BLOCK, UID_BLOCKS, Protections
from submissions import FULL, copy_stubs, with_attack

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/python3").exists(),
                                reason="Gradescope runs the autograder as root, with a system Python")
WORKER_UIDS = range(BASE_UID, BASE_UID + UID_BLOCK * UID_BLOCKS)  # what graders elsewhere use
FAILING_BWRAP = "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n"


def _system_packages() -> set[str]:
    found = set()
    for folder in ("/usr/lib/python3/dist-packages", "/usr/local/lib"):
        if Path(folder).is_dir():
            found |= {str(p) for p in Path(folder).rglob("*") if p.is_dir() and p.name.endswith("-info")}
    return found


@pytest.fixture(scope="module")
def tree():
    root = Path(tempfile.mkdtemp(prefix="gradescope-", dir="/tmp"))
    os.chmod(root, 0o755)
    upload = Path(tempfile.mkdtemp(prefix="gradescope-upload-")) / "autograder.zip"  # 0700: answers inside
    names = build_zip(PROJECT, upload, TERM)
    autograder = root / "autograder"
    source = autograder / "source"
    source.mkdir(parents=True)
    os.chmod(autograder, 0o755)
    with zipfile.ZipFile(upload) as z:
        z.extractall(source)
    for script in ("setup.sh", "run_autograder"):  # zipfile drops modes; Gradescope's unzip keeps them
        os.chmod(source / script, 0o755)
    (root / "bin").mkdir()
    (root / "bin" / "bwrap").write_text(FAILING_BWRAP)
    os.chmod(root / "bin" / "bwrap", 0o755)
    env = {"PATH": f"{root / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(root), "LANG": "C.UTF-8",
           "HARNESS_VENV": str(root / "venv"), "HARNESS_TORCH_INDEX": "", "AUTOGRADER": str(autograder),
           "HARNESS_COPIES_UNDER": str(root),  # this host holds checkouts (this one, at least): the tree's own
           "HARNESS_PYTHON": "/usr/bin/python3.10"}  # Ubuntu 22.04's: too old, said and passed over
    before = _system_packages()
    setup = subprocess.run(["bash", str(source / "setup.sh")], env=env, capture_output=True, text=True,
                           timeout=900)
    yield {"root": root, "autograder": autograder, "env": env, "setup": setup, "names": names, "upload": upload,
           "system_before": before, "system_after": _system_packages()}
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(upload.parent, ignore_errors=True)


def grade(tree, make) -> tuple[dict, str]:
    """One submission through run_autograder, as Gradescope runs it: results.json and stdout. Beside
    source/ lies Gradescope's submission_metadata.json, readable by everyone (umask 022), with an
    earlier submission's results in it."""
    autograder = tree["autograder"]
    for folder in ("submission", "results"):
        shutil.rmtree(autograder / folder, ignore_errors=True)
    make(autograder / "submission")
    metadata = autograder / "submission_metadata.json"
    metadata.write_text(json.dumps({"previous_submissions": [{"results": {"tests": [{"name": "hidden verdict"}]}}]}))
    os.chmod(metadata, 0o644)
    os.chmod(autograder, 0o755)  # as Gradescope makes it; run_autograder closes it
    done = subprocess.run(["bash", str(autograder / "source" / "run_autograder")], cwd=autograder, env=tree["env"],
                          capture_output=True, text=True, timeout=600)
    results = autograder / "results" / "results.json"
    assert results.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(results.read_text()), done.stdout + done.stderr


def _attack(name: str, tree):
    constants = {"AUTOGRADER": str(tree["autograder"]), "TERM": TERM}
    return lambda dst: with_attack(dst, "stubs", name, constants)


def test_setup_makes_a_venv_of_the_graders_own(tree):
    setup = tree["setup"]
    assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
    python = tree["root"] / "venv" / "bin" / "python"
    version = subprocess.run([str(python), "-c", "import sys, torch; print(sys.version_info >= (3, 11), torch.__version__)"],
                             capture_output=True, text=True, cwd="/")
    assert version.stdout.split()[0] == "True" and version.stdout.split()[1].startswith("2.13.0"), version
    # the harness itself is not installed there: the worker's uid can read the venv
    assert subprocess.run([str(python), "-c", "import harness"], cwd="/", capture_output=True).returncode != 0
    assert tree["system_after"] == tree["system_before"], "setup.sh installed into the system Python"
    assert "HARNESS_PYTHON=/usr/bin/python3.10 is not a Python >= 3.11" in setup.stderr, setup.stderr[-2000:]
    said = setup.stdout
    assert f"term {TERM} verifies" in said and "unprivileged uid per slot" in said.split("OFF:")[0], said
    assert "filesystem allow-list" in said.split("OFF:")[1], said  # the failing bwrap was found, and not used


def test_the_zip_holds_what_grading_needs_and_nothing_a_submission_may_read(tree):
    names = set(tree["names"])
    assert {"setup.sh", "run_autograder", "pyproject.toml", "requirements.txt"} <= names
    assert f"fixtures/{TERM}/hidden/manifest.json" in names
    assert not [n for n in names if n.startswith(("reference/", "selftest/", "student/", ".git"))]
    assert not [n for n in names if n.startswith("fixtures/") and not n.startswith(f"fixtures/{TERM}/")]
    assert "harness/term/catalogue.py" not in names and "harness/grading/drive.py" in names
    with zipfile.ZipFile(tree["upload"]) as z:
        assert (z.getinfo("run_autograder").external_attr >> 16) & 0o111
    assert tree["upload"].stat().st_mode & 0o077 == 0  # the answers are in it


def test_the_reference_scores_full_marks(tree):
    results, said = grade(tree, reference_as_student)
    assert results["score"] == pytest.approx(FULL), said[-3000:]
    assert all("score" not in t for t in results["tests"] if t["visibility"] == "visible")


def test_the_stubs_score_zero(tree):
    results, said = grade(tree, copy_stubs)
    assert results["score"] == 0 and results["tests"], said[-3000:]


def test_the_submissions_code_reads_nothing_of_the_grader(tree):
    results, said = grade(tree, _attack("gradescope_probe.py", tree))
    probe = next((t["output"] for t in results["tests"] if "PROBE" in t["output"]), said[-3000:])
    uid = int(re.search(r"PROBE uid=(\d+)", probe).group(1))
    assert uid >= BASE_UID and uid not in WORKER_UIDS, probe  # unprivileged, never root, a block at random
    for what in ("source", "hidden", "listing", "results", "write", "metadata", "autograder"):
        assert f"{what}:denied" in probe, probe
    assert "LEAKED" not in probe and "installed:" not in probe, probe


def test_a_leftover_process_cannot_forge_the_grade(tree):
    results, said = grade(tree, _attack("gradescope_forger.py", tree))
    time.sleep(3)  # the forger tried every 50 ms for a minute, had it lived
    after = json.loads((tree["autograder"] / "results" / "results.json").read_text())
    assert results["score"] == after["score"] == 0 and after["tests"], said[-3000:]
    assert not (tree["autograder"] / "forged").exists()
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _comm(p) == "forger6061"]


def _comm(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def test_without_bubblewrap_or_a_uid_of_its_own_the_code_is_not_run(tmp_path):
    """Not even the uid drop: run as root, the code could read the answers and write the
    results. It is not run, and results.json says so with 0 (the reason goes to the staff)."""
    autograder = tmp_path / "autograder"
    shutil.copytree(PROJECT / "tests", autograder / "source" / "tests")
    marker = tmp_path / "ran"
    copy_stubs(autograder / "submission")
    with (autograder / "submission" / "adapters.py").open("a") as f:
        f.write(f"\nopen({str(marker)!r}, 'w').close()\n")
    results = run(autograder, protections=Protections(bwrap=None, uid_drop=False))
    assert results["score"] == 0 and results["output"] == REFUSED and not results["tests"]
    assert json.loads((autograder / "results" / "results.json").read_text()) == results
    assert not marker.exists()
    assert (autograder / "results").stat().st_mode & 0o077 == 0


# ---------------------------------------------------------------- local grading without bubblewrap

@pytest.fixture(scope="module")
def project(tree):
    """What grading reads of the project, and the reference beside it, copied where every user may read
    them (as a checkout is, by git's modes and a default umask), outside the setup's venv."""
    copy = tree["root"] / "project"
    for part in ("harness", "tests", f"fixtures/{TERM}", "reference"):
        shutil.copytree(PROJECT / part, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PROJECT / "pyproject.toml", copy / "pyproject.toml")
    for path in [copy, *copy.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return copy


@pytest.fixture(scope="module")
def local(tree, project, tmp_path_factory):
    """Local grading from the setup's venv (a system Python every uid can reach), bubblewrap failing:
    of the open project, through the command line; then of the project closed as the refusal says,
    with cgroups off, three submissions in turn under one uid: one looks for the project, one leaves
    a file in /run/lock (which others may write to), one looks for what it left."""
    tmp = tmp_path_factory.mktemp("local")
    python = str(tree["root"] / "venv" / "bin" / "python")
    copy_stubs(tmp / "stubs")
    refused = subprocess.run([python, "-m", "harness", "grade", str(tmp / "stubs"), "--out", str(tmp / "refused"),
                              "--term", TERM], cwd=project, env=tree["env"], capture_output=True, text=True, timeout=600)
    shared = Path("/run/lock")
    if not (shared.is_dir() and shared.stat().st_mode & 0o002):
        pytest.skip("no /run/lock that every user may write to")
    constants = {"PROJECT": str(project), "TERM": TERM, "MARK": f"{os.getpid()}-{time.monotonic_ns()}",
                 "PLACES": [str(shared)]}
    subs = [with_attack(tmp / name, "stubs", f"{name}.py", constants)
            for name in ("reads_project", "leaves_files", "finds_files")]
    script = ("import sys; from dataclasses import replace; from pathlib import Path; "
              "from harness.grading import grade; from harness.grading.sandbox import Protections; "
              "plain = replace(Protections.detect(), cgroup=None); "
              "print(plain.describe()); [print('SCORE', g.name, g.score, g.status) for g in grade.grade_all("
              "Path.cwd(), [Path(p) for p in sys.argv[3:]], sys.argv[1], Path(sys.argv[2]), jobs=1, case_timeout=10, "
              "protections=plain)]")
    before = shared.stat().st_mtime_ns
    os.chmod(project, 0o700)
    os.chmod(tree["autograder"], 0o700)  # its source/ holds the answers too
    try:
        graded = subprocess.run([python, "-c", script, TERM, str(tmp / "out"), *map(str, subs)],
                                cwd=project, env=tree["env"], capture_output=True, text=True, timeout=900)
    finally:
        os.chmod(project, 0o755)
        left = list(shared.glob(f"harness-left-{constants['MARK']}"))
        for path in left:
            path.unlink()
    return {"refused": refused, "graded": graded, "out": tmp / "out", "left": left, "project": project,
            "refused_out": tmp / "refused", "shared": shared, "before": before}


def test_without_bubblewrap_a_project_others_can_read_is_refused(local):
    """As root, with bubblewrap failing and a Python every uid can reach (the refusal's own advice once
    led here, a venv in the checkout), the worker's uid read reference/, the hidden cases and the grading
    seed, and scored 123. The grader refuses, naming what is readable and the command that closes it."""
    said, project = local["refused"].stderr, local["project"]
    assert local["refused"].returncode == 2 and "can read" in said and f"chmod o= {project}" in said, said[-3000:]
    assert "reference/" in said and f"fixtures/{TERM}/hidden/" in said, said[-3000:]
    assert not local["refused_out"].exists()


def test_without_bubblewrap_a_closed_project_grades_and_reads_nothing(local):
    """The project closed as the refusal says (its venv outside it), cgroups off: a submission that looks
    for the project reads nothing of it and scores 0; a file another submission left in a folder anyone
    may write to (/run/lock once) is gone before the next one runs under the same uid, and the folder's times
    are set back."""
    done = local["graded"]
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "OFF: per-submission cgroup" in said and "filesystem allow-list" in said, said[-3000:]
    scores = dict(re.findall(r"^SCORE (\w+) ([\d.]+) ok$", done.stdout, re.M))
    assert scores == {"reads_project": "0.0", "leaves_files": "0.0", "finds_files": "0.0"}, said[-3000:]
    outputs = {name: "".join(t["output"] for t in json.loads((local["out"] / name / "results.json").read_text())["tests"])
               + (local["out"] / name / "output.txt").read_text() for name in scores}
    reads = re.search(r"READS (.*)", outputs["reads_project"]).group(1)
    assert "LEAKED" not in reads and all(f"{what}:denied" in reads for what in ("hidden", "listing", "reference")), reads
    assert str(local["shared"]) in outputs["leaves_files"], outputs["leaves_files"][-2000:]  # it did leave one
    assert "FOUND []" in outputs["finds_files"], outputs["finds_files"][-2000:]
    assert not local["left"], local["left"]
    # red team 14: nor does the folder's own mtime, set to a moment the submission chose, reach the next one
    assert f"TIMES {{'{local['shared']}': {local['before']}}}" in outputs["finds_files"], outputs["finds_files"][-2000:]
