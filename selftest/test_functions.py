"""Every contract function is fully covered: adding one without its cases, its probe or a
named mistake fails here, with what is missing.

For each adapter:
- fixture cases in the catalogue, public and hidden. Module builders (get_*) return a
  module, which no fixture can store: their property tests in tests/ stand in for
  cases, and their hidden share is graded through the run_* functions built on them.
- a device probe: a test in tests/test_devices.py attributed to it.
- a known mistake that the suite names in a failure of one of this function's own
  tests (its variant's diagnosis or `named_by` phrase), not merely any failure.
"""

import pytest
import torch

from conftest import PROJECT, run_suite
from harness.catalogue import CATALOGUE
from harness.contract import ADAPTERS

BUILDERS = [n for n, a in ADAPTERS.items() if a.signature.return_annotation is torch.nn.Module]
FUNCTIONS = [n for n in ADAPTERS if n not in BUILDERS]
# Functions whose own tests name no variant yet (a strict xfail: once a variant closes the
# gap, the entry fails until it is removed here). Empty: every function names one.
UNNAMED: set[str] = set()


@pytest.fixture(scope="module")
def collected() -> dict[str, str]:
    """test node id -> the contract function it is attributed to."""
    return run_suite("--adapters", "reference.adapters", "--hidden", "--collect-only", "-q").adapters


@pytest.mark.parametrize("name", FUNCTIONS)
def test_function_has_public_and_hidden_cases(name):
    specs = [s for s in CATALOGUE if s.function == name]
    assert [s for s in specs if not s.hidden and s.check == "output"], \
        f"{name}: add a public output case to harness/catalogue.py"
    assert [s for s in specs if s.hidden], f"{name}: add a hidden case (hidden=True) to harness/catalogue.py"


@pytest.mark.parametrize("name", BUILDERS)
def test_builder_has_property_tests(collected, name):
    own = [n for n, a in collected.items() if a == name and "test_devices.py" not in n]
    assert own, f"{name} returns a module: give it property tests in tests/ marked adapter({name!r})"


@pytest.mark.parametrize("name", list(ADAPTERS))
def test_function_has_a_device_probe(collected, name):
    assert [n for n, a in collected.items() if a == name and n.startswith("tests/test_devices.py")], \
        f"{name} has no meta-device probe in tests/test_devices.py"


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason="no variant yet"))
                                  if n in UNNAMED else n for n in ADAPTERS])
def test_function_has_a_mistake_named_in_its_own_tests(table, name):
    named = [row.variant for row in table.values() if not row.correct and name in row.named_in]
    assert named, (f"no known mistake is named by a failing test of {name}: add a variant to "
                   "reference/variants.py whose hint or named_by appears in that failure report")


@pytest.mark.parametrize("variant", ["softmax_without_max", "blocks_in_python_list", "rmsnorm_gains_not_one"])
def test_the_table_runs_every_test_that_a_variant_fails(table, variant):
    """The table runs a variant only on the tests whose adapter calls used a piece it patches
    (a function, or a class the call builds); the whole suite fails no other test."""
    from harness.suite import run_suite as run_quietly
    whole = run_quietly(PROJECT, "--adapters", f"reference.variants:{variant}", "--hidden", quiet=True)
    assert sorted({n.split("::")[-1] for n in whole.failed}) == table[variant].caught_by
