"""Known-mistake variants and correct alternatives of the reference, as data.

Each variant is the reference adapters with a few functions replaced. The selftest
runs the student suite against every one: a mistake must fail at least one test,
a correct alternative must pass them all. Select one with
`pytest --adapters reference.variants:NAME`.
"""

import math
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

import reference.adapters as ref
from reference import embeddings as emb


@dataclass
class Variant:
    name: str
    title: str
    mistake: int | None = None  # entry number in MISTAKES.md; None for extra ones
    correct: bool = False       # a correct alternative: must pass everything
    replaces: dict[str, Callable] = field(default_factory=dict)

    def __getattr__(self, adapter: str):
        if adapter in self.replaces:
            return self.replaces[adapter]
        return getattr(ref, adapter)


VARIANTS: dict[str, Variant] = {}


def register(name: str, title: str, *, mistake: int | None = None, correct: bool = False, **replaces):
    VARIANTS[name] = Variant(name, title, mistake, correct, replaces)


def __getattr__(name: str) -> Variant:
    try:
        return VARIANTS[name]
    except KeyError:
        raise AttributeError(f"no variant {name!r}; known: {', '.join(VARIANTS)}") from None


# ---------------------------------------------------------------- helpers

def _sinusoidal(d, positions, *, layout="interleaved", exponent="pair", swap=False):
    """Sinusoidal encodings with one knob per known way of getting them wrong."""
    p = positions.to(torch.float64)[..., None]
    if layout == "concatenated":  # tensor2tensor / fairseq
        half = d // 2
        inv = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float64) / (half - 1))
        return torch.cat([(p * inv).sin(), (p * inv).cos()], dim=-1).float()
    j = torch.arange(d, dtype=torch.float64)
    power = j if exponent == "raw" else j - j % 2
    angles = p / torch.pow(10000.0, power / d)
    even, odd = (angles.cos(), angles.sin()) if swap else (angles.sin(), angles.cos())
    return torch.where(j % 2 == 0, even, odd).float()


class _ParameterTable(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.table = nn.Parameter(emb.sinusoidal_positions(d_model, torch.arange(max_len)))

    def forward(self, positions):
        return self.table[positions]


class _AttributeTable(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.table = emb.sinusoidal_positions(d_model, torch.arange(max_len))

    def forward(self, positions):
        return self.table[positions]


def _embed(position_fn):
    """run_embed_with_positions whose positions come from position_fn(token_ids, seq)."""
    def run(vocab_size, context_length, d_model, token_weights, position_weights, token_ids):
        positions = position_fn(token_ids, token_ids.shape[-1])
        if position_weights is None:
            pos = emb.sinusoidal_positions(d_model, positions)
        else:
            pos = position_weights[positions]
        return emb.embedding_lookup(token_weights, token_ids) + pos
    return run


# ---------------------------------------------------------------- Unit 2.1 mistakes

register("one_hot_matmul", "embedding as a one-hot matmul", mistake=1,
         run_embedding=lambda vocab_size, d_model, weights, token_ids:
             F.one_hot(token_ids, vocab_size).to(weights.dtype) @ weights)

def _two_d(vocab_size, d_model, weights, token_ids):
    B, T = token_ids.shape
    return emb.embedding_lookup(weights, token_ids.reshape(B * T)).view(B, T, d_model)

register("hard_coded_2d_ids", "B, T = ids.shape: only 2-D ids work", mistake=2, run_embedding=_two_d)

register("negative_ids_wrap", "plain weights[ids]: negative ids wrap to the last rows", mistake=3,
         run_embedding=lambda vocab_size, d_model, weights, token_ids: weights[token_ids])

register("detached_table", "the table is detached, so it gets no gradient", mistake=4,
         run_embedding=lambda vocab_size, d_model, weights, token_ids:
             emb.embedding_lookup(weights.detach(), token_ids))

register("bf16_round_trip", "the table goes through bf16 and back", mistake=5,
         run_embedding=lambda vocab_size, d_model, weights, token_ids:
             emb.embedding_lookup(weights.to(torch.bfloat16), token_ids).to(weights.dtype))

register("positions_indexed_by_ids", "position vectors indexed by token ids", mistake=6,
         run_embed_with_positions=_embed(lambda ids, seq: ids))

register("one_based_positions", "positions start at 1", mistake=7,
         run_embed_with_positions=_embed(lambda ids, seq: torch.arange(1, seq + 1)))

register("concatenated_sin_cos", "sinusoidal [sin | cos] layout (tensor2tensor/fairseq)", mistake=8,
         run_sinusoidal_positions=lambda d_model, token_positions:
             _sinusoidal(d_model, token_positions, layout="concatenated"))

register("swapped_sin_cos", "cos on even dims, sin on odd dims", mistake=9,
         run_sinusoidal_positions=lambda d_model, token_positions:
             _sinusoidal(d_model, token_positions, swap=True))

register("raw_dimension_exponent", "exponent uses the raw dimension j instead of 2i", mistake=10,
         run_sinusoidal_positions=lambda d_model, token_positions:
             _sinusoidal(d_model, token_positions, exponent="raw"))

register("position_table_parameter", "sinusoidal table stored as an nn.Parameter", mistake=11,
         get_sinusoidal_positions=_ParameterTable)

register("position_table_attribute", "sinusoidal table as a plain attribute, not a buffer", mistake=12,
         get_sinusoidal_positions=_AttributeTable)

register("unchecked_learned_positions", "learned positions are not range-checked", mistake=13,
         run_learned_positions=lambda context_length, d_model, weights, token_positions:
             weights[token_positions])

# ---------------------------------------------------------------- contract slips

register("forgot_return", "the adapter forgets to return",
         run_embedding=lambda vocab_size, d_model, weights, token_ids: None)

register("flattened_output", "the lookup flattens the leading dimensions",
         run_embedding=lambda vocab_size, d_model, weights, token_ids:
             emb.embedding_lookup(weights, token_ids.reshape(-1)))

register("float64_output", "positions returned in float64",
         run_sinusoidal_positions=lambda d_model, token_positions:
             emb.sinusoidal_positions(d_model, token_positions).double())

def _mutating(vocab_size, d_model, weights, token_ids):
    with torch.no_grad():
        weights[-1] = 0.0
    return emb.embedding_lookup(weights, token_ids)

register("mutates_input", "the lookup writes into its weights", run_embedding=_mutating)


# ---------------------------------------------------------------- correct alternatives

def _f_embedding(vocab_size, d_model, weights, token_ids):
    emb.check_range(token_ids, vocab_size, "token id")
    return F.embedding(token_ids, weights)

register("functional_embedding", "F.embedding with an explicit range check", correct=True,
         run_embedding=_f_embedding)

def _index_select(vocab_size, d_model, weights, token_ids):
    emb.check_range(token_ids, vocab_size, "token id")
    return weights.index_select(0, token_ids.reshape(-1)).reshape(*token_ids.shape, d_model)

register("index_select_embedding", "index_select on flattened ids", correct=True, run_embedding=_index_select)

def _sinusoidal_float32(d_model, token_positions):
    i = torch.arange(0, d_model, 2, dtype=torch.float32, device=token_positions.device)
    angles = token_positions[..., None].float() / torch.pow(10000.0, i / d_model)
    pe = torch.empty(*angles.shape[:-1], d_model, device=token_positions.device)
    pe[..., 0::2], pe[..., 1::2] = angles.sin(), angles.cos()
    return pe

register("float32_sinusoidal", "sinusoidal computed in float32 with pow and strided writes", correct=True,
         run_sinusoidal_positions=_sinusoidal_float32)
