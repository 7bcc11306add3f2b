"""How a function's points split over its tests: the one rule the grader and the progress table share.

A function's points split evenly over all its tests, public and hidden, in 1/10,000ths (so the
shares add up exactly). A passing output or gradient check earns its share. A must-raise case
or a property/probe test earns its share only once an output case of the same function passes:
code that raises on every input, or returns anything of the right shape, has not earned them.
"""

UNITS = 10_000
EARNED_ALONE = (":output]", ":gradient]")  # the fixture checks that need no other test to pass


def is_output(test_id: str) -> bool:
    return test_id.endswith(":output]")


def split(points: float, tests: list[tuple[str, str]]) -> list[tuple[float, float]]:
    """(score, max_score) for each (test id, outcome) of one function, in the order given.
    Tests that did not run (outcome "not run") count towards the split and earn nothing."""
    if not tests:
        return []
    base, extra = divmod(points * UNITS, len(tests))
    outputs = [outcome for test_id, outcome in tests if is_output(test_id)]
    works = not outputs or "passed" in outputs  # functions without output cases (modules) are not gated
    out = []
    for i, (test_id, outcome) in enumerate(tests):
        share = (base + (i < extra)) / UNITS
        earned = outcome == "passed" and (works or test_id.endswith(EARNED_ALONE))
        out.append((share if earned else 0.0, share))
    return out
