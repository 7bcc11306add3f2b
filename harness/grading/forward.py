"""The driver's own transformer LM forward: it judges the weights a training run returns.

In grading, a submission's run_transformer_lm runs in its worker, so a held-out loss computed with
it would rest on the submission's own word. The driver computes it with this instead: the
contract's LM (run_transformer_lm: pre-norm blocks, RMSNorm, RoPE on adjacent pairs, causal
attention, SwiGLU, an untied head), plain torch, no student code and no reference package (which
the Gradescope zip leaves out). selftest/test_training_judged.py holds it to the term's
run_transformer_lm fixtures.
"""

import torch
import torch.nn.functional as F


def transformer_lm(vocab_size: int, context_length: int, d_model: int, num_layers: int, num_heads: int,
                   d_ff: int, rope_theta: float, weights: dict, in_indices: torch.Tensor) -> torch.Tensor:
    w = {k: v.float() for k, v in weights.items()}  # 16-bit weights: float32 inside, rounded once
    seq, d_k = in_indices.shape[-1], d_model // num_heads
    angles = torch.arange(seq, dtype=torch.float64)[:, None] * rope_theta ** (
        -torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)
    cos, sin = angles.cos().float(), angles.sin().float()

    def norm(x, gain):
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * gain

    def rope(t):  # [..., heads, seq, d_k]: pairs (0, 1), (2, 3), ... rotated by position
        even, odd = t[..., 0::2], t[..., 1::2]
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)

    def heads(t):
        return t.unflatten(-1, (num_heads, d_k)).transpose(-2, -3)

    x = w["token_embeddings.weight"][in_indices]
    for i in range(num_layers):
        p = f"layers.{i}."
        h = norm(x, w[p + "ln1.weight"])
        q, k, v = (heads(h @ w[f"{p}attn.{n}_proj.weight"].T) for n in ("q", "k", "v"))
        out = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True)
        x = x + out.transpose(-2, -3).flatten(-2) @ w[p + "attn.output_proj.weight"].T
        h = norm(x, w[p + "ln2.weight"])
        x = x + (F.silu(h @ w[p + "ffn.w1.weight"].T) * (h @ w[p + "ffn.w3.weight"].T)) @ w[p + "ffn.w2.weight"].T
    return (norm(x, w["ln_final.weight"]) @ w["lm_head.weight"].T).to(weights["lm_head.weight"].dtype)
