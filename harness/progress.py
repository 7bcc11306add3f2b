"""The end-of-run progress table: per unit, per function, in course order."""

import textwrap
from collections import Counter

from harness.contract import ADAPTERS, UNITS


class Progress:
    """A pytest plugin object: counts each function's reports, then renders the table."""

    def __init__(self, term, target: str, pinned: str):
        self.term = term
        self.target = target
        self.pinned = pinned
        self.results: dict[str, Counter] = {}
        self.adapter_of: dict[str, str] = {}  # nodeid -> contract function

    def pytest_runtest_logreport(self, report):
        name = self.adapter_of.get(report.nodeid)
        if name and (report.when == "call" or report.failed):
            self.record(name, report.outcome, getattr(report, "not_implemented", False))

    def record(self, adapter: str, outcome: str, not_implemented: bool) -> None:
        key = "not implemented" if not_implemented else outcome
        self.results.setdefault(adapter, Counter())[key] += 1

    def status(self, adapter: str) -> str:
        counts = self.results[adapter]
        if counts["failed"] == 0 and counts["not implemented"] == 0:
            return "passed"
        if counts["failed"]:
            return "failed"
        return "not implemented"

    def render(self) -> str:
        lines = [f"Progress: term {self.term.name}, adapters {self.target}"]
        if self.term.name != self.pinned:
            lines.append(f"  note: this release pins term {self.pinned}; you ran {self.term.name}.")
        for unit in UNITS:
            names = [a.name for a in ADAPTERS.values() if a.unit == unit.key and a.name in self.results]
            if not names:
                continue
            lines.append(unit.title)
            for name in names:
                counts = self.results[name]
                total = sum(counts.values())
                points = ADAPTERS[name].points * counts["passed"] / total
                lines.append(f"  {name:<38} {self.status(name):<16} {counts['passed']:>3}/{total:<3} tests "
                             f"{points:4.1f}/{ADAPTERS[name].points} points")
            if all(self.status(n) == "passed" for n in names):
                lines.append(f"  -> every function passes. Next: {unit.next_step}")
        hidden = self.term.hidden_counts
        if hidden and not self.term.hidden_loaded:
            per = ", ".join(f"{k} {v}" for k, v in hidden.items())
            lines += textwrap.wrap(f"Hidden cases exist and were not run here: {sum(hidden.values())} ({per}).",
                                   100, subsequent_indent="  ")
            lines.append("  They check the same contract with other sizes and values; passing every")
            lines.append("  public test here is not your grade.")
        return "\n".join(lines)
