"""Unit 2.2: linear layers, softmax, SiLU and attention.

adapters.py calls the code below; the docstring of the adapter named in each
stub is its specification (shapes, layout and error rules).
"""

import torch  # noqa: F401
from torch import nn  # noqa: F401


class Linear(nn.Module):
    """Bias-free linear layer; its one parameter is `weight` [out_features, in_features]."""

    def __init__(self, in_features: int, out_features: int, device=None, dtype=None):
        super().__init__()
        raise NotImplementedError("see the docstring of run_linear in adapters.py")


def softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    raise NotImplementedError("see the docstring of run_softmax in adapters.py")


def silu(x: torch.Tensor) -> torch.Tensor:
    raise NotImplementedError("see the docstring of run_silu in adapters.py")


def scaled_dot_product_attention(Q, K, V, mask=None):
    raise NotImplementedError("see the docstring of run_scaled_dot_product_attention in adapters.py")


def attention_with_bias(Q, K, V, bias, mask=None):
    raise NotImplementedError("see the docstring of run_attention_with_bias in adapters.py")


class MultiHeadSelfAttention(nn.Module):
    """Causal MHA with parameters q_proj, k_proj, v_proj, output_proj (each a Linear).

    With max_seq_len and theta given, apply RoPE to Q and K after the head split.
    """

    def __init__(self, d_model: int, num_heads: int, max_seq_len: int | None = None,
                 theta: float | None = None, device=None, dtype=None):
        super().__init__()
        raise NotImplementedError("see the docstrings of run_multihead_self_attention and run_multihead_self_attention_with_rope in adapters.py")
