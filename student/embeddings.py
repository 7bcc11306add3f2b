"""Unit 2.1: token embeddings and absolute positions.

Each function below is called by the adapter of the same topic in adapters.py;
that adapter's docstring is the specification (shapes, layout and error rules).
"""

import torch
from torch import nn

_SPEC = "see the docstring of {} in adapters.py"


def embedding_lookup(weights: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    raise NotImplementedError(_SPEC.format("run_embedding"))


def learned_positions(weights: torch.Tensor, token_positions: torch.Tensor) -> torch.Tensor:
    raise NotImplementedError(_SPEC.format("run_learned_positions"))


def sinusoidal_positions(d_model: int, token_positions: torch.Tensor) -> torch.Tensor:
    raise NotImplementedError(_SPEC.format("run_sinusoidal_positions"))


def embed_with_positions(token_weights, position_weights, token_ids):
    raise NotImplementedError(_SPEC.format("run_embed_with_positions"))


class Embedding(nn.Module):
    def __init__(self, vocab_size: int, d_model: int):
        super().__init__()
        raise NotImplementedError(_SPEC.format("get_embedding"))


class SinusoidalPositions(nn.Module):
    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        raise NotImplementedError(_SPEC.format("get_sinusoidal_positions"))
