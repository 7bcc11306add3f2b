"""From GPT-2 to modern models: properties no fixture can fake. Grouped-query attention
with as many kv heads as query heads is multi-head attention; the GPT-2 LM's parameters,
tied head, initialisation and parameter count (its forward against the run_gpt2_lm
fixture is in test_model.py, beside the modern LM's)."""

import math

import pytest
import torch

from harness.student_run.checks import generator, oracle_passes, shaped
from harness.contract import gpt2_lm_weight_shapes
from harness.student_run.probes import parameter_roles

adapter = pytest.mark.adapter

CONFIG = dict(vocab_size=512, context_length=24, d_model=64, num_layers=2, num_heads=4, d_ff=256)
RESIDUAL = ("attn.output_proj.weight", "mlp.c_proj.weight")
NORM_GAINS = ("ln1.weight", "ln2.weight", "ln_final.weight")


def randn(*shape, seed=0):
    return torch.randn(shape, generator=generator(seed))


def build(adapters, seed=0):
    torch.manual_seed(seed)
    return adapters.get_gpt2_lm(**CONFIG)


# ---------------------------------------------------------------- grouped-query attention

@adapter("run_grouped_query_attention")
def test_gqa_with_every_kv_head_is_multihead_attention(adapters, term):
    oracle_passes(adapters, term, "run_multihead_self_attention", "run_grouped_query_attention")
    d, h = 24, 4
    w = [randn(d, d, seed=s) / d ** 0.5 for s in range(4)]
    x = randn(3, 5, d, seed=7)
    gqa = shaped(adapters.run_grouped_query_attention(d, h, h, *w, x), x.shape, "run_grouped_query_attention")
    mha = shaped(adapters.run_multihead_self_attention(d, h, *w, x), x.shape, "run_multihead_self_attention")
    assert torch.allclose(gqa, mha, atol=1e-5, rtol=1e-4), (
        f"with num_kv_heads = num_heads = {h}, grouped-query attention must equal run_multihead_self_attention; "
        f"they differ by up to {(gqa - mha).abs().max().item():.3g}")


@adapter("run_grouped_query_attention")
def test_gqa_shares_each_kv_head_within_its_group(adapters, term):
    """Duplicating kv head j into every head of group j (as MHA weights) gives the same output."""
    oracle_passes(adapters, term, "run_multihead_self_attention", "run_grouped_query_attention")
    d, h, kv = 24, 6, 2
    d_k, group = d // h, h // kv
    wq, wo = randn(d, d, seed=1) / d ** 0.5, randn(d, d, seed=2) / d ** 0.5
    wk, wv = randn(kv * d_k, d, seed=3) / d ** 0.5, randn(kv * d_k, d, seed=4) / d ** 0.5
    x = randn(2, 5, d, seed=5)
    gqa = shaped(adapters.run_grouped_query_attention(d, h, kv, wq, wk, wv, wo, x), x.shape, "run_grouped_query_attention")
    # query head i reads kv head i // group: expand the kv rows head by head
    expand = lambda w: w.view(kv, d_k, d).repeat_interleave(group, dim=0).reshape(d, d)
    mha = shaped(adapters.run_multihead_self_attention(d, h, wq, expand(wk), expand(wv), wo, x), x.shape,
                 "run_multihead_self_attention")
    assert torch.allclose(gqa, mha, atol=1e-5, rtol=1e-4), (
        "query head h must use kv head h // (num_heads / num_kv_heads) (repeat_interleave), as multi-head "
        f"attention with each kv head copied into its group does; they differ by {(gqa - mha).abs().max().item():.3g}")


@adapter("run_grouped_query_attention")
def test_gqa_is_causal(adapters):
    d, h, kv = 24, 6, 3
    d_k = d // h
    w = [randn(d, d, seed=1), randn(kv * d_k, d, seed=2), randn(kv * d_k, d, seed=3), randn(d, d, seed=4)]
    w = [t / d ** 0.5 for t in w]
    x = randn(2, 6, d)
    later_changed = x.clone()
    later_changed[:, 3:] = randn(2, 3, d, seed=9)
    a, b = (shaped(adapters.run_grouped_query_attention(d, h, kv, *w, t, 10000.0, 16), x.shape,
                   "run_grouped_query_attention") for t in (x, later_changed))
    leaked = (a[:, :3] - b[:, :3]).abs().max().item()
    assert leaked < 1e-6, f"changing tokens 3..5 changed the output at positions 0..2 by {leaked:.3g}: mask causally"


# ---------------------------------------------------------------- the GPT-2 LM

@pytest.mark.reports_only  # the model lists its own parameters
@adapter("get_gpt2_lm")
def test_gpt2_parameters_are_the_contract_with_a_tied_head(adapters):
    model = build(adapters)
    expected = set(gpt2_lm_weight_shapes(CONFIG["vocab_size"], CONFIG["context_length"], CONFIG["d_model"],
                                         CONFIG["num_layers"], CONFIG["d_ff"]))
    names = {n for n, _ in model.named_parameters()}
    assert names == expected, (
        f"parameters differ from the contract: missing {sorted(expected - names)[:5]}, extra {sorted(names - expected)[:5]}."
        + (" The LM head must be tied: share token_embeddings.weight, do not give lm_head a matrix of its own."
           if any(n.startswith("lm_head") for n in names - expected) else ""))
    state = model.state_dict()
    extra = set(state) - expected
    assert extra <= {"lm_head.weight"}, f"state_dict has keys outside the contract: {sorted(extra)[:5]}"
    if "lm_head.weight" in state:
        assert torch.equal(state["lm_head.weight"], state["token_embeddings.weight"]), \
            "lm_head.weight differs from token_embeddings.weight: the head must be tied, the very same tensor"


@pytest.mark.reports_only  # the model lists its own parameters
@adapter("get_gpt2_lm")
def test_gpt2_parameter_count_matches_accounting(adapters):
    model = build(adapters)
    count = sum(p.numel() for p in model.parameters())
    V, T, d, L, f = (CONFIG[k] for k in ("vocab_size", "context_length", "d_model", "num_layers", "d_ff"))
    # wte + wpe + per layer (4 attention matrices and biases, MLP with biases, 2 LayerNorms) + ln_f
    expected = V * d + T * d + L * (4 * d * d + 4 * d + 2 * d * f + f + d + 4 * d) + 2 * d
    assert count == expected, (f"the model has {count:,} parameters; Vd + Td + L(4d^2 + 4d + 2d*d_ff + d_ff + d + 4d) "
                               f"+ 2d = {expected:,} (difference {count - expected:+,}). The tied head adds 0.")
    yours = adapters.run_gpt2_accounting(**CONFIG)["params.total"]
    assert yours == count, f"your run_gpt2_accounting says params.total={yours:,} but your model has {count:,}"


ROLES = {"table": "an embedding table", "matrix": "a matrix", "residual": "a sublayer's output projection",
         "gain": "a LayerNorm gain", "shift": "a LayerNorm bias", "bias": "a bias"}


def contract_role(name: str, contract: set[str], dim: int) -> str | None:
    """A contract name's role, as the docstring gives it."""
    if name not in contract:
        return None
    if dim == 1:
        return "gain" if name.endswith(NORM_GAINS) else "bias"
    return "residual" if name.endswith(RESIDUAL) else "table" if name.endswith("embeddings.weight") else "matrix"


@pytest.mark.reports_only  # the model lists its own parameters, and the role probe runs in its process
@adapter("get_gpt2_lm")
def test_gpt2_initialisation_is_nanogpts(adapters):
    """Each parameter is judged by its contract name, or where the names differ (nanoGPT's own ln_1,
    attn.c_proj) by its role in the model; one whose role is unclear is not judged, and said so."""
    model = build(adapters)
    contract = set(gpt2_lm_weight_shapes(CONFIG["vocab_size"], CONFIG["context_length"], CONFIG["d_model"],
                                         CONFIG["num_layers"], CONFIG["d_ff"]))
    ids = torch.randint(0, CONFIG["vocab_size"], (1, 4), generator=generator(3))
    roles = parameter_roles(model, ids)
    problems, unjudged = [], []
    for name, p in model.named_parameters():
        w = p.detach().double()
        role = contract_role(name, contract, w.dim()) or roles.get(name)
        said = name if name in contract else f"{name} ({ROLES.get(role, role)}, by its role)"
        if role is None or (w.dim() == 1) != (role in ("gain", "shift", "bias")):
            unjudged.append(name)
            continue
        if w.dim() == 1:
            want = torch.ones_like(w) if role == "gain" else torch.zeros_like(w)
            if not torch.equal(w, want):
                problems.append(f"{said}: must start at {'1' if role == 'gain' else '0'}")
            continue
        sigma = 0.02 / math.sqrt(2 * CONFIG["num_layers"]) if role == "residual" else 0.02
        slack = 5 * sigma / math.sqrt(2 * w.numel())  # 5 standard errors of a sample std
        if abs(w.std().item() - sigma) > slack or abs(w.mean().item()) > 5 * sigma / math.sqrt(w.numel()):
            problems.append(f"{said}: mean {w.mean().item():.3g}, std {w.std().item():.4g}, expected N(0, {sigma:.4g})")
    if unjudged:
        problems.append(f"not judged: {', '.join(unjudged[:4])}{' ...' if len(unjudged) > 4 else ''}: not the "
                        "contract's names, and their role is unclear. Name the parameters as get_gpt2_lm's "
                        "docstring in adapters.py lists them")
    assert not problems, ("nanoGPT's init: N(0, 0.02) for every matrix and table, attn.output_proj and mlp.c_proj "
                          "~ N(0, 0.02/sqrt(2*num_layers)), biases 0, LayerNorm weights 1:\n  " + "\n  ".join(problems[:6]))
