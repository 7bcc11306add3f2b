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

from conftest import TERM, run_suite
from harness.term.catalogue import CATALOGUE
from harness.contract import ADAPTERS

BUILDERS = [n for n, a in ADAPTERS.items() if a.builder]
ENTRY_POINTS = [n for n, a in ADAPTERS.items() if a.entry_point]
# Exempt from stored answers: a training run's final weights after many float32 steps are chaotic (a
# correct student's do not match the reference's to any tolerance), so its cases are check="train",
# judged by what the weights do (check_training: held-out loss under the driver's forward, embedding
# rows, determinism), each public one with its hidden twin.
TRAINED = [n for n, a in ADAPTERS.items() if a.check == "train"]
FUNCTIONS = [n for n in ADAPTERS if n not in BUILDERS and n not in ENTRY_POINTS and n not in TRAINED]


@pytest.fixture(scope="module")
def collected() -> dict[str, str]:
    """test node id -> the contract function it is attributed to."""
    return run_suite("--adapters", "reference.adapters", "--hidden", "--collect-only", "-q").adapters


@pytest.mark.parametrize("name", FUNCTIONS)
def test_function_has_public_and_hidden_cases(name):
    specs = [s for s in CATALOGUE if s.function == name]
    assert [s for s in specs if not s.hidden and s.check == "output"], \
        f"{name}: add a public output case to harness/term/catalogue.py"
    assert [s for s in specs if s.hidden], f"{name}: add a hidden case (hidden=True) to harness/term/catalogue.py"


@pytest.mark.parametrize("name", TRAINED)
def test_training_run_has_train_cases(name):
    specs = [s for s in CATALOGUE if s.function == name]
    assert specs and all(s.check == "train" for s in specs), \
        f"{name}: give it public cases with check='train' (their twins are its hidden cases), and no other kind"
    assert [s for s in specs if not s.hidden], f"{name}: add a public check='train' case to harness/term/catalogue.py"


@pytest.mark.parametrize("name", BUILDERS)
def test_builder_has_property_tests(collected, name):
    own = [n for n, a in collected.items() if a == name and "test_devices.py" not in n]
    assert own, f"{name} returns a module: give it property tests in tests/ marked adapter({name!r})"


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_entry_point_is_exercised_by_its_drills(name):
    """Each drill exists, has cases, and its glue calls what the entry point's glue calls."""
    point = ADAPTERS[name]
    for drill in point.drills:
        assert drill in ADAPTERS and not ADAPTERS[drill].entry_point, f"{name}: drill {drill!r} is not a contract function"
        assert point.symbols <= ADAPTERS[drill].symbols, \
            f"{name}: the glue of its drill {drill} must call {', '.join(sorted(point.symbols - ADAPTERS[drill].symbols))}"
        assert [s for s in CATALOGUE if s.function == drill], f"{name}: its drill {drill} has no cases"


@pytest.mark.parametrize("name", [n for n in ADAPTERS if n not in ENTRY_POINTS and n not in TRAINED
                                  and not ADAPTERS[n].no_device_probe])
def test_function_has_a_device_probe(collected, name):
    assert [n for n, a in collected.items() if a == name and n.startswith("tests/test_devices.py")], \
        f"{name} has no meta-device probe in the suite: the term the selftest runs on ({TERM}) does not cover it " \
        "(a term built before it: run with HARNESS_TERM=NAME of one built since), or tests/test_devices.py leaves it out"


# Modules whose weights the tests load by name (an optimizer class holds none)
CLASSES = {a.stub.split()[1].split("(")[0]: a for a in ADAPTERS.values()
           if a.stub.lstrip().startswith("class ") and "(nn.Module)" in a.stub.splitlines()[0]}


def built(cls: str) -> torch.nn.Module:
    """The reference's `cls`, built as the glue of an adapter builds it: with the arguments of that
    function's first public case, or a builder's declared `example`. From the contract and the
    catalogue alone, so a new module (num_buckets, ...) needs no edit here."""
    import ast
    import importlib
    module = CLASSES[cls].impl_module
    importlib.import_module(f"reference.{module}")
    for a in ADAPTERS.values():
        calls = [n for n in ast.walk(ast.parse(a.glue))
                 if isinstance(n, ast.Call) and ast.unparse(n.func) == f"impl.{module}.{cls}"]
        first = next((s for s in CATALOGUE if s.function == a.name and not s.hidden and s.check == "output"), None)
        if not calls or (first is None and a.example is None):
            continue
        defaults = {n: p.default for n, p in a.signature.parameters.items() if p.default is not p.empty}
        values = a.example or {**first.args, **first.generate(0)}  # tensors too: the glue may pass x.device
        return eval(ast.unparse(calls[0]), {**defaults, **values, "impl": importlib.import_module("reference.adapters").impl})
    raise AssertionError(f"no adapter builds {cls} with arguments: give a function whose glue builds it a public "
                         "case in harness/term/catalogue.py, or its builder example= in harness/contract.py")


@pytest.mark.parametrize("name", BUILDERS)
def test_builder_declares_the_arguments_it_is_built_with(name):
    example = ADAPTERS[name].example
    assert example is not None, f"{name}: declare example=dict(...) with its adapter: the arguments the suite builds it with"
    ADAPTERS[name].signature.bind(**example)


@pytest.mark.parametrize("cls", CLASSES)
def test_docstrings_name_every_parameter_the_tests_load(cls):
    """Tests load weights into a student's module by name (run_transformer_lm loads
    token_embeddings.weight into the Embedding of get_embedding): the docs of each class
    (its stub, and the adapters that build it) must name each of its parameters."""
    import re
    module = CLASSES[cls].impl_module
    state = built(cls).state_dict()
    docs = CLASSES[cls].stub + "".join(a.spec.__doc__ for a in ADAPTERS.values() if f"impl.{module}.{cls}(" in a.glue)
    missing = sorted({key.split(".")[0] for key in state} - set(re.findall(r"\w+", docs)))
    assert not missing, f"{cls}: say in its stub's or its adapter's docstring that it holds {missing}"


def _reference_on_meta(name: str) -> str | None:
    """Why the reference cannot run `name`'s first public catalogue case on meta tensors (None: it ran
    to the end, so its device probe checks the whole call). run_on_meta forgives such errors as not the
    student's fault, so a probe of a call that always ends in one checks nothing."""
    import reference.adapters as ref
    from harness.paths import assemble, leaves
    from harness.student_run.probes import _MetaWatcher
    from harness.torch_imports import meta_kernels_lean
    spec = next(s for s in CATALOGUE if s.function == name and not s.hidden and s.check == "output")
    generated = spec.generate(0)
    kwargs = {**{k: v for k, v in spec.args.items() if k not in generated},
              **assemble(generated, {p: t.to("meta") for p, t in leaves(generated)})}
    try:
        with meta_kernels_lean(), _MetaWatcher():
            getattr(ref, name)(**kwargs)
    except Exception as e:  # noqa: BLE001 - any error is what the probe would have forgiven
        return f"{type(e).__name__}: {e}"
    return None


PROBED = [n for n in FUNCTIONS if not ADAPTERS[n].no_device_probe]


@pytest.mark.parametrize("name", [n for n in PROBED if any(any(s.gens()) for s in CATALOGUE if s.function == n)])
def test_device_probe_runs_the_whole_call(name):
    """A device probe forgives errors that meta tensors cause (no data to copy, a value to read), so one
    of a call that always ends in such an error checks nothing: the reference runs each probed call to the
    end on meta."""
    failed = _reference_on_meta(name)
    assert not failed, (f"the reference's {name} cannot run on meta tensors ({failed[:300]}), so its device "
                        "probe checks nothing: make the call run on meta, or declare no_device_probe=\"why\" "
                        "with its adapter in harness/contract.py")


@pytest.mark.parametrize("name", [n for n in FUNCTIONS if ADAPTERS[n].no_device_probe])
def test_a_function_without_a_device_probe_needs_none(name):
    """no_device_probe holds where the reference cannot run the call on meta (a probe would check nothing),
    or where every student piece its glue calls is probed through another function (or a builder's probe)."""
    probed = [n for n in PROBED + BUILDERS if n != name]
    elsewhere = {s for n in probed for s in ADAPTERS[n].symbols}
    unprobed = sorted(ADAPTERS[name].symbols - elsewhere)
    assert _reference_on_meta(name) or not unprobed, (
        f"{name} runs on meta tensors, and no other function's device probe reaches "
        f"{', '.join('impl.' + s for s in unprobed)}: drop no_device_probe in harness/contract.py, so "
        "tests/test_devices.py probes it")


def test_meta_answers_from_the_shape_table_are_the_kernels_own(monkeypatch):
    """The device probe answers an op on meta tensors it has seen before from a table (probes._META_RESULTS).
    Each probed reference call runs twice, the second from the table where it can. Every answer so given is
    what the table recorded (the argument itself for an op in place), and every entry is what the kernel
    computes again from its key alone: the key holds all that decides the result."""
    from harness.student_run import probes
    replayed, real_replay = [], probes._replay

    def watched(recorded, args):
        answer = real_replay(recorded, args)  # checked now: later ops may reshape it in place
        replayed.append(answer is args[0] if recorded == ("self",) else probes._recorded(answer) == recorded)
        return answer
    monkeypatch.setattr(probes, "_replay", watched)
    probes._META_RESULTS.clear()
    for name in PROBED:
        for _ in range(2):
            _reference_on_meta(name)
    assert len(replayed) > 500, "the probes' repeated ops should be answered from the table"
    assert all(replayed), f"{replayed.count(False)} answers are not what the table recorded"
    for (func, args, kwargs, _), recorded in probes._META_RESULTS.items():
        with torch.utils._python_dispatch._disable_current_modes():
            out = func(*_rebuilt(args), **dict(_rebuilt(kwargs)))
        if recorded == ("self",):
            assert probes._kind(func) == "self"
        else:
            assert probes._recorded(out) == recorded, f"{func}: the table says {recorded}, the kernel {probes._recorded(out)}"


def _rebuilt(described):
    """Values from a shape-table key (probes._described): meta tensors of those layouts."""
    if isinstance(described, tuple) and described and described[0] == "T":
        _, shape, stride, offset, dtype, _, _ = described
        elements = offset + (0 if 0 in shape else 1 + sum((n - 1) * s for n, s in zip(shape, stride)))
        return torch.empty(elements, dtype=dtype, device="meta").as_strided(shape, stride, offset)
    if isinstance(described, tuple) and len(described) == 2 and described[0] in (list, tuple):
        return described[0](_rebuilt(v) for v in described[1])
    if isinstance(described, tuple) and len(described) == 2 and isinstance(described[0], type):
        return described[1]
    return tuple((key, _rebuilt(value)) for key, value in described)  # a dict's items

def test_a_device_mix_is_caught_after_the_same_op_was_answered_from_the_table():
    from harness.student_run.probes import DeviceMismatch, run_on_meta
    x = torch.ones(3, 4, device="meta")

    def mixed(x):
        y = x * 2 + x  # meta alone: recorded, then answered from the table
        y = x * 2 + x
        return y + torch.ones(3, 4)  # the same add's shapes, with a CPU tensor made here

    def made_on_the_cpu(x):
        y = x * 2
        y = x * 2
        table = torch.ones(3, 4) * 2  # the same mul on the CPU alone: computed there, never answered as meta
        return y + table
    for call in (mixed, made_on_the_cpu):
        with pytest.raises(DeviceMismatch, match="made by torch.ones"):
            run_on_meta(call, x)


def test_an_op_that_reshapes_its_argument_in_place_is_computed_each_time():
    """unsqueeze_, t_ and resize_ write their argument's layout, not its values: the table cannot answer them."""
    from harness.student_run.probes import run_on_meta

    def reshaped(x):
        first, second = x.clone(), x.clone()
        first.unsqueeze_(0)
        second.unsqueeze_(0)
        return second
    assert run_on_meta(reshaped, torch.ones(3, 4, device="meta")).shape == (1, 3, 4)


def test_the_shape_table_answers_under_the_default_dtype_it_was_made_with():
    """int_tensor * 2.5 makes the default float dtype: a notebook that changes it between checks gets it."""
    from harness.student_run.probes import run_on_meta
    ids = torch.ones(3, dtype=torch.long, device="meta")
    assert run_on_meta(lambda x: x * 2.5, ids).dtype == torch.float32
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert run_on_meta(lambda x: x * 2.5, ids).dtype == torch.float64
    finally:
        torch.set_default_dtype(previous)
