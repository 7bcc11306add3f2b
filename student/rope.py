"""Unit 2.5: rotary position embedding. See run_rope in adapters.py."""

import torch
from torch import nn


class RotaryPositionalEmbedding(nn.Module):
    """forward(x [..., seq, d_k], token_positions [..., seq]) -> [..., seq, d_k]. No parameters."""

    def __init__(self, theta: float, d_k: int, max_seq_len: int, device=None):
        super().__init__()
        raise NotImplementedError("see the docstring of run_rope in adapters.py")
