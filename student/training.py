"""Train it: the cross-entropy loss, gradient clipping, training batches and checkpoints.

adapters.py calls the code below; the docstring of the adapter named in each
stub is its specification (shapes, layout and error rules).
"""

import torch  # noqa: F401
from torch import nn  # noqa: F401


def cross_entropy(inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    raise NotImplementedError("see the docstrings of run_cross_entropy, run_training_steps and run_train_tiny_lm in adapters.py")


def gradient_clipping(parameters, max_l2_norm: float) -> None:
    raise NotImplementedError("see the docstrings of run_gradient_clipping, run_clip_gradients, run_training_steps and run_train_tiny_lm in adapters.py")


def get_batch(dataset, batch_size: int, context_length: int, device: str):
    raise NotImplementedError("see the docstrings of run_get_batch, run_sample_batches and run_train_tiny_lm in adapters.py")


def save_checkpoint(model, optimizer, iteration: int, out) -> None:
    raise NotImplementedError("see the docstrings of run_save_checkpoint and run_resume_training in adapters.py")


def load_checkpoint(src, model, optimizer) -> int:
    raise NotImplementedError("see the docstrings of run_load_checkpoint and run_resume_training in adapters.py")
