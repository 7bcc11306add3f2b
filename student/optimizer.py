"""Train it: AdamW and the cosine learning-rate schedule.

adapters.py calls the code below; the docstring of the adapter named in each
stub is its specification (shapes, layout and error rules).
"""

import torch  # noqa: F401
from torch import nn  # noqa: F401


class AdamW(torch.optim.Optimizer):
    """AdamW (see get_adamw_cls in adapters.py). Write __init__ and step(closure=None)."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01):
        raise NotImplementedError("see the docstrings of run_adamw_steps, run_adamw_resumed, run_adamw_param_groups, run_training_steps and run_train_tiny_lm in adapters.py")


def lr_cosine_schedule(it: int, max_learning_rate: float, min_learning_rate: float, warmup_iters: int, cosine_cycle_iters: int) -> float:
    raise NotImplementedError("see the docstrings of run_get_lr_cosine_schedule, run_lr_schedule, run_training_steps and run_train_tiny_lm in adapters.py")
