"""`python -m harness`: the instructor's command line."""

import argparse
import sys
from pathlib import Path

from harness.store import FixtureError, Term, list_terms


class BadSetup(Exception):
    """Raised by commands that cannot run as asked (see harness.grade)."""


def project_root() -> Path:
    """The directory with the pyproject.toml that declares [tool.harness]."""
    for folder in [Path.cwd(), *Path.cwd().parents]:
        if (folder / "pyproject.toml").is_file() and "[tool.harness]" in (folder / "pyproject.toml").read_text():
            return folder
    raise SystemExit("harness: run this inside the assignment repository (no pyproject.toml with [tool.harness])")


def main(argv=None) -> int:
    root = project_root()
    if str(root) not in sys.path:  # the installed `harness` script: reference/ and student/ live here
        sys.path.insert(0, str(root))
    parser = argparse.ArgumentParser(prog="harness", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    terms = sub.add_parser("term", help="build, verify and list fixture terms")
    term = terms.add_subparsers(dest="action", required=True)
    new = term.add_parser("new", help="build fixtures/NAME from the reference and the case catalogue")
    new.add_argument("name")
    new.add_argument("--seed", type=int, required=True, help="fresh inputs and weights; same seed, same bytes")
    new.add_argument("--from-catalogue", action="store_true",
                     help="build from harness/catalogue.py (the only source today; accepted for clarity)")
    new.add_argument("--force", action="store_true", help="replace an existing term")
    verify = term.add_parser("verify", help="check hashes and schema, then run the reference on every case")
    verify.add_argument("name")
    term.add_parser("list", help="list terms with their public and hidden case counts")
    diff = term.add_parser("diff", help="cases added or removed between two terms")
    diff.add_argument("a")
    diff.add_argument("b")

    rel = sub.add_parser("release", help="write the student edition: stubs, tests, public fixtures, student README")
    rel.add_argument("out", type=Path)
    rel.add_argument("--term", required=True)

    grade = sub.add_parser("grade", help="grade submissions (folders or zips) in isolated subprocesses")
    grade.add_argument("submissions", nargs="+", type=Path)
    grade.add_argument("--term", required=True)
    grade.add_argument("--out", type=Path, required=True, help="results.json + junit.xml per submission, grades.csv")
    grade.add_argument("--jobs", type=int, default=1, help="submissions graded at once (default 1)")
    grade.add_argument("--timeout", type=float, default=600, help="seconds per submission (default 600)")
    grade.add_argument("--case-timeout", type=float, default=30,
                       help="CPU seconds one call of the submission's code may use (default 30)")
    grade.add_argument("--require-confinement", action="store_true",
                       help="refuse to grade unless the bubblewrap sandbox (and, as root, the uid drop) is available")
    grade.add_argument("--memory-mb", type=int, default=4096, help="address-space cap per submission (default 4096)")

    contract = sub.add_parser("contract", help="render adapters.py and reference/adapters.py from the contract")
    contract.add_argument("--check", action="store_true", help="fail if a rendered file is out of date")

    mistakes = sub.add_parser("mistakes", help="run the suite against every known-mistake variant and print "
                                                "which tests catch it and whether the report names it")
    mistakes.add_argument("names", nargs="*", help="only these variants")

    args = parser.parse_args(argv)
    try:
        return COMMANDS[(args.command, getattr(args, "action", None))](root, args)
    except (FixtureError, FileExistsError, ValueError, BadSetup) as e:
        print(f"harness: {e}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith(("harness.", "reference")):
            print(f"harness: `{args.command}` is an instructor command; this copy does not include it "
                  f"(missing {e.name}).", file=sys.stderr)
            return 2
        raise


def term_new(root: Path, args) -> int:
    from harness.build import build_term
    folder = build_term(root, args.name, args.seed, args.force)
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    print(f"wrote {folder.relative_to(root)} ({size / 1024:.0f} KiB)")
    return 0


def term_verify(root: Path, args) -> int:
    from harness.build import verify_term
    failures = verify_term(root, args.name)
    for failure in failures:
        print(failure, file=sys.stderr)
    verdict = f"FAILS {len(failures)} checks" if failures else "passes every case"
    print(f"term {args.name}: hashes ok, reference {verdict}")
    return 1 if failures else 0


def term_list(root: Path, args) -> int:
    for name in list_terms(root):
        t = Term(root, name, hidden=True)
        public = sum(not c.hidden for c in t.cases)
        print(f"{name}: seed {t.manifest['seed']}, {public} public cases, {len(t.cases) - public} hidden")
    return 0


def term_diff(root: Path, args) -> int:
    a, b = ({c.id: c for c in Term(root, n, hidden=True).cases} for n in (args.a, args.b))
    for label, ids in (("added", sorted(set(b) - set(a))), ("removed", sorted(set(a) - set(b)))):
        for case_id in ids:
            case = b.get(case_id) or a[case_id]
            print(f"{label:<8} {case_id}{' (hidden)' if case.hidden else ''}")
    same = sorted(set(a) & set(b))
    print(f"{len(same)} cases in both (their values differ unless the seeds match)")
    return 0


def release_cmd(root: Path, args) -> int:
    from harness.release import release
    out = release(root, args.out, args.term)
    print(f"wrote the student release of term {args.term} to {out}")
    return 0


def grade_cmd(root: Path, args) -> int:
    from harness.grade import grade_all
    tty = sys.stderr.isatty()

    def progress(done, total, result):
        if tty:
            bar = "#" * (30 * done // total)
            print(f"\r[{bar:<30}] {done}/{total} {result.name[:30]:<30}", end="", file=sys.stderr, flush=True)
    graded = grade_all(root, args.submissions, args.term, args.out, args.jobs, args.timeout,
                       args.case_timeout, args.memory_mb, progress, args.require_confinement,
                       announce=lambda text: print(f"harness grade: {text}", file=sys.stderr))
    if tty:
        print(file=sys.stderr)
    for g in graded:
        flag = f"  TAMPERED: {', '.join(g.tampered)}" if g.tampered else ""
        print(f"{g.name:<30} {g.score:6.2f}  {g.status:<16} {g.seconds:5.1f} s{flag}")
    print(f"wrote {args.out}/grades.csv")
    return 0


def contract_render(root: Path, args) -> int:
    from harness.contract import render_adapters
    stale = []
    for package, path in [("student", root / "adapters.py"), ("reference", root / "reference" / "adapters.py")]:
        text = render_adapters(package)
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(text)
    verb = "out of date" if args.check else "rendered"
    for path in stale:
        print(f"{verb}: {path.relative_to(root)}")
    return 1 if stale and args.check else 0


def mistakes_table(root: Path, args) -> int:
    from harness.coverage import NAMED_TARGET, coverage, render
    rows = coverage(root, args.names)
    print(render(rows))
    mistakes = [r for r in rows if not r.correct]
    missed = [r for r in mistakes if not r.caught_by] + [r for r in rows if r.correct and r.caught_by]
    named = sum(r.named for r in mistakes) / max(len(mistakes), 1)
    return 1 if missed or named < NAMED_TARGET else 0


COMMANDS = {
    ("term", "new"): term_new,
    ("term", "verify"): term_verify,
    ("term", "list"): term_list,
    ("term", "diff"): term_diff,
    ("release", None): release_cmd,
    ("grade", None): grade_cmd,
    ("contract", None): contract_render,
    ("mistakes", None): mistakes_table,
}
