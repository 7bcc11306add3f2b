"""Unit 2.1: relative positions as attention biases: ALiBi's slopes and bias, T5's bucketed table.

adapters.py calls the code below; the docstring of the adapter named in each
stub is its specification (shapes, layout and error rules).
"""

import torch  # noqa: F401
from torch import nn  # noqa: F401


def alibi_slopes(num_heads: int) -> torch.Tensor:
    raise NotImplementedError("see the docstring of run_alibi_slopes in adapters.py")


def alibi_bias(num_heads: int, seq_len: int) -> torch.Tensor:
    raise NotImplementedError("see the docstring of run_alibi_bias in adapters.py")


class T5RelativeBias(nn.Module):
    """One parameter, `weight` [num_buckets, num_heads]: a learned bias per bucket and head.

    forward(seq_len) -> [num_heads, seq_len, seq_len]; buckets as run_t5_relative_bias says.
    """

    def __init__(self, num_heads: int, num_buckets: int, max_distance: int, bidirectional: bool = True):
        super().__init__()
        raise NotImplementedError("see the docstring of run_t5_relative_bias in adapters.py")
