"""Accounting: parameter, FLOP and KV-cache counts, and the memory and FLOPs of a training step.

adapters.py calls the code below; the docstring of the adapter named in each
stub is its specification (shapes, layout and error rules).
"""

import torch  # noqa: F401
from torch import nn  # noqa: F401


def transformer_accounting(vocab_size, context_length, d_model, num_layers, num_heads, d_ff,
                           num_kv_heads=None, batch_size=1, kv_cache_dtype="float32") -> dict[str, int]:
    raise NotImplementedError("see the docstring of run_transformer_accounting in adapters.py")


def gpt2_accounting(vocab_size, context_length, d_model, num_layers, num_heads, d_ff,
                    batch_size=1, kv_cache_dtype="float32") -> dict[str, int]:
    raise NotImplementedError("see the docstring of run_gpt2_accounting in adapters.py")


def training_accounting(vocab_size, context_length, d_model, num_layers, num_heads, d_ff,
                        batch_size=1, param_dtype="float32", optimizer_dtype="float32") -> dict[str, int]:
    raise NotImplementedError("see the docstring of run_training_accounting in adapters.py")
