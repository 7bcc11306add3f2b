"""Which tests earn a function's points: the one rule the grader and the progress table share.

A function's points split evenly, in 1/10,000ths (so the shares add up exactly), over its tests
that carry points: its public tests and its own hidden cases. A report-only verdict (a probe
that runs in the submission's own process, README "Grading") carries none.

Points are earned on values the student has not seen:
- a public case with its hidden twin (the same case on fresh values) loaded: the twin holds
  the public case's share, and earns it when the twin passes, whatever the public case did.
  So a public verdict never moves a score (a lookup of the public answers laid over buggy code
  earns what the buggy code earns), and the grader can show it before grades are published;
- a test that is not an output or gradient check (must-raise, property, probe) earns once the
  function is proved to work: an output check of it passed on fresh values (for a module
  builder: its forward against a function's fixtures and their twins, a `forward_values` test).
  Code that raises on every input, returns anything of the right shape, or answers from the
  public fixtures has not earned it.

A student's own run has no twins: `twins_unseen` judges a public case on itself, as if its twin
passed too, so the table never shows less than the grader could give for the same code, and
never more than the grader gives when the twins pass.
"""

from dataclasses import dataclass

from harness.contract import ADAPTERS

UNITS = 10_000
ON_VALUES = ("output", "gradient", "train")  # fixture checks judged on values (stored answers, or what
# a training run's returned weights do under the driver's own forward)
PROVING = ("output", "train")  # a pass on fresh values proves the function works


@dataclass(frozen=True)
class Result:
    id: str
    function: str
    outcome: str                 # "passed", "failed", "not run", ...
    check: str = ""              # a fixture case's "output", "gradient" or "raises"; "" for a property or probe
    hidden: bool = False
    carries_points: bool = True  # False: a twin, or a report-only verdict
    twin: str = ""               # a public case's check: the id of the same check on its twin


def points_text(points: float) -> str:
    """A score as every output writes it: two decimals, more where the shares need them (94.9413, not
    the 94.94 of a CSV beside the 94.9413 of Gradescope's results.json)."""
    whole, _, decimals = f"{points:.4f}".partition(".")
    return f"{whole}.{decimals.rstrip('0').ljust(2, '0')}"


def contract_points() -> dict[str, float]:
    """Per function, the points the contract gives it today (a term built earlier keeps its own)."""
    return {n: a.points for n, a in ADAPTERS.items()}


def scores(results: list[Result], twins_unseen: bool = False,
           points: dict[str, float] | None = None) -> dict[str, tuple[float, float]]:
    """Per test id: (score, max_score); each function's max_scores add up to its points: the term's own
    (`points`, from Term.functions: what the contract gave when it was built), else the contract's."""
    points = contract_points() if points is None else points
    by_id = {r.id: r for r in results}
    fresh = {r.function for r in results
             if r.check in PROVING and r.outcome == "passed" and (r.hidden or twins_unseen)}
    by_function: dict[str, list[Result]] = {}
    for r in results:
        by_function.setdefault(r.function, []).append(r)
    out = {}
    for fn, tests in by_function.items():
        scored = [r for r in tests if r.carries_points]
        base, extra = divmod(round(points.get(fn, 0) * UNITS), max(len(scored), 1))
        shares = {r.id: (base + (i < extra)) / UNITS for i, r in enumerate(scored)}
        proved = fn in fresh
        for r in tests:
            share = shares.get(r.id, 0.0)
            twin = by_id.get(r.twin) if r.twin else None
            judged = twin or r  # with its twin loaded, a public case is judged on fresh values alone
            earned = share if judged.outcome == "passed" and (r.check in ON_VALUES or proved) else 0.0
            if twin is not None:
                out[r.id], out[twin.id] = (0.0, 0.0), (earned, share)
            else:
                out.setdefault(r.id, (earned, share))
    return out
