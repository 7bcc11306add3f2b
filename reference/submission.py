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


def variant_as_student(name: str, dst: Path) -> Path:
    """A submission that makes one known mistake of reference/variants.py: the reference as
    student/, plus variants.py (renamed) whose patches adapters.py applies for good at import."""
    from reference.variants import VARIANTS
    if name not in VARIANTS:  # TA trial 13: a typo made a submission that failed only at its import, in grading
        import difflib
        close = difflib.get_close_matches(name, VARIANTS, n=3)
        raise KeyError(f"no variant {name!r}" + (f"; did you mean {', '.join(close)}?" if close else
                                                 "; MISTAKES.md lists them"))
    reference_as_student(dst)
    source = (REFERENCE / "variants.py").read_text().replace("import reference.adapters as ref", "ref = None")
    (dst / "student" / "variants.py").write_text(re.sub(r"\breference\b", "student", source))
    with (dst / "adapters.py").open("a") as f:
        f.write(f"\n\nfrom student.variants import VARIANTS as _VARIANTS\n"
                f"_MISTAKE = _VARIANTS[{name!r}].applied()  # kept: a dropped one undoes its patches\n"
                "_MISTAKE.__enter__()\n")
    return dst
