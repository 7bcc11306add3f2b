"""Every function runs on `meta` tensors: no table or mask is made on the CPU inside a call.

Only a device mix fails. Data-dependent reads that meta tensors cannot answer (an id
range check, .item()) are correct code and are not penalised.
"""

import pytest
import torch

from harness.contract import block_weight_shapes, lm_weight_shapes
from harness.probes import run_on_meta


def meta(*shape, dtype=torch.float32):
    return torch.empty(shape, dtype=dtype, device="meta")


def ids(*shape):
    return torch.zeros(shape, dtype=torch.long, device="meta")


def weights(shapes: dict) -> dict:
    return {k: meta(*s) for k, s in shapes.items()}


FUNCTION_CALLS = {
    "run_embedding": lambda: (10, 4, meta(10, 4), ids(2, 3)),
    "run_learned_positions": lambda: (8, 4, meta(8, 4), ids(2, 3)),
    "run_sinusoidal_positions": lambda: (8, ids(2, 3)),
    "run_embed_with_positions": lambda: (10, 4, 8, meta(10, 8), None, ids(2, 3)),
    "run_linear": lambda: (8, 4, meta(4, 8), meta(2, 3, 8)),
    "run_softmax": lambda: (meta(2, 5), -1),
    "run_silu": lambda: (meta(2, 5),),
    "run_scaled_dot_product_attention": lambda: (meta(2, 3, 4), meta(2, 5, 4), meta(2, 5, 6),
                                                 meta(2, 3, 5, dtype=torch.bool)),
    "run_multihead_self_attention": lambda: (8, 2, *[meta(8, 8)] * 4, meta(2, 3, 8)),
    "run_rope": lambda: (8, 10000.0, 16, meta(2, 3, 8), ids(3)),
    "run_multihead_self_attention_with_rope": lambda: (8, 2, 16, 10000.0, *[meta(8, 8)] * 4, meta(2, 3, 8), ids(3)),
    "run_rmsnorm": lambda: (8, 1e-5, meta(8), meta(2, 3, 8)),
    "run_swiglu": lambda: (8, 12, meta(12, 8), meta(8, 12), meta(12, 8), meta(2, 3, 8)),
    "run_transformer_block": lambda: (8, 2, 12, 16, 10000.0, weights(block_weight_shapes(8, 12)), meta(2, 3, 8)),
    "run_transformer_lm": lambda: (20, 8, 8, 2, 2, 12, 10000.0, weights(lm_weight_shapes(20, 8, 2, 12)), ids(2, 5)),
}

MODULE_CALLS = {
    "get_embedding": (lambda a: a.get_embedding(16, 4), lambda: (ids(2, 3),)),
    "get_sinusoidal_positions": (lambda a: a.get_sinusoidal_positions(64, 16), lambda: (ids(5),)),
    "get_transformer_lm": (lambda a: a.get_transformer_lm(20, 8, 8, 2, 2, 12, 10000.0), lambda: (ids(2, 5),)),
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.adapter(n)) for n in FUNCTION_CALLS])
def test_function_runs_on_meta_device(adapters, name):
    out = run_on_meta(getattr(adapters, name), *FUNCTION_CALLS[name]())
    assert out is None or out.device.type == "meta", f"{name} returned a tensor on {out.device}, not the inputs' device"


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.adapter(n)) for n in MODULE_CALLS])
def test_module_moves_to_meta_device(adapters, name):
    build, inputs = MODULE_CALLS[name]
    module = build(adapters).to("meta")
    left_behind = [n for n, t in [*module.named_parameters(), *module.named_buffers()] if t.device.type != "meta"]
    assert not left_behind, f".to('meta') did not move {left_behind}: register tables with register_buffer"
    out = run_on_meta(module, *inputs())
    assert out is None or out.device.type == "meta"
