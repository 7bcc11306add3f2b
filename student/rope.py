"""Unit 2.5: rotary position embedding.

adapters.py calls the code below; the docstring of the adapter named in each
stub is its specification (shapes, layout and error rules).
"""

import torch  # noqa: F401
from torch import nn  # noqa: F401


class RotaryPositionalEmbedding(nn.Module):
    """forward(x [..., seq, d_k], token_positions [..., seq]) -> [..., seq, d_k]. No parameters."""

    def __init__(self, theta: float, d_k: int, max_seq_len: int, device=None):
        super().__init__()
        raise NotImplementedError("see the docstring of run_rope in adapters.py")
