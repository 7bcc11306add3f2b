"""Accounting that needs no fixture: totals add up, and GPT-2 XL matches the closed-form formulas."""

import pytest

adapter = pytest.mark.adapter

XL = dict(vocab_size=50257, context_length=1024, d_model=1600, num_layers=48, num_heads=25, d_ff=6400)


@adapter("run_transformer_accounting")
@pytest.mark.parametrize("config", [XL, dict(vocab_size=100, context_length=7, d_model=12, num_layers=3,
                                               num_heads=3, d_ff=20)], ids=["gpt2-xl", "small"])
def test_totals_are_the_sum_of_their_parts(adapters, config):
    counts = adapters.run_transformer_accounting(**config)
    for kind in ("params", "flops"):
        parts = sum(v for k, v in counts.items() if k.startswith(kind + ".") and k != f"{kind}.total")
        total = counts[f"{kind}.total"]
        assert total == parts, f"{kind}.total = {total:,} but its parts sum to {parts:,}"


@adapter("run_transformer_accounting")
def test_gpt2_xl_matches_the_closed_forms(adapters):
    V, T, L, d, d_ff = XL["vocab_size"], XL["context_length"], XL["num_layers"], XL["d_model"], XL["d_ff"]
    counts = adapters.run_transformer_accounting(**XL)
    params = 2 * V * d + L * (4 * d * d + 3 * d * d_ff + 2 * d) + d
    # per layer: QKV 6Td^2, QK^T 2T^2 d, AV 2T^2 d, output 2Td^2, FFN 6T d d_ff; LM head 2TdV once.
    flops = L * (6 * T * d * d + 2 * T * T * d + 2 * T * T * d + 2 * T * d * d + 6 * T * d * d_ff) + 2 * T * d * V
    assert counts["params.total"] == params, f"params.total {counts['params.total']:,} != {params:,}"
    assert counts["flops.total"] == flops, (
        f"flops.total {counts['flops.total']:.4g} != {flops:.4g} (ratio {counts['flops.total'] / flops:.3f}; "
        "0.5 means MACs were counted, not FLOPs = 2 per multiply-add)")
