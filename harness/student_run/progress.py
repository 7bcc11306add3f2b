"""The end-of-run progress table: per unit, per function, in course order.

It shows what ran. A function whose tests did not all run says how many did not,
and a unit is declared done only when every test of every function in it ran and passed.
Points follow the grader's rule (harness/scoring.py), counting a passed public test as if its
hidden twin passes too; hidden cases that did not run here count in the split and earn nothing,
so a function's row shows its public points out of what public tests can earn ("2.6/2.6 public"),
and its hidden share beside them ("+0.4 hidden"), never as a deduction.
They are the term's own (Term.functions): an old term keeps its total, and a function it does not
cover is not listed.
"""

from collections import Counter

import pytest

from harness.contract import ADAPTERS, UNITS
from harness.scoring import Result, scores


class Progress:
    """A pytest plugin object: counts each function's reports, then renders the table."""

    def __init__(self, term, target: str, pinned: str, complete: bool = True, hidden_asked: bool = False):
        self.term = term
        self.hidden_asked = hidden_asked  # --hidden, which a student's copy cannot honour
        self.covered = term.functions  # function -> its points on this term, and test counts
        self.target = target
        self.pinned = pinned
        self.results: dict[str, Counter] = {}
        self.outcomes: dict[str, list[Result]] = {}  # per function, for the points
        # Tests per function in the whole student suite; empty when the run collected
        # something else, and then no unit is ever declared done.
        self.totals: dict[str, int] = {}
        self.unscored: dict[str, int] = {}  # ... of them, those that carry no points (report-only)
        self.waits: dict[str, Counter] = {}  # function -> the failing functions its skipped tests wait on
        self.complete = complete

    def pytest_runtest_logreport(self, report):
        name = getattr(report, "adapter", None)
        if name and (report.when == "call" or report.failed):
            self.record(name, report.outcome, getattr(report, "not_implemented", False), report.nodeid,
                        getattr(report, "check", ""), getattr(report, "carries_points", True))
            if getattr(report, "waits_on", None):
                self.waits.setdefault(name, Counter())[report.waits_on] += 1

    def pytest_sessionfinish(self, session):
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:  # an xdist worker: the controller renders the table
            workeroutput["harness_totals"] = self.totals
            workeroutput["harness_unscored"] = self.unscored

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        self.totals = getattr(node, "workeroutput", {}).get("harness_totals") or self.totals
        self.unscored = getattr(node, "workeroutput", {}).get("harness_unscored") or self.unscored

    def record(self, adapter: str, outcome: str, not_implemented: bool, test_id: str = "", check: str = "",
               carries_points: bool = True) -> None:
        key = "not implemented" if not_implemented else outcome
        self.results.setdefault(adapter, Counter())[key] += 1
        tests = self.outcomes.setdefault(adapter, [])
        tests.append(Result(test_id or f"test-{len(tests)}", adapter, outcome, check, False, carries_points))

    def hidden_tests(self, adapter: str) -> int:
        """Hidden tests of this function that carry points and did not run here: its own hidden
        cases' checks (a twin's points are its public case's)."""
        return 0 if self.term.hidden_loaded else self.term.scored_hidden.get(adapter, 0)

    def scores(self, adapter: str) -> dict[str, tuple[float, float]]:
        """The grader's rule (harness/scoring.py) on the tests that ran here, their twins assumed to
        pass; tests that did not run, and hidden cases (ids under "hidden/"), earn nothing."""
        ran = self.outcomes.get(adapter, [])
        unscored = max(0, self.unscored.get(adapter, 0) - sum(not r.carries_points for r in ran))
        missing = [Result(f"not-run/{i}", adapter, "not run", carries_points=i >= unscored)
                   for i in range(self.unrun(adapter) or 0)]
        missing += [Result(f"hidden/{i}", adapter, "not run") for i in range(self.hidden_tests(adapter))]
        return scores(ran + missing, twins_unseen=True, points=self.points_by_function)

    @property
    def points_by_function(self) -> dict[str, float]:
        return {name: record["points"] for name, record in self.covered.items()}

    def points(self, adapter: str) -> float:
        return sum(score for score, _ in self.scores(adapter).values())

    def max_public_points(self, adapter: str) -> float:
        """The most this function's public tests can earn: its own hidden cases hold the rest."""
        return sum(most for test_id, (_, most) in self.scores(adapter).items() if not test_id.startswith("hidden/"))

    def status(self, adapter: str) -> str:
        counts = self.results[adapter]
        if counts["failed"]:
            return "failed"
        if counts["not implemented"]:
            return "not implemented"
        return "blocked" if self.waits.get(adapter) else "passed"

    def unrun(self, adapter: str) -> int | None:
        """Tests of this function that did not run; None when unknown."""
        if not self.complete or adapter not in self.totals:
            return None
        return self.totals[adapter] - sum(self.results.get(adapter, Counter()).values())

    def full_run(self) -> bool:
        return self.complete and bool(self.totals) and all(self.unrun(n) == 0 for n in self.totals)

    def render(self) -> str:
        about = "" if self.target == "adapters" else f", adapters {self.target}"
        lines = [f"Progress: term {self.term.name}{about}"]
        if self.term.name != self.pinned:
            lines.append(f"  note: this project pins term {self.pinned}; you ran {self.term.name}.")
        if self.hidden_asked and not self.term.hidden_loaded:  # TA trial 10: the student edition said nothing
            lines.append(f"  note: --hidden: this copy of term {self.term.name} holds no hidden cases (the course "
                         "staff keep them for grading); only the public tests ran.")
        if later := [n for n, a in ADAPTERS.items() if n not in self.covered and not a.entry_point]:
            lines.append(f"  note: term {self.term.name} does not cover {', '.join(later)} (built before "
                         "the contract had it): not run, and not in its points.")
        hidden = {} if self.term.hidden_loaded else self.term.hidden_counts
        for unit in UNITS:
            members = [a.name for a in ADAPTERS.values() if a.unit == unit.key and a.name in self.covered]
            names = [n for n in members if n in self.results]
            if not names:
                continue
            lines.append(unit.title)
            for name in names:
                counts = self.results[name]
                ran = sum(counts.values())
                unrun = self.unrun(name)
                # Points only for a function whose tests all ran: a part of them would read as a deduction.
                column = f" {unrun} not run: its points once they all run" if unrun else \
                    self.points_column(name, hidden.get(name, 0))
                if waits := self.waits.get(name):  # its own tests pass; some wait on another function
                    column += "; " + ", ".join(f"{n} not run until {other} passes" for other, n in waits.items())
                lines.append(f"  {name:<38} {self.status(name):<16} {counts['passed']:>3}/{ran:<3} tests {column}")
            done = [n for n in members if self.unrun(n) == 0 and n in self.results and self.status(n) == "passed"]
            if len(done) == len(members):
                lines.append(f"  -> every function passes. {self.next_step(unit)}")
            elif all(self.status(n) == "passed" for n in names):
                lines.append("  -> what ran passes, but not every test of this unit ran: "
                             "run `pytest` to see the unit as a whole")
        lines += self.total_lines(hidden, self.term.hidden_loaded)
        return "\n".join(lines)

    def next_step(self, unit) -> str:
        """The unit's pointer to the next one, where this term covers it (TA trial 14: an older term without
        "Train it" pointed there)."""
        following = UNITS[UNITS.index(unit) + 1:UNITS.index(unit) + 2]
        if following and not any(a.unit == following[0].key and a.name in self.covered for a in ADAPTERS.values()):
            return f"It is the last unit term {self.term.name} covers."
        return f"Next: {unit.next_step}"

    def points_column(self, adapter: str, hidden_cases: int) -> str:
        """Earned of what the public tests can earn, then the hidden share: "2.6/2.6 public  +0.4 hidden"
        for a function whose public tests all pass (never read as a deduction); "3.0/3.0 points" when
        no share is hidden (the hidden cases ran, or the function has none)."""
        public, whole = self.max_public_points(adapter), self.covered[adapter]["points"]
        if not hidden_cases:
            return f"{self.points(adapter):4.1f}/{whole:.1f} points"
        # "+0.0 hidden (1 case)": only twins, whose points are their public case's (TA trial 9 added up the
        # rows' cases to one fewer than the total line, which counts these too)
        cases = f"{hidden_cases} case{'s' * (hidden_cases != 1)}"
        return f"{self.points(adapter):4.1f}/{public:.1f} public  +{max(whole - public, 0):.1f} hidden ({cases})"

    def total_lines(self, hidden: dict, hidden_ran: bool = False) -> list[str]:
        """The total, and how hidden cases add to it (`hidden_ran`: --hidden, as the grader runs them)."""
        functions = [n for n in self.covered if n in self.totals] or list(self.covered)
        total = sum(self.covered[n]["points"] for n in functions)
        earned = sum(self.points(n) for n in self.results if not self.unrun(n))
        public = sum(self.max_public_points(n) for n in functions)
        ran = sum(self.covered[n]["points"] for n in functions if n in self.results and not self.unrun(n))
        # what those functions can earn beside the term's total (TA trial 13 read 5.9/123 of a --function run)
        scope = "" if self.full_run() else f" of the functions whose tests all ran ({ran:g} of the {total:g} are theirs)"
        if hidden_ran:
            return [f"Total: {earned:.1f}/{total:g} points{scope}, hidden cases included: counted as the grader counts"]
        lines = [f"Total: {earned:.1f}/{total:g} points from the public tests{scope}, an estimate: as if each "
                 "hidden twin passes as its public case did (the grade counts fresh values only)"]
        if hidden:
            lines.append(f"Hidden cases (+P hidden above: {sum(hidden.values())} cases, never run here) are worth the "
                         f"other {total - public:.1f} points, graded like the public tests on other values; X/Y public "
                         "is what a function's public tests can earn, Y when they all pass.")
        return lines
