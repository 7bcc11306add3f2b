"""Rules every case in the catalogue keeps, so transposes, broadcasts and ignored values cannot hide.

Distinct axes get distinct sizes (batch != heads != seq, d_k != d_v, ...) unless a
case is about their equality; such cases are listed below with the reason. Every
scalar or optional argument of the contract varies across public cases, and every
function that exponentiates its inputs sees a large spread inside one slice. (The
third rule, reduced precision judged within 1 ulp of the float32 result rounded once,
is the build's: harness/build.py sets it on every float16/bfloat16 output.)
"""

import typing
from unittest import mock

import pytest

from harness.catalogue import CATALOGUE, case, given, normal
from harness.contract import ADAPTERS
from harness.rules import exponential_ranges, narrow_spread, public, unvaried

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

WITH_CASES = sorted({s.function for s in CATALOGUE})


@pytest.mark.parametrize("function", WITH_CASES)
def test_every_scalar_and_optional_argument_varies_in_public_cases(function):
    """Code that ignores an argument (a hard-coded theta, eps or size; None never handled) passes
    every case that holds it fixed: some public case must move it."""
    assert not unvaried(function), f"{function}: {'; '.join(unvaried(function))}"


def test_the_variation_rule_can_fail():
    fixed = [case("run_rope", "a", d_k=8, theta=10000.0, max_seq_len=8, in_query_or_key=normal(2, 8),
                  token_positions=given([0, 1])),
             case("run_rope", "b", d_k=4, theta=10000.0, max_seq_len=9, in_query_or_key=normal(2, 4),
                  token_positions=given([0, 1]))]
    with mock.patch("harness.rules.CATALOGUE", fixed):
        assert unvaried("run_rope") == ["theta: every public case uses [10000.0]"]


# ---------------------------------------------------------------- exponentials see a large spread

EXPONENTIATING = [f for f in WITH_CASES if any(exponential_ranges(s) for s in public(f))]


def test_exponentiating_functions_are_found_from_the_reference():
    assert {"run_softmax", "run_silu", "run_scaled_dot_product_attention", "run_transformer_lm"} <= \
        set(EXPONENTIATING), EXPONENTIATING
    assert "run_sinusoidal_positions" not in EXPONENTIATING  # its exp sees no input: frequencies only


@pytest.mark.parametrize("function", EXPONENTIATING)
def test_exponentiating_functions_have_a_large_spread_inside_one_slice(function):
    """A softmax that subtracts the mean, or a sigmoid written as 1 / (1 + exp(-x)), is exact on
    small spreads: some public case must spread one slice by SPREAD, not only offset it."""
    assert narrow_spread(function) is None, f"{function}: {narrow_spread(function)}"
    offset_only = [s for s in public("run_softmax") if s.name == "offset-100"]
    with mock.patch("harness.rules.CATALOGUE", offset_only):
        assert "spans" in narrow_spread("run_softmax")  # a large offset is not a spread


def test_term_new_refuses_a_catalogue_that_breaks_the_rules(tmp_path):
    from harness.build import build_term
    with mock.patch("harness.rules.CATALOGUE", [s for s in CATALOGUE if s.name != "spread-300"]):
        with pytest.raises(ValueError, match="run_softmax: the widest"):
            build_term(tmp_path, "broken", seed=1)
