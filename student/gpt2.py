"""From GPT-2 to modern models: LayerNorm, GELU, the GPT-2 MLP, grouped-query attention,
the GPT-2 block and LM.

Parameter names are part of the contract (see run_gpt2_lm in adapters.py).

adapters.py calls the code below; the docstring of the adapter named in each
stub is its specification (shapes, layout and error rules).
"""

import torch  # noqa: F401
from torch import nn  # noqa: F401


class LayerNorm(nn.Module):
    """Parameters `weight` [d_model] (ones) and `bias` [d_model] (zeros)."""

    def __init__(self, d_model: int, eps: float = 1e-5, device=None, dtype=None):
        super().__init__()
        raise NotImplementedError("see the docstring of run_layernorm in adapters.py")


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    raise NotImplementedError("see the docstring of run_gelu in adapters.py")


class GPT2MLP(nn.Module):
    """Parameters c_fc and c_proj, each a linear layer with a bias (nn.Linear layout)."""

    def __init__(self, d_model: int, d_ff: int, approximate: str = "none", device=None, dtype=None):
        super().__init__()
        raise NotImplementedError("see the docstring of run_gpt2_mlp in adapters.py")


class GroupedQueryAttention(nn.Module):
    """Causal attention with num_kv_heads key/value heads; parameters q_proj, k_proj, v_proj,
    output_proj (each a Linear, no bias unless bias=True). With theta given, RoPE on Q and K."""

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int, max_seq_len: int | None = None,
                 theta: float | None = None, bias: bool = False, device=None, dtype=None):
        super().__init__()
        raise NotImplementedError("see the docstring of run_grouped_query_attention in adapters.py")


class GPT2Block(nn.Module):
    """Submodules ln1 (LayerNorm), attn (GroupedQueryAttention with biases), ln2, mlp (GPT2MLP)."""

    def __init__(self, d_model: int, num_heads: int, d_ff: int, eps: float = 1e-5, device=None, dtype=None):
        super().__init__()
        raise NotImplementedError("see the docstring of run_gpt2_block in adapters.py")


class GPT2LM(nn.Module):
    """Submodules token_embeddings, position_embeddings, layers, ln_final; the LM head is tied."""

    def __init__(self, vocab_size: int, context_length: int, d_model: int, num_layers: int,
                 num_heads: int, d_ff: int, device=None, dtype=None):
        super().__init__()
        raise NotImplementedError("see the docstrings of run_gpt2_lm and get_gpt2_lm in adapters.py")
