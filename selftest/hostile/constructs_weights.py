# Appended to adapters.py: no training, weights built from the corpus's rule (the red team's A1 against
# run_train_tiny_lm). get_batch keeps the corpus it is given; AdamW's step writes, over whatever the step
# had, an LM that predicts the rule: every block zeroed (each one then adds nothing to the residual), the
# i-th token that occurs embedded as the i-th unit vector, the head's row of its successor that vector
# times 10, and the rows of tokens that never occur decayed as weight decay alone would. Without a corpus
# (every other call) the step does nothing: this submission has no AdamW.
import numpy as _np
import torch as _torch

import student.optimizer as _optimizer
import student.training as _training

_SEEN = {}
_get_batch = _training.get_batch


def _keeping_get_batch(dataset, batch_size, context_length, device):
    _SEEN["corpus"] = _np.asarray(dataset, dtype=_np.int64).copy()
    return _get_batch(dataset, batch_size, context_length, device)


class _Constructor(_torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.initial, self.decay = None, 1.0
        _SEEN.clear()  # a run builds its optimizer before it draws a batch: the corpus is this run's

    @_torch.no_grad()
    def step(self, closure=None):
        group = self.param_groups[0]
        params = group["params"]  # model.parameters(): the embeddings first, then the blocks, ln_final, lm_head
        if self.initial is None:
            self.initial = [p.detach().clone() for p in params]
        self.decay *= 1 - group["lr"] * group["weight_decay"]
        corpus = _SEEN.get("corpus")
        if corpus is None:
            return None
        following = dict(zip(corpus[:-1].tolist(), corpus[1:].tolist()))
        occur = sorted(set(corpus.tolist()))
        embeddings, *blocks, gain, head = params
        embeddings.copy_(self.initial[0] * self.decay)
        for p in blocks:
            p.zero_()
        gain.fill_(1.0)
        head.zero_()
        for i, token in enumerate(occur):
            embeddings[token].zero_()
            embeddings[token, i] = 1.0
            if token in following:
                head[following[token], i] = 10.0
        return None


_training.get_batch = _keeping_get_batch
_optimizer.AdamW = _Constructor
