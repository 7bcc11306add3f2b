"""Rules every catalogue case keeps, checked where a maintainer first runs something:
`term new`, `contract --check`, and the selftest (instructor only).

Distinct axes get distinct sizes (batch != heads != seq, d_k != d_v, ...), so transposes
and broadcasts cannot hide. A case whose point is an equality declares it:
`case(..., equal=("queries=keys",))`; a declared pair the case does not have is an error too.
"""

import typing

from harness.contract import ADAPTERS


def _dims(annotation) -> list[str]:
    """Named axes of a jaxtyping annotation (or of the tensor member of `X | None`)."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if hasattr(candidate, "dim_str"):
            return candidate.dim_str.split()
    return []


def axis_sizes(spec) -> dict[str, set[int]]:
    """Every named axis of a case and the sizes its inputs give it, plus the head axes
    its scalar arguments imply (heads, kv_heads, d_head)."""
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
    if spec.args.get("num_kv_heads") is not None:
        sizes["kv_heads"] = {spec.args["num_kv_heads"]}
    return sizes


def _pairs(spec) -> list[tuple[str, str]]:
    """Pairs of distinct axes of `spec` that share a size other than 1, sorted by name."""
    sizes = axis_sizes(spec)
    axes = sorted(sizes)
    return [(a, b) for i, a in enumerate(axes) for b in axes[i + 1:] if sizes[a] & sizes[b] - {1}]


def _declared(spec) -> set[tuple[str, str]]:
    return {tuple(sorted(p.split("="))) for p in spec.equal}


def clashes(spec) -> list[str]:
    """Axis pairs that share a size and are not declared equal, as 'a=[n] vs b=[n]'."""
    sizes, declared = axis_sizes(spec), _declared(spec)
    return [f"{a}={sorted(sizes[a])} vs {b}={sorted(sizes[b])}" for a, b in _pairs(spec) if (a, b) not in declared]


def problems(catalogue) -> list[str]:
    """Every broken rule of the catalogue, one line each (empty when all hold)."""
    out = []
    for spec in catalogue:
        if spec.check != "output":
            continue
        where = f"{spec.function}/{spec.name}"
        if clashes(spec):
            out.append(f"{where}: distinct axes share a size ({', '.join(clashes(spec))}); give them different "
                       "sizes, or declare the equality the case is about: case(..., equal=(\"a=b\",))")
        for a, b in sorted(_declared(spec) - set(_pairs(spec))):
            out.append(f"{where}: declares {a}={b}, but its {a} and {b} do not share a size")
    return out
