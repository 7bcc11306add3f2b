"""get_transformer_lm: structure, parameter count, determinism and initialisation."""

import math

import pytest
import torch

from harness.contract import lm_weight_shapes
from harness.student_run.checks import generator, shaped
from harness.student_run.probes import parameter_roles, tables_indexed

adapter = pytest.mark.adapter

# Large enough that init statistics are sharp (4,096+ values per matrix), small enough to be quick.
CONFIG = dict(vocab_size=512, context_length=24, d_model=64, num_layers=2, num_heads=4, d_ff=128)
RESIDUAL = ("attn.output_proj.weight", "ffn.w2.weight")


def build(adapters, init_scheme="cs336", seed=0):
    torch.manual_seed(seed)
    return adapters.get_transformer_lm(**CONFIG, rope_theta=10000.0, init_scheme=init_scheme)


def formula_params(vocab_size, d_model, num_layers, d_ff, **_):
    """CONVENTIONS.md: 2*V*d + L*(4*d^2 + 3*d*d_ff + 2*d) + d."""
    V, d, L = vocab_size, d_model, num_layers
    return 2 * V * d + L * (4 * d * d + 3 * d * d_ff + 2 * d) + d


def unregistered(model) -> str:
    """A sentence naming attributes that hold modules in a plain list, or one module object that
    holds several places (`[block] * num_layers`: its parameters are listed once), or ''."""
    lists = [name for m in model.modules() for name, value in vars(m).items()
             if isinstance(value, (list, tuple)) and any(isinstance(v, torch.nn.Module) for v in value)]
    if lists:
        return (f" `{lists[0]}` is a plain Python list of modules: they are not registered, so parameters(), "
                "state_dict(), .to() and optimizers miss them. Use nn.ModuleList.")
    places: dict[int, list[str]] = {}
    for name, m in model.named_modules(remove_duplicate=False):
        if name and next(m.parameters(), None) is not None:
            places.setdefault(id(m), []).append(name)
    shared = sorted((names for names in places.values() if len(names) > 1), key=lambda names: len(names[0]))
    return (f" {', '.join(f'`{n}`' for n in shared[0][:3])} are one module object (`[block] * num_layers`?): "
            "parameters() lists it once and every layer computes with the same weights. Build a new one for "
            "each place." if shared else "")


def tied(model) -> str:
    """A sentence naming a parameter that two modules hold (a head tied to the table: blind trial 13), or ''.
    For this LM alone: GPT-2's head is tied on purpose."""
    tensors: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        tensors.setdefault(id(p), []).append(name)
    names = next((names for names in tensors.values() if len(names) > 1), None)
    return (f" `{names[0]}` and `{names[1]}` are one tensor: parameters() lists it once, and loading the weights "
            "writes both into it. This LM's head is a matrix of its own, apart from the embedding table (GPT-2's "
            "head is tied to it; this one's is not)." if names else "")


@pytest.mark.reports_only  # the model lists its own state
@adapter("get_transformer_lm")
def test_state_dict_keys_are_the_contract(adapters):
    model = build(adapters)
    keys = set(model.state_dict())
    expected = set(lm_weight_shapes(CONFIG["vocab_size"], CONFIG["d_model"], CONFIG["num_layers"], CONFIG["d_ff"]))
    assert keys == expected, (f"state_dict keys differ from the contract: missing {sorted(expected - keys)[:5]}, "
                              f"extra {sorted(keys - expected)[:5]}. RoPE tables are non-persistent buffers, "
                              "and RoPE has no parameters." + unregistered(model))


@pytest.mark.reports_only  # the model lists its own parameters
@adapter("get_transformer_lm")
def test_parameter_count_matches_accounting(adapters):
    model = build(adapters)
    count = sum(p.numel() for p in model.parameters())
    expected = formula_params(**CONFIG)
    assert count == expected, (f"the model has {count:,} parameters; 2Vd + L(4d^2 + 3d*d_ff + 2d) + d = "
                               f"{expected:,} (difference {count - expected:+,}). RoPE contributes 0."
                               + (unregistered(model) or tied(model)))
    yours = adapters.run_transformer_accounting(**CONFIG)["params.total"]
    assert yours == count, f"your accounting says params.total={yours:,} but your model has {count:,}"


@pytest.mark.forward_values
@pytest.mark.parametrize("builder, function", [
    pytest.param("get_transformer_lm", "run_transformer_lm", marks=adapter("get_transformer_lm")),
    pytest.param("get_gpt2_lm", "run_gpt2_lm", marks=adapter("get_gpt2_lm")),
])
def test_forward_matches_the_lm_fixture(adapters, term, builder, function):
    """The built model, with the fixture's weights loaded, gives the fixture's logits (on the
    case's hidden twin too, where hidden cases are loaded: grading)."""
    first, *others = term.output_cases(function)
    for case in [first, *[c for c in others if c.twin_of == first.name]]:
        _forward_matches(adapters, term, builder, function, case)


def _forward_matches(adapters, term, builder, function, case):
    kwargs = term.inputs(case)
    model = getattr(adapters, builder)(**{k: v for k, v in case.args.items()})
    weights = dict(kwargs["weights"])
    if function == "run_gpt2_lm" and "lm_head.weight" in model.state_dict():  # a tied head module
        weights["lm_head.weight"] = weights["token_embeddings.weight"]
    try:
        model.load_state_dict(weights)
    except RuntimeError as e:  # torch's message is long: keep the key lines
        keys = [line.strip()[:300] for line in str(e).splitlines() if "key(s)" in line or "size mismatch" in line]
        lines = [*(keys or [str(e)[:300]]), unregistered(model).strip()]
        raise AssertionError(f"load_state_dict with the {function} weights failed:\n  "
                             + "\n  ".join(line for line in lines if line)) from None
    model.eval()
    with torch.no_grad():
        logits = model(kwargs["in_indices"])
    expected = term.tensors(case)["out"]
    assert logits.shape == expected.shape, f"forward returned {list(logits.shape)}, expected {list(expected.shape)}"
    assert torch.allclose(logits, expected, atol=case.atol, rtol=case.rtol), (
        f"forward(in_indices) with the fixture weights loaded differs from {function}'s expected logits "
        f"(case {case.name!r})." + (unregistered(model) or (tied(model) if builder == "get_transformer_lm" else "")))


def build_initialised(adapters, init_scheme="cs336"):
    """build(), failing first on weights that are not initialised: non-finite, or different
    between two builds from the same seed (torch.empty memory left as it was)."""
    model = build(adapters, init_scheme)
    # A model in a grading worker draws from the worker's generator, which manual_seed here does
    # not reach: there, only non-finite or all-zero weights are evidence.
    twin = {} if getattr(model, "remote_probe", None) else dict(build(adapters, init_scheme).named_parameters())
    nonfinite = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
    unseeded = [n for n, p in model.named_parameters() if torch.isfinite(p).all()
                and ((n in twin and not torch.equal(p, twin[n])) or (p.dim() == 2 and not p.any()))]
    if nonfinite or unseeded:
        names = ", ".join((nonfinite + unseeded)[:4])
        what = "hold NaN/inf" if nonfinite else \
            "are all zero, or differ between two builds after the same torch.manual_seed,"
        raise AssertionError(f"weights {names} {what} right after get_transformer_lm: they are not initialised "
                             "(torch.empty leaves whatever was in memory). Initialise every weight: "
                             "nn.init.trunc_normal_ for matrices, ones for RMSNorm gains.")
    return model


@adapter("get_transformer_lm")
def test_eval_forward_is_deterministic(adapters):
    model = build_initialised(adapters).eval()
    ids = torch.randint(0, CONFIG["vocab_size"], (2, 8), generator=generator(1))
    with torch.no_grad():
        first, second = model(ids), model(ids)
    assert torch.isfinite(first).all() and torch.isfinite(second).all(), (
        "an eval-mode forward of freshly initialised weights holds NaN/inf, so determinism cannot be judged")
    assert torch.equal(first, second), (
        f"two eval-mode forwards differ (by up to {(first - second).abs().max().item():.3g}) on finite outputs: "
        "something random runs in eval mode (dropout that ignores self.training, or random numbers drawn in forward)")


@adapter("get_transformer_lm")
def test_logits_are_causal(adapters):
    model = build_initialised(adapters).eval()
    ids = torch.randint(0, CONFIG["vocab_size"], (1, 8), generator=generator(2))
    changed = ids.clone()
    changed[0, 5:] = (changed[0, 5:] + 1) % CONFIG["vocab_size"]
    with torch.no_grad():
        a, b = (shaped(model(t), (*ids.shape, CONFIG["vocab_size"]), "the LM's forward") for t in (ids, changed))
    assert torch.isfinite(a).all() and torch.isfinite(b).all(), \
        "the logits hold NaN/inf on freshly initialised weights, so causality cannot be judged"
    assert torch.allclose(a[:, :5], b[:, :5], atol=1e-5), "logits at t changed when tokens after t changed"


def _expected_std(residual, shape, scheme, embedding):
    L = CONFIG["num_layers"]
    if embedding:
        return 1.0 if scheme == "cs336" else 0.02
    if scheme == "gpt2":
        return 0.02 / math.sqrt(2 * L) if residual else 0.02
    d_out, d_in = shape
    return math.sqrt(2.0 / (d_in + d_out))


# A normal truncated at +-3 sigma has std 0.9866 sigma.
TRUNCATED_STD = 0.9866


@pytest.mark.reports_only  # its own parameter listing, and the table probe in its process
@adapter("get_transformer_lm")
@pytest.mark.parametrize("scheme", ["cs336", "gpt2"])
def test_initialisation_statistics(adapters, scheme):
    model = build_initialised(adapters, scheme)
    # Judge each matrix by its role, not its name: the embedding is the table the forward indexes;
    # where the names are not the contract's, a residual projection is the matrix a sublayer ends with.
    ids = torch.randint(0, CONFIG["vocab_size"], (1, 4), generator=generator(3))
    with torch.no_grad():
        tables = tables_indexed(model, ids)
    roles = parameter_roles(model, ids)
    contract = set(lm_weight_shapes(CONFIG["vocab_size"], CONFIG["d_model"], CONFIG["num_layers"], CONFIG["d_ff"]))
    problems, unjudged = [], []
    for name, p in model.named_parameters():
        w = p.detach().double()
        ours = name in contract
        if w.dim() == 1:
            if not ours and roles.get(name) != "gain":
                unjudged.append(name)
            elif not torch.equal(w, torch.ones_like(w)):
                problems.append(f"{name}: RMSNorm gains must start at 1")
            continue
        if scheme == "gpt2" and not ours and name not in tables and roles.get(name) not in ("residual", "matrix"):
            unjudged.append(name)
            continue
        embedding = name in tables
        residual = name.endswith(RESIDUAL) if ours else roles.get(name) == "residual"
        sigma = _expected_std(residual, tuple(w.shape), scheme, embedding)
        target = sigma * (TRUNCATED_STD if scheme == "cs336" else 1.0)
        # The sample std of n values has standard error about sigma / sqrt(2n); allow 5 of them.
        slack = 5 * sigma / math.sqrt(2 * w.numel())
        std = w.std().item()
        if abs(std - target) > slack:
            kind = "embedding" if embedding else "linear"
            problem = f"{name} ({kind}): std {std:.4g}, expected {target:.4g} +- {slack:.2g}"
            if sigma < 1 and abs(std - target * sigma) < slack * sigma:
                problem += f": that is the variance {sigma ** 2:.4g} used as the std; pass std=sqrt(variance)"
            problems.append(problem)
        # truncated at 3 of its own sigma: the std line above says what is wrong, the bounds are right
        own_bounds = w.abs().max().item() <= 3 * std / TRUNCATED_STD * 1.02
        if scheme == "cs336" and w.abs().max().item() > 3 * sigma * (1 + 1e-6) and not own_bounds:
            problems.append(f"{name}: max |w| = {w.abs().max().item():.4g} > 3 sigma = {3 * sigma:.4g}; "
                            "pass a=-3*std, b=3*std to trunc_normal_ (its defaults are absolute +-2)")
    if unjudged:
        problems.append(f"not judged: {', '.join(unjudged[:4])}{' ...' if len(unjudged) > 4 else ''}: not the "
                        "contract's names, and their role is unclear. Name the parameters as get_transformer_lm's "
                        "docstring in adapters.py lists them")
    hint = {"cs336": "Linear ~ N(0, 2/(d_in+d_out)) truncated at +-3 sigma, embeddings ~ N(0, 1) truncated at +-3",
            "gpt2": "N(0, 0.02), and attn.output_proj / ffn.w2 ~ N(0, 0.02/sqrt(2*num_layers))"}[scheme]
    assert not problems, f"init_scheme={scheme!r} ({hint}):\n  " + "\n  ".join(problems[:6])
