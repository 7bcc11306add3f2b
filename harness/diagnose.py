"""Name the likely mistake behind a wrong result, or say nothing.

Fingerprints: when a term is built, each known-mistake variant of the reference runs
on every public case, and where its output differs from the expected one, a sample
of it is stored (the elements where it differs most, plus random ones). A student
output that matches a fingerprint at those elements is diagnosed as that mistake.

When no fingerprint matches, a few cheap heuristics that are never wrong about what
they claim (a constant factor, a transpose, a shift by one position, a permutation
of the last axis) may still describe the difference. Otherwise: no diagnosis.
"""

import torch

TOP, RANDOM = 16, 16
MATCH_SLACK = 10  # fingerprints match within 10x the case tolerance


def fingerprint(variant_out, expected, seed: int, atol: float, rtol: float) -> dict | None:
    """A compact sample of a variant's output, or None where it is not distinguishable."""
    if isinstance(expected, dict):
        if not isinstance(variant_out, dict) or set(variant_out) != set(expected) or variant_out == expected:
            return None
        return {k: torch.tensor(int(v)) for k, v in variant_out.items()}
    if not isinstance(variant_out, torch.Tensor) or variant_out.shape != expected.shape:
        return None
    out = variant_out.detach().to(expected.dtype)
    diff = (out.double() - expected.double()).abs().nan_to_num(nan=float("inf")).flatten()
    if torch.isclose(out, expected, atol=atol, rtol=rtol, equal_nan=True).all():
        return None
    g = torch.Generator().manual_seed(seed)
    idx = torch.cat([diff.topk(min(TOP, diff.numel())).indices,
                     torch.randperm(diff.numel(), generator=g)[:RANDOM]]).unique()
    return {"idx": idx.to(torch.int64), "val": out.flatten()[idx]}


def matching_variant(actual, fingerprints: dict[str, dict], atol: float, rtol: float) -> str | None:
    """The variant whose fingerprint the student's result matches best, if any."""
    best, best_error = None, float("inf")
    for name, fp in fingerprints.items():
        if "idx" not in fp:  # counts: all keys must agree
            if isinstance(actual, dict) and all(actual.get(k) == v.item() for k, v in fp.items()):
                return name
            continue
        if not isinstance(actual, torch.Tensor) or actual.numel() <= int(fp["idx"].max()):
            continue
        sample = actual.detach().flatten()[fp["idx"]].to(fp["val"].dtype)
        close = torch.isclose(sample, fp["val"], atol=MATCH_SLACK * max(atol, 1e-6),
                              rtol=MATCH_SLACK * max(rtol, 1e-5), equal_nan=True)
        if close.all():
            error = (sample.double() - fp["val"].double()).abs().nan_to_num(0.0).max().item()
            if error < best_error:
                best, best_error = name, error
    return best


def heuristic(actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> str | None:
    """A description of the difference when it has a simple, certain shape."""
    if not isinstance(actual, torch.Tensor) or actual.shape != expected.shape or not expected.is_floating_point():
        return None
    a, e = actual.detach().double(), expected.double()
    close = lambda x, y: x.shape == y.shape and x.numel() > 0 and torch.allclose(
        x, y, atol=max(atol, 1e-6) * 10, rtol=max(rtol, 1e-5) * 10)
    if not torch.isfinite(a).all() or close(a, e):
        return None
    if a.dim() >= 2 and a.shape[-1] == a.shape[-2] > 1 and close(a.transpose(-1, -2), e):
        return "your output is the transpose of the expected one (its last two axes are swapped)"
    scale = (a * e).sum() / (e * e).sum().clamp_min(1e-30)
    if abs(scale.item() - 1) > 1e-3 and close(a, scale * e):
        return (f"every value is {scale.item():.4g} x the expected one: a missing or extra constant factor "
                "(a scale such as 1/sqrt(d_k), or a factor of 2)")
    if a.dim() >= 2 and a.shape[-2] > 2:
        if close(a[..., 1:, :], e[..., :-1, :]) or close(a[..., :-1, :], e[..., 1:, :]):
            return "your output matches the expected one shifted by one position along the sequence axis"
        row_wrong = ~torch.isclose(a, e, atol=max(atol, 1e-6), rtol=max(rtol, 1e-5)).any(dim=-1)
        if close(a[..., :1, :], e[..., :1, :]) and row_wrong[..., 1:].all():
            return ("only the first position is right: what changes with the position (or with earlier "
                    "tokens) is off, while position 0 is unaffected by it")
    if a.shape[-1] > 1 and close(a.sort(dim=-1).values, e.sort(dim=-1).values):
        return ("the right values, in the wrong order along the last axis: a layout difference "
                "(how dimensions are paired, interleaved or concatenated)")
    return None


def overflow(actual, expected: torch.Tensor, largest_input: float) -> str | None:
    """NaN/inf where the reference is finite, on inputs large enough to overflow exp or a square."""
    if not isinstance(actual, torch.Tensor) or actual.shape != expected.shape:
        return None
    broken = ~torch.isfinite(actual.detach()) & torch.isfinite(expected)
    if broken.any() and largest_input >= 50:
        return (f"NaN/inf appear where the reference is finite, and the inputs reach |x| = {largest_input:.0f}: "
                "an overflow. Subtract the max before exp, or square in float32 rather than float16")
    return None


_RANK_ERRORS = ("values to unpack", "number of subscripts", "number of dimensions", "-dimensional",
                "dimension specified as", "invalid for input of size")


def rank_error(message: str, shapes: str) -> str | None:
    """A crash that comes from assuming a fixed number of dimensions."""
    if any(p in message for p in _RANK_ERRORS):
        return (f"code that assumes a fixed number of dimensions; this case's inputs are {shapes}. "
                "Handle any leading dims: x.shape[-1], einsum with '...', reshape(*x.shape[:-1], n)")
    return None
