"""Unit 2.5 reference: rotary position embedding, interleaved pairs."""

import torch
from torch import nn


class RotaryPositionalEmbedding(nn.Module):
    def __init__(self, theta: float, d_k: int, max_seq_len: int, device=None):
        super().__init__()
        # Angles in float64 keep large positions accurate; the tables are float32.
        pair = torch.arange(0, d_k, 2, dtype=torch.float64, device=device)
        inv_freq = theta ** (-pair / d_k)
        angles = torch.arange(max_seq_len, dtype=torch.float64, device=device)[:, None] * inv_freq
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: torch.Tensor, token_positions: torch.Tensor) -> torch.Tensor:
        cos, sin = self.cos[token_positions], self.sin[token_positions]
        wide = x.to(torch.promote_types(x.dtype, torch.float32))  # 16-bit x: rotated in float32, rounded once
        even, odd = wide[..., 0::2], wide[..., 1::2]
        rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
        return rotated.flatten(-2).to(x.dtype)
