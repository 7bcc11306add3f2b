"""Speed and size figures for the student suite and the fixture store.

    python benchmarks/bench.py [--runs N] [--term NAME]   (default: the pinned term)

--runs is the number of timed runs of each figure: 7 suite runs, 3 grading batches and 3 class
reports when not given.

Prints medians over several runs. Targets (checked here, never by a timed test):
the full student suite against the reference within 1.6x a bare `import torch` on the
2-core machine (a `pytest` command there runs in 2 processes), `--function` within 1.25x, and one
term's fixtures under 90 KiB per function it holds cases of. The suite and the import alternate,
so a busy machine slows both alike; CPU seconds are printed too (all processes'), as they vary less.
Each command runs once first, as a student's second run: bytecode caches written, and the suite's
last run's times by which it deals its tests to its processes.
"""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))  # reference/ lives at the project root


def wall(cmd: list[str], runs: int) -> float:
    return statistics.median(timed(cmd)[0] for _ in range(runs))


# As a student's machine runs them: Python writes its bytecode caches (pytest its rewritten tests'),
# which some sandboxes turn off (PYTHONDONTWRITEBYTECODE) and then pay a compile on every run.
STUDENT_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of cmd."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, cwd=PROJECT, capture_output=True, check=False, env=STUDENT_ENV)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return seconds, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def suite_vs_torch(runs: int) -> None:
    """The student suite against the reference, and one function of it (a student's edit-test
    loop), each paired with a bare `import torch`: alternating, so a load on the machine falls on both."""
    torch_import = [sys.executable, "-c", "import torch"]
    suite = [sys.executable, "-m", "pytest", "-q", "--adapters", "reference.adapters"]
    runs_of = {"student suite vs reference": (suite, 1.6), "--function run_embedding": (
        [*suite, "--function", "run_embedding"], 1.25)}
    for label, (command, target) in runs_of.items():
        timed(command)  # a warm-up: bytecode caches, and the last run's times the suite deals its tests by
        pairs = [(timed(torch_import), timed(command)) for _ in range(runs)]
        t_wall, t_cpu = (statistics.median(p[0][i] for p in pairs) for i in (0, 1))
        s_wall, s_cpu = (statistics.median(p[1][i] for p in pairs) for i in (0, 1))
        print(f"  python -c 'import torch'            {t_wall:6.2f} s  ({t_cpu:.2f} s CPU)")
        print(f"  {label:<34} {s_wall:6.2f} s  = {s_wall / t_wall:.2f}x torch import "
              f"(target <= {target}x); CPU {s_cpu:.2f} s = {s_cpu / t_cpu:.2f}x")


def folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=None,
                        help="timed runs of each figure (default: 7 of the suite, 3 grading batches and reports)")
    parser.add_argument("--term", default=None, help="fixture term (default: [tool.harness] term)")
    parser.add_argument("--grading", type=int, default=20, metavar="N",
                        help="grade N reference submissions with --jobs 2 (0 skips it)")
    parser.add_argument("--suite-only", action="store_true", help="only the suite vs `import torch` figure")
    parser.add_argument("--report", type=int, default=1000, metavar="N",
                        help="time the class report for N submissions (0 skips it)")
    parser.add_argument("--report-only", action="store_true", help="only the class report figure")
    parser.add_argument("--grading-only", action="store_true", help="only the grading throughput")
    args = parser.parse_args()
    from harness.store import pinned_term
    args.term = args.term or pinned_term(PROJECT)
    batches = args.runs or 3
    if args.report_only:
        return report(args.report, args.term, batches)
    if args.grading_only:
        grading(args.grading or 20, args.term, batches)
        return
    args.runs = args.runs or 7

    print(f"median of {args.runs} runs")
    suite_vs_torch(args.runs)
    if args.suite_only:
        return
    torch_import = wall([sys.executable, "-c", "import torch"], args.runs)
    suite_hidden = wall([sys.executable, "-m", "pytest", "-q", "--adapters", "reference.adapters", "--hidden"],
                        args.runs)
    term = PROJECT / "fixtures" / args.term
    public = folder_size(term) - folder_size(term / "hidden")
    hidden = folder_size(term / "hidden")

    from harness.term.build import build_term
    builds = []
    for i in range(3):
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            build_term(Path(tmp), "bench", seed=i)
            builds.append(time.perf_counter() - start)

    print(f"  same, with hidden cases            {suite_hidden:6.2f} s  = {suite_hidden / torch_import:.2f}x")
    print(f"  term build (in process, median 3)  {statistics.median(builds):6.2f} s")
    from harness.store import Term
    functions = len({c.function for c in Term(PROJECT, args.term).cases})
    print(f"fixtures/{args.term}: public {public / 1024:.0f} KiB + hidden {hidden / 1024:.0f} KiB "
          f"= {(public + hidden) / 1024:.0f} KiB for {functions} functions, "
          f"{(public + hidden) / 1024 / functions:.0f} KiB each (target < 90 KiB each)")


    if args.grading:
        grading(args.grading, args.term, batches)
    if args.report:
        report(args.report, args.term, batches)


def grading(n: int, term: str, runs: int = 3) -> None:
    """Throughput of `harness grade --jobs 2` on reference submissions, median of `runs` batches
    (target: 30 submissions a minute on 2 cores, every submission confined as in real grading)."""
    from harness.grading.grade import grade_all
    from reference.submission import reference_as_student
    rates, per, full = [], [], True
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            subs = [reference_as_student(Path(tmp) / f"student{i:02d}") for i in range(n)]
            start = time.perf_counter()
            graded = grade_all(PROJECT, subs, term, Path(tmp) / "out", jobs=2)
            rates.append(60 * n / (time.perf_counter() - start))
        per += [g.seconds for g in graded]
        full &= all(g.status == "ok" and abs(g.score - graded[0].score) < 1e-9 for g in graded)
    from harness.grading.sandbox import Protections
    protections = Protections.detect().describe()
    torch_import = wall([sys.executable, "-c", "import torch"], 3)
    # A batch of n pays the drivers' and the first sandboxes' start-up (torch imported four times) once: a
    # class-sized batch approaches two slots' worth of submissions at the median time each.
    steady = 2 * 60 / statistics.median(per)
    unconfined = unconfined_cpu(term)
    print(f"grade {n} reference submissions, --jobs 2, median of {runs} batches: "
          f"{statistics.median(rates):.1f} submissions/min (target >= 30); median {statistics.median(per):.1f} s "
          f"per submission ({statistics.median(per) / torch_import:.1f}x a bare import torch, {torch_import:.2f} s "
          f"now), so {steady:.1f} a minute once a long batch has started; all full marks: {full}; every "
          f"protection on: {'OFF' not in protections}\n  {protections}\n"
          f"  the same tests unconfined, in one warm process: {unconfined:.2f} CPU s a submission, so 2 cores "
          f"grade at most {2 * 60 / unconfined:.0f} a minute without confinement")


# The official suite, hidden cases included, run again and again in one process: its tests' own CPU, with
# no worker, wire or sandbox, and nothing imported or warmed up twice (the first run is left out).
UNCONFINED = """
import contextlib, io, statistics, sys, time, pytest
cpu = []
for _ in range(4):
    start = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        pytest.main(["-q", "-p", "no:cacheprovider", "--adapters", "reference.adapters", "--hidden", "--jobs", "1",
                     "--term", sys.argv[1]])
    cpu.append(time.process_time() - start)
print(statistics.median(cpu[1:]))
"""


def unconfined_cpu(term: str) -> float:
    """CPU seconds a submission's tests take with the reference in the test process itself."""
    out = subprocess.run([sys.executable, "-c", UNCONFINED, term], cwd=PROJECT, capture_output=True, text=True,
                         check=True, env=STUDENT_ENV)
    return float(out.stdout.split()[-1])


REPORT_MIX = ["one_hot_matmul", "concatenated_sin_cos", "softmax_without_max", "attention_missing_scale",
              "rope_half_split", "rmsnorm_subtracts_mean", "swiglu_w1_w3_swapped", "missing_lm_head_flops"]


def report(n: int, term: str, runs: int = 3) -> None:
    """The class report for n submissions (target: seconds), median of `runs`, from a synthetic batch:
    the reference, the stubs and known-mistake variants graded once, their result folders copied
    to n names. Then once through `python -m harness report`, imports included."""
    import csv
    import shutil
    from harness.grading.grade import grade_all
    from harness.grading.report import write_report
    from reference.submission import reference_as_student, variant_as_student
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        stubs = tmp / "subs" / "stubs"
        shutil.copytree(PROJECT / "student", stubs / "student", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(PROJECT / "adapters.py", stubs / "adapters.py")
        subs = [reference_as_student(tmp / "subs" / "reference"), stubs,
                *(variant_as_student(v, tmp / "subs" / v) for v in REPORT_MIX)]
        grade_all(PROJECT, subs, term, tmp / "graded", jobs=2)
        with (tmp / "graded" / "grades.csv").open(newline="") as f:
            header, *rows = list(csv.reader(f))
        big = tmp / "big"
        big.mkdir()
        with (big / "grades.csv").open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            for i in range(n):
                row = list(rows[i % len(rows)])
                shutil.copytree(tmp / "graded" / row[0], big / f"{row[0]}-{i:04d}")
                writer.writerow([f"{row[0]}-{i:04d}", *row[1:]])
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            write_report(big, PROJECT)
            times.append(time.perf_counter() - start)
        command, _ = timed([sys.executable, "-m", "harness", "report", str(big)])
        size = (big / "report.html").stat().st_size
    print(f"class report for {n} submissions ({len(rows)} graded, copied): {statistics.median(times):.2f} s in "
          f"process (median of {runs}); `python -m harness report` {command:.2f} s with its imports; "
          f"report.html {size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
