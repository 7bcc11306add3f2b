"""A student repository whose student/ holds the reference: for grading tests and benchmarks."""

import re
from pathlib import Path

REFERENCE = Path(__file__).resolve().parent
NOT_STUDENT_CODE = {"adapters.py", "variants.py", "submission.py", "__init__.py"}


def reference_as_student(dst: Path) -> Path:
    """Write adapters.py and student/ (the reference, its imports renamed) into dst."""
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "adapters.py").write_text((REFERENCE.parent / "adapters.py").read_text())
    (dst / "student").mkdir(exist_ok=True)
    for f in REFERENCE.glob("*.py"):
        if f.name not in NOT_STUDENT_CODE:
            (dst / "student" / f.name).write_text(re.sub(r"\breference\b", "student", f.read_text()))
    (dst / "student" / "__init__.py").touch()
    return dst
