"""Units 2.2 and 2.5 properties that any correct implementation has, whatever its inputs."""

import pytest
import torch

from harness.student_run.checks import generator, shaped

adapter = pytest.mark.adapter


def randn(*shape, seed=0):
    return torch.randn(shape, generator=generator(seed))


# ---------------------------------------------------------------- softmax

@adapter("run_softmax")
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_slices_sum_to_one(adapters, dim):
    out = shaped(adapters.run_softmax(randn(4, 5, 6), dim), (4, 5, 6), "run_softmax")
    sums = out.sum(dim=dim)
    assert torch.allclose(sums, torch.ones_like(sums), atol=1e-5), (
        f"slices along dim={dim} sum to {sums.min():.4g}..{sums.max():.4g}, not 1: is `dim` honoured?")


@adapter("run_softmax")
def test_softmax_is_shift_invariant(adapters):
    x = randn(3, 7)
    shifted = shaped(adapters.run_softmax(x + 5.0, -1), x.shape, "run_softmax")
    assert torch.allclose(shaped(adapters.run_softmax(x, -1), x.shape, "run_softmax"), shifted, atol=1e-6), \
        "softmax(x + c) must equal softmax(x): the constant cancels"


@adapter("run_softmax")
def test_softmax_is_finite_at_plus_1000(adapters):
    out = adapters.run_softmax(randn(3, 7) + 1000.0, -1)
    assert torch.isfinite(out).all(), (
        "softmax of inputs near +1000 gave NaN/inf: subtract the max along `dim` before exp "
        "(exp(89) already overflows float32)")


@adapter("run_softmax")
def test_softmax_subtracts_the_max_of_each_slice(adapters):
    x = randn(3, 6)
    x[1] += 300.0  # one slice far above the others
    out = adapters.run_softmax(x, -1)
    assert torch.isfinite(out).all(), (
        "rows far below the largest row became NaN: subtract the max of each slice along `dim` "
        "(amax(dim=dim, keepdim=True)), not the global max")


# ---------------------------------------------------------------- causality

def _mha(adapters, x, rope: bool, heads: int = 2):
    d = x.shape[-1]
    w = [randn(d, d, seed=s) / d ** 0.5 for s in range(4)]
    if rope:
        return adapters.run_multihead_self_attention_with_rope(d, heads, 32, 10000.0, *w, x, None)
    return adapters.run_multihead_self_attention(d, heads, *w, x)


def _leak(adapters, rope: bool, heads: int) -> tuple[torch.Tensor, float]:
    """The output, and how much positions 0..2 change when tokens 3..5 change."""
    x = randn(2, 6, 8)
    later_changed = x.clone()
    later_changed[:, 3:] = randn(2, 3, 8, seed=9)
    a, b = (shaped(_mha(adapters, t, rope, heads), x.shape, "multi-head attention") for t in (x, later_changed))
    return a, (a[:, :3] - b[:, :3]).abs().max().item()


@pytest.mark.parametrize("name, rope", [
    pytest.param("run_multihead_self_attention", False, marks=adapter("run_multihead_self_attention")),
    pytest.param("run_multihead_self_attention_with_rope", True,
                 marks=adapter("run_multihead_self_attention_with_rope")),
])
def test_attention_is_causal(adapters, name, rope):
    """The output at position t does not change when inputs after t change. A cause is named
    only where this test's own evidence shows it."""
    out, leaked = _leak(adapters, rope, heads=2)
    broken = ~torch.isfinite(out)
    if broken.any():
        rows = sorted(set(broken.nonzero()[:, -2].tolist()))
        cause = (" Only query position 0 is NaN: its row of the causal mask hides every key. Is the diagonal "
                 "masked too (triu without diagonal=1)? Query i sees keys 0..i." if rows == [0] else "")
        raise AssertionError(f"the output holds NaN/inf at positions {rows} (of 6), so causality cannot be "
                             f"judged.{cause}")
    if leaked < 1e-6:
        return
    _, one_head = _leak(adapters, rope, heads=1)
    cause = ("With 1 head nothing leaks: a head split or merge that mixes positions (a reshape "
             "without its transpose), not the mask." if one_head < 1e-6 else
             "It leaks with 1 head too: query i may only see keys 0..i (mask with tril, True = may attend).")
    raise AssertionError(f"changing tokens 3..5 changed the output at positions 0..2 by {leaked:.3g} (2 heads). "
                         + cause)


# ---------------------------------------------------------------- RoPE

@adapter("run_rope")
def test_rope_preserves_norms(adapters):
    x = randn(3, 5, 8)
    positions = torch.tensor([0, 7, 7, 30, 2])
    out = shaped(adapters.run_rope(8, 10000.0, 64, x, positions), x.shape, "run_rope")
    assert torch.allclose(out.norm(dim=-1), x.norm(dim=-1), rtol=1e-5), \
        "RoPE is a rotation: every vector must keep its norm"


@adapter("run_rope")
def test_rope_scores_depend_only_on_the_offset(adapters):
    """<rope(q, m), rope(k, n)> is the same for every (m, n) with the same m - n."""
    q, k = randn(1, 8, seed=1), randn(1, 8, seed=2)

    def score(m, n):
        rq = adapters.run_rope(8, 10000.0, 512, q, torch.tensor([m]))
        rk = adapters.run_rope(8, 10000.0, 512, k, torch.tensor([n]))
        return (rq * rk).sum().item()

    scores = [score(m, m - 3) for m in (3, 10, 100, 400)]
    assert max(scores) - min(scores) < 1e-4, (
        f"q.k at offset 3 varies with the absolute position: {[round(s, 5) for s in scores]}. "
        "Rotate each (x_2k, x_2k+1) pair by pos * theta^(-2k/d_k), the same angle for q and k.")
    assert abs(score(5, 5) - (q * k).sum().item()) < 1e-4, "at equal positions the score must be unchanged"
