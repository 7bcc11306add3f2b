"""Rules every case in the catalogue keeps, so transposes and broadcasts cannot hide.

Distinct axes get distinct sizes (batch != heads != seq, d_k != d_v, ...) unless a
case is about their equality; such cases are listed below with the reason.
"""

import typing

import pytest

from harness.catalogue import CATALOGUE
from harness.contract import ADAPTERS

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
