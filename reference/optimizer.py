"""Train it reference: AdamW and the cosine learning-rate schedule."""

import math

import torch


class AdamW(torch.optim.Optimizer):
    """AdamW as torch.optim.AdamW computes it (Loshchilov and Hutter): decay first, decoupled from
    the gradient, then the bias-corrected Adam step. Each parameter counts its own steps: one that
    gets no gradient at a step is skipped, and its moments and count stay as they were."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01):
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"invalid AdamW settings: lr={lr}, betas={betas}, eps={eps}, weight_decay={weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                t, m, v = state["step"], state["exp_avg"], state["exp_avg_sq"]
                p.mul_(1 - lr * decay)
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                denominator = (v / (1 - beta2 ** t)).sqrt_().add_(eps)
                p.addcdiv_(m, denominator, value=-lr / (1 - beta1 ** t))
        return loss


def lr_cosine_schedule(it: int, max_learning_rate: float, min_learning_rate: float, warmup_iters: int,
                       cosine_cycle_iters: int) -> float:
    """Linear warmup from 0 over iterations 0 .. warmup_iters - 1, cosine from the maximum at
    warmup_iters to the minimum at cosine_cycle_iters, then the minimum."""
    if it < warmup_iters:
        return it / warmup_iters * max_learning_rate
    if it <= cosine_cycle_iters:
        progress = (it - warmup_iters) / (cosine_cycle_iters - warmup_iters)
        return min_learning_rate + 0.5 * (1 + math.cos(math.pi * progress)) * (max_learning_rate - min_learning_rate)
    return min_learning_rate
