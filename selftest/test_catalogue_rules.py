"""Rules every case in the catalogue keeps, so transposes, broadcasts and ignored values cannot hide.

Distinct axes get distinct sizes (batch != heads != seq, d_k != d_v, ...) unless a
case is about their equality; such cases are listed below with the reason. Every
scalar or optional argument of the contract varies across public cases, and every
function that exponentiates its inputs sees a large spread inside one slice. (The
third rule, reduced precision judged within 1 ulp of the float32 result rounded once,
is the build's: harness/build.py sets it on every float16/bfloat16 output.)
"""

import inspect
import typing

import pytest
import torch
from torch.overrides import TorchFunctionMode

from harness.catalogue import CATALOGUE
from harness.contract import ADAPTERS
from harness.paths import assemble, leaves

# (function, case) -> why equal sizes are the point of the case
ABOUT_EQUALITY = {
    ("run_scaled_dot_product_attention", "square-no-mask"): "square attention: queries == keys, d_k == d_v",
    ("run_embed_with_positions", "full-context"): "seq == context_length: the last position is context_length-1",
}


def _dims(annotation) -> list[str]:
    """Named axes of a jaxtyping annotation (or of the tensor member of `X | None`)."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if hasattr(candidate, "dim_str"):
            return candidate.dim_str.split()
    return []


def axis_sizes(spec) -> dict[str, set[int]]:
    """Every named axis of a case and the sizes its inputs give it."""
    generated, adapter = spec.generate(0), ADAPTERS[spec.function]
    sizes: dict[str, set[int]] = {}
    for name, param in adapter.signature.parameters.items():
        tensor = generated.get(name)
        dims = _dims(param.annotation)
        if tensor is None or not hasattr(tensor, "shape") or not dims:
            continue
        named = dims[1:] if dims[0] == "..." else dims
        for axis, size in zip(named, tensor.shape[len(tensor.shape) - len(named):]):
            sizes.setdefault(axis, set()).add(size)
        if dims[0] == "..." and tensor.dim() > len(named) and "num_heads" in spec.args:
            sizes.setdefault("batch", set()).add(tensor.shape[0])
    if "num_heads" in spec.args:
        sizes["heads"] = {spec.args["num_heads"]}
        sizes["d_head"] = {spec.args["d_model"] // spec.args["num_heads"]}
    return sizes


def clashes(spec) -> list[str]:
    sizes = axis_sizes(spec)
    axes = sorted(sizes)
    return [f"{a}={sorted(sizes[a])} vs {b}={sorted(sizes[b])}" for i, a in enumerate(axes) for b in axes[i + 1:]
            if sizes[a] & sizes[b] - {1}]


@pytest.mark.parametrize("spec", [s for s in CATALOGUE if s.check == "output"], ids=lambda s: f"{s.function}/{s.name}")
def test_distinct_axes_have_distinct_sizes(spec):
    if (spec.function, spec.name) in ABOUT_EQUALITY:
        return
    assert not clashes(spec), (f"{spec.function}/{spec.name}: distinct axes share a size ({', '.join(clashes(spec))}); "
                               "give them different sizes, or list the case in ABOUT_EQUALITY with the reason")


def test_equality_allow_list_names_real_cases_with_clashes():
    specs = {(s.function, s.name): s for s in CATALOGUE}
    for key in ABOUT_EQUALITY:
        assert key in specs and clashes(specs[key]), f"{key} is allowed equal sizes it does not have"


def test_rank_3_non_contiguous_inputs_exist():
    ranks = {gen.shape and len(gen.shape) for s in CATALOGUE for _, gen in s.gens() if gen.layout}
    assert max(ranks) >= 3, "every non-contiguous input is 2-D: add head split/merge layouts (layout='heads')"


# ---------------------------------------------------------------- every value varies where code could ignore it

def _public(function: str) -> list:
    return [s for s in CATALOGUE if s.function == function and not s.hidden and s.check == "output"]


def _optional(param) -> bool:
    return param.default is None or type(None) in typing.get_args(param.annotation)


def unvaried(function: str) -> list[str]:
    """Arguments of `function` (from its contract signature) that no public case varies: a scalar
    with one value only, an optional argument never None or never given, a default never left."""
    public, problems = _public(function), []
    for name, param in ADAPTERS[function].signature.parameters.items():
        values = [s.args.get(name) for s in public if name in s.args]
        if _optional(param):
            if not (any(v is None for v in values) and any(v is not None for v in values)):
                problems.append(f"{name}: needs a public case with None and one with a value")
        elif param.annotation in (int, float, bool, str):
            if len(set(values)) < 2:
                problems.append(f"{name}: every public case uses {sorted(set(values))}")
        elif param.default is not inspect.Parameter.empty and all(v == param.default for v in values):
            problems.append(f"{name}: never leaves its default {param.default!r}")
    return problems


WITH_CASES = sorted({s.function for s in CATALOGUE})


@pytest.mark.parametrize("function", WITH_CASES)
def test_every_scalar_and_optional_argument_varies_in_public_cases(function):
    """Code that ignores an argument (a hard-coded theta, eps or size; None never handled) passes
    every case that holds it fixed: some public case must move it."""
    assert not unvaried(function), f"{function}: {'; '.join(unvaried(function))}"


# ---------------------------------------------------------------- exponentials see a large spread

SPREAD = 100.0  # exp(x - mean) overflows float32 once x - mean > 88.7


class _Exponentials(TorchFunctionMode):
    """Records the range of every operand of exp, sigmoid or softmax that depends on the inputs."""
    FUNCS = {torch.exp, torch.Tensor.exp, torch.sigmoid, torch.Tensor.sigmoid, torch.softmax,
             torch.Tensor.softmax, torch.nn.functional.softmax}

    def __init__(self):
        super().__init__()
        self.ranges: list[float] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        x = args[0] if args else None
        if func in self.FUNCS and isinstance(x, torch.Tensor) and x.requires_grad:
            finite = x.detach()[x.detach().isfinite()]
            self.ranges.append((finite.max() - finite.min()).item() if finite.numel() else 0.0)
        return func(*args, **(kwargs or {}))


def exponential_ranges(spec) -> list[float]:
    """Ranges of the exp/sigmoid/softmax operands of the reference's call on one case. The
    reference subtracts each slice's max before exp, so a range there is a spread inside a slice."""
    import reference.adapters as ref
    generated = spec.generate(0)
    grads = {p: t.requires_grad_(t.is_floating_point()) for p, t in leaves(generated)}
    kwargs = {**{k: v for k, v in spec.args.items() if k not in generated}, **assemble(generated, grads)}
    with _Exponentials() as mode:
        getattr(ref, spec.function)(**kwargs)
    return mode.ranges


EXPONENTIATING = [f for f in WITH_CASES if any(exponential_ranges(s) for s in _public(f))]


def test_exponentiating_functions_are_found_from_the_reference():
    assert {"run_softmax", "run_silu", "run_scaled_dot_product_attention", "run_transformer_lm"} <= \
        set(EXPONENTIATING), EXPONENTIATING
    assert "run_sinusoidal_positions" not in EXPONENTIATING  # its exp sees no input: frequencies only


@pytest.mark.parametrize("function", EXPONENTIATING)
def test_exponentiating_functions_have_a_large_spread_inside_one_slice(function):
    """A softmax that subtracts the mean, or a sigmoid written as 1 / (1 + exp(-x)), is exact on
    small spreads: some public case must spread one slice by SPREAD, not only offset it."""
    widest = max(max(exponential_ranges(s), default=0.0) for s in _public(function))
    assert widest >= SPREAD, (f"{function}: the widest exp/sigmoid/softmax operand in a public case spans "
                              f"{widest:.3g}; add a case whose slice spans at least {SPREAD:g}")
