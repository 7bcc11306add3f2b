"""Adapters: the glue between the test suite and the code in `reference/`.

Each function's signature and docstring is the contract the tests check.
Do not change the signatures; change the code in the package if you need to.
This file is rendered from harness/contract.py.
"""

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

import reference as impl
import reference.accounting  # noqa: F401
import reference.attention  # noqa: F401
import reference.embeddings  # noqa: F401
import reference.gpt2  # noqa: F401
import reference.model  # noqa: F401
import reference.rope  # noqa: F401


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
        still absolute, one vector per position. RoPE, unlike this, rotates Q and K.
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
