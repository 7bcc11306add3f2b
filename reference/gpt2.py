"""From GPT-2 to modern models reference: LayerNorm, GELU, the GPT-2 MLP, grouped-query
attention, the GPT-2 block and LM (nanoGPT's model.py, with CS336 names)."""

import math

import torch
from einops import rearrange
from torch import nn

# Referenced through their modules, so a variant that swaps one piece reaches every caller.
from reference import attention, embeddings, rope


def widen(x: torch.Tensor) -> torch.Tensor:
    """x in at least float32: a 16-bit x is upcast, float32 and float64 are kept (the build widens
    float32 cases to float64). This module's own, so a variant can make this module alone 16-bit."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


class LayerNorm(nn.Module):
    def __init__(self, d_model: int, eps: float = 1e-5, device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(d_model, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = x.to(torch.promote_types(x.dtype, torch.float32))
        centered = wide - wide.mean(dim=-1, keepdim=True)
        var = centered.pow(2).mean(dim=-1, keepdim=True)  # biased, as nn.LayerNorm
        return (centered / torch.sqrt(var + self.eps) * self.weight + self.bias).to(x.dtype)


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    wide = widen(x)  # a 16-bit x: computed in float32, rounded once
    if approximate == "none":
        return (0.5 * wide * (1 + torch.erf(wide / math.sqrt(2)))).to(x.dtype)
    if approximate == "tanh":
        return (0.5 * wide * (1 + torch.tanh(math.sqrt(2 / math.pi) * (wide + 0.044715 * wide.pow(3))))).to(x.dtype)
    raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")


class Linear(nn.Module):
    """A linear layer with a bias (nn.Linear layout), initialised as nanoGPT: N(0, 0.02), bias 0."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features, device=device, dtype=dtype))
        nn.init.normal_(self.weight, 0.0, 0.02)
        self.bias = nn.Parameter(torch.zeros(out_features, device=device, dtype=dtype)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = widen(x)
        y = wide @ self.weight.to(wide.dtype).T
        return (y if self.bias is None else y + self.bias.to(wide.dtype)).to(x.dtype)


class GPT2MLP(nn.Module):
    def __init__(self, d_model: int, d_ff: int, approximate: str = "none", device=None, dtype=None):
        super().__init__()
        self.approximate = approximate
        self.c_fc = Linear(d_model, d_ff, device=device, dtype=dtype)
        self.c_proj = Linear(d_ff, d_model, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = widen(x)  # float32 throughout, rounded once at the end
        return self.c_proj(gelu(self.c_fc(wide), self.approximate)).to(x.dtype)


def expand_kv(t: torch.Tensor, group: int) -> torch.Tensor:
    """[..., kv_heads, seq, d] -> [..., kv_heads * group, seq, d]: query head h reads kv head h // group."""
    return t.repeat_interleave(group, dim=-3)


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int, max_seq_len: int | None = None,
                 theta: float | None = None, bias: bool = False, device=None, dtype=None):
        super().__init__()
        if num_heads % num_kv_heads:
            raise ValueError(f"num_kv_heads={num_kv_heads} must divide num_heads={num_heads}")
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        d_kv = num_kv_heads * (d_model // num_heads)
        self.q_proj = Linear(d_model, d_model, bias, device=device, dtype=dtype)
        self.k_proj = Linear(d_model, d_kv, bias, device=device, dtype=dtype)
        self.v_proj = Linear(d_model, d_kv, bias, device=device, dtype=dtype)
        self.output_proj = Linear(d_model, d_model, bias, device=device, dtype=dtype)
        self.rope = None
        if theta is not None:
            self.rope = rope.RotaryPositionalEmbedding(theta, d_model // num_heads, max_seq_len, device=device)

    def forward(self, x: torch.Tensor, token_positions: torch.Tensor | None = None) -> torch.Tensor:
        seq, wide = x.shape[-2], widen(x)  # float32 throughout, rounded once at the end
        q = rearrange(self.q_proj(wide), "... s (h d) -> ... h s d", h=self.num_heads)
        k, v = (rearrange(p(wide), "... s (h d) -> ... h s d", h=self.num_kv_heads) for p in (self.k_proj, self.v_proj))
        if self.rope is not None:
            if token_positions is None:
                token_positions = torch.arange(seq, device=x.device)
            positions = token_positions.unsqueeze(-2)  # the same rotation for every head
            q, k = self.rope(q, positions), self.rope(k, positions)
        group = self.num_heads // self.num_kv_heads
        k, v = expand_kv(k, group), expand_kv(v, group)
        causal = torch.ones(seq, seq, dtype=torch.bool, device=x.device).tril()
        out = attention.scaled_dot_product_attention(q, k, v, causal)
        return self.output_proj(rearrange(out, "... h s d -> ... s (h d)")).to(x.dtype)


class GPT2Block(nn.Module):
    def __init__(self, d_model: int, num_heads: int, d_ff: int, eps: float = 1e-5, device=None, dtype=None):
        super().__init__()
        self.ln1 = LayerNorm(d_model, eps, device=device, dtype=dtype)
        self.attn = GroupedQueryAttention(d_model, num_heads, num_heads, bias=True, device=device, dtype=dtype)
        self.ln2 = LayerNorm(d_model, eps, device=device, dtype=dtype)
        self.mlp = GPT2MLP(d_model, d_ff, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = widen(x)
        z = wide + self.attn(self.ln1(wide))
        return (z + self.mlp(self.ln2(z))).to(x.dtype)


class GPT2LM(nn.Module):
    def __init__(self, vocab_size: int, context_length: int, d_model: int, num_layers: int,
                 num_heads: int, d_ff: int, device=None, dtype=None):
        super().__init__()
        self.token_embeddings = embeddings.Embedding(vocab_size, d_model, device=device, dtype=dtype)
        self.position_embeddings = embeddings.Embedding(context_length, d_model, device=device, dtype=dtype)
        self.layers = nn.ModuleList(GPT2Block(d_model, num_heads, d_ff, device=device, dtype=dtype)
                                    for _ in range(num_layers))
        self.ln_final = LayerNorm(d_model, device=device, dtype=dtype)
        self._init_nanogpt(num_layers)

    @torch.no_grad()
    def _init_nanogpt(self, num_layers: int) -> None:
        for name, p in self.named_parameters():
            if p.dim() == 2:
                residual = name.endswith(("attn.output_proj.weight", "mlp.c_proj.weight"))
                p.normal_(0.0, 0.02 / math.sqrt(2 * num_layers) if residual else 0.02)

    def forward(self, in_indices: torch.Tensor) -> torch.Tensor:
        seq = in_indices.shape[-1]
        context = self.position_embeddings.weight.shape[0]
        if seq > context:
            raise ValueError(f"sequence length {seq} exceeds context_length {context}")
        positions = torch.arange(seq, device=in_indices.device)
        table = self.token_embeddings.weight
        x = widen(self.token_embeddings(in_indices)) + widen(self.position_embeddings(positions))
        for layer in self.layers:
            x = layer(x)
        return (self.ln_final(x) @ table.to(x.dtype).T).to(table.dtype)  # the tied LM head; 16-bit: rounded once
