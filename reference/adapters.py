"""Adapters: the glue between the test suite and the code in `reference/`.

Each function's signature and docstring is the contract the tests check.
Do not change the signatures; change the code in the package if you need to.
This file is rendered from harness/contract.py.
"""

import importlib
import os  # noqa: F401  (CS336's checkpoint signatures)
from collections.abc import Iterable  # noqa: F401
from typing import IO, BinaryIO  # noqa: F401

import numpy.typing as npt  # noqa: F401
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor


class Package:
    """`impl.rope` imports rope.py of the package at its first use: a file that fails to import
    stops only the functions that use it, and its error names the file and line."""

    def __init__(self, name: str):
        self.name = name

    def __getattr__(self, module: str):
        return importlib.import_module(f"{self.name}.{module}")


impl = Package('reference')  # accounting, attention, embeddings, gpt2, model, optimizer, positions, rope, training


def with_weights(module: torch.nn.Module, weights: dict, *inputs):
    """Run `module` with `weights` standing in for its parameters, so gradients reach them."""
    own = dict(module.named_parameters())
    if set(own) != set(weights):
        raise KeyError(f"{type(module).__name__}'s parameters must be exactly {sorted(weights)}; "
                       f"missing {sorted(set(weights) - set(own))}, extra {sorted(set(own) - set(weights))}. "
                       "Use the names in the docstring; tables without gradients belong in buffers.")
    return torch.func.functional_call(module, weights, inputs)


def run_embedding(
    vocab_size: int,
    d_model: int,
    weights: Float[Tensor, "vocab_size d_model"],
    token_ids: Int[Tensor, "..."],
) -> Float[Tensor, "... d_model"]:
    """Look up the embedding vector of every token id: out = weights[token_ids].

    Token ids are labels, not coordinates: id 7 is no more like id 8 than like
    id 900. Each id selects one row of the [vocab_size, d_model] table, so ids
    shaped [2, 5] with V=1000, D=32 give an output shaped [2, 5, 32] from a table
    of 32,000 parameters. Repeated ids select identical rows.


    A float16/bfloat16 table gives rows of its dtype, bit-exact.

    Args:
        vocab_size: V, the number of rows in the table.
        d_model: D, the width of each embedding vector.
        weights: the [vocab_size, d_model] embedding table.
        token_ids: int64 ids of any shape [...], including 1-D and 4-D.

    Returns:
        [..., d_model]: the selected rows, bit-exact copies of the table's rows
        (checked with torch.equal, not a tolerance).

    Rules:
        - Index the table. Never build a one-hot [..., vocab_size] tensor: at
          GPT-2 scale ([8, 1024] ids, V=50257) it is 1.6 GB in fp32.
        - Raise on ids outside [0, vocab_size). Plain weights[ids] silently wraps
          -1 to the last row.
        - Gradients must reach `weights`, summed over repeated ids.
    """
    return impl.embeddings.embedding_lookup(weights, token_ids)


def run_learned_positions(
    context_length: int,
    d_model: int,
    weights: Float[Tensor, "context_length d_model"],
    token_positions: Int[Tensor, "... seq"],
) -> Float[Tensor, "... seq d_model"]:
    """Look up learned absolute position vectors: out = weights[token_positions].

    A learned position table has one trainable row per position 0 .. context_length-1,
    trained jointly with everything else (GPT-2's approach). Positions are absolute
    and 0-based, and they need not be 0..seq-1: offsets and gaps are valid.


    A float16/bfloat16 table gives rows of its dtype, bit-exact.

    Args:
        context_length: the number of rows, i.e. the longest sequence the table covers.
        d_model: the width of each position vector.
        weights: the [context_length, d_model] position table.
        token_positions: int64 positions shaped [..., seq].

    Returns:
        [..., seq, d_model]: the selected rows.

    Rules:
        - Raise a clear error for any position < 0 or >= context_length: there is
          no row for it, and wrapping would silently reuse another position's vector.
        - Gradients must reach `weights`.
    """
    return impl.embeddings.learned_positions(weights, token_positions)


def run_sinusoidal_positions(
    d_model: int,
    token_positions: Int[Tensor, "... seq"],
) -> Float[Tensor, "... seq d_model"]:
    """Fixed sinusoidal position encodings (Vaswani et al., interleaved layout).

        PE[p, 2i]   = sin(p / 10000^(2i / d_model))
        PE[p, 2i+1] = cos(p / 10000^(2i / d_model))

    Even dimensions hold sines and odd dimensions cosines, one frequency per pair
    (2i, 2i+1). This is not the [sin | cos] concatenated layout of tensor2tensor or
    fairseq, which is a different convention and fails here.

    Args:
        d_model: the encoding width (even).
        token_positions: int64 absolute 0-based positions shaped [..., seq].

    Returns:
        float32 [..., seq, d_model], every value in [-1, 1].

    Notes:
        The formula has no parameters and extends to any position, so this must
        work for positions far beyond any training length. That the formula
        extends does not prove that a trained model extrapolates to longer inputs.
        For a fixed offset k, PE[p + k] is a fixed rotation of each (sin, cos) pair
        of PE[p]: that is what lets attention relate offsets, yet the encoding is
        still absolute, one vector per position. Relative schemes add no vector per
        position: RoPE rotates Q and K, and ALiBi and T5 add a bias to the attention
        scores that depends on the offset only (run_alibi_bias, run_t5_relative_bias).
    """
    return impl.embeddings.sinusoidal_positions(d_model, token_positions)


def run_embed_with_positions(
    vocab_size: int,
    context_length: int,
    d_model: int,
    token_weights: Float[Tensor, "vocab_size d_model"],
    position_weights: Float[Tensor, "context_length d_model"] | None,
    token_ids: Int[Tensor, "batch seq"],
) -> Float[Tensor, "batch seq d_model"]:
    """Token vectors plus position vectors: x = E[token_ids] + PE[positions].

    Positions are 0 .. seq-1 along the last axis, the same for every batch row.
    With position_weights given, PE is that learned table; with None, PE is the
    sinusoidal encoding of run_sinusoidal_positions.

    Repeated ids select identical token vectors; adding position vectors makes
    them differ. For ids [2, 0, 2], rows 0 and 2 of E[ids] are equal, and rows 0
    and 2 of the output are not: that is the information attention alone lacks.


    float16/bfloat16 tables: the sum in token_weights' dtype, rounded once (bit-exact,
    as the sum of two 16-bit values rounds once in float32 too).

    Args:
        vocab_size, context_length, d_model: table sizes.
        token_weights: the [vocab_size, d_model] token table.
        position_weights: the [context_length, d_model] learned table, or None
            for sinusoidal positions.
        token_ids: int64 ids shaped [batch, seq].

    Returns:
        [batch, seq, d_model].

    Rules:
        - The same id and range rules as run_embedding and run_learned_positions
          apply; with a learned table, seq > context_length must raise.
        - Gradients must reach both tables.
    """
    return impl.embeddings.embed_with_positions(token_weights, position_weights, token_ids)


def get_embedding(vocab_size: int, d_model: int) -> torch.nn.Module:
    """Build your token embedding module for a vocab_size x d_model table.

    Its one parameter is the [vocab_size, d_model] table, named `weight` (V=1000,
    D=32 gives exactly 32,000 parameters): run_transformer_lm later loads
    token_embeddings.weight into it by that name. forward(token_ids [...]) returns
    [..., d_model] by indexing that table, as run_embedding does.
    """
    return impl.embeddings.Embedding(vocab_size, d_model)


def get_sinusoidal_positions(max_len: int, d_model: int) -> torch.nn.Module:
    """Build your sinusoidal position module for positions 0 .. max_len-1.

    forward(token_positions [..., seq]) returns [..., seq, d_model], the values of
    run_sinusoidal_positions. The precomputed table is a buffer
    (register_buffer(..., persistent=False)), not a Parameter: the module has 0
    parameters, and .to(device) moves the table with it.
    """
    return impl.embeddings.SinusoidalPositions(max_len, d_model)


def run_alibi_slopes(num_heads: int) -> Float[Tensor, "heads"]:
    """ALiBi's slope of every head (Press et al., "Train Short, Test Long"), as their get_slopes.

    For a power of two n = num_heads, head h = 1 .. n gets 2^(-8 h / n): a geometric sequence
    that starts at 2^(-8 / n) and has that same ratio. With 8 heads: 1/2, 1/4, ..., 1/256.

    For any other n, with c the largest power of two below n: the c slopes of c heads, then
    every other slope of 2c heads, starting with its first, for the remaining n - c heads
    (2c's slopes 1, 3, 5, ...). With 6 heads: the 4 slopes of 4 heads (2^-2, 2^-4, 2^-6, 2^-8),
    then 2^-1 and 2^-3 (slopes 1 and 3 of 8 heads).

    Returns:
        float32 [num_heads] in that order (decreasing only for a power of two), on torch's default
        device (no tensor goes in).
    """
    return impl.positions.alibi_slopes(num_heads)


def run_alibi_bias(num_heads: int, seq_len: int) -> Float[Tensor, "heads queries keys"]:
    """ALiBi's additive attention bias: bias[h, i, j] = -slope_h * |i - j|.

    A relative scheme: unlike learned absolute positions (a trained row per position) and fixed
    sinusoidal ones (a vector per position added to the input), ALiBi adds nothing to the token
    vectors. Each head adds this bias to its scores, softmax(Q K^T / sqrt(d_k) + bias), and it
    depends only on the offset j - i, never on i itself. slope_h is run_alibi_slopes(num_heads)[h].

    Axes: [heads, queries, keys]; query i and key j are positions 0 .. seq_len-1. The sign: a key
    at distance |i - j| costs slope_h * |i - j|, so the bias is 0 on the diagonal and negative
    elsewhere: nearer keys weigh more, and steep heads look only nearby.

    Causal use (Press et al.'s decoder): a causal mask hides the keys j > i, so only the lower
    triangle counts, where the bias is -slope_h * (i - j), query minus key. The upper triangle
    holds the same distances, so the bias also serves an encoder without a mask. (Their code adds
    slope_h * j to every row instead: the softmax is the same, the bias is not, and this function
    returns the bias.)

    Returns:
        float32 [num_heads, seq_len, seq_len], on torch's default device (no tensor goes in).

    Notes:
        The formula extends to any seq_len, far beyond the lengths a model trained on; that it
        computes says nothing of whether a trained model keeps working there.
    """
    return impl.positions.alibi_bias(num_heads, seq_len)


def run_t5_relative_bias(
    num_heads: int,
    num_buckets: int,
    max_distance: int,
    bidirectional: bool,
    seq_len: int,
    weight: Float[Tensor, "num_buckets heads"],
) -> Float[Tensor, "heads queries keys"]:
    """T5's bucketed relative position bias: bias[h, i, j] = weight[bucket(j - i), h].

    A relative scheme with a learned table: one trained bias per bucket of offsets and per head,
    added to that head's attention scores. Unlike a learned absolute table it has no row per
    position, only per offset bucket, so the same table serves every position and every seq_len.

    The bucket of query i and key j, with r = j - i (key minus query, T5's memory - context):
        bidirectional: half = num_buckets // 2; keys after the query (r > 0) use buckets
            half .. 2 half - 1, the others (r <= 0, the query itself too) 0 .. half - 1;
            the distance is n = |r|.
        causal (bidirectional=False): half = num_buckets, and n = max(i - j, 0): keys after the
            query, which a causal mask hides anyway, share bucket 0.
        Within a half, with max_exact = half // 2: a distance n < max_exact has its own bucket n.
        A larger n goes to bucket max_exact + k, for the largest k in 0 .. half - max_exact - 1 with
            n >= max_exact * (max_distance / max_exact) ** (k / (half - max_exact)),
        so buckets grow logarithmically and every n >= max_distance shares the last one (half - 1).
        This is T5's floor(log(n / max_exact) / log(max_distance / max_exact) * (half - max_exact)),
        read in exact arithmetic. The tests use settings whose boundaries fall on no integer (the nearest
        distance is more than 1e-3 of a bucket from one), so that formula in float32 or float64 gives
        these buckets. T5's own default (32 buckets, max_distance 128, bidirectional) puts boundaries
        exactly on 16, 32 and 64, where a floating-point log can land on either side.

    Args:
        num_heads, num_buckets, max_distance, bidirectional: T5's settings (its encoder is
            bidirectional, its decoder causal).
        seq_len: queries and keys are positions 0 .. seq_len-1.
        weight: the learned [num_buckets, num_heads] table (an nn.Embedding's layout in T5).

    Returns:
        [num_heads, seq_len, seq_len] in weight's dtype, on weight's device. Gradients reach
        `weight`, summed over every (i, j) in a bucket.
    """
    module = impl.positions.T5RelativeBias(num_heads, num_buckets, max_distance, bidirectional)
    return with_weights(module, {'weight': weight}, seq_len)


def run_linear(
    d_in: int,
    d_out: int,
    weights: Float[Tensor, "d_out d_in"],
    in_features: Float[Tensor, "... d_in"],
) -> Float[Tensor, "... d_out"]:
    """A bias-free linear layer: y = x @ W.T, with W stored as [d_out, d_in].


    float16/bfloat16 input: compute in float32 and return the input's dtype (the float32
    result rounded once: within 1 ulp). A plain x @ W.T in 16 bits does that: torch
    accumulates the products in float32.

    Args:
        d_in, d_out: input and output widths.
        weights: W, shaped [d_out, d_in] (the layout of torch.nn.Linear.weight).
        in_features: x, shaped [..., d_in] with any number of leading dims
            (none, one, or several), possibly non-contiguous.

    Returns:
        [..., d_out].

    Your Linear module's only parameter is `weight` [d_out, d_in]. Do not assume
    x is 3-D: einsum("...i,oi->...o") or x @ W.T work for any rank.
    """
    return with_weights(impl.attention.Linear(d_in, d_out), {'weight': weights}, in_features)


def run_softmax(in_features: Float[Tensor, "..."], dim: int) -> Float[Tensor, "..."]:
    """Softmax along `dim`: exp(x - max) / sum(exp(x - max)).

    Subtract the maximum along `dim` (per slice, not the global max) before exp,
    so inputs offset by +100 or +1000 stay finite. Honour `dim`; it is not always -1.

    Returns:
        a tensor shaped like in_features whose slices along `dim` sum to 1.

    float16/bfloat16 input: compute in float32 and return the input's dtype (the float32
    result rounded once: within 1 ulp).
    """
    return impl.attention.softmax(in_features, dim)


def run_silu(in_features: Float[Tensor, "..."]) -> Float[Tensor, "..."]:
    """SiLU (swish): x * sigmoid(x), elementwise, same shape.

    float16/bfloat16 input: compute in float32 and return the input's dtype (the float32
    result rounded once: within 1 ulp).
    """
    return impl.attention.silu(in_features)


def run_scaled_dot_product_attention(
    Q: Float[Tensor, "... queries d_k"],
    K: Float[Tensor, "... keys d_k"],
    V: Float[Tensor, "... keys d_v"],
    mask: Bool[Tensor, "... queries keys"] | None = None,
) -> Float[Tensor, "... queries d_v"]:
    """softmax(Q K^T / sqrt(d_k) + mask_term) V, over any number of leading dims.

    The softmax runs over the keys axis (the last axis of the scores [..., queries,
    keys]). The scale uses d_k, the width of Q and K, which may differ from d_v, and
    queries may differ from keys.


    float16/bfloat16 input: compute in float32 and return the input's dtype (the float32
    result rounded once: within 1 ulp). The scores and the softmax in float32 too:
    torch's fused scaled_dot_product_attention may round the probabilities to 16 bits,
    so call it on float32 tensors.

    Args:
        Q: [..., queries, d_k]; K: [..., keys, d_k]; V: [..., keys, d_v].
        mask: optional boolean [..., queries, keys]. True means the query MAY attend
            to that key, as in torch.nn.functional.scaled_dot_product_attention.
            False positions get -inf before the softmax (never zeroed after it).
            Fixtures contain no fully masked row.

    Returns:
        [..., queries, d_v].
    """
    return impl.attention.scaled_dot_product_attention(Q, K, V, mask)


def run_attention_with_bias(
    Q: Float[Tensor, "... queries d_k"],
    K: Float[Tensor, "... keys d_k"],
    V: Float[Tensor, "... keys d_v"],
    bias: Float[Tensor, "... queries keys"],
    mask: Bool[Tensor, "... queries keys"] | None = None,
) -> Float[Tensor, "... queries d_v"]:
    """softmax(Q K^T / sqrt(d_k) + bias + mask_term) V: attention with an additive score bias.

    This is how relative schemes enter attention: run_alibi_bias or run_t5_relative_bias gives a
    [heads, queries, keys] bias, and with Q, K, V shaped [batch, heads, seq, d] it broadcasts over
    the batch, one bias per head. The bias is added after the 1/sqrt(d_k) scale (it is not scaled)
    and before the softmax; the mask is as in run_scaled_dot_product_attention.

    Args:
        Q: [..., queries, d_k]; K: [..., keys, d_k]; V: [..., keys, d_v].
        bias: float [..., queries, keys], broadcast against the scores [..., queries, keys]
            (fewer leading dims than Q, or size-1 dims, broadcast as in torch).
        mask: optional boolean, broadcast the same way. True means the query MAY attend to that
            key; False positions get -inf before the softmax. Fixtures contain no fully masked row.

    Returns:
        [..., queries, d_v] in Q's dtype. With float16 or bfloat16 inputs, compute in float32 and
        round once at the end (as torch.nn.functional.scaled_dot_product_attention does): scores
        and a softmax in 16 bits are caught. Gradients reach Q, K, V and bias.
    """
    return impl.attention.attention_with_bias(Q, K, V, bias, mask)


def run_multihead_self_attention(
    d_model: int,
    num_heads: int,
    q_proj_weight: Float[Tensor, "d_model d_model"],
    k_proj_weight: Float[Tensor, "d_model d_model"],
    v_proj_weight: Float[Tensor, "d_model d_model"],
    o_proj_weight: Float[Tensor, "d_model d_model"],
    in_features: Float[Tensor, "... seq d_model"],
) -> Float[Tensor, "... seq d_model"]:
    """Causal multi-head self-attention without positions.

    Q = x Wq^T, K = x Wk^T, V = x Wv^T; each is split into num_heads heads of
    d_k = d_v = d_model / num_heads. Projection rows are grouped head by head:
    rows h*d_k .. (h+1)*d_k-1 of Wq belong to head h ("(h d) -> h d"), so the split
    is view(..., seq, h, d_k) followed by a transpose to [..., h, seq, d_k].
    Query i attends to keys 0..i only (causal; the diagonal is visible). The heads
    are concatenated back in the same order and projected by W_o.


    float16/bfloat16 input and weights: compute in float32 throughout (upcast x once,
    and each weight where it is used, e.g. F.linear(x, w.to(x.dtype))), and round once
    at the end to the input's dtype: results rounded to 16 bits between layers are off
    by more than 1 ulp.

    Args:
        d_model, num_heads: sizes; d_model is divisible by num_heads.
        q_proj_weight, k_proj_weight, v_proj_weight, o_proj_weight: [d_model, d_model].
        in_features: [..., seq, d_model] with any leading dims.

    Returns:
        [..., seq, d_model].
    """
    module = impl.attention.MultiHeadSelfAttention(d_model, num_heads)
    weights = {'q_proj.weight': q_proj_weight, 'k_proj.weight': k_proj_weight,
               'v_proj.weight': v_proj_weight, 'output_proj.weight': o_proj_weight}
    return with_weights(module, weights, in_features)


def run_rope(
    d_k: int,
    theta: float,
    max_seq_len: int,
    in_query_or_key: Float[Tensor, "... seq d_k"],
    token_positions: Int[Tensor, "... seq"],
) -> Float[Tensor, "... seq d_k"]:
    """Rotary position embedding of a query or key tensor, interleaved pairs.

    Dimensions pair up as (x0, x1), (x2, x3), ...; pair k (0-based) rotates by the
    angle pos * theta^(-2k / d_k):

        (x_2k, x_2k+1) -> (x_2k cos a - x_2k+1 sin a,  x_2k sin a + x_2k+1 cos a)

    This is not GPT-NeoX / Hugging Face rotate_half, which pairs i with i + d_k/2.


    float16/bfloat16 input: compute in float32 and return the input's dtype (the float32
    result rounded once: within 1 ulp).

    Args:
        d_k: width of the vectors (even).
        theta: the base, e.g. 10000.
        max_seq_len: the largest position + 1 your cos/sin tables must cover.
        in_query_or_key: [..., seq, d_k].
        token_positions: int64 [..., seq], any non-negative integers below
            max_seq_len: offsets, gaps, repeats, not only arange. They broadcast
            against the leading dims of in_query_or_key.

    Returns:
        [..., seq, d_k], with the norm of every vector unchanged.

    RoPE has no learnable parameters: precompute cos/sin as non-persistent buffers
    (register_buffer(..., persistent=False)) on the right device. The point of it:
    <rope(q, m), rope(k, n)> depends only on m - n.
    """
    rope = impl.rope.RotaryPositionalEmbedding(theta, d_k, max_seq_len, device=in_query_or_key.device)
    return rope(in_query_or_key, token_positions)


def run_multihead_self_attention_with_rope(
    d_model: int,
    num_heads: int,
    max_seq_len: int,
    theta: float,
    q_proj_weight: Float[Tensor, "d_model d_model"],
    k_proj_weight: Float[Tensor, "d_model d_model"],
    v_proj_weight: Float[Tensor, "d_model d_model"],
    o_proj_weight: Float[Tensor, "d_model d_model"],
    in_features: Float[Tensor, "... seq d_model"],
    token_positions: Int[Tensor, "... seq"] | None = None,
) -> Float[Tensor, "... seq d_model"]:
    """Causal multi-head self-attention with RoPE on queries and keys.

    As run_multihead_self_attention, plus: after the head split, Q and K of every
    head are rotated by RoPE with d_k = d_model / num_heads (the same rotation for
    each head). V is never rotated. RoPE is not applied over d_model before the split.


    float16/bfloat16 input and weights: compute in float32 throughout (upcast x once,
    and each weight where it is used, e.g. F.linear(x, w.to(x.dtype))), and round once
    at the end to the input's dtype: results rounded to 16 bits between layers are off
    by more than 1 ulp.

    Args:
        token_positions: int64 [..., seq]; None means 0 .. seq-1. Positions may be
            offset, gapped or repeated. The causal mask follows sequence order, not
            the position values.

    Returns:
        [..., seq, d_model].
    """
    module = impl.attention.MultiHeadSelfAttention(d_model, num_heads, max_seq_len=max_seq_len, theta=theta,
                                                   device=in_features.device)
    weights = {'q_proj.weight': q_proj_weight, 'k_proj.weight': k_proj_weight,
               'v_proj.weight': v_proj_weight, 'output_proj.weight': o_proj_weight}
    return with_weights(module, weights, in_features, token_positions)


def run_rmsnorm(
    d_model: int,
    eps: float,
    weights: Float[Tensor, "d_model"],
    in_features: Float[Tensor, "... d_model"],
) -> Float[Tensor, "... d_model"]:
    """RMSNorm over the last axis: x / sqrt(mean(x^2) + eps) * g.

    eps goes inside the square root, and the `eps` argument is used, not a
    hard-coded value. Compute in float32 (upcast fp16/bf16 inputs first: 300^2
    overflows fp16) and return the input's dtype. There is no mean subtraction:
    that would be LayerNorm.

    Args:
        weights: the gain g, [d_model].
        in_features: [..., d_model], float32, float16 or bfloat16.

    Returns:
        [..., d_model] in the dtype of in_features.
    """
    return with_weights(impl.model.RMSNorm(d_model, eps=eps), {'weight': weights}, in_features)


def run_swiglu(
    d_model: int,
    d_ff: int,
    w1_weight: Float[Tensor, "d_ff d_model"],
    w2_weight: Float[Tensor, "d_model d_ff"],
    w3_weight: Float[Tensor, "d_ff d_model"],
    in_features: Float[Tensor, "... d_model"],
) -> Float[Tensor, "... d_model"]:
    """The SwiGLU feed-forward network: W2 (silu(W1 x) * (W3 x)), no biases.

    W1 and W3 are [d_ff, d_model] and W2 is [d_model, d_ff] (nn.Linear layout:
    [out, in]). W1 goes through SiLU, W3 is the linear gate. d_ff is given; never
    derive it from d_model.

    float16/bfloat16 input and weights: compute in float32 throughout (upcast x once,
    and each weight where it is used, e.g. F.linear(x, w.to(x.dtype))), and round once
    at the end to the input's dtype: results rounded to 16 bits between layers are off
    by more than 1 ulp.
    """
    module = impl.model.SwiGLU(d_model, d_ff)
    return with_weights(module, {'w1.weight': w1_weight, 'w2.weight': w2_weight, 'w3.weight': w3_weight},
                        in_features)


def run_transformer_block(
    d_model: int,
    num_heads: int,
    d_ff: int,
    max_seq_len: int,
    theta: float,
    weights: dict[str, Tensor],
    in_features: Float[Tensor, "batch seq d_model"],
) -> Float[Tensor, "batch seq d_model"]:
    """One pre-norm transformer block with RoPE attention (positions 0 .. seq-1):

        z = x + MHA(RMSNorm1(x))
        y = z + FFN(RMSNorm2(z))

    The residual adds the raw input, not the normalised one. RMSNorm eps is 1e-5.


    float16/bfloat16 input and weights: compute in float32 throughout (upcast x once,
    and each weight where it is used, e.g. F.linear(x, w.to(x.dtype))), and round once
    at the end to the input's dtype: results rounded to 16 bits between layers are off
    by more than 1 ulp.

    Args:
        weights: the keys of one layer, without a `layers.{i}.` prefix:
            attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight,
            attn.output_proj.weight [d_model, d_model]; ln1.weight, ln2.weight
            [d_model]; ffn.w1.weight, ffn.w3.weight [d_ff, d_model]; ffn.w2.weight
            [d_model, d_ff].
        in_features: [batch, seq, d_model].
    """
    module = impl.model.TransformerBlock(d_model, num_heads, d_ff, max_seq_len, theta, device=in_features.device)
    return with_weights(module, weights, in_features)


def run_transformer_lm(
    vocab_size: int,
    context_length: int,
    d_model: int,
    num_layers: int,
    num_heads: int,
    d_ff: int,
    rope_theta: float,
    weights: dict[str, Tensor],
    in_indices: Int[Tensor, "batch seq"],
) -> Float[Tensor, "batch seq vocab_size"]:
    """The transformer language model: unnormalised next-token logits.

    token_embeddings -> num_layers pre-norm blocks (RoPE, positions 0 .. seq-1)
    -> ln_final (RMSNorm) -> lm_head. The output is logits, not probabilities: no
    softmax at the end. lm_head is a separate matrix (untied). seq may be shorter
    than context_length.


    float16/bfloat16 weights: compute in float32 throughout (upcast the embeddings once,
    and each weight where it is used), and return logits in the weights' dtype, rounded
    once: results rounded to 16 bits between layers are off by more than 1 ulp.

    Args:
        weights: token_embeddings.weight [vocab_size, d_model];
            layers.{i}.attn.{q_proj,k_proj,v_proj,output_proj}.weight;
            layers.{i}.ln1.weight, layers.{i}.ln2.weight;
            layers.{i}.ffn.{w1,w2,w3}.weight; ln_final.weight;
            lm_head.weight [vocab_size, d_model].
        in_indices: int64 token ids [batch, seq].

    Returns:
        [batch, seq, vocab_size] logits.
    """
    module = impl.model.TransformerLM(vocab_size, context_length, d_model, num_layers, num_heads, d_ff,
                                      rope_theta, device=in_indices.device)
    return with_weights(module, weights, in_indices)


def run_layernorm(
    d_model: int,
    weight: Float[Tensor, "d_model"],
    bias: Float[Tensor, "d_model"],
    in_features: Float[Tensor, "... d_model"],
    eps: float = 1e-5,
) -> Float[Tensor, "... d_model"]:
    """LayerNorm over the last axis (GPT-2's norm):

        y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias

    mean and var are over the last (d_model) axis only, and var is the biased
    variance, mean((x - mean)^2), as torch.nn.LayerNorm uses: torch.var's default
    (unbiased, divided by d_model - 1) is wrong here. eps goes inside the square
    root and is the `eps` argument. Unlike RMSNorm, the mean is subtracted and
    there is a bias. Compute in float32 (upcast float16/bfloat16 inputs), the
    affine included (weight and bias applied in 16 bits are off by more than 1
    ulp), and round once to the input's dtype.

    Args:
        weight, bias: the gain and bias, [d_model].
        in_features: [..., d_model] with any number of leading dims, float32,
            float16 or bfloat16.

    Returns:
        [..., d_model] in the dtype of in_features.
    """
    module = impl.gpt2.LayerNorm(d_model, eps=eps)
    return with_weights(module, {'weight': weight, 'bias': bias}, in_features)


def run_gelu(
    in_features: Float[Tensor, "..."],
    approximate: str = "none",
) -> Float[Tensor, "..."]:
    """GELU, elementwise, same shape.

    approximate="none" (the default) is the exact form:
        x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2)))
    approximate="tanh" is GPT-2's approximation:
        0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
    The two differ by up to about 1e-3, so use the form asked for. Any other
    value of approximate raises ValueError. (torch.nn.functional.gelu raises
    RuntimeError for it: code that calls F.gelu checks the value itself first.)

    float16/bfloat16 input: compute in float32 and return the input's dtype (the float32
    result rounded once: within 1 ulp).
    """
    return impl.gpt2.gelu(in_features, approximate=approximate)


def run_gpt2_mlp(
    d_model: int,
    d_ff: int,
    c_fc_weight: Float[Tensor, "d_ff d_model"],
    c_fc_bias: Float[Tensor, "d_ff"],
    c_proj_weight: Float[Tensor, "d_model d_ff"],
    c_proj_bias: Float[Tensor, "d_model"],
    in_features: Float[Tensor, "... d_model"],
    approximate: str = "none",
) -> Float[Tensor, "... d_model"]:
    """GPT-2's feed-forward network: c_proj(GELU(c_fc(x))), both linears with biases.

        h = GELU(x W_fc^T + b_fc),  y = h W_proj^T + b_proj

    Weights use the nn.Linear layout [out, in]. GELU is run_gelu with the given
    `approximate` (GPT-2 itself used "tanh"). d_ff is given (GPT-2 uses 4 d_model);
    never derive it from d_model. Compare SwiGLU: no gate, one matrix fewer, biases.

    float16/bfloat16 input and weights: compute in float32 throughout (upcast x once,
    and each weight where it is used, e.g. F.linear(x, w.to(x.dtype))), and round once
    at the end to the input's dtype: results rounded to 16 bits between layers are off
    by more than 1 ulp.
    """
    module = impl.gpt2.GPT2MLP(d_model, d_ff, approximate=approximate)
    weights = {'c_fc.weight': c_fc_weight, 'c_fc.bias': c_fc_bias,
               'c_proj.weight': c_proj_weight, 'c_proj.bias': c_proj_bias}
    return with_weights(module, weights, in_features)


def run_grouped_query_attention(
    d_model: int,
    num_heads: int,
    num_kv_heads: int,
    q_proj_weight: Float[Tensor, "d_model d_model"],
    k_proj_weight: Float[Tensor, "d_kv d_model"],
    v_proj_weight: Float[Tensor, "d_kv d_model"],
    o_proj_weight: Float[Tensor, "d_model d_model"],
    in_features: Float[Tensor, "... seq d_model"],
    theta: float | None = None,
    max_seq_len: int | None = None,
    token_positions: Int[Tensor, "... seq"] | None = None,
) -> Float[Tensor, "... seq d_model"]:
    """Causal grouped-query attention (GQA): num_heads query heads share
    num_kv_heads key/value heads.

    d_k = d_model / num_heads for every head, queries, keys and values alike.
    Q = x Wq^T is split into num_heads heads as in run_multihead_self_attention;
    K = x Wk^T and V = x Wv^T are [..., seq, num_kv_heads * d_k], split the same
    way into num_kv_heads heads. num_kv_heads divides num_heads; each group of
    g = num_heads / num_kv_heads consecutive query heads shares one kv head:
    query head h uses kv head h // g (repeat_interleave(g) along the heads axis,
    not repeat(g), which would give h % num_kv_heads). num_kv_heads = num_heads is
    plain multi-head attention; num_kv_heads = 1 is multi-query attention (MQA).
    The group size comes from the head counts, not from d_model. Query i attends
    to keys 0..i. The heads are concatenated in order and projected by W_o.

    With theta given, RoPE (run_rope's, d_k wide, base theta, tables for
    max_seq_len positions) rotates Q and K of every head after the split; V is
    never rotated. token_positions [..., seq] as in
    run_multihead_self_attention_with_rope; None means 0 .. seq-1. With theta None
    there are no positions (max_seq_len and token_positions are unused).


    float16/bfloat16 input and weights: compute in float32 throughout (upcast x once,
    and each weight where it is used, e.g. F.linear(x, w.to(x.dtype))), and round once
    at the end to the input's dtype: results rounded to 16 bits between layers are off
    by more than 1 ulp.

    Args:
        q_proj_weight, o_proj_weight: [d_model, d_model].
        k_proj_weight, v_proj_weight: [num_kv_heads * d_k, d_model].
        in_features: [..., seq, d_model] with any leading dims.

    Returns:
        [..., seq, d_model]. The KV cache of this layer holds 2 * num_kv_heads * d_k
        values per token instead of 2 * d_model: that is what GQA saves.
    """
    module = impl.gpt2.GroupedQueryAttention(d_model, num_heads, num_kv_heads, max_seq_len=max_seq_len,
                                             theta=theta, device=in_features.device)
    weights = {'q_proj.weight': q_proj_weight, 'k_proj.weight': k_proj_weight,
               'v_proj.weight': v_proj_weight, 'output_proj.weight': o_proj_weight}
    return with_weights(module, weights, in_features, token_positions)


def run_gpt2_block(
    d_model: int,
    num_heads: int,
    d_ff: int,
    weights: dict[str, Tensor],
    in_features: Float[Tensor, "batch seq d_model"],
    eps: float = 1e-5,
) -> Float[Tensor, "batch seq d_model"]:
    """One GPT-2 block: pre-LN, causal attention with biases and no RoPE, GELU MLP.

        z = x + Attn(LayerNorm1(x))
        y = z + MLP(LayerNorm2(z))

    Attn is causal multi-head attention (num_kv_heads = num_heads) whose four
    projections all have biases; MLP is run_gpt2_mlp with exact GELU; both
    LayerNorms use `eps`. Positions are not rotated: GPT-2 adds learned absolute
    positions to the input once, before the first block.


    float16/bfloat16 input and weights: compute in float32 throughout (upcast x once,
    and each weight where it is used, e.g. F.linear(x, w.to(x.dtype))), and round once
    at the end to the input's dtype: results rounded to 16 bits between layers are off
    by more than 1 ulp.

    Args:
        weights: the keys of one layer, without a `layers.{i}.` prefix:
            ln1.weight, ln1.bias, ln2.weight, ln2.bias [d_model];
            attn.{q_proj,k_proj,v_proj,output_proj}.weight [d_model, d_model] and
            .bias [d_model]; mlp.c_fc.weight [d_ff, d_model], mlp.c_fc.bias [d_ff];
            mlp.c_proj.weight [d_model, d_ff], mlp.c_proj.bias [d_model].
        in_features: [batch, seq, d_model].
    """
    module = impl.gpt2.GPT2Block(d_model, num_heads, d_ff, eps=eps, device=in_features.device)
    return with_weights(module, weights, in_features)


def run_gpt2_lm(
    vocab_size: int,
    context_length: int,
    d_model: int,
    num_layers: int,
    num_heads: int,
    d_ff: int,
    weights: dict[str, Tensor],
    in_indices: Int[Tensor, "batch seq"],
) -> Float[Tensor, "batch seq vocab_size"]:
    """The GPT-2 language model: unnormalised next-token logits.

        x = token_embeddings[ids] + position_embeddings[0 .. seq-1]
        x -> num_layers GPT-2 blocks (eps 1e-5) -> ln_final (LayerNorm)
        logits = x @ token_embeddings.weight^T   (the LM head is tied)

    Positions are learned and absolute (no RoPE); seq may be shorter than
    context_length, and longer must raise. The LM head shares the token embedding
    matrix: there is no separate lm_head parameter (nanoGPT's
    `wte.weight = lm_head.weight`; define token_embeddings before any lm_head so
    the shared parameter is named token_embeddings.weight).


    float16/bfloat16 weights: compute in float32 throughout (upcast the embeddings once,
    and each weight where it is used), and return logits in the weights' dtype, rounded
    once: results rounded to 16 bits between layers are off by more than 1 ulp.

    Args:
        weights: token_embeddings.weight [vocab_size, d_model];
            position_embeddings.weight [context_length, d_model];
            layers.{i}.<the run_gpt2_block keys>; ln_final.weight, ln_final.bias.
        in_indices: int64 token ids [batch, seq].

    Returns:
        [batch, seq, vocab_size] logits.
    """
    module = impl.gpt2.GPT2LM(vocab_size, context_length, d_model, num_layers, num_heads, d_ff,
                              device=in_indices.device)
    return with_weights(module, weights, in_indices)


def get_gpt2_lm(
    vocab_size: int,
    context_length: int,
    d_model: int,
    num_layers: int,
    num_heads: int,
    d_ff: int,
) -> torch.nn.Module:
    """Build your GPT-2 LM, initialised as nanoGPT's model.py does.

    Its state_dict() keys are the run_gpt2_lm weight keys, plus lm_head.weight if
    the tied head is a module (it must then be the very same tensor as
    token_embeddings.weight). forward(in_indices [batch, seq]) returns logits.

    Initialisation: every Linear weight and both embedding tables ~ N(0, 0.02);
    the residual projections attn.output_proj.weight and mlp.c_proj.weight ~
    N(0, 0.02 / sqrt(2 * num_layers)) (so the residual stream's variance does not
    grow with depth); every bias 0; LayerNorm weights 1 and biases 0. Compare
    get_transformer_lm's "cs336" scheme: per-layer std from fan-in and fan-out,
    no biases, no depth scaling.
    """
    return impl.gpt2.GPT2LM(vocab_size, context_length, d_model, num_layers, num_heads, d_ff)


def run_transformer_accounting(
    vocab_size: int,
    context_length: int,
    d_model: int,
    num_layers: int,
    num_heads: int,
    d_ff: int,
    num_kv_heads: int | None = None,
    batch_size: int = 1,
    kv_cache_dtype: str = "float32",
) -> dict[str, int]:
    """Parameters, forward-pass matmul FLOPs and KV-cache size of the transformer LM above.

    A matmul of [m, n] by [n, p] costs 2*m*n*p FLOPs (a multiply and an add per
    MAC). FLOPs are for one forward pass over one sequence of context_length
    tokens; parameter counts cover all layers. The LM is untied, uses RoPE (no
    position parameters) and has no biases.

    num_kv_heads (None means num_heads) makes the attention grouped-query, as in
    run_grouped_query_attention: K and V projections are [num_kv_heads * d_k,
    d_model] with d_k = d_model / num_heads. Every query head still scores every
    key, so only the projections and the cache shrink.

    The KV cache stores K and V of every layer for every token, each value in
    kv_cache_dtype ("float32", "float16" or "bfloat16"; 4, 2, 2 bytes).

    Returns exactly these keys:
        params.token_embeddings, params.attention, params.ffn, params.norms,
        params.lm_head, params.total;
        flops.attention_projections (Q, K, V and output projections),
        flops.attention_scores (Q K^T), flops.attention_values (softmax(.) V),
        flops.ffn, flops.lm_head, flops.total;
        kv_cache.bytes_per_token (one token, all layers, K and V),
        kv_cache.bytes (batch_size sequences of context_length tokens).
    """
    return impl.accounting.transformer_accounting(vocab_size, context_length, d_model, num_layers, num_heads, d_ff,
                                                  num_kv_heads=num_kv_heads, batch_size=batch_size,
                                                  kv_cache_dtype=kv_cache_dtype)


def run_gpt2_accounting(
    vocab_size: int,
    context_length: int,
    d_model: int,
    num_layers: int,
    num_heads: int,
    d_ff: int,
    batch_size: int = 1,
    kv_cache_dtype: str = "float32",
) -> dict[str, int]:
    """Parameters, forward-pass matmul FLOPs and KV-cache size of the GPT-2 LM
    (run_gpt2_lm), counted as run_transformer_accounting counts.

    GPT-2 differs from the modern LM: learned absolute positions
    ([context_length, d_model] parameters), biases on every linear layer,
    LayerNorms with weight and bias, a two-matrix GELU MLP, and a tied LM head
    (its parameters are the token embeddings: params.lm_head is 0, yet its matmul
    still costs FLOPs). Attention is plain multi-head (num_kv_heads = num_heads).
    Biases add no matmul FLOPs. For GPT-2 small (V=50257, T=1024, d=768, 12
    layers, d_ff=3072) params.total is nanoGPT's count with positions included.

    Returns exactly these keys:
        params.token_embeddings, params.position_embeddings, params.attention
        (weights and biases), params.mlp (weights and biases), params.norms,
        params.lm_head, params.total;
        flops.attention_projections, flops.attention_scores, flops.attention_values,
        flops.mlp, flops.lm_head, flops.total;
        kv_cache.bytes_per_token, kv_cache.bytes (as run_transformer_accounting).
    """
    return impl.accounting.gpt2_accounting(vocab_size, context_length, d_model, num_layers, num_heads, d_ff,
                                           batch_size=batch_size, kv_cache_dtype=kv_cache_dtype)


def run_training_accounting(
    vocab_size: int,
    context_length: int,
    d_model: int,
    num_layers: int,
    num_heads: int,
    d_ff: int,
    batch_size: int = 1,
    param_dtype: str = "float32",
    optimizer_dtype: str = "float32",
) -> dict[str, int]:
    """Memory and FLOPs of one AdamW training step of the transformer LM above, on batch_size
    sequences of context_length tokens, counted from run_transformer_accounting's counts.

    Memory (bytes). Every parameter is trained, the token embeddings too: an LLM's
    embeddings are trained jointly with everything else from the very start, with no
    separate embedding-training phase. So each of the params.total parameters holds:
        its value, in param_dtype;
        its gradient, in param_dtype (the same shape and dtype as the parameter);
        AdamW's two moments, m and v (running averages of the gradient and of its
        square), each in optimizer_dtype.
    float32 takes 4 bytes a value, float16 and bfloat16 2. With everything in float32 that is
    16 bytes a parameter: 4 + 4 + 2 x 4. Not counted: activations kept for the backward
    pass (they grow with batch_size x context_length and depend on what autograd saves),
    a float32 master copy of 16-bit parameters, the data, and temporary buffers.

    FLOPs (matmul FLOPs, 2*m*n*p, as run_transformer_accounting counts them). flops.forward
    is batch_size x that function's flops.total. The backward pass costs twice the
    forward: each matmul of the forward has two in the backward, one for the gradient of
    its input and one for the gradient of its weight. So one step costs 3 x the forward,
    which is about 6 x (parameters in matmuls: all but the token embeddings, a lookup,
    and the norms) x tokens, plus attention's T^2 terms
    (Q K^T and A V, 3 x 4 x L x T^2 x d per sequence), which that rule of thumb leaves out.
    The optimizer's own update (a few FLOPs per parameter) is not counted.

    Returns exactly these keys, all ints:
        memory.parameters, memory.gradients, memory.adamw_moments (m and v together),
        memory.total (the three added);
        tokens (batch_size x context_length);
        flops.forward, flops.backward, flops.total (forward + backward).
    """
    return impl.accounting.training_accounting(vocab_size, context_length, d_model, num_layers, num_heads, d_ff,
                                               batch_size=batch_size, param_dtype=param_dtype,
                                               optimizer_dtype=optimizer_dtype)


def get_transformer_lm(
    vocab_size: int,
    context_length: int,
    d_model: int,
    num_layers: int,
    num_heads: int,
    d_ff: int,
    rope_theta: float,
    init_scheme: str = "cs336",
) -> torch.nn.Module:
    """Build your transformer LM, initialised by `init_scheme`.

    Its state_dict() keys are exactly the run_transformer_lm weight keys (RoPE
    tables are non-persistent buffers, so they are not among them), and
    forward(in_indices [batch, seq]) returns logits [batch, seq, vocab_size].

    "cs336": every Linear weight ~ N(0, 2 / (d_in + d_out)) truncated at +-3 sigma
        (pass a=-3*std, b=3*std: trunc_normal_'s defaults are absolute +-2);
        embeddings ~ N(0, 1) truncated at +-3; RMSNorm gains 1.
    "gpt2" (nanoGPT): every Linear and Embedding ~ N(0, 0.02), except the residual
        output projections attn.output_proj and ffn.w2 ~ N(0, 0.02 / sqrt(2 *
        num_layers)); RMSNorm gains 1.
    """
    return impl.model.TransformerLM(vocab_size, context_length, d_model, num_layers, num_heads, d_ff, rope_theta,
                                    init_scheme=init_scheme)


def run_cross_entropy(
    inputs: Float[Tensor, "... vocab_size"],
    targets: Int[Tensor, "..."],
) -> Float[Tensor, ""]:
    """The mean cross-entropy of next-token logits: mean over every example of -log softmax(x)[target].

        loss_i = logsumexp(x_i) - x_i[t_i] = log(sum_j exp(x_ij - m_i)) - (x_i[t_i] - m_i),  m_i = max_j x_ij

    Args:
        inputs: unnormalised logits [..., vocab_size]: [batch, vocab_size] as in CS336, or
            [batch, seq, vocab_size] straight from the LM; the softmax runs over the last axis.
        targets: int64 class ids [...] (the leading shape of inputs), each in [0, vocab_size).

    Returns:
        a 0-d tensor: the mean over all leading positions, in the dtype of inputs.

    Rules:
        - Subtract each row's max before exp (or use logsumexp): logits of +-1000 must give a finite,
          exact loss; exp(1000) is inf in float32.
        - Pick the target's logit with gather or indexing. Never build a one-hot [..., vocab_size] tensor
          (at GPT-2 scale, [8, 1024] ids and V=50257, it is 1.6 GB) and keep nothing for backward beyond
          what autograd needs (one [..., vocab_size] tensor, as F.cross_entropy keeps its log-softmax; gather
          keeps the tensor it reads, so gathering from x rather than x - max keeps one fewer).
        - Compute in float32 (upcast float16/bfloat16 logits) and return the inputs' dtype.
        - Gradients must reach `inputs`.
    """
    return impl.training.cross_entropy(inputs, targets)


def run_gradient_clipping(parameters: Iterable[torch.nn.Parameter], max_l2_norm: float) -> None:
    """Clip the gradients of `parameters`, in place, to a joint L2 norm of at most max_l2_norm (CS336).

    The norm is one global norm over every gradient together, sqrt(sum over parameters of sum(g^2)),
    not one per parameter. When it exceeds max_l2_norm, every gradient is multiplied by
    max_l2_norm / (norm + 1e-6) (CS336's eps); a norm below the maximum leaves them untouched. At
    exactly the maximum either is right: CS336 scales from it on (>=), by a factor within 1e-6 of 1.
    Parameters whose .grad is None (frozen, or unused) are skipped. `parameters` may be a generator,
    as model.parameters() is: iterate it once. Compute the norm in float32 (upcast float16/bfloat16
    gradients: their squares overflow float16) and write each gradient back in its own dtype.
    torch.nn.utils.clip_grad_norm_ does the same (it scales by min(1, max / (norm + 1e-6)), which
    differs only for norms within 1e-6 below the maximum).

    An entry point: run_clip_gradients checks it, with tensors in and out, and run_training_steps in training.
    """
    impl.training.gradient_clipping(parameters, max_l2_norm)


def run_clip_gradients(
    gradients: dict[str, Tensor],
    max_l2_norm: float,
    num_without_grad: int = 0,
) -> Float[Tensor, "total"]:
    """A drill of run_gradient_clipping (you write nothing here): your gradient_clipping on parameters
    that carry these gradients, and num_without_grad frozen parameters (.grad None) among them; it
    returns the clipped gradients, flattened and concatenated in the order of their names.

    It checks the rules of run_gradient_clipping: one global norm, the scale max_l2_norm / (norm + 1e-6)
    above the maximum, gradients untouched below it (bit for bit), frozen parameters skipped,
    float16 and bfloat16 gradients.
    """
    parameters = []
    for name in sorted(gradients):
        parameter = torch.nn.Parameter(torch.zeros_like(gradients[name]))
        parameter.grad = gradients[name].detach().clone()
        parameters.append(parameter)
    for i in range(num_without_grad):  # frozen parameters: .grad is None
        like = parameters[0]
        parameters.insert(2 * i, torch.nn.Parameter(torch.ones(3, dtype=like.dtype, device=like.device),
                                                    requires_grad=False))
    impl.training.gradient_clipping((p for p in parameters), max_l2_norm)  # a generator, as model.parameters()
    return torch.cat([p.grad.flatten() for p in parameters if p.grad is not None])


def run_get_batch(
    dataset: npt.NDArray, batch_size: int, context_length: int, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample batch_size training windows from a 1-D array of token ids (CS336).

    Each row starts at s, drawn uniformly from 0 .. len(dataset) - context_length - 1 (every start whose
    target window fits, the last one included), independently per row:

        x = dataset[s : s + context_length],  y = dataset[s + 1 : s + context_length + 1]

    so y is x shifted by one token: y[i] is the token after x[i].

    Args:
        dataset: a 1-D numpy array of integer token ids, often an np.memmap of a uint16 token file
            (np.memmap(path, dtype=np.uint16, mode="r")): read only the windows you need, never
            the whole file.
        batch_size, context_length: B and T.
        device: a torch device string ("cpu", "cuda:0", "mps", "meta"): x and y are made there.

    Returns:
        (x, y), two int64 (torch.long) tensors [batch_size, context_length] on `device`, whatever the
        array's dtype.

    Draw with torch (torch.randint), numpy (np.random.randint) or random: the tests seed all three.
    An entry point: run_sample_batches checks it, with tensors in and out.
    """
    return impl.training.get_batch(dataset, batch_size, context_length, device)


def run_sample_batches(
    dataset: Int[Tensor, "n"],
    batch_size: int,
    context_length: int,
    num_batches: int,
    seed: int,
    memmap: bool,
) -> Int[Tensor, "num_batches 2 batch_size context_length"]:
    """A drill of run_get_batch (you write nothing here): num_batches calls of your get_batch on the
    dataset's ids, as an int64 numpy array, or with memmap=True as an np.memmap of a uint16 token file;
    random, numpy and torch seeded with `seed` first, and batches asked for on the dataset's device.
    Returns each batch's x and y: out[k, 0] is call k's x, out[k, 1] its y.

    It checks the rules of run_get_batch: full windows, y shifted by one, int64, on the requested
    device, every start possible and none past the end, starts uniform.
    """
    import random
    import tempfile

    import numpy as np
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    device = str(dataset.device)  # batches are asked for on the dataset's device
    # a meta dataset (the device probe) has no values: its windows are zeros, on meta
    tokens = np.zeros(tuple(dataset.shape), dtype=np.int64) if dataset.is_meta else dataset.numpy(force=True)
    with tempfile.TemporaryDirectory() as folder:
        if memmap:  # a uint16 token file, mapped as training maps one
            path = os.path.join(folder, "tokens.bin")
            tokens.astype(np.uint16).tofile(path)
            tokens = np.memmap(path, dtype=np.uint16, mode="r", shape=tokens.shape)
        batches = [impl.training.get_batch(tokens, batch_size, context_length, device) for _ in range(num_batches)]
        for x, y in batches:
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):  # numpy's: a bare TypeError below
                raise TypeError(f"get_batch returned x as {type(x).__name__} and y as {type(y).__name__}; both must "
                                "be torch tensors on the requested device: torch.from_numpy(windows).to(device)")
            if tuple(x.shape) != (batch_size, context_length) or tuple(y.shape) != (batch_size, context_length):
                short = x.shape == (batch_size, context_length) and y.shape[-1:] < x.shape[-1:]
                raise ValueError(f"get_batch returned x of shape {list(x.shape)} and y of shape {list(y.shape)}; "
                                 f"both must be [batch_size, context_length] = {[batch_size, context_length]}" +
                                 ("; a y window shorter than x ran past the end: the valid starts are 0 .. "
                                  "len(dataset) - context_length - 1" if short else ""))
        # copies into one tensor, not torch.stack: stack of meta tensors imports torch._dynamo (a second)
        x = batches[0][0]
        out = torch.empty((num_batches, 2, batch_size, context_length), dtype=x.dtype, device=x.device)
        for k, (x, y) in enumerate(batches):
            out[k, 0], out[k, 1] = x, y
        return out


def run_save_checkpoint(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    iteration: int,
    out: str | os.PathLike | BinaryIO | IO[bytes],
) -> None:
    """Save what training needs to resume (CS336): model.state_dict(), optimizer.state_dict() (AdamW's
    moments and step counts, its learning rate and betas) and the iteration, to `out`: a path, or a
    binary file object (io.BytesIO) to write to.

    torch.save of a dict works (torch's load, weights_only=True by default, reads it back);
    any format that run_load_checkpoint reads back exactly will do.
    An entry point: run_resume_training checks it with run_load_checkpoint.
    """
    impl.training.save_checkpoint(model, optimizer, iteration, out)


def run_load_checkpoint(
    src: str | os.PathLike | BinaryIO | IO[bytes],
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
) -> int:
    """Restore a run_save_checkpoint checkpoint from `src` (a path, or a binary file object to read
    from) into `model` and `optimizer` (load_state_dict) and return its iteration, an int.

    After it, training continues exactly, bit for bit, as if it had never stopped.
    An entry point: run_resume_training checks it with run_save_checkpoint.
    """
    return impl.training.load_checkpoint(src, model, optimizer)


def run_resume_training(
    w1: Float[Tensor, "d_hidden d_in"],
    w2: Float[Tensor, "d_out d_hidden"],
    inputs: Float[Tensor, "steps batch d_in"],
    targets: Float[Tensor, "steps batch d_out"],
    save_at: int,
    lr: float,
    to_file: bool,
) -> Float[Tensor, "runs params"]:
    """A drill of run_save_checkpoint and run_load_checkpoint (you write nothing here): a small model
    (weights w1, w2; x -> w2 tanh(w1 x)) trains on the mean squared error, one step per (inputs[i],
    targets[i]), with an optimizer of the harness's own (a momentum buffer and a step count per
    parameter, in optimizer.state: what a checkpoint must restore, as it must AdamW's). After
    save_at steps your save_checkpoint saves it with iteration save_at - 1, the 0-based index of the
    step just done, as a training loop saves (to a file with to_file, else to an io.BytesIO), and the
    run goes on to the last step, in a copy (the model and optimizer saved are then overwritten: what is
    restored must come from the checkpoint itself). A second model, with other weights and a fresh
    optimizer, is restored by your load_checkpoint, which must return that iteration (not a count
    kept by the optimizer), and trains from the next one to the last step.

    Returns the final weights of both runs, flattened: out[0] the run that never stopped, out[1] the
    resumed one. They must be equal bit for bit: model, optimizer state and iteration all restored.
    """
    import io
    import copy
    import numbers
    import tempfile

    class Momentum(torch.optim.Optimizer):  # the harness's own: state to restore, whatever your AdamW does
        def __init__(self, params, lr):
            super().__init__(params, dict(lr=lr))

        @torch.no_grad()
        def step(self):
            for group in self.param_groups:
                for p in group["params"]:
                    state = self.state[p]
                    state["step"] = state.get("step", 0) + 1
                    buffer = state.setdefault("momentum", torch.zeros_like(p))
                    buffer.mul_(0.9).add_(p.grad)
                    p.sub_(group["lr"] * buffer / state["step"] ** 0.5)

    def fresh(scale):  # a small model of the harness's own (Linear, tanh, Linear) and its optimizer
        model = torch.nn.Sequential(
            torch.nn.Linear(w1.shape[1], w1.shape[0], bias=False, dtype=w1.dtype, device=w1.device),
            torch.nn.Tanh(),
            torch.nn.Linear(w2.shape[1], w2.shape[0], bias=False, dtype=w2.dtype, device=w2.device))
        with torch.no_grad():
            model[0].weight.copy_(w1 * scale)
            model[2].weight.copy_(w2 * scale)
        return model, Momentum(model.parameters(), lr)

    def train(model, optimizer, steps):
        for i in steps:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(inputs[i]), targets[i]).backward()
            optimizer.step()

    model, optimizer = fresh(1.0)
    train(model, optimizer, range(save_at))
    with tempfile.TemporaryDirectory() as folder:
        checkpoint = os.path.join(folder, "checkpoint") if to_file else io.BytesIO()
        # saved as a loop saves: the 0-based index of the iteration just done, which is not the optimizer's
        # step count (blind trial 12: returning the optimizer's step count passed)
        impl.training.save_checkpoint(model, optimizer, save_at - 1, checkpoint)
        saved, saved_optimizer = model, optimizer
        model, optimizer = fresh(1.0)  # the run that never stopped goes on in a copy of the saved one
        model.load_state_dict(saved.state_dict())
        optimizer.load_state_dict(copy.deepcopy(saved_optimizer.state_dict()))
        with torch.no_grad():  # what is restored must come from the checkpoint, not from the objects saved
            for p in saved.parameters():
                p.fill_(float("nan"))
        saved_optimizer.state.clear()
        train(model, optimizer, range(save_at, len(inputs)))
        resumed, resumed_optimizer = fresh(0.5)  # other weights and no moments: the checkpoint must restore both
        if not to_file:
            checkpoint.seek(0)
        iteration = impl.training.load_checkpoint(checkpoint, resumed, resumed_optimizer)
    if isinstance(iteration, bool) or not isinstance(iteration, numbers.Integral):  # a tensor(4) == 4 too
        raise ValueError(f"load_checkpoint returned the iteration as a {type(iteration).__name__}: return an int "
                         "(int(...) of what the checkpoint holds)")
    if iteration != save_at - 1:
        raise ValueError(f"load_checkpoint returned iteration {iteration!r}; the checkpoint was saved with iteration "
                         f"{save_at - 1}: save_checkpoint stores the iteration it is given (not iteration + 1), and "
                         "load_checkpoint returns that stored value, not a count kept by the optimizer")
    if not all(bool(p.isfinite().all()) for p in resumed.parameters()):
        raise ValueError("the weights load_checkpoint restored came from the model object saved, which this drill "
                         "overwrote (NaN) after saving, not from the checkpoint: write copies of the state "
                         "(state_dict()) to the file, not references to the live model and optimizer")
    train(resumed, resumed_optimizer, range(iteration + 1, len(inputs)))
    return torch.stack([torch.cat([p.detach().flatten() for p in m.parameters()]) for m in (model, resumed)])


def get_adamw_cls() -> type[torch.optim.Optimizer]:
    """Your AdamW class (a torch.optim.Optimizer), as CS336 calls it:
    get_adamw_cls()(model.parameters(), lr=..., betas=(beta1, beta2), eps=..., weight_decay=...).

    The arguments, their defaults (lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01: run_train_tiny_lm
    passes only lr and weight_decay) and the arithmetic are torch.optim.AdamW's. For each parameter p with a
    gradient g, at its own step t = 1, 2, ...:

        p = p - lr * weight_decay * p          (decoupled decay: not added to g)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g^2
        p = p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)

    Rules:
        - Bias correction: without the 1 - beta^t factors the first steps are 10x too small
          (beta1 = 0.9) and the steps that follow too large.
        - Decay is decoupled: adding weight_decay * p to the gradient (L2) sends it through
          m / sqrt(v), so a parameter with a zero gradient would move by about lr per step.
        - A parameter whose .grad is None at a step is skipped: no decay, and its m, v and t
          stay as they were. Each parameter counts its own t; a zero gradient is a step.
        - The state (m, v, t of every parameter) lives in self.state[p], so state_dict() and
          load_state_dict() carry it: training resumed in a fresh optimizer continues exactly.
        - Read lr (and the rest) from each param group at every step: a schedule sets
          group["lr"] between steps.

    The CS336 handout's order (alpha_t = lr sqrt(1 - beta2^t) / (1 - beta1^t), eps added to sqrt(v),
    decay after the update) passes too: it moves p by about lr^2 x weight_decay a step more, and
    its eps weighs sqrt(1 - beta2^t) more, both far below the tolerance at the settings the cases
    use. Checked by run_adamw_steps, run_adamw_resumed, run_adamw_param_groups and run_training_steps.
    """
    return impl.optimizer.AdamW


def run_adamw_steps(
    params: dict[str, Tensor],
    grads: dict[str, Tensor],
    has_grad: dict[str, Tensor],
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
) -> Float[Tensor, "steps total"]:
    """Your AdamW (get_adamw_cls) stepped over given gradients: the parameters after every step.

    Args:
        params: the initial parameters, name -> tensor of any shape.
        grads: name -> [steps, *shape], the gradient each parameter gets at each step (mostly
            zeros, as an embedding table's are).
        has_grad: name -> bool [steps]; False: that parameter's .grad is None at that step
            (it must be skipped, as torch.optim.AdamW skips it).
        lr, beta1, beta2, eps, weight_decay: the optimizer's settings.

    Returns:
        [steps, total]: after each step, every parameter flattened and concatenated in sorted
        name order (total = their sizes added up).
    """
    names = sorted(params)
    weights = {k: torch.nn.Parameter(params[k].detach().clone()) for k in names}
    optimizer = impl.optimizer.AdamW([weights[k] for k in names], lr=lr, betas=(beta1, beta2), eps=eps,
                                     weight_decay=weight_decay)
    trajectory = []
    for t in range(grads[names[0]].shape[0]):
        for k in names:
            weights[k].grad = grads[k][t].clone() if has_grad[k][t] else None
        optimizer.step()
        trajectory.append(torch.cat([weights[k].detach().flatten() for k in names]))
    return torch.stack(trajectory)


def run_adamw_resumed(
    params: dict[str, Tensor],
    grads: dict[str, Tensor],
    has_grad: dict[str, Tensor],
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    resume_at: int,
) -> Float[Tensor, "steps total"]:
    """run_adamw_steps, interrupted: before step `resume_at` (0-based) the weights are copied and
    a fresh AdamW over the copies loads the first one's state_dict(). The trajectory must be the
    uninterrupted one, exactly: every bit of the state (m, v and each parameter's step count) has
    to be in state_dict(). Args and Returns as run_adamw_steps."""
    names = sorted(params)
    settings = dict(lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay)
    weights = {k: torch.nn.Parameter(params[k].detach().clone()) for k in names}
    optimizer = impl.optimizer.AdamW([weights[k] for k in names], **settings)
    trajectory = []
    for t in range(grads[names[0]].shape[0]):
        if t == resume_at:  # as a checkpoint would: copies of the weights and of the optimizer's state_dict()
            state = torch.utils._pytree.tree_map(
                lambda v: v.clone() if isinstance(v, torch.Tensor) else v, optimizer.state_dict())
            weights = {k: torch.nn.Parameter(weights[k].detach().clone()) for k in names}
            optimizer = impl.optimizer.AdamW([weights[k] for k in names], **settings)
            optimizer.load_state_dict(state)
        for k in names:
            weights[k].grad = grads[k][t].clone() if has_grad[k][t] else None
        optimizer.step()
        trajectory.append(torch.cat([weights[k].detach().flatten() for k in names]))
    return torch.stack(trajectory)


def run_adamw_param_groups(
    params: dict[str, Tensor],
    grads: dict[str, Tensor],
    has_grad: dict[str, Tensor],
    lr: float,
    first_lr: float,
    first_beta1: float,
    first_beta2: float,
    first_eps: float,
    first_weight_decay: float,
) -> Float[Tensor, "steps total"]:
    """Your AdamW over two param groups, as torch.optim takes them: get_adamw_cls()([first, second], lr=lr).
    The first group holds the first parameter in sorted name order, with settings of its own (first_lr,
    betas (first_beta1, first_beta2), first_eps, first_weight_decay); the second holds the others and
    gives none, so it takes lr from the constructor and every other setting from your class's defaults
    (betas (0.9, 0.999), eps 1e-8, weight_decay 0.01, as torch.optim.AdamW's). Each group is stepped
    with its own settings. Args (params, grads, has_grad) and Returns as run_adamw_steps.
    """
    names = sorted(params)
    weights = {k: torch.nn.Parameter(params[k].detach().clone()) for k in names}
    own = dict(lr=first_lr, betas=(first_beta1, first_beta2), eps=first_eps, weight_decay=first_weight_decay)
    optimizer = impl.optimizer.AdamW([{"params": [weights[names[0]]], **own},
                                      {"params": [weights[k] for k in names[1:]]}], lr=lr)
    trajectory = []
    for t in range(grads[names[0]].shape[0]):
        for k in names:
            weights[k].grad = grads[k][t].clone() if has_grad[k][t] else None
        optimizer.step()
        trajectory.append(torch.cat([weights[k].detach().flatten() for k in names]))
    return torch.stack(trajectory)


def run_get_lr_cosine_schedule(
    it: int,
    max_learning_rate: float,
    min_learning_rate: float,
    warmup_iters: int,
    cosine_cycle_iters: int,
) -> float:
    """The learning rate at iteration `it` (0-based): linear warmup, cosine decay, then constant.

        it < warmup_iters:                      it / warmup_iters * max_learning_rate
        warmup_iters <= it <= cosine_cycle_iters:
            min + (1 + cos(pi * (it - warmup_iters) / (cosine_cycle_iters - warmup_iters))) / 2 * (max - min)
        it > cosine_cycle_iters:                min_learning_rate

    So it = 0 gives 0, it = warmup_iters gives exactly the maximum, it = cosine_cycle_iters
    exactly the minimum, and every later iteration the minimum. warmup_iters may be 0 (no
    warmup); warmup_iters < cosine_cycle_iters. Checked by run_lr_schedule, at every iteration, and
    in training by run_training_steps.
    """
    return impl.optimizer.lr_cosine_schedule(it, max_learning_rate, min_learning_rate, warmup_iters, cosine_cycle_iters)


def run_lr_schedule(
    max_learning_rate: float,
    min_learning_rate: float,
    warmup_iters: int,
    cosine_cycle_iters: int,
    num_iters: int,
) -> Float[Tensor, "num_iters"]:
    """run_get_lr_cosine_schedule at every iteration 0 .. num_iters - 1, as float32 (num_iters >
    cosine_cycle_iters + 1, so every boundary is in: 0, warmup_iters - 1, warmup_iters,
    cosine_cycle_iters, cosine_cycle_iters + 1 and beyond). Exact at the boundaries: within
    1e-7 + 1e-6 x each value (a cosine in float32 rounds to about 6e-8 of max_learning_rate)."""
    return torch.tensor([float(impl.optimizer.lr_cosine_schedule(it, max_learning_rate, min_learning_rate, warmup_iters,
                                                                 cosine_cycle_iters)) for it in range(num_iters)])


def run_training_steps(
    weights: dict[str, Tensor],
    inputs: Int[Tensor, "steps batch seq"],
    targets: Int[Tensor, "steps batch seq"],
    vocab_size: int,
    context_length: int,
    d_model: int,
    num_layers: int,
    num_heads: int,
    d_ff: int,
    rope_theta: float,
    max_learning_rate: float,
    min_learning_rate: float,
    warmup_iters: int,
    cosine_cycle_iters: int,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    max_l2_norm: float,
) -> Float[Tensor, "total"]:
    """A few training steps of your transformer LM on given batches (you write nothing here): the final weights.

    Your TransformerLM (get_transformer_lm) starts from `weights` (the run_transformer_lm keys) and
    trains for steps = inputs.shape[0] steps. Step t (0-based) sets every param group's lr to your
    lr_cosine_schedule(t, max_learning_rate, min_learning_rate, warmup_iters, cosine_cycle_iters), takes
    your cross_entropy of model(inputs[t]) against targets[t], backpropagates, clips with your
    gradient_clipping to max_l2_norm and steps your AdamW (lr=max_learning_rate, betas=(beta1, beta2),
    eps, weight_decay). It is run_train_tiny_lm's loop with the batches given instead of drawn.

    Returns:
        [total]: the final weights, each flattened, concatenated in sorted key order.

    Checked against the reference's weights after the same steps (computed in float64, rounded once),
    within 1e-5 + 8 x steps x max_learning_rate^2 x weight_decay (and 1e-5 relative). float32, einsum or
    matmul, F.cross_entropy, clip_grad_norm_, torch.optim.AdamW and the CS336 handout's AdamW order (decay
    after the update: lr^2 x weight_decay a step more; eps on sqrt(v)) stayed within a tenth of it over 300
    draws of each case. Adam
    turns a gradient element of any size into a step of about lr, so a gradient of 1e-9 whose sign rounding
    flips would move a weight by 2 x lr: every case therefore starts with lr 0 (warmup), its eps is tiny and
    its weight decay small. A mistake in any piece (the schedule off by one, clipping per parameter, AdamW
    without bias correction or with L2 decay, a loss over the wrong axis, frozen embeddings) misses by 170 to
    6000 times the tolerance; clipping per parameter, where a step clips, by 1.5 times or more.

    Why: run_train_tiny_lm judges what a run learned, and weights built from its corpus's rule, with no
    training, pass that. Here the batches are random ids, and in grading they and the initial weights are
    ones the code has never seen (hidden twins): only a loop whose every piece is right follows the
    trajectory. So this drill holds 4 points and run_train_tiny_lm 2.
    """
    # the weights' dtype: float64 when the term is built, so the expected trajectory is the exact one rounded once
    model = impl.model.TransformerLM(vocab_size, context_length, d_model, num_layers, num_heads, d_ff, rope_theta,
                                     device=inputs.device, dtype=weights["lm_head.weight"].dtype)
    model.load_state_dict(weights)
    optimizer = impl.optimizer.AdamW(model.parameters(), lr=max_learning_rate, betas=(beta1, beta2), eps=eps,
                                     weight_decay=weight_decay)
    for t in range(inputs.shape[0]):
        for group in optimizer.param_groups:
            group["lr"] = impl.optimizer.lr_cosine_schedule(t, max_learning_rate, min_learning_rate, warmup_iters,
                                                            cosine_cycle_iters)
        with torch.enable_grad():  # training needs gradients, even where the caller turned them off
            loss = impl.training.cross_entropy(model(inputs[t]), targets[t])
            optimizer.zero_grad()
            loss.backward()
        impl.training.gradient_clipping(model.parameters(), max_l2_norm)
        optimizer.step()
    state = model.state_dict()
    return torch.cat([state[k].detach().flatten() for k in sorted(weights)])


def run_train_tiny_lm(
    weights: dict[str, Tensor],
    corpus: Int[Tensor, "n"],
    vocab_size: int,
    context_length: int,
    d_model: int,
    num_layers: int,
    num_heads: int,
    d_ff: int,
    rope_theta: float,
    steps: int,
    batch_size: int,
    max_learning_rate: float,
    min_learning_rate: float,
    warmup_iters: int,
    weight_decay: float,
    max_l2_norm: float,
    seed: int,
) -> dict[str, Tensor]:
    """Train your transformer LM end to end: the final state_dict() after `steps` steps.

    Your TransformerLM (get_transformer_lm) starts from `weights` (the run_transformer_lm keys);
    each step sets the learning rate of step t (0-based) from your lr_cosine_schedule(t, max,
    min, warmup_iters, steps), draws `batch_size` windows with your get_batch (the global
    generators seeded by `seed`), takes your cross_entropy of the next token, clips with your
    gradient_clipping to max_l2_norm and steps your AdamW (default betas and eps). This glue is
    the training loop; every piece it calls is yours.

    The corpus follows a fixed rule, so a trained model can be measured: the next token is a
    fixed permutation (one cycle) of the previous one, over some of the vocabulary; the other
    tokens never occur. The test judges the weights you return, never a loss you report:
        - the mean cross-entropy on windows of the rule from every token that occurs falls well
          below that of the initial weights (computed by the test, with a forward it trusts);
        - every embedding row of a token that occurs moves: the embeddings train jointly with
          everything else, from the first step (no separate or frozen embedding phase);
        - every row of a token that never occurs gets no gradient, so it changes by weight decay
          alone: exactly the initial row times prod_t (1 - lr_t * weight_decay);
        - the same seed gives the same weights, bit for bit.

    It holds 2 points, run_training_steps 4: weights built from the corpus's rule, with no training
    (a get_batch that keeps the corpus, an AdamW whose step writes them), pass every check here;
    they cannot follow run_training_steps' trajectory on batches and weights they have never seen.
    """
    import random
    import numpy as np
    random.seed(seed)  # get_batch draws from the global generators, as CS336's does
    np.random.seed(seed)
    torch.manual_seed(seed)
    tokens = corpus.numpy(force=True)
    model = impl.model.TransformerLM(vocab_size, context_length, d_model, num_layers, num_heads, d_ff, rope_theta)
    model.load_state_dict(weights)
    optimizer = impl.optimizer.AdamW(model.parameters(), lr=max_learning_rate, weight_decay=weight_decay)
    for t in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = impl.optimizer.lr_cosine_schedule(t, max_learning_rate, min_learning_rate, warmup_iters, steps)
        x, y = impl.training.get_batch(tokens, batch_size, context_length, "cpu")
        loss = impl.training.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        impl.training.gradient_clipping(model.parameters(), max_l2_norm)
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
