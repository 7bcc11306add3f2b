"""`harness release OUT --term NAME`: the student edition of this repository.

It carries the stubs, adapters, student tests, the harness that runs them and the
term's public fixtures, with pyproject.toml pinned to that term and the README's
student part. It leaves out the reference, the variants, hidden fixtures, the
selftest and the instructor code that builds terms, measures coverage and grades.
"""

import re
import shutil
from pathlib import Path

from harness.contract import ADAPTERS, render_stub
from harness.store import HIDDEN, Term

INSTRUCTOR_ONLY = {"term", "grading"}  # harness/ subpackages: the term's build and the grader
STUDENT_README_END = "## Instructor and maintainer guide"
MASTER_ONLY = re.compile(r"<!-- master only.*?<!-- end of master only -->\n*", re.S)  # the master copy's banner


def release(project: Path, out: Path, term: str) -> Path:
    Term(project, term)  # refuse to ship a term that does not verify
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty; choose a new folder for the release")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy2(project / "adapters.py", out / "adapters.py")
    shutil.copy2(project / ".gitignore", out / ".gitignore")
    for folder in ("tests", "notebooks"):
        shutil.copytree(project / folder, out / folder, ignore=ignore)
    # Stubs rendered from the contract, never this folder's student/: a TA may have solved it.
    (out / "student").mkdir()
    (out / "student" / "__init__.py").write_text((project / "student" / "__init__.py").read_text())
    for module in sorted({a.impl_module for a in ADAPTERS.values()}):
        (out / "student" / f"{module}.py").write_text(render_stub(module))
    shutil.copytree(project / "harness", out / "harness",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", *INSTRUCTOR_ONLY))
    shutil.copytree(project / "fixtures" / term, out / "fixtures" / term,
                    ignore=shutil.ignore_patterns(HIDDEN, "__pycache__"))
    pyproject = (project / "pyproject.toml").read_text()
    pyproject = re.sub(r'(?m)^term = ".*"$', f'term = "{term}"', pyproject)
    (out / "pyproject.toml").write_text(pyproject)
    readme = MASTER_ONLY.sub("", (project / "README.md").read_text()).split(STUDENT_README_END)[0].rstrip() + "\n"
    (out / "README.md").write_text(readme)
    return out
