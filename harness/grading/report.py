"""The class report: what a graded batch got wrong, function by function, mistake by mistake.

`python -m harness report GRADED_DIR` (also run at the end of `harness grade` and `harness merge`)
reads only what the grader wrote: grades.csv, and per submission results.json and code.sha256.
It runs no code. It writes report.html (one self-contained page for staff: no script, nothing
fetched) and mistakes.csv (one row per known mistake and function it was named under).

A mistake is *named* in a failure when the report the student got says so: its `Likely cause:`
line holds the mistake's diagnosis (the variant's hint in reference/variants.py), or else its
text holds the phrase of the check that names it (`named_by`). Numbers are MISTAKES.md's.
"""

import ast
import csv
import hashlib
import hmac
import html
import json
import os
import re
import statistics
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from harness.contract import ADAPTERS

TAIL = 0.27              # item discrimination: top 27% minus bottom 27% by total score
CRASH_MARKS = [          # (kind, phrases of the grader's own failure messages), first match wins
    ("not implemented", ("not implemented",)),
    ("timeout", ("did not finish within", "ran out of time", "ran out of its time limit")),
    ("worker died", ("worker process died", "worker died", "could not import")),
    ("raised", ("raised an exception",)),
]
MATCHED = "\nLikely cause: your output matches "  # harness/student_run/diagnose.py: a line of its own
CANNOT_TELL = "known mistakes, which give the same result on this case"  # diagnose.py's: several named, none claimed
RAISED = re.compile(r"(?:Hidden test\. )?\w+: (\w+): ")  # "run_x: ValueError: ..." (a public raise; any class name)
UNCHECKED = "the result cannot be checked: "  # remote.py: a result that cannot cross, told in the submission's words
POSED = "(the code's words):"  # remote.disarm: the submission's text posed as a diagnosis line


# CPython 3.11 before 3.11.8 keeps ast.parse's recursion count per interpreter, not per thread:
# two driver threads parsing at once fail with "AST constructor recursion depth mismatch".
_PARSING = threading.Lock()


PARSED_BYTES = 256 << 10  # ast.parse takes ~500 bytes of memory per byte of source: only this much
PARSED_TOTAL = 512 << 10  # and ~7 us of CPU per byte at worst (red team 12: 250 files of 256 KiB took 7 minutes);
# a real submission holds about 110 KB


def code_hash(folder: Path) -> str:
    """sha256 of a submission's code (adapters.py and student/), normalised: each Python file as
    its syntax tree, so comments, blank lines and formatting do not matter. It runs in the
    trusted grader, so a file over PARSED_BYTES is never parsed, nor any once PARSED_TOTAL bytes have
    been: their non-blank lines are hashed instead (a 16 MiB file of `x = [0, 0, ...]` took 8 GB to parse)."""
    digest = hashlib.sha256()
    student = folder / "student"
    files = [folder / "adapters.py", *(sorted(student.rglob("*")) if student.is_dir() else [])]
    budget = PARSED_TOTAL
    for path in files:
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        data = path.read_bytes()
        if path.suffix == ".py":
            parsed = len(data) <= min(PARSED_BYTES, budget)
            budget -= len(data) if parsed else 0
            tree = _syntax_tree(data) if parsed else None
            data = tree or b"\n".join(line.rstrip() for line in data.splitlines() if line.strip())
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()


def _syntax_tree(source: bytes) -> bytes | None:
    try:
        with _PARSING:
            return ast.dump(ast.parse(source)).encode()
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


# ---------------------------------------------------------------- CSV cells

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet reads a cell that starts so as a formula


def text_cell(text: str) -> str:
    """A text cell of a CSV the grader writes, shown as text by a spreadsheet (OWASP's CSV
    injection advice: a leading quote). Submission names may start with +, - or @."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def from_text_cell(cell: str) -> str:
    """What text_cell was given (no text the grader writes starts with a quote before one of those)."""
    return cell[1:] if cell.startswith("'") and cell[1:].startswith(FORMULA_STARTS) else cell


# ---------------------------------------------------------------- what the grader wrote

POINTS_ENTRY = "points"  # results.json's "FUNCTION: points" entry (harness/grading/grade.py)
STATUS_ENTRY = "grading: status"  # ... and its entry for a status published with the grades

@dataclass
class Result:
    function: str
    test: str          # the test id within its function
    hidden: bool
    passed: bool
    output: str


@dataclass
class Submission:
    name: str
    score: float
    status: str
    tampered: list[str]
    per_function: dict[str, float]
    code_hash: str = ""
    results: list[Result] = field(default_factory=list)
    error: str = ""  # status import-error: what failed to import, with the file and line
    points: dict[str, float] = field(default_factory=dict)  # per function, its maximum on the term graded


def load(graded: Path) -> tuple[list[Submission], float]:
    """Every row of grades.csv with its results.json; and the batch's maximum score."""
    subs, max_score = [], 0.0
    with (graded / "grades.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            max_score = float(row.get("max_score") or 0) or max_score
            sub = Submission(from_text_cell(row["submission"]), float(row["score"]), row["status"],
                             [t for t in from_text_cell(row.get("tampered") or "").split(";") if t],
                             {fn: float(row[fn]) for fn in ADAPTERS if row.get(fn)},
                             error=from_text_cell(row.get("error") or ""))
            folder = graded / sub.name
            if (folder / "code.sha256").is_file():
                sub.code_hash = (folder / "code.sha256").read_text().strip()
            if (folder / "results.json").is_file():
                for t in json.loads((folder / "results.json").read_text()).get("tests", []):
                    if t["name"] == STATUS_ENTRY:  # grades.csv has the status
                        continue
                    function, _, test = t["name"].partition(": ")
                    if test == POINTS_ENTRY:  # a function's points on the term graded: not a test
                        if "max_score" in t:
                            sub.points[function] = float(t["max_score"])
                        continue
                    sub.results.append(Result(function, test, t.get("visibility") == "after_published",
                                              t.get("status") == "passed", t.get("output", "")))
            subs.append(sub)
    return subs, max_score or sum(a.points for a in ADAPTERS.values())


# ---------------------------------------------------------------- naming mistakes

@dataclass
class Mistake:
    number: int
    variant: str
    title: str
    hint: str
    named_by: str


def known_mistakes() -> list[Mistake]:
    """MISTAKES.md's list, from the registry it is generated from."""
    from harness.term.coverage import numbered
    from reference.variants import VARIANTS
    # A title's provenance, "(blind trial 8)", is the maintainers' (MISTAKES.md), not the staff's
    return [Mistake(n, v.name, re.sub(r" \(blind trial \d+\)$", "", v.title), v.hint, v.named_by)
            for n, v in numbered(VARIANTS)]


class Namer:
    """Which known mistakes a failure report names."""

    def __init__(self, mistakes: list[Mistake]):
        self.hints = [(m.hint, m.number) for m in mistakes if m.hint]
        shared = Counter(m.named_by for m in mistakes if m.named_by)
        # A phrase several mistakes share, or one bare word ("shape", "device"), names a kind of
        # check rather than one mistake: it is not counted.
        self.phrases = [(m.named_by, m.number) for m in mistakes if m.named_by and shared[m.named_by] == 1
                        and not re.fullmatch(r"[a-z]+", m.named_by)]
        self._cache: dict[str, frozenset[int]] = {}

    def diagnosed(self, output: str) -> frozenset[int]:
        """The known mistake the report's `Likely cause:` line names ("your output matches <hint>"),
        as the grader writes it on a wrong result."""
        at = output.rfind(MATCHED)
        if at < 0:
            return frozenset()
        cause = output[at + len(MATCHED):]
        if cause not in self._cache:
            self._cache[cause] = frozenset(n for hint, n in self.hints if cause.startswith(hint))
        return self._cache[cause]

    def phrased(self, output: str) -> frozenset[int]:
        """Mistakes whose check's phrase the report holds, outside a diagnosis that names several and claims
        none (TA trial 9: the hints it lists hold their own phrases, and one was counted)."""
        at = output.rfind(MATCHED)
        if at >= 0 and re.match(rf"\d+ {CANNOT_TELL}", output[at + len(MATCHED):]):
            output = output[:at]
        return frozenset(n for phrase, n in self.phrases if phrase in output)

    def named(self, outputs: list[str]) -> set[int]:
        """The mistakes one function's failed reports name, for one submission. A diagnosis beats a
        phrase: where any report gives one, phrases (which some checks print as a general hint,
        "0.5 means MACs were counted") are not counted. A report of an exception the submission
        raised carries its message, which the submission writes: it names nothing; nor does a result
        that cannot be checked, which names itself (its class) in the submission's words, nor a report
        that quotes the submission posing as a diagnosis (a returned dict's key, say)."""
        outputs = [o for o in outputs if not RAISED.match(o) and UNCHECKED not in o and POSED not in o]
        diagnosed = set().union(*map(self.diagnosed, outputs))
        return diagnosed or set().union(*map(self.phrased, outputs))


def crash_kind(output: str) -> str | None:
    """How a failed test crashed, from the grader's message; None for a wrong result."""
    head = output[:400]
    if head.startswith(("not run", "Hidden test. not run")):  # the submission's time ran out before it
        return "not run"
    for kind, marks in CRASH_MARKS:
        if any(mark in head for mark in marks):
            return kind
    return "raised" if RAISED.match(head) else None


# ---------------------------------------------------------------- the analysis

@dataclass
class Item:
    """One test across the class."""
    function: str
    test: str
    hidden: bool
    passed: int = 0
    taken: int = 0
    facility: float = 0.0
    discrimination: float | None = None


@dataclass
class Analysis:
    subs: list[Submission]
    max_score: float
    functions: list[str]
    mistakes: dict[int, Mistake]
    named: dict[tuple[int, str], list[str]]          # (mistake, function) -> submissions
    crashes: dict[str, Counter]                      # function -> kind -> submissions
    items: list[Item]
    public_hidden: dict[str, tuple[float | None, float | None]]
    hidden_gaps: list[tuple[str, list[str]]]         # submission, functions
    identical: list[list[str]]
    starter: list[str]                               # submissions identical to the starter code
    unimportable: list[Submission] = field(default_factory=list)  # status import-error: apart from the rest
    points: dict[str, float] = field(default_factory=dict)        # per function, on the term graded


UNIMPORTABLE = "import-error"  # its every test failed for one reason: it says nothing about any function


def analyse(subs: list[Submission], max_score: float, mistakes: list[Mistake], starter_hash: str = "",
            depends: dict[str, set[str]] | None = None) -> Analysis:
    """`depends`: function -> the functions its code uses (harness.term.coverage.depends_on, the default)."""
    namer = Namer(mistakes)
    if depends is None:
        from harness.term.coverage import depends_on
        depends = depends_on()
    every, subs = subs, [s for s in subs if s.status != UNIMPORTABLE]
    functions = [fn for fn in ADAPTERS if any(fn in s.per_function for s in subs)]
    functions += sorted({r.function for s in subs for r in s.results} - set(functions))
    named: dict[tuple[int, str], set[str]] = defaultdict(set)
    crashes: dict[str, Counter] = defaultdict(Counter)
    items: dict[tuple[str, str], Item] = {}
    counts = defaultdict(lambda: [0, 0, 0, 0])  # function -> public passed, public run, hidden passed, hidden run
    gaps = []
    for s in subs:
        kinds: dict[str, set[str]] = defaultdict(set)
        failed: dict[str, list[str]] = defaultdict(list)  # function -> its public failures' reports
        public_fail, hidden_fail, has_public = set(), set(), set()
        for r in s.results:
            item = items.get((r.function, r.test))
            if item is None:
                item = items[(r.function, r.test)] = Item(r.function, r.test, r.hidden)
            item.taken += 1
            item.passed += r.passed
            c = counts[r.function]
            c[2 * r.hidden] += r.passed
            c[2 * r.hidden + 1] += 1
            if not r.hidden:
                has_public.add(r.function)
            if r.passed:
                continue
            kind = crash_kind(r.output)
            if kind is not None:
                kinds[r.function].add(kind)
            # no verdict; nor is a hidden case that ran out of time a gap (a TA's timed-out student was flagged
            # in 9 functions as if it answered from the public fixtures)
            if kind != "not run" and not (r.hidden and kind == "timeout"):
                (hidden_fail if r.hidden else public_fail).add(r.function)
            if not r.hidden:
                failed[r.function].append(r.output)
        for fn, outputs in failed.items():
            for n in namer.named(outputs):
                named[(n, fn)].add(s.name)
        for fn, ks in kinds.items():
            crashes[fn].update(ks)
        # Public tests pass and its own hidden cases fail while every function it uses passes: a failure
        # of RoPE's makes the LM's hidden cases fail too, and is RoPE's to flag.
        failing = hidden_fail | public_fail
        gap = sorted((fn for fn in (hidden_fail - public_fail) & has_public if not depends.get(fn, set()) & failing),
                     key=functions.index)
        if gap:
            gaps.append((s.name, gap))

    ranked = sorted((s for s in subs if s.results), key=lambda s: s.score)
    tail = max(1, round(TAIL * len(ranked))) if len(ranked) >= 2 else 0
    bottom, top = {s.name for s in ranked[:tail]}, {s.name for s in ranked[len(ranked) - tail:]}
    passed_by: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    if tail:
        for s in subs:
            side = 0 if s.name in top else 1 if s.name in bottom else None
            if side is None:
                continue
            for r in s.results:
                passed_by[(r.function, r.test)][side] += r.passed
    for key, item in items.items():
        item.facility = item.passed / item.taken
        if tail:
            up, down = passed_by[key]
            item.discrimination = (up - down) / tail

    by_hash = defaultdict(list)
    for s in every:
        if s.code_hash:
            by_hash[s.code_hash].append(s.name)
    points = {fn: p for s in subs for fn, p in s.points.items()}
    return Analysis(
        every, max_score, functions, {m.number: m for m in mistakes},
        {k: sorted(v) for k, v in sorted(named.items(), key=lambda kv: (kv[0][0], functions.index(kv[0][1])))},
        crashes, sorted(items.values(), key=lambda i: (functions.index(i.function), i.hidden)),
        {fn: (c[0] / c[1] if c[1] else None, c[2] / c[3] if c[3] else None) for fn, c in counts.items()},
        gaps, sorted(g for h, g in by_hash.items() if len(g) > 1 and h != starter_hash),
        by_hash.get(starter_hash, []) if starter_hash else [], [s for s in every if s.status == UNIMPORTABLE], points)


# ---------------------------------------------------------------- outputs

def pseudonyms(graded: Path, names: list[str]) -> dict[str, str]:
    """Stable pseudonyms: an HMAC of each name under a key kept in the graded folder (so the same
    folder always gives the same ones, and a list of names cannot be hashed to undo them)."""
    key_file = graded / ".report-key"
    if not key_file.is_file():
        key_file.write_bytes(os.urandom(32))
        key_file.chmod(0o600)
    key = key_file.read_bytes()
    return {n: "student-" + hmac.new(key, n.encode(), "sha256").hexdigest()[:8] for n in names}


def write_report(graded: Path, project: Path | None = None, anonymise: bool = False) -> Path:
    """report.html and mistakes.csv in `graded`; `project`'s adapters.py and student/ are the
    starter code, whose copies are not flagged as identical. `anonymise`: report-anonymised.html and
    mistakes-anonymised.csv beside them (TA trial 10: the pseudonyms overwrote the named report)."""
    suffix = "-anonymised" if anonymise else ""
    subs, max_score = load(graded)
    if anonymise:
        alias = pseudonyms(graded, [s.name for s in subs])
        for s in subs:
            s.name = alias[s.name]
    starter = code_hash(project) if project is not None and (project / "adapters.py").is_file() else ""
    a = analyse(subs, max_score, known_mistakes(), starter)
    with (graded / f"mistakes{suffix}.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["mistake", "variant", "title", "function", "count", "submissions"])
        for (n, fn), names in a.named.items():
            writer.writerow([n, *map(text_cell, (a.mistakes[n].variant, a.mistakes[n].title, fn)), len(names),
                             text_cell(";".join(names))])
    path = graded / f"report{suffix}.html"
    path.write_text(render(a, graded.name))
    return path


STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;max-width:1180px;color:#222;padding:0 1em}
h1{margin-bottom:.2em}h2{margin-top:1.8em;border-bottom:2px solid #ccd;padding-bottom:.2em}h3{margin:1.4em 0 .3em}
.staff{background:#fff4d6;border:1px solid #e6c65c;padding:.5em .8em;border-radius:4px}
table{border-collapse:collapse;margin:.4em 0 1em}th,td{border-bottom:1px solid #e3e3ea;padding:3px 8px;text-align:left;vertical-align:middle}
th{background:#f3f3f8;font-weight:600}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.bar{display:inline-block;width:110px;height:11px;background:#ececf3;border-radius:2px;vertical-align:middle;margin-right:6px}
.bar span{display:block;height:100%;background:#4a78c2;border-radius:2px}.bar.hidden span{background:#8a5cc2}
.bar.count span{background:#d0743c}.gap{color:#b3261e;font-weight:600}.muted{color:#777}
svg text{font:10px system-ui,sans-serif;fill:#444}svg rect.b{fill:#4a78c2}
details summary{cursor:pointer;color:#345}ul.names{columns:4;margin:.2em 0}code{font-size:12px}
.flag{color:#b3261e}
"""


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def _bar(x: float | None, kind: str = "") -> str:
    if x is None:
        return '<span class="muted">n/a</span>'
    return f'<span class="bar {kind}"><span style="width:{100 * x:.1f}%"></span></span>{_pct(x)}'


def histogram(values: list[float], hi: float, width: int, height: int, bins: int = 10, axis: bool = True) -> str:
    """An inline SVG histogram of values in [0, hi]."""
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, max(0, int(bins * v / hi))) if hi > 0 else 0] += 1
    top = max(counts, default=0) or 1
    pad = 14 if axis else 0
    w, h = (width - 2 * pad) / bins, height - pad
    bars = []
    for i, c in enumerate(counts):
        bh = h * c / top
        lo_edge, hi_edge = hi * i / bins, hi * (i + 1) / bins
        bars.append(f'<rect class="b" x="{pad + i * w + 0.5:.1f}" y="{h - bh:.1f}" width="{max(w - 1, 1):.1f}" '
                    f'height="{bh:.1f}"><title>{lo_edge:g} to {hi_edge:g}: {c}</title></rect>')
    labels = (f'<line x1="{pad}" y1="{h}" x2="{width - pad}" y2="{h}" stroke="#999"/>'
              f'<text x="{pad}" y="{height - 2}">0</text>'
              f'<text x="{width - pad}" y="{height - 2}" text-anchor="end">{hi:g}</text>'
              f'<text x="{pad - 2}" y="10" text-anchor="end">{top}</text>') if axis else ""
    return (f'<svg class="plot" role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'xmlns="http://www.w3.org/2000/svg">{"".join(bars)}{labels}</svg>')


def _names(names: list[str]) -> str:
    if len(names) <= 6:
        return ", ".join(_e(n) for n in names)
    return (f"<details><summary>{len(names)} submissions</summary><ul class=\"names\">"
            + "".join(f"<li>{_e(n)}</li>" for n in names) + "</ul></details>")


def render(a: Analysis, title: str) -> str:
    graded = [s for s in a.subs if s.results and s.status != UNIMPORTABLE]
    n = len(graded) or 1
    out = [f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Class report: {_e(title)}</title>'
           f"<style>{STYLE}</style></head><body>",
           f"<h1>Class report: {_e(title)}</h1>",
           '<p class="staff">For course staff only. Students get their own results.json; this page compares the '
           "whole class. Flags are for a person to look at, never penalties.</p>"]
    # -- summary
    scores = [s.score for s in a.subs]
    statuses = Counter(s.status for s in a.subs)
    out.append('<section id="summary"><h2>Summary</h2>')
    out.append(f"<p>{len(a.subs)} submissions ({', '.join(f'{c} {_e(k)}' for k, c in statuses.most_common())}); "
               f"out of {a.max_score:g} points: mean {statistics.fmean(scores) if scores else 0:.2f}, "
               f"median {statistics.median(scores) if scores else 0:.2f}.</p>")
    out.append(f"<figure><figcaption>Total scores</figcaption>{histogram(scores, a.max_score, 560, 170, 20)}</figure>")
    out.append("</section>")
    # -- per function table
    out.append('<section id="functions"><h2>Per function</h2>'
               '<p class="muted">Pass rates pool every test of the function over the class. <b>Named</b>: '
               "submissions whose failure reports name a known mistake here.</p>"
               '<table id="function-table"><thead><tr><th>function</th><th class="num">points</th>'
               '<th class="num">mean</th><th>score distribution</th><th>public tests passed</th>'
               "<th>hidden tests passed</th><th class=\"num\">public pass, hidden fail</th><th>named mistakes</th><th>crashes</th>"
               "<th>tests failed by over half</th></tr></thead><tbody>")
    by_fn_items = defaultdict(list)
    for item in a.items:
        by_fn_items[item.function].append(item)
    by_fn_named = defaultdict(list)
    for (m, fn), names in a.named.items():
        by_fn_named[fn].append((m, names))
    gaps = Counter(fn for _, fns in a.hidden_gaps for fn in fns)
    for fn in a.functions:
        points = a.points.get(fn, ADAPTERS[fn].points if fn in ADAPTERS else 0)
        values = [s.per_function.get(fn, 0.0) for s in a.subs if s.status != UNIMPORTABLE]
        pub, hid = a.public_hidden.get(fn, (None, None))
        gap = pub is not None and hid is not None and pub - hid >= 0.1
        hard = [i for i in by_fn_items[fn] if i.taken and i.facility < 0.5]
        crashes = ", ".join(f"{_e(k)} {c}" for k, c in a.crashes[fn].most_common()) or '<span class="muted">none</span>'
        named = ", ".join(f"#{m} ({len(names)})" for m, names in by_fn_named[fn]) or '<span class="muted">none</span>'
        out.append(f'<tr data-function="{_e(fn)}"><td><a href="#fn-{_e(fn)}"><code>{_e(fn)}</code></a></td>'
                   f'<td class="num">{points:g}</td><td class="num">{statistics.fmean(values) if values else 0:.2f}</td>'
                   f"<td>{histogram(values, points or 1, 130, 30, 10, axis=False)}</td>"
                   f"<td>{_bar(pub)}</td><td{' class=gap' if gap else ''}>{_bar(hid, 'hidden')}</td>"
                   f'<td class="num{" gap" if gaps[fn] else ""}" data-gap="{_e(fn)}">{gaps[fn]}</td>'
                   f"<td>{named}</td><td>{crashes}</td><td class=\"num\">{len(hard)}</td></tr>")
    out.append("</tbody></table>")
    for fn in a.functions:
        out.append(f'<section class="function" id="fn-{_e(fn)}"><h3><code>{_e(fn)}</code></h3>')
        if by_fn_named[fn]:
            out.append("<table><thead><tr><th>mistake</th><th class=\"num\">submissions</th><th></th>"
                       "<th>who</th></tr></thead><tbody>")
            for m, names in by_fn_named[fn]:
                out.append(f"<tr><td>#{m} {_e(a.mistakes[m].title)}</td>"
                           f'<td class="num count" data-mistake="{m}" data-function="{_e(fn)}">{len(names)}</td>'
                           f'<td><span class="bar count"><span style="width:{100 * len(names) / n:.1f}%"></span></span>'
                           f"</td><td>{_names(names)}</td></tr>")
            out.append("</tbody></table>")
        else:
            out.append('<p class="muted">No known mistake named.</p>')
        if a.crashes[fn]:
            out.append("<p>Crashes (submissions with at least one): "
                       + ", ".join(f"{_e(k)} {c}" for k, c in a.crashes[fn].most_common()) + "</p>")
        hard = [i for i in by_fn_items[fn] if i.taken and i.facility < 0.5]
        if hard:
            out.append("<p>Failed by more than half the class: " + ", ".join(
                f"<code>{_e(i.test)}</code> ({_pct(1 - i.facility)})" for i in hard) + "</p>")
        out.append("</section>")
    out.append("</section>")
    # -- per mistake
    totals = defaultdict(set)
    fns = defaultdict(list)
    for (m, fn), names in a.named.items():
        totals[m].update(names)
        fns[m].append(fn)
    out.append('<section id="mistakes"><h2>Per mistake</h2>')
    if totals:
        out.append('<table id="mistake-table"><thead><tr><th class="num">#</th><th>mistake</th>'
                   '<th class="num">submissions</th><th></th><th>functions</th></tr></thead><tbody>')
        for m in sorted(totals, key=lambda m: (-len(totals[m]), m)):
            out.append(f'<tr><td class="num">{m}</td><td>{_e(a.mistakes[m].title)} <span class="muted">'
                       f"(<code>{_e(a.mistakes[m].variant)}</code>)</span></td>"
                       f'<td class="num" data-mistake-total="{m}">{len(totals[m])}</td>'
                       f'<td><span class="bar count"><span style="width:{100 * len(totals[m]) / n:.1f}%"></span></span></td>'
                       f"<td>{', '.join(f'<code>{_e(f)}</code>' for f in fns[m])}</td></tr>")
        out.append("</tbody></table>")
    else:
        out.append('<p class="muted">No known mistake was named in any failure.</p>')
    out.append("</section>")
    # -- item analysis
    out.append('<section id="items"><h2>Item analysis</h2><p class="muted">Facility: the share of submissions '
               f"that pass. Discrimination: the pass rate among the top {TAIL:.0%} by total score minus the bottom "
               f"{TAIL:.0%}. Tests to rewrite next term: those nobody fails, everybody fails, or that stronger "
               "submissions fail more often than weaker ones.</p>")
    groups = [("Nobody fails", [i for i in a.items if i.taken and i.passed == i.taken]),
              ("Everybody fails", [i for i in a.items if i.taken and i.passed == 0]),
              ("Negative discrimination", [i for i in a.items if (i.discrimination or 0) < 0])]
    for label, group in groups:
        out.append(f"<h3>{label}: {len(group)}</h3>")
        if group:
            out.append(f"<details><summary>{len(group)} tests</summary><ul>"
                       + "".join(f"<li><code>{_e(i.function)}: {_e(i.test)}</code></li>" for i in group)
                       + "</ul></details>")
    out.append(f"<details><summary>Every test ({len(a.items)})</summary><table id=\"item-table\"><thead><tr>"
               '<th>function</th><th>test</th><th>facility</th><th class="num">discrimination</th></tr></thead><tbody>')
    for i in a.items:
        d = "n/a" if i.discrimination is None else f"{i.discrimination:+.2f}"
        out.append(f"<tr><td><code>{_e(i.function)}</code></td><td><code>{_e(i.test)}</code>"
                   f"{' <span class=muted>(hidden)</span>' if i.hidden else ''}</td><td>{_bar(i.facility)}</td>"
                   f'<td class="num">{d}</td></tr>')
    out.append("</tbody></table></details></section>")
    # -- flags
    out.append('<section id="flags"><h2>Flags</h2><p class="muted">For a person to look at; none changes a score.</p>')
    out.append(f"<h3>Public tests pass, hidden cases fail: {len(a.hidden_gaps)}</h3>")
    if a.hidden_gaps:
        out.append('<table id="gap-table"><tbody>' + "".join(
            f"<tr><td>{_e(name)}</td><td>{', '.join(f'<code>{_e(f)}</code>' for f in fs)}</td></tr>"
            for name, fs in a.hidden_gaps) + "</tbody></table>")
    out.append(f"<h3>Identical code: {len(a.identical)} group{'' if len(a.identical) == 1 else 's'}</h3>")
    out.append('<p class="muted">Same adapters.py and student/ once comments and formatting are ignored.'
               + (f" {len(a.starter)} more submitted the starter code unchanged." if a.starter else "") + "</p>")
    if a.identical:
        out.append('<ul id="identical">' + "".join(f"<li>{', '.join(_e(x) for x in g)}</li>" for g in a.identical)
                   + "</ul>")
    tampered = [s for s in a.subs if s.tampered]
    out.append(f"<h3>Official files changed: {len(tampered)}</h3>")
    if tampered:
        out.append("<ul>" + "".join(f"<li>{_e(s.name)}: {', '.join(f'<code>{_e(t)}</code>' for t in s.tampered)}</li>"
                                    for s in tampered) + "</ul>")
    out.append(f"<h3>Could not be imported: {len(a.unimportable)}</h3>")
    out.append('<p class="muted">Every test failed at the import: these submissions count in the scores above, '
               "and nowhere per function.</p>")
    if a.unimportable:
        out.append('<ul id="import-errors">' + "".join(f"<li>{_e(s.name)}: <code>{_e(s.error)}</code></li>"
                                                      for s in a.unimportable) + "</ul>")
    trouble = [s for s in a.subs if s.status not in ("ok", UNIMPORTABLE)]
    out.append(f"<h3>Not graded normally: {len(trouble)}</h3>")
    if trouble:
        out.append("<ul>" + "".join(f"<li class=\"{'flag' if s.status == 'grader-error' else ''}\">{_e(s.name)}: "
                                    f"{_e(s.status)}</li>" for s in trouble) + "</ul>")
    out.append("</section></body></html>\n")
    return "\n".join(out)
