"""The case catalogue: every fixture case, as data.

A case names an adapter, its scalar arguments and how to generate each tensor
argument. `python -m harness term new` runs the reference over this list and
stores inputs, outputs, cotangents and gradients. Each case draws from its own
generator, seeded from the term seed and the case id, so adding a case never
changes another.
"""

import zlib
from dataclasses import dataclass, field
from typing import Callable

import torch

from harness.store import Case


@dataclass(frozen=True)
class Gen:
    """A recipe for one tensor argument."""
    kind: str
    shape: tuple = ()
    params: dict = field(default_factory=dict)

    def make(self, g: torch.Generator) -> torch.Tensor:
        p = self.params
        if self.kind == "normal":
            return torch.randn(self.shape, generator=g) * p.get("scale", 1.0) + p.get("offset", 0.0)
        if self.kind == "ints":
            return torch.randint(p.get("low", 0), p["high"], self.shape, generator=g)
        if self.kind == "given":
            return torch.tensor(p["values"])
        raise ValueError(self.kind)


def normal(*shape, scale=1.0, offset=0.0) -> Gen:
    return Gen("normal", shape, {"scale": scale, "offset": offset})


def ints(*shape, high, low=0) -> Gen:
    """Uniform int64 ids or positions in [low, high)."""
    return Gen("ints", shape, {"low": low, "high": high})


def given(values) -> Gen:
    return Gen("given", params={"values": values})


@dataclass(frozen=True)
class Spec:
    function: str
    name: str
    args: dict
    note: str = ""
    check: str = "output"
    tolerance: tuple | Callable = (0.0, 0.0)  # (atol, rtol), or a function of the inputs
    hidden: bool = False

    def case(self, generated: dict, inputs: list[str], grads: list[str]) -> Case:
        scalars = {k: v for k, v in self.args.items() if not isinstance(v, Gen)}
        atol, rtol = self.tolerance(generated) if callable(self.tolerance) else self.tolerance
        return Case(function=self.function, name=self.name, args=scalars, inputs=inputs,
                    check=self.check, atol=atol, rtol=rtol,
                    grads=grads, hidden=self.hidden, note=self.note)

    def generate(self, seed: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(f"{self.function}/{self.name}".encode()))
        return {k: v.make(g) for k, v in self.args.items() if isinstance(v, Gen)}


def case(function, name, note="", *, check="output", tolerance=(0.0, 0.0), hidden=False, **args) -> Spec:
    return Spec(function, name, args, note, check, tolerance, hidden)


def raises(function, name, note, **args) -> Spec:
    return Spec(function, name, args, note, check="raises")


def sinusoidal_tolerance(tensors: dict) -> tuple[float, float]:
    """Expected sinusoidal values come from float64. A correct float32 implementation
    (pow or exp, either order) drifts by up to 7.5e-8 x the largest position (measured
    for d_model 4..512, positions to 1e6), so allow 4e-7 x position, at least 1e-6."""
    ids = tensors.get("token_positions", tensors.get("token_ids"))
    largest = ids.max().item() if "token_positions" in tensors else ids.shape[-1] - 1
    return max(1e-6, 4e-7 * largest), 0.0


CATALOGUE: list[Spec] = [
    # ---- run_embedding: bit-exact lookups of every rank, repeated and boundary ids
    case("run_embedding", "seed-exercise", "V=1000, D=32, ids shaped [2, 5]: the self-test exercise",
         vocab_size=1000, d_model=32, weights=normal(1000, 32), token_ids=ints(2, 5, high=1000)),
    case("run_embedding", "ids-1d", "1-D ids [7]",
         vocab_size=50, d_model=8, weights=normal(50, 8), token_ids=ints(7, high=50)),
    case("run_embedding", "ids-3d", "3-D ids [2, 3, 4]",
         vocab_size=50, d_model=8, weights=normal(50, 8), token_ids=ints(2, 3, 4, high=50)),
    case("run_embedding", "ids-4d", "4-D ids [2, 1, 3, 2]",
         vocab_size=50, d_model=8, weights=normal(50, 8), token_ids=ints(2, 1, 3, 2, high=50)),
    case("run_embedding", "repeated-ids", "ids [[2, 0, 2], [2, 2, 4]]: repeated ids share a row, gradients add up",
         vocab_size=5, d_model=4, weights=normal(5, 4), token_ids=given([[2, 0, 2], [2, 2, 4]])),
    case("run_embedding", "boundary-ids", "ids 0 and vocab_size-1, batch 3 != seq 1",
         vocab_size=9, d_model=6, weights=normal(9, 6), token_ids=given([[0], [8], [0]])),
    case("run_embedding", "hidden-wide", "wide table, 2-D ids", hidden=True,
         vocab_size=300, d_model=24, weights=normal(300, 24), token_ids=ints(3, 11, high=300)),
    raises("run_embedding", "negative-id", "token id -1 (plain indexing would wrap it to the last row)",
           vocab_size=10, d_model=4, weights=normal(10, 4), token_ids=given([3, -1, 2])),
    raises("run_embedding", "id-equals-vocab", "token id == vocab_size",
           vocab_size=10, d_model=4, weights=normal(10, 4), token_ids=given([[3, 10]])),

    # ---- run_learned_positions: stored positions, not only arange
    case("run_learned_positions", "arange", "positions 0..5 in a [2, 6] batch",
         context_length=16, d_model=8, weights=normal(16, 8),
         token_positions=given([list(range(6))] * 2)),
    case("run_learned_positions", "offset-100", "positions 100..107 (an offset window)",
         context_length=128, d_model=8, weights=normal(128, 8), token_positions=given(list(range(100, 108)))),
    case("run_learned_positions", "gaps-3d", "gapped, repeated positions shaped [2, 2, 4]",
         context_length=32, d_model=6, weights=normal(32, 6),
         token_positions=given([[[0, 3, 3, 31], [7, 1, 9, 2]], [[5, 5, 5, 5], [30, 20, 10, 0]]])),
    case("run_learned_positions", "random-4d", "random positions shaped [2, 1, 3, 5]",
         context_length=20, d_model=4, weights=normal(20, 4), token_positions=ints(2, 1, 3, 5, high=20)),
    case("run_learned_positions", "hidden-offset", "offset positions", hidden=True,
         context_length=64, d_model=8, weights=normal(64, 8), token_positions=given([[40, 41, 42], [60, 61, 63]])),
    raises("run_learned_positions", "position-equals-context", "position == context_length",
           context_length=8, d_model=4, weights=normal(8, 4), token_positions=given([0, 1, 8])),
    raises("run_learned_positions", "negative-position", "position -1",
           context_length=8, d_model=4, weights=normal(8, 4), token_positions=given([[-1, 0]])),

    # ---- run_sinusoidal_positions: interleaved layout, 0-based, far positions
    case("run_sinusoidal_positions", "arange-1d", "positions 0..9, d_model=16",
         tolerance=sinusoidal_tolerance, d_model=16, token_positions=given(list(range(10)))),
    case("run_sinusoidal_positions", "offset-2d", "positions offset by 100 in a [2, 5] batch",
         tolerance=sinusoidal_tolerance, d_model=8, token_positions=given([[100, 101, 102, 103, 104], [200, 201, 202, 203, 204]])),
    case("run_sinusoidal_positions", "gaps-3d", "gapped positions shaped [2, 2, 3], d_model=6",
         tolerance=sinusoidal_tolerance, d_model=6, token_positions=given([[[0, 5, 9], [1, 1, 2]], [[13, 3, 8], [40, 0, 7]]])),
    case("run_sinusoidal_positions", "random-4d", "random positions shaped [1, 2, 2, 4]",
         tolerance=sinusoidal_tolerance, d_model=12, token_positions=ints(1, 2, 2, 4, high=64)),
    case("run_sinusoidal_positions", "far-positions", "positions up to 20,000, beyond any training length",
         tolerance=sinusoidal_tolerance, d_model=16, token_positions=given([0, 1000, 4095, 12345, 20000])),
    case("run_sinusoidal_positions", "hidden-wide", "d_model=64", hidden=True,
         tolerance=sinusoidal_tolerance, d_model=64, token_positions=ints(3, 6, high=100)),

    # ---- run_embed_with_positions: both kinds, the repeated-token exercise
    case("run_embed_with_positions", "learned", "learned positions, batch 3 != seq 5",
         vocab_size=20, context_length=8, d_model=8, token_weights=normal(20, 8),
         position_weights=normal(8, 8), token_ids=ints(3, 5, high=20)),
    case("run_embed_with_positions", "sinusoidal", "sinusoidal positions (position_weights=None), batch 2 != seq 6",
         tolerance=sinusoidal_tolerance, vocab_size=20, context_length=8, d_model=8, token_weights=normal(20, 8),
         position_weights=None, token_ids=ints(2, 6, high=20)),
    case("run_embed_with_positions", "repeated-learned", "ids [[2, 0, 2]] with learned positions",
         vocab_size=5, context_length=4, d_model=4, token_weights=normal(5, 4),
         position_weights=normal(4, 4), token_ids=given([[2, 0, 2]])),
    case("run_embed_with_positions", "repeated-sinusoidal", "ids [[2, 0, 2]] with sinusoidal positions",
         tolerance=sinusoidal_tolerance, vocab_size=5, context_length=4, d_model=4, token_weights=normal(5, 4),
         position_weights=None, token_ids=given([[2, 0, 2]])),
    case("run_embed_with_positions", "full-context", "seq == context_length (the last position is context_length-1)",
         vocab_size=11, context_length=6, d_model=4, token_weights=normal(11, 4),
         position_weights=normal(6, 4), token_ids=ints(2, 6, high=11)),
    case("run_embed_with_positions", "hidden-learned", "learned positions", hidden=True,
         vocab_size=30, context_length=10, d_model=6, token_weights=normal(30, 6),
         position_weights=normal(10, 6), token_ids=ints(4, 7, high=30)),
    raises("run_embed_with_positions", "longer-than-context", "seq 5 > context_length 4 with a learned table",
           vocab_size=5, context_length=4, d_model=4, token_weights=normal(5, 4),
           position_weights=normal(4, 4), token_ids=given([[0, 1, 2, 3, 4]])),
]
