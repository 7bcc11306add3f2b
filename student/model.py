"""Model assembly: RMSNorm, SwiGLU, the transformer block and the LM.

Parameter names are part of the contract (see run_transformer_lm in adapters.py).

adapters.py calls the code below; the docstring of the adapter named in each
stub is its specification (shapes, layout and error rules).
"""

import torch  # noqa: F401
from torch import nn  # noqa: F401


class RMSNorm(nn.Module):
    """One parameter, `weight` [d_model], initialised to ones."""

    def __init__(self, d_model: int, eps: float = 1e-5, device=None, dtype=None):
        super().__init__()
        raise NotImplementedError("see the docstring of run_rmsnorm in adapters.py")


class SwiGLU(nn.Module):
    """Parameters w1, w2, w3 (each a Linear)."""

    def __init__(self, d_model: int, d_ff: int, device=None, dtype=None):
        super().__init__()
        raise NotImplementedError("see the docstring of run_swiglu in adapters.py")


class TransformerBlock(nn.Module):
    """Submodules ln1, attn, ln2, ffn."""

    def __init__(self, d_model: int, num_heads: int, d_ff: int, max_seq_len: int, theta: float,
                 device=None, dtype=None):
        super().__init__()
        raise NotImplementedError("see the docstring of run_transformer_block in adapters.py")


class TransformerLM(nn.Module):
    """Submodules token_embeddings, layers, ln_final, lm_head; see get_transformer_lm for init."""

    def __init__(self, vocab_size: int, context_length: int, d_model: int, num_layers: int,
                 num_heads: int, d_ff: int, rope_theta: float, init_scheme: str = "cs336",
                 device=None, dtype=None):
        super().__init__()
        raise NotImplementedError("see the docstrings of run_transformer_lm, get_transformer_lm, run_training_steps and run_train_tiny_lm in adapters.py")
