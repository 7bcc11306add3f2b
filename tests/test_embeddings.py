"""Unit 2.1 checks that need no fixture: probes, module structure and properties.

Inputs are made here from a fixed seed; expected values come from properties that
any correct implementation has, never from a stored answer.
"""

import pytest
import torch

from harness.student_run.checks import generator
from harness.student_run.probes import assert_no_large_allocation

adapter = pytest.mark.adapter


def rng():
    return generator(0)


# ---------------------------------------------------------------- lookups allocate no one-hot

V, ROWS = 4096, (8, 16)  # a one-hot [8, 16, 4096] is 1,024x the [8, 16, 4] output


def _ids():
    return torch.randint(0, V, ROWS, generator=rng())


LOOKUPS = {  # adapter -> (callable, its arguments, the axis a one-hot would span)
    "run_embedding": lambda a: (a.run_embedding, (V, 4, torch.randn(V, 4), _ids())),
    "run_learned_positions": lambda a: (a.run_learned_positions, (V, 4, torch.randn(V, 4), _ids())),
    "run_embed_with_positions": lambda a: (a.run_embed_with_positions,
                                           (V, 16, 4, torch.randn(V, 4), torch.randn(16, 4), _ids())),
    "get_embedding": lambda a: (a.get_embedding(V, 4), (_ids(),)),
}


@pytest.mark.reports_only  # the allocation hook runs in the code's own process
@pytest.mark.parametrize("name", [pytest.param(n, marks=adapter(n)) for n in LOOKUPS])
def test_lookup_allocates_no_one_hot(adapters, name):
    fn, args = LOOKUPS[name](adapters)
    with torch.no_grad():
        assert_no_large_allocation(name, fn, args, vocab_size=V, ids_shape=ROWS)



# ---------------------------------------------------------------- positions


@adapter("run_sinusoidal_positions")
def test_sinusoidal_extends_far_beyond_training_length(adapters):
    # The formula extends to any position; that is not the same as a model extrapolating.
    positions = torch.tensor([0, 1, 10**4, 10**5, 10**6])
    pe = adapters.run_sinusoidal_positions(32, positions)
    assert torch.isfinite(pe).all(), "non-finite encodings at large positions"
    assert pe.abs().max() <= 1.0 + 1e-6, f"sin/cos values must lie in [-1, 1]; max |PE| = {pe.abs().max():.4g}"


def _pair_residual(now, later, dims) -> tuple[float, torch.Tensor]:
    """How far dims (a, b) at p+k are from one fixed linear map of the same dims at p, and the map."""
    a, b = now[:, list(dims)], later[:, list(dims)]
    rotation = torch.linalg.lstsq(a, b).solution  # b ≈ a @ rotation, the same for every p
    return (a @ rotation - b).abs().max().item(), rotation


@adapter("run_sinusoidal_positions")
@pytest.mark.parametrize("k", [1, 5])
def test_sinusoidal_offset_is_a_rotation_of_each_pair(adapters, k):
    """PE[p+k] = R_k PE[p] with one fixed 2x2 rotation per (2i, 2i+1) pair, for every p."""
    d = 16
    p = torch.arange(0, 40)
    now = adapters.run_sinusoidal_positions(d, p).double()
    later = adapters.run_sinusoidal_positions(d, p + k).double()
    for i in range(d // 2):
        residual, rotation = _pair_residual(now, later, (2 * i, 2 * i + 1))
        if residual >= 1e-4:
            # Name the [sin | cos] layout only where its own pairs (i, i + d/2) are the rotations.
            halves = all(_pair_residual(now, later, (j, j + d // 2))[0] < 1e-4 for j in range(d // 2))
            layout = (" Here dims i and i + d/2 rotate together: that is the [sin | cos] halves layout; "
                      "interleave sin and cos instead." if halves else
                      " Both dims of pair i use the same frequency w_i = 10000^(-2i/d_model).")
            raise AssertionError(
                f"dims ({2 * i}, {2 * i + 1}) at position p+{k} are not a fixed linear map of the same dims at p "
                f"(residual {residual:.2g}). Each pair must hold sin and cos of one frequency: "
                f"PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i).{layout}")
        should_be_identity = rotation.T @ rotation
        assert torch.allclose(should_be_identity, torch.eye(2, dtype=torch.double), atol=1e-3), (
            f"dims ({2 * i}, {2 * i + 1}): the map from p to p+{k} is not a rotation")


@adapter("run_embed_with_positions")
@pytest.mark.parametrize("kind", ["learned", "sinusoidal"])
def test_repeated_token_differs_after_adding_positions(adapters, kind):
    """The self-test exercise: ids [2, 0, 2] match before positions are added, not after."""
    ids = torch.tensor([[2, 0, 2]])
    table = torch.randn(5, 8, generator=rng())
    positions = torch.randn(4, 8, generator=rng()) if kind == "learned" else None
    tokens = adapters.run_embedding(5, 8, table, ids)
    assert torch.equal(tokens[0, 0], tokens[0, 2]), "the same id must select the same row"
    x = adapters.run_embed_with_positions(5, 4, 8, table, positions, ids)
    assert not torch.allclose(x[0, 0], x[0, 2]), (
        f"with {kind} positions, the two copies of id 2 (positions 0 and 2) still have equal vectors: "
        "position vectors must be added, indexed by position, not by token id.")



# ---------------------------------------------------------------- modules

@pytest.mark.reports_only  # the module lists its own parameters
@adapter("get_embedding")
def test_embedding_module_has_exactly_the_table(adapters):
    module = adapters.get_embedding(1000, 32)
    params = list(module.parameters())
    count = sum(p.numel() for p in params)
    assert count == 32_000, f"V=1000, D=32 must give exactly 32,000 parameters (the table); got {count:,}"
    assert [list(p.shape) for p in params] == [[1000, 32]], \
        f"expected one [1000, 32] parameter, got {[list(p.shape) for p in params]}"
    ids = torch.randint(0, 1000, (2, 5), generator=rng())
    out = module(ids)
    assert out.shape == (2, 5, 32), f"ids [2, 5] must give [2, 5, 32], got {list(out.shape)}"
    assert torch.equal(out, params[0][ids]), "forward(ids) must return the table's rows, weight[ids]"


@pytest.mark.forward_values
@adapter("get_embedding")
def test_embedding_module_matches_fixtures(adapters, term):
    """The module, with a run_embedding case's table loaded as `weight`, gives that case's rows:
    its public cases, and their hidden twins where hidden cases are loaded (grading)."""
    cases = term.output_cases("run_embedding")
    assert cases, "the term has no run_embedding cases"
    for case in cases:
        kwargs = term.inputs(case)
        weights = kwargs["weights"]
        module = adapters.get_embedding(*weights.shape)
        module.load_state_dict({"weight": weights})
        expected = term.tensors(case)["out"]
        out = module(kwargs["token_ids"])
        assert out.shape == expected.shape and torch.equal(out, expected), (
            f"forward() with the table loaded as `weight` differs from run_embedding's expected rows on case "
            f"{case.name!r} ({case.note})")


@adapter("get_embedding")
def test_embedding_module_rejects_ids_outside_the_vocabulary(adapters):
    module = adapters.get_embedding(20, 4)
    for bad in (20, -1):
        try:
            module(torch.tensor([[1, bad]]))
        except Exception:  # noqa: BLE001 - any error names the problem; the point is not to return
            continue
        raise AssertionError(f"forward() returned for id {bad} with vocab_size=20: raise on ids outside "
                             "[0, vocab_size), as run_embedding does (weight[-1] silently returns the last row)")


@adapter("get_embedding")
def test_embedding_module_trains_its_table(adapters):
    module = adapters.get_embedding(20, 4)
    frozen = [name for name, p in module.named_parameters() if not p.requires_grad]
    assert not frozen, (f"{', '.join(frozen)} has requires_grad=False, so it never trains: an LLM's embeddings train "
                        "jointly with every other weight from the first step (leave nn.Parameter's default, True)")
    module(torch.tensor([[1, 1, 3]])).sum().backward()
    (table,) = module.parameters()
    assert table.grad is not None, "no gradient reached the table: is it an nn.Parameter used in forward?"
    assert torch.equal(table.grad[1], torch.full((4,), 2.0)), "id 1 appears twice, so its row's gradient must be 2"




@pytest.mark.reports_only  # the module lists its own parameters and buffers
@adapter("get_sinusoidal_positions")
def test_sinusoidal_module_has_no_parameters(adapters):
    module = adapters.get_sinusoidal_positions(64, 16)
    params = {n: list(p.shape) for n, p in module.named_parameters()}
    assert not params, (f"sinusoidal encodings are fixed, so the module has 0 parameters; "
                        f"found {params}. Store the table with register_buffer, not nn.Parameter.")
    assert any(b.numel() for b in module.buffers()), \
        "keep the precomputed table as a buffer (register_buffer) so .to(device) moves it"
    saved = list(module.state_dict())
    assert not saved, (f"the table is derived, not learned: register it with persistent=False so it stays out "
                       f"of the state dict (and of every checkpoint of a model that holds it); found {saved}")



@pytest.mark.forward_values
@adapter("get_sinusoidal_positions")
def test_sinusoidal_module_matches_fixtures(adapters, term):
    """The module's forward gives run_sinusoidal_positions' values: its public cases, and their
    hidden twins where hidden cases are loaded (grading)."""
    cases = term.output_cases("run_sinusoidal_positions")
    assert cases, "the term has no run_sinusoidal_positions cases"
    for case in cases:
        kwargs = term.inputs(case)
        positions = kwargs["token_positions"]
        module = adapters.get_sinusoidal_positions(int(positions.max()) + 1, case.args["d_model"])
        expected = term.tensors(case)["out"]
        out = module(positions)
        assert out.shape == expected.shape and torch.allclose(out, expected, atol=case.atol, rtol=case.rtol), (
            f"forward() differs from run_sinusoidal_positions' expected values on case {case.name!r} "
            f"({case.note})")
