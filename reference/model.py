"""Model assembly reference: RMSNorm, SwiGLU, the pre-norm block and the LM."""

import math

import torch
from torch import nn

# Modules are referenced through their module, so a selftest variant that swaps one
# piece (reference/variants.py) reaches every model built from it.
from reference import attention, embeddings


def widen(x: torch.Tensor) -> torch.Tensor:
    """x in at least float32: a 16-bit x is upcast, float32 and float64 are kept (the build widens
    float32 cases to float64). This module's own, so a variant can make this module alone 16-bit."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


class RMSNorm(nn.Module):
    def __init__(self, d_model: int, eps: float = 1e-5, device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # At least float32: fp16 squares overflow beyond about 256.
        wide = x.to(torch.promote_types(x.dtype, torch.float32))
        rms = torch.sqrt(wide.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (wide / rms * self.weight).to(x.dtype)


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, d_ff: int, device=None, dtype=None):
        super().__init__()
        self.w1 = attention.Linear(d_model, d_ff, device=device, dtype=dtype)
        self.w2 = attention.Linear(d_ff, d_model, device=device, dtype=dtype)
        self.w3 = attention.Linear(d_model, d_ff, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = widen(x)  # float32 throughout, rounded once at the end
        return self.w2(attention.silu(self.w1(wide)) * self.w3(wide)).to(x.dtype)


class TransformerBlock(nn.Module):
    def __init__(self, d_model: int, num_heads: int, d_ff: int, max_seq_len: int, theta: float,
                 device=None, dtype=None):
        super().__init__()
        self.ln1 = RMSNorm(d_model, device=device, dtype=dtype)
        self.attn = attention.MultiHeadSelfAttention(d_model, num_heads, max_seq_len, theta, device=device, dtype=dtype)
        self.ln2 = RMSNorm(d_model, device=device, dtype=dtype)
        self.ffn = SwiGLU(d_model, d_ff, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = widen(x)
        z = wide + self.attn(self.ln1(wide))
        return (z + self.ffn(self.ln2(z))).to(x.dtype)


class TransformerLM(nn.Module):
    def __init__(self, vocab_size: int, context_length: int, d_model: int, num_layers: int,
                 num_heads: int, d_ff: int, rope_theta: float, init_scheme: str = "cs336",
                 device=None, dtype=None):
        super().__init__()
        self.token_embeddings = embeddings.Embedding(vocab_size, d_model, device=device, dtype=dtype)
        self.layers = nn.ModuleList(
            TransformerBlock(d_model, num_heads, d_ff, context_length, rope_theta, device=device, dtype=dtype)
            for _ in range(num_layers))
        self.ln_final = RMSNorm(d_model, device=device, dtype=dtype)
        self.lm_head = attention.Linear(d_model, vocab_size, device=device, dtype=dtype)
        if init_scheme == "gpt2":
            self._init_gpt2(num_layers)
        elif init_scheme != "cs336":
            raise ValueError(f"init_scheme must be 'cs336' or 'gpt2', got {init_scheme!r}")

    @torch.no_grad()
    def _init_gpt2(self, num_layers: int) -> None:
        for name, p in self.named_parameters():
            if p.dim() == 2:
                residual = name.endswith(("attn.output_proj.weight", "ffn.w2.weight"))
                p.normal_(0.0, 0.02 / math.sqrt(2 * num_layers) if residual else 0.02)

    def forward(self, in_indices: torch.Tensor) -> torch.Tensor:
        rows = self.token_embeddings(in_indices)
        x = widen(rows)  # 16-bit weights: float32 throughout, the logits rounded once to their dtype
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.ln_final(x)).to(rows.dtype)
