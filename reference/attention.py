"""Unit 2.2 reference: linear, softmax, SiLU, attention, multi-head self-attention."""

import math

import torch
from einops import rearrange
from torch import nn

from reference import rope


def widen(x: torch.Tensor) -> torch.Tensor:
    """x in at least float32: a 16-bit x is upcast, float32 and float64 are kept (the build widens
    float32 cases to float64). This module's own, so a variant can make this module alone 16-bit."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


class Linear(nn.Module):
    def __init__(self, in_features: int, out_features: int, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features, device=device, dtype=dtype))
        std = math.sqrt(2.0 / (in_features + out_features))
        nn.init.trunc_normal_(self.weight, std=std, a=-3 * std, b=3 * std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = widen(x)  # 16-bit x and weights: computed in float32, rounded once
        return (wide @ self.weight.to(wide.dtype).T).to(x.dtype)


def softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    wide = widen(x)
    shifted = wide - wide.amax(dim=dim, keepdim=True)
    e = shifted.exp()
    return (e / e.sum(dim=dim, keepdim=True)).to(x.dtype)


def silu(x: torch.Tensor) -> torch.Tensor:
    wide = widen(x)
    return (wide * torch.sigmoid(wide)).to(x.dtype)


def scaled_dot_product_attention(Q, K, V, mask=None):
    q, k, v = widen(Q), widen(K), widen(V)
    scores = q @ k.transpose(-1, -2) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return (softmax(scores, dim=-1) @ v).to(Q.dtype)


def attention_with_bias(Q, K, V, bias, mask=None):
    # float16/bfloat16 inputs are computed in float32 and rounded once, as torch's fused attention does.
    work = torch.promote_types(Q.dtype, torch.float32)
    scores = Q.to(work) @ K.to(work).transpose(-1, -2) / math.sqrt(Q.shape[-1]) + bias.to(work)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return (softmax(scores, dim=-1) @ V.to(work)).to(Q.dtype)


class MultiHeadSelfAttention(nn.Module):
    """Causal MHA; with max_seq_len and theta given, RoPE rotates Q and K per head."""

    def __init__(self, d_model: int, num_heads: int, max_seq_len: int | None = None,
                 theta: float | None = None, device=None, dtype=None):
        super().__init__()
        self.num_heads = num_heads
        self.q_proj, self.k_proj, self.v_proj, self.output_proj = (
            Linear(d_model, d_model, device=device, dtype=dtype) for _ in range(4))
        self.rope = None
        if theta is not None:
            self.rope = rope.RotaryPositionalEmbedding(theta, d_model // num_heads, max_seq_len, device=device)

    def forward(self, x: torch.Tensor, token_positions: torch.Tensor | None = None) -> torch.Tensor:
        seq, wide = x.shape[-2], widen(x)  # float32 throughout, rounded once at the end
        heads = lambda t: rearrange(t, "... s (h d) -> ... h s d", h=self.num_heads)
        q, k, v = heads(self.q_proj(wide)), heads(self.k_proj(wide)), heads(self.v_proj(wide))
        if self.rope is not None:
            if token_positions is None:
                token_positions = torch.arange(seq, device=x.device)
            positions = token_positions.unsqueeze(-2)  # the same rotation for every head
            q, k = self.rope(q, positions), self.rope(k, positions)
        causal = torch.ones(seq, seq, dtype=torch.bool, device=x.device).tril()
        out = scaled_dot_product_attention(q, k, v, causal)
        return self.output_proj(rearrange(out, "... h s d -> ... s (h d)")).to(x.dtype)
