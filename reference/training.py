"""Train it: the loss, gradient clipping, batches and checkpoints (the reference)."""

import json
import os

import numpy as np
import torch
from safetensors.torch import load as load_tensors, save as save_tensors


def cross_entropy(inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean over every leading position of logsumexp(x) - x[target], in float32 (or wider)."""
    x = inputs if inputs.dtype == torch.float64 else inputs.float()
    top = x.amax(dim=-1, keepdim=True)  # the row max: exp never sees more than 0
    lse = (x - top).exp().sum(dim=-1).log()
    # gathered from x, not from x - top: gather keeps its source for backward, one more [..., V] tensor
    picked = x.gather(-1, targets.unsqueeze(-1)) - top
    return (lse - picked.squeeze(-1)).mean().to(inputs.dtype)


EPS = 1e-6  # CS336's: the scale is max_l2_norm / (norm + 1e-6)


def gradient_clipping(parameters, max_l2_norm: float) -> None:
    """Scale every gradient in place by max_l2_norm / (norm + eps) when their joint L2 norm exceeds max_l2_norm."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return
    with torch.no_grad():
        wide = torch.float64 if any(g.dtype == torch.float64 for g in grads) else torch.float32
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.to(wide)) for g in grads]))
        if norm > max_l2_norm:
            scale = max_l2_norm / (norm + EPS)
            for g in grads:
                g.copy_(g.to(wide) * scale)  # in the wide dtype, rounded once to the gradient's


def get_batch(dataset, batch_size: int, context_length: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """batch_size windows at starts drawn uniformly from 0 .. len(dataset) - context_length - 1."""
    starts = torch.randint(0, len(dataset) - context_length, (batch_size,)).numpy()
    offsets = np.arange(context_length + 1)
    windows = torch.from_numpy(np.asarray(dataset[starts[:, None] + offsets], dtype=np.int64))
    windows = windows.to(device)
    return windows[:, :-1], windows[:, 1:]


def save_checkpoint(model: torch.nn.Module, optimizer: torch.optim.Optimizer, iteration: int, out) -> None:
    """The model's and the optimizer's state and the iteration, as safetensors (tensors) + JSON (the rest)."""
    tensors: dict[str, torch.Tensor] = {}
    model_keys = []
    for key, value in model.state_dict().items():
        tensors[f"model/{len(model_keys)}"] = value.detach().clone().contiguous()
        model_keys.append(key)
    optimizer_state = _to_json(optimizer.state_dict(), tensors)
    metadata = {"iteration": json.dumps(iteration), "model": json.dumps(model_keys),
                "optimizer": json.dumps(optimizer_state)}
    blob = save_tensors(tensors, metadata=metadata)
    if isinstance(out, (str, os.PathLike)):
        with open(out, "wb") as f:
            f.write(blob)
    else:
        out.write(blob)


def load_checkpoint(src, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Restore what save_checkpoint wrote; return its iteration."""
    if isinstance(src, (str, os.PathLike)):
        with open(src, "rb") as f:
            blob = f.read()
    else:
        blob = src.read()
    tensors = load_tensors(blob)
    metadata = _metadata(blob)
    keys = json.loads(metadata["model"])
    model.load_state_dict({key: tensors[f"model/{i}"] for i, key in enumerate(keys)})
    optimizer.load_state_dict(_from_json(json.loads(metadata["optimizer"]), tensors))
    return int(json.loads(metadata["iteration"]))


def _metadata(blob: bytes) -> dict[str, str]:
    """The safetensors header's __metadata__ (its first 8 bytes give the header's length)."""
    length = int.from_bytes(blob[:8], "little")
    return json.loads(blob[8:8 + length]).get("__metadata__", {})


def _to_json(value, tensors: dict):
    """A state dict as JSON: tensors by reference into `tensors`, tuples and int keys tagged so they come back."""
    if isinstance(value, torch.Tensor):
        key = f"optimizer/{len(tensors)}"
        tensors[key] = value.detach().clone().contiguous()
        return {"$tensor": key}
    if isinstance(value, dict):
        return {"$dict": [[_to_json(k, tensors), _to_json(v, tensors)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {"$tuple": [_to_json(v, tensors) for v in value]}
    if isinstance(value, list):
        return [_to_json(v, tensors) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot store a {type(value).__name__} in a checkpoint")


def _from_json(value, tensors: dict):
    if isinstance(value, list):
        return [_from_json(v, tensors) for v in value]
    if isinstance(value, dict):
        if "$tensor" in value:
            return tensors[value["$tensor"]]
        if "$tuple" in value:
            return tuple(_from_json(v, tensors) for v in value["$tuple"])
        return {_from_json(k, tensors): _from_json(v, tensors) for k, v in value["$dict"]}
    return value
