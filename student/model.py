"""Model assembly: RMSNorm, SwiGLU, the transformer block and the LM.

Parameter names are part of the contract (see run_transformer_lm in adapters.py).
"""

from torch import nn

_SPEC = "see the docstring of {} in adapters.py"


class RMSNorm(nn.Module):
    """One parameter, `weight` [d_model], initialised to ones."""

    def __init__(self, d_model: int, eps: float = 1e-5, device=None, dtype=None):
        super().__init__()
        raise NotImplementedError(_SPEC.format("run_rmsnorm"))


class SwiGLU(nn.Module):
    """Parameters w1, w2, w3 (each a Linear)."""

    def __init__(self, d_model: int, d_ff: int, device=None, dtype=None):
        super().__init__()
        raise NotImplementedError(_SPEC.format("run_swiglu"))


class TransformerBlock(nn.Module):
    """Submodules ln1, attn, ln2, ffn."""

    def __init__(self, d_model: int, num_heads: int, d_ff: int, max_seq_len: int, theta: float,
                 device=None, dtype=None):
        super().__init__()
        raise NotImplementedError(_SPEC.format("run_transformer_block"))


class TransformerLM(nn.Module):
    """Submodules token_embeddings, layers, ln_final, lm_head; see get_transformer_lm for init."""

    def __init__(self, vocab_size: int, context_length: int, d_model: int, num_layers: int,
                 num_heads: int, d_ff: int, rope_theta: float, init_scheme: str = "cs336",
                 device=None, dtype=None):
        super().__init__()
        raise NotImplementedError(_SPEC.format("run_transformer_lm and get_transformer_lm"))
