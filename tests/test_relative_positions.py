"""Relative schemes (Unit 2.1) and the attention they plug into (Unit 2.2): properties no fixture can fake.

A relative bias depends only on the offset j - i, whatever the length: each test asks for lengths and
head counts the fixtures never use. Which lengths a trained model handles is another matter: these
tests check only that the formula extends."""

import math

import pytest
import torch

from harness.student_run.checks import generator, oracle_passes, shaped

adapter = pytest.mark.adapter

LONG = 300  # longer than any fixture case


def randn(*shape, seed=0):
    return torch.randn(shape, generator=generator(seed))


def _shift_invariant(bias: torch.Tensor, what: str) -> None:
    """bias[h, i, j] depends only on j - i: moving query and key by one changes nothing."""
    moved = (bias[:, 1:, 1:] - bias[:, :-1, :-1]).abs().max().item()
    assert moved == 0, (f"{what}[h, i+1, j+1] differs from [h, i, j] by up to {moved:.3g}: a relative bias depends "
                        "only on the offset j - i, never on the query's position i")


# ---------------------------------------------------------------- ALiBi

@adapter("run_alibi_slopes")
@pytest.mark.parametrize("num_heads", [2, 4, 32, 64])
def test_alibi_slopes_fall_geometrically_for_a_power_of_two(adapters, num_heads):
    """For 2^k heads the slopes are 2^(-8/n), 2^(-16/n), ...: each head's slope is the previous one times the first."""
    slopes = adapters.run_alibi_slopes(num_heads).double()
    assert slopes.shape == (num_heads,), f"{num_heads} heads gave slopes shaped {list(slopes.shape)}"
    first = 2.0 ** (-8.0 / num_heads)
    assert abs(slopes[0].item() - first) <= 1e-6 * first, \
        f"with {num_heads} heads the first slope is 2^(-8/{num_heads}) = {first:.6g}, not {slopes[0].item():.6g}"
    ratios = slopes[1:] / slopes[:-1]
    assert torch.allclose(ratios, torch.full_like(ratios, first), rtol=1e-5), (
        f"with {num_heads} heads each slope is the one before times {first:.6g}; the ratios run from "
        f"{ratios.min().item():.6g} to {ratios.max().item():.6g}" + (
            ": they grow, so the slopes are in reverse order (head 1 has the largest)" if (ratios > 1).all() else ""))


def _geometric(slopes: torch.Tensor) -> bool:
    """Press et al.'s slopes for a power of two n: 2^(-8/n), then each the one before times it."""
    n = slopes.numel()
    expected = 2.0 ** (-8.0 * torch.arange(1, n + 1, dtype=torch.float64) / n)
    return slopes.shape == (n,) and torch.allclose(slopes.double(), expected, rtol=1e-5)


@adapter("run_alibi_slopes")
@pytest.mark.parametrize("num_heads", [3, 5, 7, 10, 24])
def test_alibi_slopes_of_other_counts_extend_the_lower_power_of_two(adapters, num_heads):
    """Press et al.: n heads take the slopes of the closest lower power of two c, then every other slope of
    2c (its 1st, 3rd, ...), so the first heads keep the slopes a c-head model has."""
    c = 2 ** math.floor(math.log2(num_heads))
    slopes, lower, upper = (adapters.run_alibi_slopes(n) for n in (num_heads, c, 2 * c))
    if not (_geometric(lower) and _geometric(upper)):
        # Judged against your own c- and 2c-head slopes: where those are wrong, this says nothing.
        pytest.skip(f"not run: your slopes for {c} and {2 * c} heads (powers of two) must be right first, as "
                    "test_alibi_slopes_fall_geometrically_for_a_power_of_two checks; this test compares with them")
    assert torch.allclose(slopes[:c], lower, rtol=1e-6), \
        f"the first {c} slopes of {num_heads} heads must be the {c} slopes of {c} heads"
    assert torch.allclose(slopes[c:], upper[0::2][:num_heads - c], rtol=1e-6), (
        f"slopes {c + 1}..{num_heads} of {num_heads} heads must be slopes 1, 3, 5, ... of {2 * c} heads "
        f"(upper[0::2]), not {[round(s, 5) for s in slopes[c:].tolist()]}")


@adapter("run_alibi_bias")
def test_alibi_bias_is_minus_slope_times_distance_at_any_length(adapters, term):
    """At a length no case uses: 0 on the diagonal, -slope x |i - j| off it, so it depends only on j - i."""
    oracle_passes(adapters, term, "run_alibi_slopes", "run_alibi_bias")
    heads = 6
    bias = adapters.run_alibi_bias(heads, LONG).double()
    assert bias.shape == (heads, LONG, LONG), f"shape {list(bias.shape)}, not [heads, queries, keys]"
    _shift_invariant(bias, "the ALiBi bias")
    slopes = adapters.run_alibi_slopes(heads).double()
    first_key = bias[:, :, 0]  # query i, key 0: distance i
    expected = -slopes[:, None] * torch.arange(LONG, dtype=torch.float64)
    assert torch.allclose(first_key, expected, rtol=1e-5, atol=1e-6), (
        "bias[h, i, 0] must be -slope_h x i (run_alibi_slopes' slope): "
        + ("it is +slope x i, so far keys weigh more" if torch.allclose(first_key, -expected, rtol=1e-5) else
           "it differs by up to " f"{(first_key - expected).abs().max().item():.3g}"))
    assert torch.equal(bias, bias.transpose(-1, -2)), \
        "bias[h, i, j] must equal bias[h, j, i]: the distance |i - j| is the same in both triangles"


# ---------------------------------------------------------------- T5

T5 = [  # (num_buckets, max_distance, bidirectional): boundaries on no integer distance
    pytest.param(16, 20, True, id="bidirectional"),
    pytest.param(12, 30, False, id="causal"),
]


def _buckets(adapters, num_buckets, max_distance, bidirectional, seq_len, heads=2) -> torch.Tensor:
    """The buckets the student's bias reads, [queries, keys]: a table whose value is its own bucket number."""
    table = torch.arange(num_buckets, dtype=torch.float32)[:, None] * heads + torch.arange(heads)
    bias = adapters.run_t5_relative_bias(heads, num_buckets, max_distance, bidirectional, seq_len, table)
    assert bias.shape == (heads, seq_len, seq_len), f"shape {list(bias.shape)}, not [heads, queries, keys]"
    heads_agree = torch.equal(bias - torch.arange(heads, dtype=bias.dtype)[:, None, None], bias[:1].expand_as(bias))
    assert heads_agree, "head h must read column h of the table, at the same bucket for every head"
    return (bias[0] / heads).round().long()


@adapter("run_t5_relative_bias")
@pytest.mark.parametrize("num_buckets, max_distance, bidirectional", T5)
def test_t5_buckets_depend_only_on_the_offset_grow_with_distance_and_saturate(adapters, num_buckets, max_distance,
                                                                              bidirectional):
    buckets = _buckets(adapters, num_buckets, max_distance, bidirectional, LONG)
    _shift_invariant(buckets[None], "the T5 bucket")
    half = num_buckets // 2 if bidirectional else num_buckets
    exact = half // 2
    before = buckets[LONG - 1].flip(0)  # query LONG-1, keys LONG-1, LONG-2, ...: distance n = 0, 1, 2, ... before it
    assert before[:exact].tolist() == list(range(exact)), (
        f"keys 0..{exact - 1} before the query must have buckets 0..{exact - 1} (one per distance below max_exact "
        f"= {exact}), not {before[:exact].tolist()}" + (
            ": these are the upper half's, so the offset is i - j (query minus key); T5 uses j - i"
            if bidirectional and (before[1:exact] >= half).all() else ""))
    steps = before[1:] - before[:-1]
    assert (steps >= 0).all(), f"buckets must not fall as keys get farther: {before[:max_distance + 2].tolist()}"
    assert (before[max_distance:] == half - 1).all(), (
        f"every distance >= max_distance = {max_distance} shares the last bucket {half - 1} of its half; "
        f"distances {max_distance}.. have buckets {sorted(set(before[max_distance:].tolist()))}")
    assert len(set(before[:max_distance + 1].tolist())) == half, \
        f"distances 0..max_distance must use every bucket 0..{half - 1} of their half"
    after = buckets[0]  # query 0, keys 0, 1, 2, ...: after it
    if bidirectional:
        assert (after[1:] - half == before[1:]).all(), \
            "a key n after the query must be in bucket half + (the bucket of a key n before it)"
    else:
        mirrored = (after[1:] == before[1:]).all()  # |i - j|: a key n after the query read like one n before it
        assert (after[1:] == 0).all(), (
            "causal: keys after the query share bucket 0" + (
                f"; yours put a key n after the query in the same bucket as one as far before it (buckets "
                f"{after[1:6].tolist()} for n = 1..5 after it): the distance is |i - j|; the causal one is "
                "n = max(i - j, 0)" if mirrored else ""))


# ---------------------------------------------------------------- attention with a bias

@adapter("run_attention_with_bias")
def test_attention_with_a_zero_bias_is_attention(adapters, term):
    oracle_passes(adapters, term, "run_scaled_dot_product_attention", "run_attention_with_bias")
    q, k, v = randn(2, 3, 5, 4, seed=1), randn(2, 3, 7, 4, seed=2), randn(2, 3, 7, 6, seed=3)
    mask = randn(5, 7, seed=4) > -0.5
    mask[:, 0] = True
    biased = shaped(adapters.run_attention_with_bias(q, k, v, torch.zeros(3, 5, 7), mask), (2, 3, 5, 6),
                    "run_attention_with_bias")
    plain = shaped(adapters.run_scaled_dot_product_attention(q, k, v, mask.expand(2, 3, 5, 7)), (2, 3, 5, 6),
                   "run_scaled_dot_product_attention")
    assert torch.allclose(biased, plain, atol=1e-6, rtol=1e-5), \
        f"with a zero bias, attention must equal run_scaled_dot_product_attention; they differ by " \
        f"{(biased - plain).abs().max().item():.3g}"


@adapter("run_attention_with_bias")
def test_attention_ignores_a_bias_constant_along_the_keys(adapters):
    """softmax(s + c) = softmax(s): a bias that is the same for every key of a query changes nothing."""
    q, k, v = randn(2, 4, 8, seed=5), randn(2, 6, 8, seed=6), randn(2, 6, 3, seed=7)
    zero, rows = (shaped(adapters.run_attention_with_bias(q, k, v, bias), (2, 4, 3), "run_attention_with_bias")
                  for bias in (torch.zeros(4, 6), (randn(4, 1, seed=8) * 50).expand(4, 6)))
    assert torch.allclose(zero, rows, atol=1e-5, rtol=1e-4), (
        f"adding a per-query constant to the bias changed the output by {(zero - rows).abs().max().item():.3g}: "
        "add the bias to the scores before the softmax over the keys")


@adapter("run_attention_with_bias")
def test_causal_alibi_attention_decays_by_exp_slope_per_step_at_any_length(adapters, term):
    """With equal scores (Q = 0), causal ALiBi attention gives query i weights proportional to exp(-slope (i - j)):
    each step back costs a factor exp(-slope), at lengths no case uses."""
    oracle_passes(adapters, term, "run_alibi_bias", "run_attention_with_bias")
    heads, seq = 4, 200
    bias = adapters.run_alibi_bias(heads, seq)
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    eye = torch.eye(seq).expand(heads, seq, seq)  # V = identity: the output is the attention weights
    weights = shaped(adapters.run_attention_with_bias(torch.zeros(heads, seq, 4), randn(heads, seq, 4), eye, bias,
                                                      causal), (heads, seq, seq), "run_attention_with_bias")
    slopes = adapters.run_alibi_slopes(heads).double()
    assert (weights.triu(1) == 0).all(), "keys after the query got weight: apply the mask as well as the bias"
    last = weights[:, -1].double()  # the last query sees all 200 keys
    ratio = last[:, -2] / last[:, -1]
    assert torch.allclose(ratio, torch.exp(-slopes), rtol=1e-4), (
        f"one step back must multiply a key's weight by exp(-slope) = {torch.exp(-slopes).tolist()}, "
        f"not {ratio.tolist()}: is the bias added unscaled, after Q K^T / sqrt(d_k)?")
