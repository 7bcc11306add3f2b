"""`python -m harness`: the command line. A student edition has `term list` and
`contract`; the instructor commands need the repository with reference/ and say so."""

import argparse
import difflib
import sys
import textwrap
import time
from pathlib import Path

import harness
from harness.store import FixtureError, Term, list_terms, pin_term, pinned_term

STUDENT_COMMANDS = {"term list", "contract"}
STUDENT_HELP = """\
What a student runs (in the assignment's folder):
  pytest                                 every function's tests, then the progress table and your total
  pytest --function run_softmax          one function's tests (comma-separate for more)
  pytest -x                              stop at the first failure
  pytest --case-timeout 10               fail a hanging test after 10 s instead of 60
  python -m harness term list            the fixture terms here, with their public and hidden case counts
  python -m harness contract             write any missing adapters.py or student/ file; never overwrites
                                         your code (--force replaces it, keeping a NAME.bak copy)
  check("run_softmax")                   from a notebook or the REPL, after
                                         `from harness.student_run.notebook import check` (README: "From a notebook")
"""
INSTRUCTOR_HELP = {
    True: "Instructor commands (this is the course's master copy): term new, term verify, term use, term diff, "
          "release, grade, merge, report and mistakes; `python -m harness COMMAND --help` explains each, and the README's "
          "\"Instructor and maintainer guide\" how they fit together.",
    False: "Instructor commands (building fixture terms, grading submissions) are not in this copy: they "
           "live in the course's master repository.",
}


def project_root() -> Path:
    """The directory with the pyproject.toml that declares [tool.harness]."""
    for folder in [Path.cwd(), *Path.cwd().parents]:
        if (folder / "pyproject.toml").is_file() and "[tool.harness]" in (folder / "pyproject.toml").read_text():
            return folder
    raise SystemExit("harness: run this inside the assignment repository (no pyproject.toml with [tool.harness])")


def is_instructor_copy(root: Path) -> bool:
    """The full repository: the reference and the code that builds terms are here."""
    return (root / "reference" / "variants.py").is_file() and (Path(harness.__file__).parent / "term").is_dir()


def parser(instructor: bool) -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m harness", formatter_class=argparse.RawDescriptionHelpFormatter,
                                  description=STUDENT_HELP, epilog=textwrap.fill(INSTRUCTOR_HELP[instructor], 100))
    sub = top.add_subparsers(dest="command", required=True)

    terms = sub.add_parser("term", help="fixture terms: " + ("build, verify, pin, compare and list" if instructor
                                                             else "list them"))
    term = terms.add_subparsers(dest="action", required=True)
    term.add_parser("list", help="list terms with their public and hidden case counts")
    contract = sub.add_parser("contract", help="render adapters.py, reference/adapters.py, MISTAKES.md and any "
                                               "missing student/ stub from the contract" if instructor else
                              "write adapters.py or a student/ stub where it is missing (never over your code)")
    contract.add_argument("--check", action="store_true",
                          help="write nothing; fail if a rendered file is out of date or missing")
    contract.add_argument("--force", action="store_true",
                          help="also replace files that hold your own code (student/, adapters.py) with the "
                               "contract's stubs; each one is first copied to NAME.bak beside it")
    if not instructor:
        return top
    contract.add_argument("--stubs", action="store_true",
                          help="also rewrite student/ files that hold only stubs but differ from the contract "
                               "(files with code need --force)")

    new = term.add_parser("new", help="build fixtures/NAME from the reference and the case catalogue")
    new.add_argument("name")
    new.add_argument("--seed", type=int, required=True, help="fresh inputs and weights; same seed, same bytes")
    new.add_argument("--grading-seed", type=int, help="hidden cases' and twins' values (kept in hidden/ only); "
                     "default: the rebuilt term's own, or a random one for a new term")
    new.add_argument("--force", action="store_true", help="replace an existing term")
    verify = term.add_parser("verify", help="check hashes and schema, then run the reference on every case")
    verify.add_argument("name")
    use = term.add_parser("use", help="pin NAME in pyproject.toml ([tool.harness] term) and say what to run next")
    use.add_argument("name")
    diff = term.add_parser("diff", help="cases added, removed or changed between two terms")
    diff.add_argument("a")
    diff.add_argument("b")

    rel = sub.add_parser("release", help="write the student edition: stubs, tests, public fixtures, student README")
    rel.add_argument("out", type=Path)
    rel.add_argument("--term", default=None, help="fixture term (default: the one pyproject.toml pins)")

    scope = sub.add_parser("gradescope", help="write the Gradescope autograder zip: setup.sh and run_autograder "
                                              "at its root, the grading harness, the term with its hidden cases")
    scope.add_argument("out", type=Path, help="the zip to write, e.g. autograder.zip")
    scope.add_argument("--term", default=None, help="fixture term (default: the one pyproject.toml pins)")

    grade = sub.add_parser("grade", help="grade submissions (folders or zips) in isolated subprocesses")
    grade.add_argument("submissions", nargs="+", type=Path)
    grade.add_argument("--term", default=None, help="fixture term (default: the one pyproject.toml pins)")
    grade.add_argument("--out", type=Path, required=True, help="a folder per submission (results.json, junit.xml, graded.json, ...); grades.csv and the "
                            "class report are rebuilt from every result folder there, so earlier results stay")
    grade.add_argument("--jobs", type=int, default=1, help="submissions graded at once (default 1)")
    grade.add_argument("--timeout", type=float, default=600, help="seconds per submission (default 600)")
    grade.add_argument("--case-timeout", type=float, default=30,
                       help="CPU seconds one call of the submission's code may use (default 30)")
    grade.add_argument("--require-confinement", action="store_true",
                       help="refuse to grade unless the bubblewrap sandbox (and, as root, the uid drop) is available")
    grade.add_argument("--fresh-sandboxes", action="store_true",
                       help="a new sandbox for every submission (default: a slot's sandbox serves its next submission "
                            "once it is clean: README, Grading)")
    grade.add_argument("--memory-mb", type=int, default=4096, help="memory per submission: all its processes together where cgroups can be made, "
                       "else the address space of each process (default 4096)")
    grade.add_argument("--shard", type=shard_arg, metavar="K/N",
                       help="grade only the K-th of N slices of the submissions (by sorted name): N machines given "
                            "the same submissions grade each once; `merge` joins their --out folders")

    merge = sub.add_parser("merge", help="copy the result folders of `grade --shard` runs into one folder and rebuild "
                                          "its grades.csv and class report, as one batch would have written them")
    merge.add_argument("shards", nargs="+", type=Path, help="the --out folders of the shards")
    merge.add_argument("--out", type=Path, required=True,
                       help="the merged folder (results already there are kept, or replaced by name)")

    report = sub.add_parser("report", help="the class report of a graded folder: report.html (staff only) and "
                                            "mistakes.csv, from what `grade` wrote (also written by `grade`)")
    report.add_argument("graded", type=Path, help="the --out folder of `harness grade`")
    report.add_argument("--anonymise", action="store_true", help="stable pseudonyms instead of submission names")

    mistakes = sub.add_parser("mistakes", help="run the suite against every known-mistake variant and print "
                                                "which tests catch it and whether the report names it")
    mistakes.add_argument("names", nargs="*", help="only these variants")
    return top


def shard_arg(text: str) -> tuple[int, int]:
    from harness.grading.grade import parse_shard
    try:
        return parse_shard(text)
    except ValueError as e:  # argparse's own message would say only "invalid value"
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv=None) -> int:
    root = project_root()
    if str(root) not in sys.path:  # the installed `harness` script: reference/ and student/ live here
        sys.path.insert(0, str(root))
    argv = sys.argv[1:] if argv is None else argv
    instructor = is_instructor_copy(root)
    words = [w for w in argv if not w.startswith("-")]
    asked = " ".join(words[:2]) if words[:1] == ["term"] else " ".join(words[:1])
    if not instructor and asked and asked not in STUDENT_COMMANDS and asked != "term":
        print(f"harness: `{asked}` is an instructor command; this student edition has only "
              f"{', '.join(sorted(STUDENT_COMMANDS))}.", file=sys.stderr)
        return 2
    args = parser(instructor).parse_args(argv)
    try:
        return COMMANDS[(args.command, getattr(args, "action", None))](root, args)
    except (FixtureError, FileExistsError, ValueError) as e:  # grading.grade.BadSetup too
        print(f"harness: {e}", file=sys.stderr)
        return 2


def term_new(root: Path, args) -> int:
    from harness.term.build import build_term
    folder = build_term(root, args.name, args.seed, args.force, grading_seed=args.grading_seed)
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    print(f"wrote {folder.relative_to(root)} ({size / 1024:.0f} KiB)")
    return 0


def term_verify(root: Path, args) -> int:
    from harness.term.build import verify_term
    failures = verify_term(root, args.name)
    for failure in failures:
        print(failure, file=sys.stderr)
    verdict = f"FAILS {len(failures)} checks" if failures else "passes every case"
    print(f"term {args.name}: hashes ok, reference {verdict}")
    return 1 if failures else 0


def term_list(root: Path, args) -> int:
    pinned = pinned_term(root)
    for name in list_terms(root):
        t = Term(root, name)  # hidden counts come from the public manifest: a release has no hidden/
        public, hidden = len(t.cases), sum(t.hidden_counts.values())
        mark = "  (pinned)" if name == pinned else ""
        print(f"{name}: seed {t.manifest['seed']}, {public} public cases, {hidden} hidden{mark}")
    return 0


def term_use(root: Path, args) -> int:
    Term(root, args.name, hidden=True)  # only a term that exists and passes its hash checks
    before = pinned_term(root)
    pin_term(root, args.name)
    print(f"pinned term {args.name} in pyproject.toml (was {before}). Next:\n"
          f"  python -m harness term verify {args.name}\n"
          "  pytest --adapters reference.adapters --hidden\n"
          "  pytest selftest -n auto\n"
          f"  git add pyproject.toml fixtures/{args.name}; git commit\n"
          f"  python -m harness release OUT --term {args.name}   # the student edition")
    return 0


def term_diff(root: Path, args) -> int:
    terms = [Term(root, n, hidden=True) for n in (args.a, args.b)]
    a, b = ({c.id: c for c in t.cases} for t in terms)
    for label, ids in (("added", sorted(set(b) - set(a))), ("removed", sorted(set(a) - set(b)))):
        for case_id in ids:
            case = b.get(case_id) or a[case_id]
            print(f"{label:<8} {case_id}{' (hidden)' if case.hidden else ''}")
    same = sorted(set(a) & set(b))
    changed = 0
    for case_id in same:
        before, after = (_described(t, c[case_id]) for t, c in zip(terms, (a, b)))
        for key in before.keys() | after.keys():
            if before.get(key) != after.get(key):
                print(f"changed  {case_id}: {key} {before.get(key)} -> {after.get(key)}")
                changed += 1
    print(f"{len(same)} cases in both, {changed} changes listed (their values differ unless the seeds match)")
    return 0


def _described(term: Term, case) -> dict:
    """What `term diff` compares: every input's shape and dtype, tolerances, note, hidden or not."""
    shapes = {f"shape of {role[3:]}": f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"
              for role, t in term.tensors(case).items() if role.startswith("in/")}
    return {**shapes, "args": case.args, "check": case.check, "tolerance": (case.atol, case.rtol),
            "gradient tolerance": (case.grad_atol, case.grad_rtol), "gradients": case.grads,
            "note": case.note, "hidden": case.hidden}


def release_cmd(root: Path, args) -> int:
    from harness.term.release import release
    term = args.term or pinned_term(root)
    out = release(root, args.out, term)
    print(f"wrote the student release of term {term} to {out}")
    return 0


def gradescope_cmd(root: Path, args) -> int:
    from harness.grading.gradescope import build_zip
    term = args.term or pinned_term(root)
    names = build_zip(root, args.out, term)
    print(f"wrote {args.out} ({len(names)} files, term {term} with its hidden cases); upload it as the "
          "assignment's autograder (README, \"Grading on Gradescope\")")
    return 0


def grade_cmd(root: Path, args) -> int:
    from harness.grading.grade import grade_all
    from harness.scoring import points_text
    missing = [str(p) for p in args.submissions if not p.exists() and not p.is_symlink()]
    if missing:  # a TA's typo graded as a 0 row beside the real ones; nothing is graded
        raise ValueError(f"no such file or folder: {', '.join(missing)}; nothing was graded. Check the path"
                         f"{'s' if len(missing) > 1 else ''} (a folder or a .zip per submission)")
    tty = sys.stderr.isatty()

    def progress(done, total, result):
        if tty:
            bar = "#" * (30 * done // total)
            print(f"\r[{bar:<30}] {done}/{total} {result.name[:30]:<30}", end="\n" if done == total else "",
                  file=sys.stderr, flush=True)
        else:  # a log (a file, tee, nohup): a line per submission, as it finishes
            print(f"graded {done}/{total} {result.name} {points_text(result.score)} {result.status}", file=sys.stderr,
                  flush=True)
    started = time.monotonic()
    graded = grade_all(root, args.submissions, args.term or pinned_term(root), args.out, args.jobs, args.timeout,
                       args.case_timeout, args.memory_mb, progress, args.require_confinement,
                       announce=lambda text: print(f"harness grade: {text}", file=sys.stderr), shard=args.shard,
                       reuse_sandboxes=not args.fresh_sandboxes)
    for g in graded:
        flag = f"  TAMPERED: {', '.join(g.tampered)}" if g.tampered else ""
        print(f"{g.name:<30} {points_text(g.score):>6}  {g.status:<16} {g.seconds:5.1f} s{flag}")
    seconds = time.monotonic() - started
    print(f"graded {len(graded)} in {seconds:.0f} s ({60 * len(graded) / max(seconds, 1e-9):.1f} a minute, "
          f"--jobs {args.jobs}, start-up included); wrote {args.out}/grades.csv (every result folder there), "
          "report.html (staff only) and mistakes.csv")
    return 0


def merge_cmd(root: Path, args) -> int:
    from harness.grading.grade import merge
    graded, problems = merge(args.shards, args.out, root)
    for problem in problems:
        print(f"harness merge: {problem}", file=sys.stderr)
    print(f"merged {len(args.shards)} folder{'s' if len(args.shards) != 1 else ''} into {args.out}: {len(graded)} results in grades.csv, "
          "report.html (staff only) and mistakes.csv")
    return 0


def report_cmd(root: Path, args) -> int:
    from harness.grading.report import write_report
    if not (args.graded / "grades.csv").is_file():
        raise ValueError(f"{args.graded} has no grades.csv: give the --out folder of `harness grade`")
    path = write_report(args.graded, root, args.anonymise)
    print(f"wrote {path} (staff only) and {path.with_name(path.stem.replace('report', 'mistakes') + '.csv').name}")
    return 0


def contract_render(root: Path, args) -> int:
    """Render what the contract generates, never losing a student's work: a missing file is
    written; a differing file that holds only stubs is rewritten by `--stubs` (instructors);
    any other differing student file (and, in a release, adapters.py) is left as it is
    unless `--force`, which keeps a backup beside it first."""
    from harness.contract import ADAPTERS, render_adapters, render_stub
    instructor = is_instructor_copy(root)
    force, stubs = getattr(args, "force", False), getattr(args, "stubs", False)
    generated = {root / "adapters.py": render_adapters("student")} if instructor else {}
    if instructor:
        from harness.term.coverage import render_mistakes
        from reference.variants import VARIANTS
        generated[root / "reference" / "adapters.py"] = render_adapters("reference")
        generated[root / "MISTAKES.md"] = render_mistakes(VARIANTS)
    theirs = {} if instructor else {root / "adapters.py": render_adapters("student")}  # a student may edit the glue
    theirs.update({root / "student" / f"{m}.py": render_stub(m) for m in sorted({a.impl_module for a in ADAPTERS.values()})})
    problems = []
    if instructor:
        from harness.term.case_rules import problems as case_problems
        from harness.term.catalogue import CATALOGUE
        problems += [f"catalogue: {p}" for p in case_problems(CATALOGUE)]
        from harness.typecheck import annotation_problems
        problems += [f"contract: {p}" for p in annotation_problems(ADAPTERS.values())]
    for path, text in [*generated.items(), *theirs.items()]:
        rel = path.relative_to(root)
        if path.exists() and path.read_text() == text:
            continue
        if not path.exists() or path in generated:
            problems.append(f"{'missing' if not path.exists() else 'out of date'}: {rel}" if args.check
                            else f"rendered: {rel}")
        elif force and not args.check:
            problems.append(f"rendered: {rel} (your version is kept in {backup(path).relative_to(root)})")
        elif stubs and not args.check and only_stubs(path.read_text()):
            problems.append(f"rendered: {rel} (it held only stubs)")
        elif only_stubs(path.read_text()) and instructor:
            problems.append(f"stale stub: {rel} differs from the contract's stubs "
                            "(`python -m harness contract --stubs` rewrites it)")
        elif instructor:
            problems.append(f"implemented: {rel} holds code, not the contract's stubs; a release renders stubs "
                            "instead. Not overwritten (`--force` replaces it, keeping a backup).")
        elif not args.check and path.name == "adapters.py":  # a student's copy: their work is fine
            problems.append(f"kept: {rel} differs from the contract's (your edits?); `--force` re-renders it, "
                            "keeping a backup")
        else:
            continue
        if problems[-1].startswith("rendered: ") and not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    for line in problems:
        print(line)
    if not problems:  # silence would not say whether anything was looked at
        files = sum(path.parent.name == "student" for path in theirs)
        print(f"up to date: adapters.py and the {files} files of student/ follow the contract"
              + (", and so do reference/adapters.py, MISTAKES.md and the catalogue" if instructor else ""))
    failed = any(p.startswith(("catalogue: ", "contract: ")) for p in problems)
    return 1 if failed or args.check and any(not p.startswith(("rendered", "kept")) for p in problems) else 0


def only_stubs(source: str) -> bool:
    """The file holds stubs and nothing else: every function body only raises NotImplementedError
    (after a docstring or `super().__init__()`), and no code runs at import beyond imports."""
    import ast
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False

    def inert(node) -> bool:  # a docstring, `pass` or `super().__init__()`
        return isinstance(node, ast.Pass) or isinstance(node, ast.Expr) and (
            isinstance(node.value, ast.Constant) or ast.unparse(node.value) == "super().__init__()")

    def raises(node) -> bool:
        return isinstance(node, ast.Raise) and node.exc is not None and "NotImplementedError" in ast.unparse(node.exc)

    def stub(node) -> bool:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = [n for n in node.body if not inert(n)]
            return len(body) == 1 and raises(body[0])
        if isinstance(node, ast.ClassDef):
            return all(stub(n) or inert(n) for n in node.body)
        return inert(node) or isinstance(node, (ast.Import, ast.ImportFrom))
    return all(stub(n) for n in tree.body)


def backup(path: Path) -> Path:
    """Copy `path` to the first free `NAME.bak`, `NAME.bak2`, ... beside it."""
    for n in range(1, 1000):
        copy = path.with_name(f"{path.name}.bak{n if n > 1 else ''}")
        if not copy.exists():
            copy.write_bytes(path.read_bytes())
            return copy
    raise FileExistsError(f"{path}: too many backups beside it; remove some")


def mistakes_table(root: Path, args) -> int:
    from harness.contract import ADAPTERS
    from harness.term.coverage import NAMED_TARGET, coverage, render
    from reference.variants import VARIANTS
    unknown = [name for name in args.names if name not in VARIANTS]
    if unknown:
        name = unknown[0]
        close = difflib.get_close_matches(name, VARIANTS, n=3)
        hint = (f": {name} is a contract function, and a variant is named by its mistake (MISTAKES.md lists "
                "each function's)" if name in ADAPTERS else f"; did you mean {', '.join(close)}?" if close else
                "; MISTAKES.md lists them all")
        print(f"mistakes: no variant named {name!r} in reference/variants.py{hint}", file=sys.stderr)
        return 2
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
    ("term", "use"): term_use,
    ("release", None): release_cmd,
    ("gradescope", None): gradescope_cmd,
    ("grade", None): grade_cmd,
    ("merge", None): merge_cmd,
    ("contract", None): contract_render,
    ("mistakes", None): mistakes_table,
    ("report", None): report_cmd,
}
