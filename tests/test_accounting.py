"""Accounting that needs no fixture: totals add up, and GPT-2 XL matches the closed-form formulas."""

import pytest

from harness.student_run.checks import oracle_passes

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
    parts = {"flops.attention_projections": L * (6 * T * d * d + 2 * T * d * d), "flops.attention_scores": L * 2 * T * T * d,
             "flops.attention_values": L * 2 * T * T * d, "flops.ffn": L * 6 * T * d * d_ff, "flops.lm_head": 2 * T * d * V}
    flops = sum(parts.values())
    assert counts["params.total"] == params, f"params.total {counts['params.total']:,} != {params:,}"
    off = {k: counts[k] / v for k, v in parts.items() if counts.get(k) not in (None, v)}
    assert counts["flops.total"] == flops, (
        f"flops.total {counts['flops.total']:.4g} != {flops:.4g} (ratio {counts['flops.total'] / flops:.3f})"
        + (": off by part (yours / the closed form): " + ", ".join(f"{k} {r:.3g}" for k, r in off.items()) if off
           else "") + (". 0.5 means MACs were counted, not FLOPs = 2 per multiply-add" if
                       abs(counts["flops.total"] / flops - 0.5) < 1e-9 else
                       ". FLOPs are 2 per multiply-add; a causal mask halves no matmul in this count"))


LLAMA_LIKE = dict(vocab_size=32000, context_length=4096, d_model=4096, num_layers=32, num_heads=32, d_ff=11008)


@adapter("run_transformer_accounting")
@pytest.mark.parametrize("kv", [1, 8])
def test_gqa_shrinks_the_kv_cache_by_the_group_size(adapters, kv):
    mha = adapters.run_transformer_accounting(**LLAMA_LIKE)
    gqa = adapters.run_transformer_accounting(**LLAMA_LIKE, num_kv_heads=kv)
    assert mha == adapters.run_transformer_accounting(**LLAMA_LIKE, num_kv_heads=LLAMA_LIKE["num_heads"]), \
        "num_kv_heads=None must count as num_kv_heads=num_heads"
    ratio = mha["kv_cache.bytes_per_token"] / gqa["kv_cache.bytes_per_token"]
    assert ratio == LLAMA_LIKE["num_heads"] / kv, (
        f"with {kv} kv heads of {LLAMA_LIKE['num_heads']}, the cache per token should shrink "
        f"{LLAMA_LIKE['num_heads'] // kv}x; yours shrinks {ratio:.3g}x")


@adapter("run_transformer_accounting")
@pytest.mark.parametrize("kv", [1, 8])
def test_gqa_keeps_the_attention_score_flops(adapters, kv):
    mha = adapters.run_transformer_accounting(**LLAMA_LIKE)
    gqa = adapters.run_transformer_accounting(**LLAMA_LIKE, num_kv_heads=kv)
    assert gqa["flops.attention_scores"] == mha["flops.attention_scores"], (
        f"flops.attention_scores is {gqa['flops.attention_scores']:,} with {kv} kv heads and "
        f"{mha['flops.attention_scores']:,} without: every query head still scores every key, so GQA does not "
        "change flops.attention_scores")


@pytest.mark.parametrize("name", [pytest.param(n, marks=adapter(n))
                                  for n in ("run_transformer_accounting", "run_gpt2_accounting")])
def test_kv_cache_scales_with_context_batch_and_dtype(adapters, name):
    fn = getattr(adapters, name)
    one = fn(**LLAMA_LIKE)
    many = fn(**LLAMA_LIKE, batch_size=3, kv_cache_dtype="bfloat16")
    assert one["kv_cache.bytes"] == one["kv_cache.bytes_per_token"] * LLAMA_LIKE["context_length"], \
        "kv_cache.bytes is bytes_per_token x context_length x batch_size"
    assert many["kv_cache.bytes"] * 2 == one["kv_cache.bytes"] * 3, \
        "3 sequences in bfloat16 (2 bytes) take 3/2 the bytes of 1 sequence in float32 (4 bytes)"


@adapter("run_gpt2_accounting")
def test_gpt2_totals_are_the_sum_of_their_parts(adapters):
    counts = adapters.run_gpt2_accounting(**{**LLAMA_LIKE, "d_ff": 4 * LLAMA_LIKE["d_model"]})
    for kind in ("params", "flops"):
        parts = sum(v for k, v in counts.items() if k.startswith(kind + ".") and k != f"{kind}.total")
        assert counts[f"{kind}.total"] == parts, f"{kind}.total = {counts[f'{kind}.total']:,} but its parts sum to {parts:,}"


# ---------------------------------------------------------------- training: checked against your own forward counts

BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
SIZES = ("vocab_size", "context_length", "d_model", "num_layers", "num_heads", "d_ff")
STEPS = [dict(XL, batch_size=2, param_dtype="bfloat16", optimizer_dtype="float32"),
         dict(vocab_size=100, context_length=7, d_model=12, num_layers=3, num_heads=3, d_ff=20, batch_size=5,
              param_dtype="float32", optimizer_dtype="bfloat16")]


@adapter("run_training_accounting")
@pytest.mark.parametrize("config", STEPS, ids=["gpt2-xl-bf16", "small"])
def test_a_training_step_costs_three_forward_passes(adapters, term, config):
    """Backward is two matmuls per forward matmul (the gradients of its input and of its weight): one step
    is 3 x the forward FLOPs of your run_transformer_accounting, for batch_size sequences."""
    oracle_passes(adapters, term, "run_transformer_accounting", "run_training_accounting")
    forward = adapters.run_transformer_accounting(**{k: config[k] for k in SIZES})["flops.total"] * config["batch_size"]
    step = adapters.run_training_accounting(**config)
    said = {k: step.get(k) for k in ("flops.forward", "flops.backward", "flops.total")}
    expected = {"flops.forward": forward, "flops.backward": 2 * forward, "flops.total": 3 * forward}
    wrong = {k: v for k, v in said.items() if v != expected[k]}
    assert not wrong, (
        f"with batch_size={config['batch_size']}, your run_transformer_accounting gives a forward of "
        f"{forward:,} FLOPs for the batch, so one step is forward {forward:,} + backward {2 * forward:,} = "
        f"{3 * forward:,}; yours: " + ", ".join(f"{k} {v:,} ({v / expected[k]:.3g}x)" if isinstance(v, int)
                                                  else f"{k} {v!r}" for k, v in wrong.items()))


@adapter("run_training_accounting")
@pytest.mark.parametrize("config", STEPS, ids=["gpt2-xl-bf16", "small"])
def test_training_memory_is_your_parameter_count_times_its_bytes(adapters, term, config):
    """Each parameter of your run_transformer_accounting's params.total holds its value and its gradient in
    param_dtype, and two AdamW moments in optimizer_dtype."""
    oracle_passes(adapters, term, "run_transformer_accounting", "run_training_accounting")
    params = adapters.run_transformer_accounting(**{k: config[k] for k in SIZES})["params.total"]
    p, o = BYTES[config["param_dtype"]], BYTES[config["optimizer_dtype"]]
    expected = {"memory.parameters": params * p, "memory.gradients": params * p, "memory.adamw_moments": 2 * params * o}
    expected["memory.total"] = sum(expected.values())
    step = adapters.run_training_accounting(**config)
    wrong = {k: step.get(k) for k in expected if step.get(k) != expected[k]}
    moments = wrong.get("memory.adamw_moments")
    # the numbers, not a cause, where the moments alone are wrong (blind trial 13: frozen embeddings were said so)
    per = (f"; your moments take {moments / params:g} bytes a parameter, where two {config['optimizer_dtype']} "
           f"moments take {2 * o}" if isinstance(moments, int) and params and set(wrong) <= {"memory.adamw_moments",
                                                                                            "memory.total"} else "")
    trained = params - adapters.run_transformer_accounting(**{k: config[k] for k in SIZES})["params.token_embeddings"]
    if step.get("memory.parameters") == trained * p and step.get("memory.gradients") == trained * p:
        per = (f"; yours count {trained:,} parameters, params.total less params.token_embeddings, as if the "
               "embeddings were frozen: they train jointly with every other weight, so they have a gradient and "
               "two moments too")
    assert not wrong, (
        f"params.total is {params:,} in your run_transformer_accounting: {config['param_dtype']} values and gradients "
        f"take {p} bytes each, {config['optimizer_dtype']} moments {o}, so expected "
        + ", ".join(f"{k} {expected[k]:,}" for k in wrong) + "; yours: "
        + ", ".join(f"{k} {v:,} ({v / expected[k]:.3g}x)" if isinstance(v, int) and expected[k] else f"{k} {v!r}"
                    for k, v in wrong.items()) + per)
