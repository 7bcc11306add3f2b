"""The mistake-coverage table: which tests catch each known mistake, and is it named.

For every variant in reference/variants.py the student suite runs once. A mistake is
caught when any test fails, and named when a failure report says what it is (the
variant's diagnosis hint, or the phrase of the probe that names it).
"""

from dataclasses import dataclass
from pathlib import Path

from harness.suite import run_suite

NAMED_TARGET = 0.8


@dataclass
class Row:
    variant: str
    mistake: int | None
    correct: bool
    caught_by: list[str]
    named: bool
    diagnosis: str


def coverage(project: Path, names: list[str] | None = None, extra: tuple = ()) -> list[Row]:
    from reference.variants import VARIANTS  # instructor-side
    rows = []
    for v in VARIANTS.values():
        if names and v.name not in names:
            continue
        run = run_suite(project, "--adapters", f"reference.variants:{v.name}", *extra, quiet=True)
        caught = sorted({n.split("::")[-1] for n in run.failed})
        named = run.mentions(v.hint) or run.mentions(v.named_by)
        said = _diagnosis_line(run)
        rows.append(Row(v.name, v.mistake, v.correct, caught, named, said))
    return rows


def _diagnosis_line(run) -> str:
    """The report's diagnosis if it gave one, else the last line of the first report."""
    for message in run.messages.values():
        for line in message.splitlines():
            if line.startswith("Likely cause:"):
                return line.removeprefix("Likely cause: ")
    first = next(iter(run.messages.values()), "")
    return first.splitlines()[-1] if first else ""


def render(rows: list[Row]) -> str:
    lines = [f"{'#':>3}  {'variant':<32} {'caught':>6}  {'named':<5}  first tests that failed / diagnosis"]
    for r in rows:
        if r.correct:
            verdict = "passes" if not r.caught_by else f"FAILS {len(r.caught_by)}"
            lines.append(f"{'ok':>3}  {r.variant:<32} {verdict:>6}  {'':<5}  correct alternative")
            continue
        number = str(r.mistake) if r.mistake else "-"
        lines.append(f"{number:>3}  {r.variant:<32} {len(r.caught_by):>6}  {'yes' if r.named else 'no':<5}  "
                     f"{', '.join(r.caught_by[:2])}")
        if r.diagnosis:
            lines.append(f"{'':>3}  {'':<32} {'':>6}  {'':<5}  -> {r.diagnosis[:110]}")
    mistakes = [r for r in rows if not r.correct]
    caught = sum(bool(r.caught_by) for r in mistakes)
    named = sum(r.named for r in mistakes)
    lines.append(f"caught {caught}/{len(mistakes)} mistakes; named {named}/{len(mistakes)} "
                 f"({100 * named / max(len(mistakes), 1):.0f}%, target {NAMED_TARGET:.0%})")
    return "\n".join(lines)
