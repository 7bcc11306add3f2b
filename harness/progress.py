"""The end-of-run progress table: per unit, per function, in course order.

It shows what ran. A function whose tests did not all run says how many did not,
and a unit is declared done only when every test of every function in it ran and passed.
Points are split over the tests that carry points (not twins, not report-only probes), as
grading splits them, and count a passed public test as if its hidden twin passes too.
"""

import textwrap
from collections import Counter

import pytest

from harness.contract import ADAPTERS, UNITS


class Progress:
    """A pytest plugin object: counts each function's reports, then renders the table."""

    def __init__(self, term, target: str, pinned: str, complete: bool = True):
        self.term = term
        self.target = target
        self.pinned = pinned
        self.results: dict[str, Counter] = {}
        self.earning: dict[str, Counter] = {}  # the same, for tests that carry points
        # Tests per function in the whole student suite; empty when the run collected
        # something else, and then no unit is ever declared done.
        self.totals: dict[str, int] = {}
        self.scored: dict[str, int] = {}  # ... of them, those that carry points
        self.complete = complete

    def pytest_runtest_logreport(self, report):
        name = getattr(report, "adapter", None)
        if name and (report.when == "call" or report.failed):
            self.record(name, report.outcome, getattr(report, "not_implemented", False),
                        getattr(report, "carries_points", True))

    def pytest_sessionfinish(self, session):
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:  # an xdist worker: the controller renders the table
            workeroutput["harness_totals"] = self.totals
            workeroutput["harness_scored"] = self.scored

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        self.totals = getattr(node, "workeroutput", {}).get("harness_totals") or self.totals
        self.scored = getattr(node, "workeroutput", {}).get("harness_scored") or self.scored

    def record(self, adapter: str, outcome: str, not_implemented: bool, carries_points: bool = True) -> None:
        key = "not implemented" if not_implemented else outcome
        self.results.setdefault(adapter, Counter())[key] += 1
        if carries_points:
            self.earning.setdefault(adapter, Counter())[key] += 1

    def status(self, adapter: str) -> str:
        counts = self.results[adapter]
        if counts["failed"] == 0 and counts["not implemented"] == 0:
            return "passed"
        if counts["failed"]:
            return "failed"
        return "not implemented"

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
            lines.append(f"  note: this release pins term {self.pinned}; you ran {self.term.name}.")
        hidden = {} if self.term.hidden_loaded else self.term.hidden_counts
        full = self.full_run()
        for unit in UNITS:
            members = [a.name for a in ADAPTERS.values() if a.unit == unit.key]
            names = [n for n in members if n in self.results]
            if not names:
                continue
            lines.append(unit.title)
            for name in names:
                counts = self.results[name]
                ran = sum(counts.values())
                unrun = self.unrun(name)
                earning = self.earning.get(name, Counter())
                share = sum(earning.values()) + max(0, self.scored.get(name, 0) - sum(earning.values()))
                points = ADAPTERS[name].points * earning["passed"] / share if share else 0.0
                note = f"  {unrun} not run" if unrun else ""
                note += f"  +{hidden[name]} hidden" if full and hidden.get(name) else ""
                lines.append(f"  {name:<38} {self.status(name):<16} {counts['passed']:>3}/{ran:<3} tests "
                             f"{points:4.1f}/{ADAPTERS[name].points} points{note}")
            done = [n for n in members if self.unrun(n) == 0 and n in self.results and self.status(n) == "passed"]
            if len(done) == len(members):
                lines.append(f"  -> every function passes. Next: {unit.next_step}")
            elif all(self.status(n) == "passed" for n in names):
                lines.append("  -> what ran passes, but not every test of this unit ran: "
                             "run `pytest` to see the unit as a whole")
        if hidden and full:
            lines += textwrap.wrap(f"Hidden cases exist and were not run here: {sum(hidden.values())} (the +N "
                                   "column): every public case again on values you have not seen, and other "
                                   "sizes. A public test earns its points only when its hidden twin passes too; "
                                   "passing every public test here is not your grade.", 100, subsequent_indent="  ")
        elif hidden:
            lines.append("Hidden cases exist and were not run here; they count toward your grade.")
        return "\n".join(lines)
