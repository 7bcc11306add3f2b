"""Unit 2.2: linear layers, softmax, SiLU and attention.

adapters.py builds these and calls them; its docstrings are the specification.
"""

import torch
from torch import nn

_SPEC = "see the docstring of {} in adapters.py"


class Linear(nn.Module):
    """Bias-free linear layer; its one parameter is `weight` [out_features, in_features]."""

    def __init__(self, in_features: int, out_features: int, device=None, dtype=None):
        super().__init__()
        raise NotImplementedError(_SPEC.format("run_linear"))


def softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    raise NotImplementedError(_SPEC.format("run_softmax"))


def silu(x: torch.Tensor) -> torch.Tensor:
    raise NotImplementedError(_SPEC.format("run_silu"))


def scaled_dot_product_attention(Q, K, V, mask=None):
    raise NotImplementedError(_SPEC.format("run_scaled_dot_product_attention"))


class MultiHeadSelfAttention(nn.Module):
    """Causal MHA with parameters q_proj, k_proj, v_proj, output_proj (each a Linear).

    With max_seq_len and theta given, apply RoPE to Q and K after the head split.
    """

    def __init__(self, d_model: int, num_heads: int, max_seq_len: int | None = None,
                 theta: float | None = None, device=None, dtype=None):
        super().__init__()
        raise NotImplementedError(_SPEC.format("run_multihead_self_attention"))
