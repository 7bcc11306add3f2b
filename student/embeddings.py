"""Unit 2.1: token embeddings and absolute positions.

adapters.py calls the code below; the docstring of the adapter named in each
stub is its specification (shapes, layout and error rules).
"""

import torch  # noqa: F401
from torch import nn  # noqa: F401


def embedding_lookup(weights: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    raise NotImplementedError("see the docstring of run_embedding in adapters.py")


def learned_positions(weights: torch.Tensor, token_positions: torch.Tensor) -> torch.Tensor:
    raise NotImplementedError("see the docstring of run_learned_positions in adapters.py")


def sinusoidal_positions(d_model: int, token_positions: torch.Tensor) -> torch.Tensor:
    raise NotImplementedError("see the docstring of run_sinusoidal_positions in adapters.py")


def embed_with_positions(token_weights, position_weights, token_ids):
    raise NotImplementedError("see the docstring of run_embed_with_positions in adapters.py")


class Embedding(nn.Module):
    """One parameter, `weight` [vocab_size, d_model]: the table."""

    def __init__(self, vocab_size: int, d_model: int, device=None, dtype=None):
        super().__init__()
        raise NotImplementedError("see the docstring of get_embedding in adapters.py")


class SinusoidalPositions(nn.Module):
    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        raise NotImplementedError("see the docstring of get_sinusoidal_positions in adapters.py")
