"""Unit 2.1 reference: token embeddings and absolute positions."""

import math

import torch
from torch import nn


def check_range(ids: torch.Tensor, size: int, what: str) -> None:
    # Plain indexing wraps negative ids; an explicit check keeps the error readable.
    if ids.numel() == 0:
        return
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= size:
        bad = low if low < 0 else high
        raise IndexError(f"{what} {bad} is outside [0, {size}); the table has {size} rows")


def embedding_lookup(weights: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    check_range(token_ids, weights.shape[0], "token id")
    return weights[token_ids]


def learned_positions(weights: torch.Tensor, token_positions: torch.Tensor) -> torch.Tensor:
    check_range(token_positions, weights.shape[0], "position")
    return weights[token_positions]


def sinusoidal_positions(d_model: int, token_positions: torch.Tensor) -> torch.Tensor:
    # float64 internals keep large positions accurate; the result is float32.
    pair = torch.arange(0, d_model, 2, dtype=torch.float64, device=token_positions.device)
    inv_freq = torch.exp(-math.log(10000.0) * pair / d_model)
    angles = token_positions.to(torch.float64)[..., None] * inv_freq
    pe = torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)
    return pe.to(torch.float32)


def embed_with_positions(token_weights, position_weights, token_ids):
    seq = token_ids.shape[-1]
    positions = torch.arange(seq, device=token_ids.device)
    if position_weights is None:
        pos = sinusoidal_positions(token_weights.shape[1], positions)
    else:
        pos = learned_positions(position_weights, positions)
    tokens = embedding_lookup(token_weights, token_ids)  # a 16-bit table: the sum rounded once, in its dtype
    return (tokens.to(torch.promote_types(tokens.dtype, pos.dtype)) + pos).to(tokens.dtype)


class Embedding(nn.Module):
    def __init__(self, vocab_size: int, d_model: int, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model, device=device, dtype=dtype))
        nn.init.trunc_normal_(self.weight, mean=0.0, std=1.0, a=-3.0, b=3.0)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        return embedding_lookup(self.weight, token_ids)


class SinusoidalPositions(nn.Module):
    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        table = sinusoidal_positions(d_model, torch.arange(max_len))
        self.register_buffer("table", table, persistent=False)

    def forward(self, token_positions: torch.Tensor) -> torch.Tensor:
        check_range(token_positions, self.table.shape[0], "position")
        return self.table[token_positions]
