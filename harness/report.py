"""The class report: what a graded batch got wrong, function by function, mistake by mistake.

`python -m harness report GRADED_DIR` (and the end of `harness grade`) reads only what the
grader wrote (grades.csv, each submission's results.json and code.sha256) and writes
report.html, one self-contained page for staff, and mistakes.csv. It never runs code.
"""

import ast
import hashlib
from pathlib import Path


def code_hash(folder: Path) -> str:
    """sha256 of a submission's code (adapters.py and student/), normalised: each Python file as
    its syntax tree, so comments, blank lines and formatting do not matter."""
    digest = hashlib.sha256()
    files = [folder / "adapters.py", *sorted((folder / "student").rglob("*"))] if (folder / "student").is_dir() \
        else [folder / "adapters.py"]
    for path in files:
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        data = path.read_bytes()
        if path.suffix == ".py":
            try:
                data = ast.dump(ast.parse(data)).encode()
            except (SyntaxError, ValueError):
                data = b"\n".join(line.rstrip() for line in data.splitlines() if line.strip())
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()
