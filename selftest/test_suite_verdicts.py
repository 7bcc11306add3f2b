"""The mistake-coverage gate: the student suite accepts the reference and every correct
alternative, rejects the stubs and every known mistake, names most mistakes, and names one
in each contract function's own tests. (Every test that reads the coverage table is here:
under `-n N` the table is built once per worker that needs it.)"""

import pytest

from conftest import PROJECT, TERM, run_suite
from harness.contract import ADAPTERS
from harness.store import Term
from harness.term.coverage import NAMED_TARGET, render
from reference.variants import VARIANTS

MISTAKES = [v for v in VARIANTS.values() if not v.correct]
# Functions whose own tests name no variant yet (a strict xfail: once a variant closes the
# gap, the entry fails until it is removed here). Empty: every function names one.
UNNAMED: set[str] = set()


def test_reference_passes_every_public_and_hidden_test():
    run = run_suite("--adapters", "reference.adapters", "--hidden")
    assert run.exit_code == 0, "\n\n".join(run.messages.values())
    assert len(run.outcomes) >= 150


def test_stubs_fail_every_test_as_not_implemented():
    run = run_suite("--adapters", "adapters")
    assert run.exit_code == 1, f"expected test failures only, got exit code {run.exit_code}"
    assert run.outcomes and not [n for n, o in run.outcomes.items() if o == "passed"]
    for nodeid, message in run.messages.items():
        assert "is not implemented yet" in message, f"{nodeid}:\n{message}"
        assert "Traceback" not in message and len(message.splitlines()) == 1


def test_every_test_is_attributed_to_a_contract_function():
    run = run_suite("--adapters", "reference.adapters", "--collect-only")
    assert run.adapters and all(run.adapters.values()), [n for n, a in run.adapters.items() if not a]


@pytest.mark.parametrize("name", [v.name for v in MISTAKES])
def test_known_mistake_fails_the_suite(table, name):
    assert table[name].caught_by, f"{name} ({VARIANTS[name].title}) passed the whole suite"


@pytest.mark.parametrize("name", [v.name for v in VARIANTS.values() if v.correct])
def test_correct_alternative_passes_with_no_diagnosis(table, name):
    row = table[name]
    assert not row.caught_by and not row.diagnosis, f"{name} failed {row.caught_by}: {row.diagnosis}"


@pytest.mark.parametrize("name", [v.name for v in MISTAKES if v.mistake is None])
def test_mistake_found_in_real_code_is_named(table, name):
    """Mistakes beyond MISTAKES.md come from independently written solutions: each must be named."""
    row = table[name]
    assert row.named, f"{name} ({VARIANTS[name].title}) is caught but not named; the report said: {row.diagnosis}"


def test_most_mistakes_are_named_in_the_report(table, capsys):
    rows = list(table.values())
    with capsys.disabled():
        print("\n" + render(rows))
    named = [r for r in rows if not r.correct and r.named]
    assert len(named) / len(MISTAKES) >= NAMED_TARGET


def test_hidden_failures_never_show_inputs_or_values():
    run = run_suite("--adapters", "reference.variants:attention_missing_scale", "--hidden", "-k", "hidden")
    hidden = {n: m for n, m in run.messages.items() if "/hidden-" in n}
    assert hidden, "the variant should fail some hidden cases"
    for nodeid, message in hidden.items():
        assert "a hidden case" in message, message
        for leak in ("inputs:", "first mismatches", "Likely cause", "max abs error"):
            assert leak not in message, f"{nodeid} leaks {leak!r}:\n{message}"


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason="no variant yet"))
                                  if n in UNNAMED else n for n, a in ADAPTERS.items()
                                  if not a.entry_point])  # an entry point has no tests: its drills name its mistakes
def test_function_has_a_mistake_named_in_its_own_tests(table, name):
    if name not in Term(PROJECT, TERM).functions:  # the table runs the pinned term, built before the function
        pytest.skip(f"term {TERM} does not cover {name}: it is judged on the term built next")
    own = {name, *ADAPTERS[name].drills}  # an entry point's tests are its drills'
    named = [row.variant for row in table.values() if not row.correct and own & set(row.named_in)]
    assert named, (f"no known mistake is named by a failing test of {name}: add a variant to "
                   "reference/variants.py whose hint or named_by appears in that failure report")


@pytest.mark.parametrize("variant", ["softmax_without_max", "blocks_in_python_list", "rmsnorm_gains_not_one"])
def test_the_table_runs_every_test_that_a_variant_fails(table, variant):
    """The table runs a variant only on the tests whose adapter calls used a piece it patches
    (a function, or a class the call builds); the whole suite fails no other test."""
    from harness.term.suite import run_suite as run_quietly
    whole = run_quietly(PROJECT, "--adapters", f"reference.variants:{variant}", "--hidden", quiet=True)
    assert sorted({n.split("::")[-1] for n in whole.failed}) == table[variant].caught_by
