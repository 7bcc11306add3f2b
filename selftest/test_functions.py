"""Every contract function is fully covered: adding one without its cases, its probe or a
named mistake fails here, with what is missing.

For each adapter:
- fixture cases in the catalogue, public and hidden. Module builders (get_*) return a
  module, which no fixture can store: their property tests in tests/ stand in for
  cases, and their hidden share is graded through the run_* functions built on them.
- a device probe: a test in tests/test_devices.py attributed to it.
- a known mistake that the suite names in a failure of one of this function's own
  tests (its variant's diagnosis or `named_by` phrase), not merely any failure: that one
  reads the coverage table, so it lives beside the table's other gates, in
  test_suite_verdicts.py.
"""

import pytest
import torch

from conftest import run_suite
from harness.catalogue import CATALOGUE
from harness.contract import ADAPTERS

BUILDERS = [n for n, a in ADAPTERS.items() if a.signature.return_annotation is torch.nn.Module]
FUNCTIONS = [n for n in ADAPTERS if n not in BUILDERS]


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


SIZES = {"vocab_size": 11, "d_model": 8, "num_heads": 2, "num_kv_heads": 1, "d_ff": 12, "context_length": 16, "max_seq_len": 16,
         "max_len": 16, "theta": 10000.0, "rope_theta": 10000.0, "num_layers": 1, "in_features": 8,
         "out_features": 6, "d_k": 8}
CLASSES = {a.stub.split()[1].split("(")[0]: a for a in ADAPTERS.values() if a.stub.lstrip().startswith("class ")}


@pytest.mark.parametrize("cls", CLASSES)
def test_docstrings_name_every_parameter_the_tests_load(cls):
    """Tests load weights into a student's module by name (run_transformer_lm loads
    token_embeddings.weight into the Embedding of get_embedding): the docs of each class
    (its stub, and the adapters that build it) must name each of its parameters."""
    import importlib
    import inspect
    import re
    module = CLASSES[cls].impl_module
    reference = getattr(importlib.import_module(f"reference.{module}"), cls)
    needed = [p for p in inspect.signature(reference).parameters.values() if p.default is p.empty]
    state = reference(**{p.name: SIZES[p.name] for p in needed}).state_dict()
    docs = CLASSES[cls].stub + "".join(a.spec.__doc__ for a in ADAPTERS.values() if f"impl.{module}.{cls}(" in a.glue)
    missing = sorted({key.split(".")[0] for key in state} - set(re.findall(r"\w+", docs)))
    assert not missing, f"{cls}: say in its stub's or its adapter's docstring that it holds {missing}"
