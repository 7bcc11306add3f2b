"""Unit 2.1 reference: relative positions as attention biases (ALiBi, T5's bucketed table)."""

import math

import torch
from torch import nn


def _power_of_two_slopes(n: int) -> list[float]:
    return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]


def alibi_slopes(num_heads: int) -> torch.Tensor:
    # Press et al.'s get_slopes, each slope computed in float64 and rounded once.
    closest = 2 ** math.floor(math.log2(num_heads))
    slopes = _power_of_two_slopes(closest) + _power_of_two_slopes(2 * closest)[0::2][:num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(num_heads: int, seq_len: int) -> torch.Tensor:
    positions = torch.arange(seq_len)
    distance = (positions[None, :] - positions[:, None]).abs()  # [queries, keys]
    return -alibi_slopes(num_heads)[:, None, None] * distance


def t5_boundaries(half: int, max_distance: int) -> list[int]:
    """The smallest distance of each logarithmic bucket k = 1 .. half - max_exact - 1, in integers:
    n >= max_exact * (max_distance / max_exact)^(k / m) <=> n^m * max_exact^k >= max_exact^m * max_distance^k."""
    exact, m = half // 2, half - half // 2
    bounds = []
    for k in range(1, m):
        n = max(exact, int(exact * (max_distance / exact) ** (k / m)) - 2)  # a float guess, then exact steps
        while n ** m * exact ** k < exact ** m * max_distance ** k:
            n += 1
        bounds.append(n)
    return bounds


def t5_buckets(relative: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> torch.Tensor:
    """T5's bucket of every offset r = j - i (key minus query), with exact integer boundaries."""
    if bidirectional:
        half = num_buckets // 2
        offset, n = (relative > 0).long() * half, relative.abs()
    else:
        half = num_buckets
        offset, n = torch.zeros_like(relative), (-relative).clamp(min=0)
    exact = half // 2
    bounds = torch.tensor(t5_boundaries(half, max_distance), dtype=torch.long, device=relative.device)
    large = exact + (n[..., None] >= bounds).sum(-1)
    return offset + torch.where(n < exact, n, large)


class T5RelativeBias(nn.Module):
    def __init__(self, num_heads: int, num_buckets: int, max_distance: int, bidirectional: bool = True,
                 device=None, dtype=None):
        super().__init__()
        self.num_buckets, self.max_distance, self.bidirectional = num_buckets, max_distance, bidirectional
        self.weight = nn.Parameter(torch.zeros(num_buckets, num_heads, device=device, dtype=dtype))

    def forward(self, seq_len: int) -> torch.Tensor:
        positions = torch.arange(seq_len, device=self.weight.device)
        relative = positions[None, :] - positions[:, None]  # [queries, keys]: j - i
        buckets = t5_buckets(relative, self.bidirectional, self.num_buckets, self.max_distance)
        return self.weight[buckets].permute(2, 0, 1)  # [heads, queries, keys]
