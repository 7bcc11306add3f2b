"""torch's own implementations as independent oracles for the reference (never student-facing)."""

import torch
import torch.nn.functional as F

from reference import attention, gpt2, model


def randn(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def grads(fn, *inputs):
    leaves = [x.clone().requires_grad_() for x in inputs]
    out = fn(*leaves)
    return out, torch.autograd.grad(out, leaves, randn(*out.shape, seed=99))


def test_attention_matches_torch_sdpa_in_values_and_gradients():
    q, k, v = randn(2, 3, 4, 8, seed=1), randn(2, 3, 6, 8, seed=2), randn(2, 3, 6, 5, seed=3)
    mask = torch.rand(2, 3, 4, 6, generator=torch.Generator().manual_seed(4)) < 0.6
    mask[..., 0] = True
    ours, our_grads = grads(lambda a, b, c: attention.scaled_dot_product_attention(a, b, c, mask), q, k, v)
    theirs, their_grads = grads(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, attn_mask=mask), q, k, v)
    assert torch.allclose(ours, theirs, atol=1e-12)
    for a, b in zip(our_grads, their_grads):
        assert torch.allclose(a, b, atol=1e-12)


def test_causal_mha_matches_torch_sdpa_is_causal():
    mha = attention.MultiHeadSelfAttention(16, 4).double()
    x = randn(2, 5, 16)
    q, k, v = (mha.q_proj(x), mha.k_proj(x), mha.v_proj(x))
    split = lambda t: t.view(2, 5, 4, 4).transpose(1, 2)
    theirs = F.scaled_dot_product_attention(split(q), split(k), split(v), is_causal=True)
    theirs = mha.output_proj(theirs.transpose(1, 2).reshape(2, 5, 16))
    assert torch.allclose(mha(x), theirs, atol=1e-12)


def test_rmsnorm_matches_torch():
    ours, theirs = model.RMSNorm(8, eps=1e-5).double(), torch.nn.RMSNorm(8, eps=1e-5).double()
    with torch.no_grad():
        ours.weight.copy_(randn(8, seed=5))
        theirs.weight.copy_(ours.weight)
    x = randn(3, 4, 8)
    assert torch.allclose(ours(x), theirs(x), atol=1e-12)


def test_silu_and_softmax_match_torch():
    x = randn(4, 7) * 5
    assert torch.allclose(attention.silu(x), F.silu(x), atol=1e-12)
    for dim in (0, 1, -1):
        assert torch.allclose(attention.softmax(x + 500, dim), torch.softmax(x, dim), atol=1e-12)


def test_layernorm_and_gelu_match_torch():
    ours, theirs = gpt2.LayerNorm(8, eps=1e-3).double(), torch.nn.LayerNorm(8, eps=1e-3).double()
    with torch.no_grad():
        ours.weight.copy_(randn(8, seed=5)), ours.bias.copy_(randn(8, seed=6))
        theirs.weight.copy_(ours.weight), theirs.bias.copy_(ours.bias)
    x = randn(3, 4, 8) * 3 + 7
    assert torch.allclose(ours(x), theirs(x), atol=1e-12)
    for form in ("none", "tanh"):
        assert torch.allclose(gpt2.gelu(x, form), F.gelu(x, approximate=form), atol=1e-12)


def test_grouped_query_attention_matches_torch_sdpa_enable_gqa():
    gqa = gpt2.GroupedQueryAttention(24, 6, 2).double()
    x = randn(2, 5, 24)
    q = gqa.q_proj(x).view(2, 5, 6, 4).transpose(1, 2)
    k, v = (p(x).view(2, 5, 2, 4).transpose(1, 2) for p in (gqa.k_proj, gqa.v_proj))
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    theirs = gqa.output_proj(theirs.transpose(1, 2).reshape(2, 5, 24))
    assert torch.allclose(gqa(x), theirs, atol=1e-12)
