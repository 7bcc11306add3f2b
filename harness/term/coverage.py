"""The mistake-coverage table: which tests catch each known mistake, and is it named.

For every variant in reference/variants.py the student suite runs once. A mistake is
caught when any test fails, and named when a failure report says what it is (the
variant's diagnosis hint, or the phrase of the probe that names it).
"""

import ast
import functools
import multiprocessing
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.term.suite import SuiteRun, run_suite

NAMED_TARGET = 0.8


@dataclass
class Row:
    variant: str
    mistake: int | None
    correct: bool
    caught_by: list[str]
    named: bool
    diagnosis: str
    named_in: list[str]  # contract functions with a failing test whose report names this mistake


def coverage(project: Path, names: list[str] | None = None, extra: tuple = (), jobs: int | None = None) -> list[Row]:
    """One suite run per variant, spread over `jobs` worker processes (default: one per CPU).

    A variant runs only the tests whose adapter calls used one of the pieces it patches
    (found by one spied reference run): every other test runs the reference's code and
    passes as the reference does.

    Workers are spawned, not forked: a fork of a process whose OpenMP threads have run
    (any torch op with more than one thread) hangs at its first parallel op. Each worker
    imports torch once, keeps to one thread (two workers on two cores would otherwise
    fight over them) and then runs many variants."""
    from reference.variants import VARIANTS  # instructor-side
    wanted = [v.name for v in VARIANTS.values() if not names or v.name in names]
    used = reach(project, extra)
    tasks = [(project, name, extra, [t for t, pieces in used.items() if VARIANTS[name].reaches(pieces)])
             for name in wanted]
    jobs = min(jobs or len(os.sched_getaffinity(0)), len(wanted))
    if jobs <= 1:
        return [_row(*task) for task in tasks]
    with multiprocessing.get_context("spawn").Pool(jobs, initializer=_one_thread) as pool:
        return pool.starmap(_row, tasks, chunksize=1)


def reach(project: Path, extra: tuple = ()) -> dict[str, set[str]]:
    """test node id -> the variant-patched pieces its adapter calls used, from one run of
    the suite against the reference with every such piece spied on."""
    from reference.variants import spying

    class PerTest:
        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_protocol(self, item):
            used.clear()
            try:
                return (yield)
            finally:
                found[item.nodeid] = set(used)

    found: dict[str, set[str]] = {}
    with spying() as used:
        run = run_suite(project, "--adapters", "reference.adapters", *extra, quiet=True, plugins=(PerTest(),))
    if run.exit_code != 0:
        raise RuntimeError(f"the reference fails its own suite:\n{run.output[-3000:]}")
    return found


def _one_thread():
    import torch
    torch.set_num_threads(1)


def _row(project: Path, name: str, extra: tuple, tests: list[str] | None) -> Row:
    """`tests`: the node ids to run (None: the whole suite; empty: none can differ)."""
    from reference.variants import VARIANTS
    v = VARIANTS[name]
    run = SuiteRun() if tests == [] else \
        run_suite(project, "--adapters", f"reference.variants:{v.name}", *extra, quiet=True, tests=tests)
    caught = sorted({n.split("::")[-1] for n in run.failed})
    naming = [n for n, m in run.messages.items() if (v.hint and v.hint in m) or (v.named_by and v.named_by in m)]
    named_in = sorted({run.adapters.get(n) for n in naming} - {None})
    number = dict((v.name, n) for n, v in numbered(VARIANTS)).get(name)
    return Row(v.name, number, v.correct, caught, bool(naming), _diagnosis_line(run, (v.hint, v.named_by)), named_in)


def numbered(variants: dict) -> list[tuple[int, object]]:
    """(number, variant) for every known mistake: its `mistake=` number, else the next free one
    in the order variants.py registers them."""
    mistakes = [v for v in variants.values() if not v.correct]
    following = max((v.mistake for v in mistakes if v.mistake), default=0) + 1
    out = []
    for v in mistakes:
        if v.mistake is None:
            out.append((following, v))
            following += 1
        else:
            out.append((v.mistake, v))
    return sorted(out, key=lambda nv: nv[0])


REFERENCE = Path(__file__).resolve().parents[2] / "reference"
NOT_CODE = ("adapters.py", "variants.py", "submission.py", "__init__.py")


@functools.cache
def uses(reference: Path = REFERENCE) -> dict[str, frozenset[str]]:
    """'module.Symbol' of the reference -> every 'module.Symbol' its definition names, transitively
    (a class's bases and methods included). Read from the source, nothing imported or run."""
    direct: dict[str, set[str]] = {}
    for path in sorted(reference.glob("*.py")):
        if path.name in NOT_CODE:
            continue
        module, tree = path.stem, ast.parse(path.read_text())
        own = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        modules, names = {}, {}  # `from reference import rope as r` -> r: rope; `from reference.rope import X`
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module == "reference":
                modules.update({a.asname or a.name: a.name for a in node.names})
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("reference."):
                names.update({a.asname or a.name: f"{node.module[10:]}.{a.name}" for a in node.names})
        for node in tree.body:
            if node.__class__ not in (ast.FunctionDef, ast.ClassDef):
                continue
            found = set()
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and sub.id in own:
                    found.add(f"{module}.{sub.id}")
                elif isinstance(sub, ast.Name) and sub.id in names:
                    found.add(names[sub.id])
                elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id in modules:
                    found.add(f"{modules[sub.value.id]}.{sub.attr}")
            direct[f"{module}.{node.name}"] = found - {f"{module}.{node.name}"}
    closed = {}
    for symbol in direct:
        seen, todo = set(), [symbol]
        while todo:
            for used in direct.get(todo.pop(), ()):
                if used not in seen:
                    seen.add(used)
                    todo.append(used)
        closed[symbol] = frozenset(seen - {symbol})
    return closed


def depends_on(reference: Path = REFERENCE) -> dict[str, set[str]]:
    """Contract function -> the other functions whose code its own code uses (run_transformer_lm ->
    run_rope, run_softmax, ...): a function whose glue calls a symbol that F's symbols use. Two
    functions of the same symbol (run_transformer_lm, get_transformer_lm) are peers, not dependencies;
    but an entry point F's glue calls (AdamW, the schedule) stands for its drills, which carry its tests
    (a training run with a wrong schedule fails because run_lr_schedule does), and a training run uses
    every function that shares a piece with it (its loss is run_cross_entropy's), builders aside (it
    starts from given weights); so do the training steps (names_own_pieces_only), whose loss, clipping, AdamW and
    schedule are others' (blind trial 8: a loss off by a constant was told it was clipping in them)."""
    from harness.contract import ADAPTERS
    used = uses(reference)
    out = {}
    for name, a in ADAPTERS.items():
        reached = set().union(*(used.get(s, ()) for s in a.symbols)) - a.symbols
        out[name] = {other for other, b in ADAPTERS.items() if other != name and b.symbols & reached}
        out[name] |= {drill for b in ADAPTERS.values() if b.entry_point and b.symbols & a.symbols
                      and name not in b.drills for drill in b.drills}
        if a.check == "train" or a.names_own_pieces_only:  # a run of the pieces: each piece's failure explains its
            out[name] |= {other for other, b in ADAPTERS.items() if other != name and b.symbols & a.symbols
                          and not b.builder and not b.entry_point and b.check != "train"}
            out[name] |= {drill for b in ADAPTERS.values() if b.entry_point and b.symbols & a.symbols
                          for drill in b.drills if drill != name}
    return out


def home(variant, reference: Path = REFERENCE) -> str | None:
    """The contract function a mistake belongs to: the first (in course order) whose glue calls a piece
    it patches, else the first whose code uses one; None if none does."""
    from harness.contract import ADAPTERS
    pieces, used = set(variant.patches), uses(reference)
    direct = [n for n, a in ADAPTERS.items() if a.symbols & pieces]
    within = [n for n, a in ADAPTERS.items() if pieces & set().union(*(used.get(s, ()) for s in a.symbols))]
    return (direct or within or [None])[0]


def render_mistakes(variants: dict) -> str:
    """MISTAKES.md: the numbered list of known mistakes, generated from reference/variants.py, in course
    order: under each unit, by the function it belongs to (`home`), then by number."""
    from harness.contract import ADAPTERS, UNITS
    lines = ["# Known mistakes", "",
             "Generated from `reference/variants.py` by `python -m harness contract`; do not edit by hand.",
             "Each entry is a variant of the reference that the selftest runs the student suite against:",
             "it must fail, and the failure report should name it. *Diagnosis* is what a report says",
             "when a result matches the mistake; *named by* is the phrase of the check that names it.",
             "Run one with `pytest --adapters reference.variants:NAME`. Numbers never change: a new",
             "mistake takes the next one, and is listed under the unit of its function."]
    order = list(ADAPTERS)
    placed = sorted(((home(v), n, v) for n, v in numbered(variants)),
                    key=lambda hnv: (order.index(hnv[0]) if hnv[0] else len(order), hnv[1]))
    sections = [(u.title, [(n, v) for h, n, v in placed if h and ADAPTERS[h].unit == u.key]) for u in UNITS]
    for title, entries in sections + [("Other", [(n, v) for h, n, v in placed if not h])]:
        lines += ["", f"## {title}", ""] if entries else []
        for n, v in entries:
            lines.append(f"- **{n}. {v.title}** (`{v.name}`)")
            if v.hint:
                lines.append(f"  Diagnosis: {v.hint}.")
            if v.named_by:
                lines.append(f"  Named by: \"{v.named_by}\".")
    lines += ["", "## Correct alternatives", "", "Each must pass every test with no diagnosis.", ""]
    lines += [f"- **{v.title}** (`{v.name}`)" for v in variants.values() if v.correct]
    return "\n".join(lines) + "\n"


def _diagnosis_line(run, phrases: tuple[str, str]) -> str:
    """The report line that names the mistake (its hint or named_by phrase), else the report's
    diagnosis, else the last line of the first report."""
    lines = [line.removeprefix("E ").strip() for message in run.messages.values() for line in message.splitlines()]
    lines = [line for line in lines if line and not line.startswith(("raise ", ">", "def ", "return "))]  # not source
    for line in lines:
        if any(phrase and phrase in line for phrase in phrases):
            return line.removeprefix("Likely cause: ")
    for line in lines:
        if line.startswith("Likely cause:"):
            return line.removeprefix("Likely cause: ")
    first = next(iter(run.messages.values()), "").strip()
    return first.splitlines()[-1].strip() if first else ""


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width].rsplit(" ", 1)[0] + " ..."


def render(rows: list[Row]) -> str:
    """The table: known mistakes by number, then correct alternatives."""
    lines = ["caught: how many tests fail. named: whether a failure report says what the mistake is.",
             "Then the first two failing tests, and (->) the report line that names it, or else its",
             "diagnosis or last line. Correct alternatives must pass every test.", "",
             f"{'#':>3}  {'variant':<32} {'caught':>6}  {'named':<5}  first tests that failed / diagnosis"]
    rows = sorted(rows, key=lambda r: (r.correct, r.mistake or 0))
    for r in rows:
        if r.correct:
            verdict = "passes" if not r.caught_by else f"FAILS {len(r.caught_by)}"
            lines.append(f"{'ok':>3}  {r.variant:<32} {verdict:>6}  {'':<5}  correct alternative")
            continue
        number = str(r.mistake) if r.mistake else "-"
        lines.append(f"{number:>3}  {r.variant:<32} {len(r.caught_by):>6}  {'yes' if r.named else 'no':<5}  "
                     f"{', '.join(r.caught_by[:2])}")
        if r.diagnosis:
            lines.append(f"{'':>3}  {'':<32} {'':>6}  {'':<5}  -> {_clip(r.diagnosis, 110)}")
    mistakes = [r for r in rows if not r.correct]
    caught = sum(bool(r.caught_by) for r in mistakes)
    named = sum(r.named for r in mistakes)
    lines.append(f"caught {caught}/{len(mistakes)} mistakes; named {named}/{len(mistakes)} "
                 f"({100 * named / max(len(mistakes), 1):.0f}%, target {NAMED_TARGET:.0%})")
    return "\n".join(lines)
