"""The case catalogue: every fixture case, as data.

A case names an adapter, its scalar arguments and how to generate each tensor
argument. `python -m harness term new` runs the reference over this list and
stores inputs, outputs, cotangents and gradients. Each case draws from its own
generator, seeded from the term seed and the case id, so adding a case never
changes another. The build adds a hidden twin of every public case (`twin`): the
same case on values the students have never seen, which grading requires too.
"""

import dataclasses
import zlib
from dataclasses import dataclass, field
from typing import Callable

import torch

from harness.contract import ADAPTERS, DIVISIBLE, block_weight_shapes, gpt2_block_weight_shapes, gpt2_lm_weight_shapes, \
    lm_weight_shapes
from harness.contract import EXACT, rope_tolerance, sinusoidal_tolerance  # noqa: F401  (per-case tolerances below)
from harness.paths import leaves
from harness.store import Case, grid_exponent, swap_view


@dataclass(frozen=True)
class Gen:
    """A recipe for one tensor argument."""
    kind: str
    shape: tuple = ()
    params: dict = field(default_factory=dict)

    def make(self, g: torch.Generator) -> torch.Tensor:
        p = self.params
        if self.kind == "normal":
            t = torch.randn(self.shape, generator=g) * p["scale"] + p["offset"]
            t = on_grid(t) if p.get("grid") else t.to(getattr(torch, p["dtype"]))
        elif self.kind == "ints":
            t = torch.randint(p["low"], p["high"], self.shape, generator=g)
            t = t.to(getattr(torch, p["dtype"])) if "dtype" in p else t
        elif self.kind == "mask":
            t = torch.rand(self.shape, generator=g) < 0.5
            # Every query keeps at least one key: fully masked rows are undefined.
            visible = self.shape[-1] - p.get("padded", 0)
            if p.get("padded"):
                t[..., visible:] = False
            keep = torch.randint(0, visible, self.shape[:-1], generator=g)
            t.scatter_(-1, keep[..., None], True)
        elif self.kind == "sparse":  # mostly zeros, as an embedding table's gradient is
            t = torch.randn(self.shape, generator=g) * p["scale"] * (torch.rand(self.shape, generator=g) < p["density"])
        elif self.kind == "chain":  # a fixed cycle over `used` tokens of the vocabulary, from a random start
            cycle = torch.randperm(p["vocab"], generator=g)[:p["used"]]
            start = int(torch.randint(0, p["used"], (), generator=g))
            t = cycle[(torch.arange(self.shape[0]) + start) % p["used"]]
        elif self.kind == "given":
            t = torch.tensor(p["values"], dtype=getattr(torch, p["dtype"]) if "dtype" in p else None)
        else:
            raise ValueError(self.kind)
        return swap_view(swap_view(t, self.layout).contiguous(), self.layout)

    @property
    def layout(self) -> str | None:
        return self.params.get("layout")


def normal(*shape, scale=1.0, offset=0.0, dtype="float32", layout=None, grid=False) -> Gen:
    """Gaussian values; layout="transposed" (last two axes) or "heads" (the layout after a head
    split: axes -3 and -2 swapped) gives a non-contiguous view of the same shape. grid=True:
    float32 values on a grid of 2^15 steps (on_grid), which the store keeps in 16 bits."""
    params = {"scale": scale, "offset": offset, "dtype": dtype, "layout": layout}
    return Gen("normal", shape, {**params, "grid": True} if grid else params)


def on_grid(t: torch.Tensor) -> torch.Tensor:
    """float32 multiples of a power of two, the largest |value| 2^14 to 2^15 steps: exact in
    float32, stored in 16 bits (store._packed), and still changed by a float16 or bfloat16
    round trip (11 and 8 significant bits) for most values. For weights, whose exact values
    matter to no check; never for inputs whose precision a case is about."""
    step = 2.0 ** -grid_exponent(t)
    return ((t / step).round() * step + 0.0).to(torch.float32)  # + 0.0: no -0.0, which 16 bits cannot hold


def ints(*shape, high, low=0, dtype=None) -> Gen:
    """Uniform int64 ids or positions in [low, high); `dtype` ("float32"): whole numbers in a float
    tensor, whose products and sums are exact, so large values stay comparable across formulas."""
    return Gen("ints", shape, {"low": low, "high": high, **({"dtype": dtype} if dtype else {})})


def mask(*shape, padded: int = 0) -> Gen:
    """A random boolean attention mask [..., queries, keys] with no fully masked row; `padded`: the last
    keys are hidden from every query, as padding is (a key column all False)."""
    return Gen("mask", shape, {"padded": padded} if padded else {})


def sparse(*shape, density=0.2, scale=1.0) -> Gen:
    """Gaussian values of which only a share `density` is nonzero."""
    return Gen("sparse", shape, {"density": density, "scale": scale})


def chain(n, *, vocab, used) -> Gen:
    """A corpus of n int64 ids whose next token is a fixed permutation (one cycle) of the previous one,
    over `used` random tokens of [0, vocab): the others never occur."""
    return Gen("chain", (n,), {"vocab": vocab, "used": used})


def given(values, dtype: str | None = None, fresh: str = "shuffle") -> Gen:
    """Exactly these values; `dtype` ("float16", ...) for values that must be 16-bit. `fresh`: how the
    hidden twin refreshes them, "shuffle" (along the last axis), "noise" (floats: each moves by up to
    1/4, so far-apart rows stay far apart), "offset" (ints: all shift by one random step, so gaps
    and repeats stay) or "keep" (targets that must stay aligned with inputs refreshed). A case whose tensors are all given must refresh one of them beyond a shuffle:
    a shuffle of its public values is answered by a lookup of its public outputs (case_rules)."""
    return Gen("given", params={"values": values, **({"dtype": dtype} if dtype else {}),
                                **({"fresh": fresh} if fresh != "shuffle" else {})})


def weight(d_out, d_in, dtype="float32") -> Gen:
    """A [d_out, d_in] matrix scaled so activations stay near unit size (float32: on the grid)."""
    return normal(d_out, d_in, scale=d_in ** -0.5, dtype=dtype, grid=dtype == "float32")


def gain(d, dtype="float32") -> Gen:
    """RMSNorm gains that are not 1, so an ignored gain shows."""
    return normal(d, scale=0.3, offset=1.0, dtype=dtype)


def block_weights(d, d_ff, dtype="float32") -> dict[str, Gen]:
    return _weights(block_weight_shapes(d, d_ff), dtype)


def lm_weights(vocab, d, layers, d_ff, dtype="float32") -> dict[str, Gen]:
    return _weights(lm_weight_shapes(vocab, d, layers, d_ff), dtype)


def gpt2_block_weights(d, d_ff, dtype="float32") -> dict[str, Gen]:
    return _weights(gpt2_block_weight_shapes(d, d_ff), dtype)


def gpt2_lm_weights(vocab, context, d, layers, d_ff, dtype="float32") -> dict[str, Gen]:
    return _weights(gpt2_lm_weight_shapes(vocab, context, d, layers, d_ff), dtype)


def bias(d, dtype="float32") -> Gen:
    """Biases that are not 0, so a dropped bias shows."""
    return normal(d, scale=0.3, dtype=dtype)


# Near one-hot attention makes float32 gradients drift by about 1e-5 from the float64 answer;
# behind a norm (whose gain scales the large queries and keys) by up to 3e-4 (measured with
# exp(x - logsumexp(x)) softmax and torch's SDPA, both correct), and without one, through large projection
# weights, by up to 4e-4 of the gradient's largest element on other terms' values (TA trial 14:
# run_grouped_query_attention/gqa-8-2, where 1e-4 was allowed): a gradient's atol is rtol x its largest
# |value| (checks.gradient_atol). A gradient-only mistake (a detached piece, a wrong backward) is off by far more.
SHARP = (1e-4, 1e-3)
# A sharp softmax under LayerNorm: a correct exp(x - logsumexp(x)) softmax's gradient was off by 1.2e-3
# of the largest element on one term's values (run_gpt2_lm/truncated); allow twice that.
SHARP_NORMED = (1e-3, 2.5e-3)
# Scores near -14,000: float32's spacing there is 1e-3, so a correct softmax that does not subtract the row max
# exactly (exp(x - logsumexp(x)): its logsumexp rounds) is off by up to 5e-4 of each weight, and its gradient
# by several % (TA trial 14): that case checks the output alone, within this
FAR = (1e-5, 2e-3)


def sharp(weights: dict[str, Gen], prefix: str = "") -> dict[str, Gen]:
    """`weights` with the query and key projections scaled up, so attention scores spread by
    hundreds inside one row: a softmax that subtracts anything but the row max overflows."""
    keys = [f"{prefix}{p}.weight" for p in ("q_proj", "k_proj")]
    return {k: normal(*g.shape, scale=2.0) if k in keys else g for k, g in weights.items()}


def tiny_stream(weights: dict[str, Gen]) -> dict[str, Gen]:
    """`weights` whose residual stream stays near 1e-3 (small embeddings, and small projections back into
    it): each LayerNorm then divides by about sqrt(1e-6 + eps), so its eps shows (blind trial 6's 1e-6)."""
    small = ("embeddings.weight", "output_proj.weight", "output_proj.bias", "c_proj.weight", "c_proj.bias")
    return {k: normal(*g.shape, scale=1e-3) if k.endswith(small) else g for k, g in weights.items()}


def _weights(shapes: dict, dtype: str = "float32") -> dict[str, Gen]:
    """Random non-unit weights for the contract's state-dict shapes, all of `dtype`."""
    return {key: (bias if key.endswith(".bias") else gain)(*shape, dtype=dtype) if len(shape) == 1
            else normal(*shape, dtype=dtype, grid=dtype == "float32") if "embeddings" in key
            else weight(*shape, dtype=dtype) for key, shape in shapes.items()}


@dataclass(frozen=True)
class Spec:
    function: str
    name: str
    args: dict
    note: str = ""
    check: str = "output"
    tolerance: tuple | Callable | None = None  # (atol, rtol), a function of the arguments, or the adapter's
    hidden: bool = False
    equal: tuple = ()  # axis pairs whose equal sizes are the point of the case, "a=b" (harness/term/case_rules.py)
    twin_of: str = ""  # a twin: the name of the public case it repeats on fresh values
    gradient: bool = True  # float32 inputs' gradients checked too

    def case(self, generated: dict, inputs: list[str], grads: list[str]) -> Case:
        scalars = {k: v for k, v in self.args.items() if k not in generated}
        tolerance = self.tolerance or ADAPTERS[self.function].tolerance
        atol, rtol = tolerance({**scalars, **generated}) if callable(tolerance) else tolerance
        grad_atol, grad_rtol = (atol, rtol) if atol or rtol else (1e-6, 1e-5)
        views = {path: gen.layout for path, gen in self.gens() if gen.layout}
        return Case(function=self.function, name=self.name, args=scalars, inputs=inputs, check=self.check,
                    atol=atol, rtol=rtol, grads=grads, grad_atol=grad_atol, grad_rtol=grad_rtol,
                    views=views, hidden=self.hidden, note=self.note, twin_of=self.twin_of)

    def gens(self):
        """(input path, recipe) for every tensor argument, dict entries as "arg/key"."""
        return ((path, gen) for path, gen in leaves(self.args) if isinstance(gen, Gen))

    def generate(self, seed: int) -> dict:
        g = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(f"{self.function}/{self.name}".encode()))
        out = {}
        for arg, value in self.args.items():
            if isinstance(value, Gen):
                out[arg] = value.make(g)
            elif isinstance(value, dict):
                out[arg] = {k: gen.make(g) for k, gen in value.items()}
        return out


def twin(spec: Spec, seed: int, public: tuple = ()) -> Spec:
    """The hidden twin of a public case: the same function, shapes and note, on fresh values. Random
    tensors come from the twin's own generator stream (its name differs); given values are shuffled
    along their last axis; a case with no tensors gets a fresh value of every argument that can take
    one (_fresh), drawn again while it equals the arguments of one of `public`, the function's public
    cases (a twin of '6-heads' drew 8 heads, which '8-heads' answered). A stored answer to a public
    case is then no answer to its twin."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(f"{spec.function}/{spec.name}/twin".encode()))
    args = dict(spec.args)
    for arg, value in spec.args.items():
        if isinstance(value, Gen) and value.kind == "given":
            args[arg] = given(_refreshed(value, g).tolist(), value.params.get("dtype"), value.params.get("fresh", "shuffle"))
    if not any(spec.gens()):
        taken = [p.args for p in public if p.function == spec.function]
        for _ in range(100):
            args.update(_fresh(spec.args, g))
            if args not in taken:
                break
    return dataclasses.replace(spec, name=f"twin-{spec.name}", args=args, hidden=True, twin_of=spec.name)


def _fresh(args: dict, g: torch.Generator) -> dict:
    """Fresh scalars for a case without tensors: every int of 2 or more and every positive float grows by
    a random step, and sizes the contract divides stay multiples (d_model = fresh num_heads x a fresh
    head width; DIVISIBLE). 0, 1, flags, words and None stay: they say what the case is about (one kv
    head is multi-query attention)."""
    out: dict = {}

    def value(name: str):
        if name not in out:
            v = args[name]
            by = next((b for a, b in DIVISIBLE if a == name and type(args.get(b)) is int and args[b] > 0
                       and v % args[b] == 0), None)
            out[name] = value(by) * _grown(v // args[by], g) if by else _grown(v, g)
        return out[name]
    for name, v in args.items():
        if type(v) in (int, float):
            value(name)
    return out


def _grown(v, g: torch.Generator):
    if type(v) is int and v >= 2:
        return v + int(torch.randint(1, v // 4 + 2, (), generator=g))
    if type(v) is float and v > 0:
        return v * (1 + int(torch.randint(1, 9, (), generator=g)) / 16)
    return v


def same_values(a: Spec, b: Spec) -> bool:
    """Whether two cases would be built from the same values: equal scalars, and tensors only from equal
    given values (a random tensor comes from its case's own generator stream, which differs)."""
    ours, theirs = dict(leaves(a.args)), dict(leaves(b.args))
    if a.function != b.function or ours.keys() != theirs.keys():
        return False
    for path, x in ours.items():
        y = theirs[path]
        if isinstance(x, Gen) or isinstance(y, Gen):
            if not (isinstance(x, Gen) and isinstance(y, Gen) and x.kind == y.kind == "given" and x.params == y.params):
                return False
        elif x != y or type(x) is not type(y):
            return False
    return True


def _refreshed(value: Gen, g: torch.Generator) -> torch.Tensor:
    """A twin's values for a given tensor (see `given`)."""
    t = torch.tensor(value.params["values"])
    how = value.params.get("fresh", "shuffle")
    if how == "noise":
        noisy = t.double() + (torch.rand(t.shape, generator=g, dtype=torch.float64) - 0.5) / 2
        return noisy.to(getattr(torch, value.params.get("dtype", "float32")))
    if how == "offset":
        return t + int(torch.randint(1, 1000, (), generator=g))
    return t if how == "keep" else _shuffled(t, g)


def _shuffled(t: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """t with each last-axis row permuted; never t itself unless no permutation can differ."""
    if t.dim() == 0 or t.shape[-1] < 2:
        return t
    order = torch.argsort(torch.rand(t.shape, generator=g), dim=-1)
    out = torch.gather(t, -1, order)
    return out if not torch.equal(out, t) else t.roll(1, -1)


def case(function, name, note="", *, check="output", tolerance=None, hidden=False, equal=(), gradient=True,
         **args) -> Spec:
    """One case. `equal`: axis pairs ("queries=keys") allowed the same size because that is the point of it.
    `gradient=False`: its output alone is checked (float32 cannot hold its gradient to any useful tolerance)."""
    return Spec(function, name, args, note, check, tolerance, hidden, tuple(equal), gradient=gradient)


def raises(function, name, note, **args) -> Spec:
    return Spec(function, name, args, note, check="raises")


UNIT_2_1 = [
    # ---- run_embedding: bit-exact lookups of every rank, repeated and boundary ids
    case("run_embedding", "seed-exercise", "V=1000, D=32, ids shaped [2, 5]: the self-test exercise",
         vocab_size=1000, d_model=32, weights=normal(1000, 32, grid=True), token_ids=ints(2, 5, high=1000)),
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
    case("run_embedding", "bf16-table", "a bfloat16 table [40, 12]: rows come back bit-exact, in bfloat16",
         vocab_size=40, d_model=12, weights=normal(40, 12, dtype="bfloat16"), token_ids=ints(3, 5, high=40)),
    case("run_embedding", "hidden-fp16-table", "", hidden=True,
         vocab_size=60, d_model=10, weights=normal(60, 10, dtype="float16"), token_ids=ints(4, 7, high=60)),
    case("run_embedding", "hidden-wide", "wide table, 2-D ids", hidden=True,
         vocab_size=300, d_model=24, weights=normal(300, 24), token_ids=ints(3, 11, high=300)),
    raises("run_embedding", "negative-id", "token id -1 (plain indexing would wrap it to the last row)",
           vocab_size=10, d_model=4, weights=normal(10, 4), token_ids=given([3, -1, 2])),
    raises("run_embedding", "single-negative-id", "a single id, -1: the range check must not skip short inputs",
           vocab_size=6, d_model=4, weights=normal(6, 4), token_ids=given([-1])),
    raises("run_embedding", "id-equals-vocab", "token id == vocab_size",
           vocab_size=10, d_model=4, weights=normal(10, 4), token_ids=given([[3, 10]])),

    # ---- run_learned_positions: stored positions, not only arange
    case("run_learned_positions", "arange", "positions 0..5 in a [2, 6] batch",
         context_length=16, d_model=8, weights=normal(16, 8),
         token_positions=given([list(range(6))] * 2)),
    case("run_learned_positions", "offset-100", "positions 100..107 (an offset window)",
         context_length=128, d_model=6, weights=normal(128, 6), token_positions=given(list(range(100, 108)))),
    case("run_learned_positions", "gaps-3d", "gapped, repeated positions shaped [2, 2, 4]",
         context_length=32, d_model=6, weights=normal(32, 6),
         token_positions=given([[[0, 3, 3, 31], [7, 1, 9, 2]], [[5, 5, 5, 5], [30, 20, 10, 0]]])),
    case("run_learned_positions", "random-4d", "random positions shaped [2, 1, 3, 5]",
         context_length=20, d_model=4, weights=normal(20, 4), token_positions=ints(2, 1, 3, 5, high=20)),
    case("run_learned_positions", "fp16-table", "a float16 table [24, 12]: rows come back bit-exact, in float16",
         context_length=24, d_model=12, weights=normal(24, 12, dtype="float16"), token_positions=ints(3, 7, high=24)),
    case("run_learned_positions", "hidden-bf16-table", "", hidden=True,
         context_length=30, d_model=12, weights=normal(30, 12, dtype="bfloat16"), token_positions=ints(2, 9, high=30)),
    case("run_learned_positions", "hidden-offset", "offset positions", hidden=True,
         context_length=64, d_model=8, weights=normal(64, 8), token_positions=given([[40, 41, 42], [60, 61, 63]])),
    raises("run_learned_positions", "position-equals-context", "position == context_length",
           context_length=8, d_model=4, weights=normal(8, 4), token_positions=given([0, 1, 8])),
    raises("run_learned_positions", "negative-position", "position -1",
           context_length=8, d_model=4, weights=normal(8, 4), token_positions=given([[-1, 0]])),

    # ---- run_sinusoidal_positions: interleaved layout, 0-based, far positions
    case("run_sinusoidal_positions", "arange-1d", "positions 0..9, d_model=16",
         d_model=16, token_positions=given(list(range(10)), fresh="offset")),
    case("run_sinusoidal_positions", "offset-2d", "positions offset by 100 in a [2, 5] batch",
         d_model=8, token_positions=given([[100, 101, 102, 103, 104], [200, 201, 202, 203, 204]], fresh="offset")),
    case("run_sinusoidal_positions", "gaps-3d", "gapped positions shaped [2, 2, 3], d_model=6",
         d_model=6, token_positions=given([[[0, 5, 9], [1, 1, 2]], [[13, 3, 8], [40, 0, 7]]], fresh="offset")),
    case("run_sinusoidal_positions", "random-4d", "random positions shaped [1, 2, 2, 4]",
         d_model=12, token_positions=ints(1, 2, 2, 4, high=64)),
    case("run_sinusoidal_positions", "far-positions", "positions up to 20,000, beyond any training length",
         d_model=16, token_positions=given([0, 1000, 4095, 12345, 20000], fresh="offset")),
    case("run_sinusoidal_positions", "hidden-wide", "d_model=64", hidden=True,
         d_model=64, token_positions=ints(3, 6, high=100)),

    # ---- run_embed_with_positions: both kinds, the repeated-token exercise
    case("run_embed_with_positions", "learned", "learned positions, batch 3 != seq 5",
         vocab_size=20, context_length=8, d_model=6, token_weights=normal(20, 6),
         position_weights=normal(8, 6), token_ids=ints(3, 5, high=20)),
    case("run_embed_with_positions", "sinusoidal", "sinusoidal positions (position_weights=None), batch 2 != seq 6",
         tolerance=sinusoidal_tolerance, vocab_size=20, context_length=8, d_model=8, token_weights=normal(20, 8),
         position_weights=None, token_ids=ints(2, 6, high=20)),
    case("run_embed_with_positions", "repeated-learned", "ids [[2, 0, 2]] with learned positions",
         vocab_size=5, context_length=4, d_model=6, token_weights=normal(5, 6),
         position_weights=normal(4, 6), token_ids=given([[2, 0, 2]])),
    case("run_embed_with_positions", "repeated-sinusoidal", "ids [[2, 0, 2]] with sinusoidal positions",
         tolerance=sinusoidal_tolerance, vocab_size=5, context_length=4, d_model=4, token_weights=normal(5, 4),
         position_weights=None, token_ids=given([[2, 0, 2]])),
    case("run_embed_with_positions", "full-context", "seq == context_length (the last position is context_length-1)",
         equal=("context_length=seq",),
         vocab_size=11, context_length=6, d_model=4, token_weights=normal(11, 4),
         position_weights=normal(6, 4), token_ids=ints(2, 6, high=11)),
    case("run_embed_with_positions", "bf16-learned", "bfloat16 tables: the sum rounded once, in bfloat16",
         vocab_size=36, context_length=12, d_model=8, token_weights=normal(36, 8, dtype="bfloat16"),
         position_weights=normal(12, 8, dtype="bfloat16"), token_ids=ints(3, 7, high=36)),
    case("run_embed_with_positions", "bf16-sinusoidal", "bfloat16 table, sinusoidal positions: the float32 sum "
         "rounded once (position vectors rounded to bfloat16 first err by their own ulp, many of the sum's)",
         tolerance=sinusoidal_tolerance, vocab_size=40, context_length=10, d_model=16, token_weights=normal(40, 16, dtype="bfloat16"),
         position_weights=None, token_ids=ints(3, 9, high=40)),
    case("run_embed_with_positions", "hidden-fp16-learned", "", hidden=True,
         vocab_size=36, context_length=10, d_model=12, token_weights=normal(36, 12, dtype="float16"),
         position_weights=normal(10, 12, dtype="float16"), token_ids=ints(2, 9, high=36)),
    case("run_embed_with_positions", "hidden-learned", "learned positions", hidden=True,
         vocab_size=30, context_length=10, d_model=6, token_weights=normal(30, 6),
         position_weights=normal(10, 6), token_ids=ints(4, 7, high=30)),
    raises("run_embed_with_positions", "longer-than-context", "seq 5 > context_length 4 with a learned table",
           vocab_size=5, context_length=4, d_model=4, token_weights=normal(5, 4),
           position_weights=normal(4, 4), token_ids=given([[0, 1, 2, 3, 4]])),
    # ---- run_alibi_slopes: powers of two and Press et al.'s rule for other head counts (sizes only: twins grow them)
    case("run_alibi_slopes", "8-heads", "8 heads: 1/2, 1/4, ..., 1/256", num_heads=8),
    case("run_alibi_slopes", "6-heads", "6 heads, not a power of 2: the 4 slopes of 4 heads, then 2 of 8's",
         num_heads=6),
    case("run_alibi_slopes", "16-heads", "16 heads: 2^(-h/2), not powers of 2 themselves", num_heads=16),
    case("run_alibi_slopes", "hidden-12", "", hidden=True, num_heads=12),
    case("run_alibi_slopes", "hidden-1", "", hidden=True, num_heads=1),

    # ---- run_alibi_bias: [heads, queries, keys], both triangles
    case("run_alibi_bias", "4-heads", "4 heads, seq_len 6", num_heads=4, seq_len=6),
    case("run_alibi_bias", "6-heads", "6 heads (not a power of 2), seq_len 9", num_heads=6, seq_len=9),
    case("run_alibi_bias", "2-heads-long", "2 heads, seq_len 40", num_heads=2, seq_len=40),
    case("run_alibi_bias", "hidden-12", "", hidden=True, num_heads=12, seq_len=7),

    # ---- run_t5_relative_bias: both directions, distances past max_distance; settings with no integer boundary
    case("run_t5_relative_bias", "bidirectional", "16 buckets, max_distance 20, seq_len 24 (distances saturate)",
         num_heads=3, num_buckets=16, max_distance=20, bidirectional=True, seq_len=24, weight=normal(16, 3)),
    case("run_t5_relative_bias", "causal", "causal, 12 buckets, max_distance 30, seq_len 40",
         num_heads=2, num_buckets=12, max_distance=30, bidirectional=False, seq_len=40, weight=normal(12, 2)),
    case("run_t5_relative_bias", "bf16-table", "a bfloat16 table [32, 8]: the bias stays bfloat16, its values copied",
         num_heads=8, num_buckets=32, max_distance=90, bidirectional=False, seq_len=13,
         weight=normal(32, 8, dtype="bfloat16")),
    case("run_t5_relative_bias", "hidden-bidirectional", "", hidden=True,
         num_heads=5, num_buckets=14, max_distance=36, bidirectional=True, seq_len=40, weight=normal(14, 5)),
    case("run_t5_relative_bias", "hidden-causal", "", hidden=True,
         num_heads=2, num_buckets=18, max_distance=40, bidirectional=False, seq_len=45, weight=normal(18, 2)),
]

UNIT_2_2 = [
    # ---- run_linear: every rank, non-contiguous input
    case("run_linear", "x-1d", "x shaped [8], no leading dims",
         d_in=8, d_out=6, weights=weight(6, 8), in_features=normal(8)),
    case("run_linear", "x-2d", "x shaped [5, 8]",
         d_in=8, d_out=6, weights=weight(6, 8), in_features=normal(5, 8)),
    case("run_linear", "x-3d", "x shaped [2, 3, 8], d_out > d_in",
         d_in=8, d_out=12, weights=weight(12, 8), in_features=normal(2, 3, 8)),
    case("run_linear", "x-4d", "x shaped [2, 2, 3, 8]",
         d_in=8, d_out=6, weights=weight(6, 8), in_features=normal(2, 2, 3, 8)),
    case("run_linear", "noncontiguous", "x is a transposed (non-contiguous) view",
         d_in=8, d_out=4, weights=weight(4, 8), in_features=normal(4, 8, layout="transposed")),
    case("run_linear", "noncontiguous-3d", "x [3, 5, 8] is a view with its first two axes swapped (seq-major storage)",
         d_in=8, d_out=6, weights=weight(6, 8), in_features=normal(3, 5, 8, layout="heads")),
    case("run_linear", "d-in-12", "x [3, 12], d_in=12 -> d_out=5",
         d_in=12, d_out=5, weights=weight(5, 12), in_features=normal(3, 12)),
    case("run_linear", "bf16", "bfloat16 x [10, 64] and W [48, 64]: the float32 product rounded once, in bfloat16",
         d_in=64, d_out=48, weights=weight(48, 64, dtype="bfloat16"), in_features=normal(10, 64, dtype="bfloat16")),
    case("run_linear", "hidden-fp16", "", hidden=True,
         d_in=40, d_out=56, weights=weight(56, 40, dtype="float16"), in_features=normal(2, 7, 40, dtype="float16")),
    case("run_linear", "hidden-wide", "", hidden=True,
         d_in=16, d_out=12, weights=weight(12, 16), in_features=normal(3, 5, 16)),

    # ---- run_softmax: dim honoured, large offsets finite
    case("run_softmax", "last-dim", "[3, 7] along dim=-1", in_features=normal(3, 7), dim=-1),
    case("run_softmax", "dim-0", "[5, 4] along dim=0 (not the last axis)", in_features=normal(5, 4), dim=0),
    case("run_softmax", "middle-dim-3d", "[2, 6, 3] along dim=1", in_features=normal(2, 6, 3), dim=1),
    case("run_softmax", "offset-100", "inputs offset by +100: exp overflows without subtracting the max",
         in_features=normal(4, 6, scale=3.0, offset=100.0), dim=-1),
    case("run_softmax", "4d", "[2, 2, 3, 5] along dim=-1", in_features=normal(2, 2, 3, 5), dim=-1),
    case("run_softmax", "rows-far-apart", "one row near 0, one near +1000: the max must be per row, not global",
         in_features=given([[0.1, -0.3, 0.5, 0.2, -1.0], [1000.0, 1001.5, 999.2, 1000.7, 998.9]], fresh="noise"),
         dim=-1),
    case("run_softmax", "spread-300", "one row spans 300: exp(x - mean) overflows, only the row max bounds exp by 1",
         in_features=given([[0.5, -150.0, 10.0, 150.0, -5.0], [300.0, 0.0, 1.0, -2.0, 0.0]], fresh="noise"), dim=-1),
    # Few keys a row, so most probabilities are large: where they are tiny, float32 rounding (the slack of
    # the 1-ulp judgement) would hide a softmax computed in 16 bits.
    case("run_softmax", "fp16", "float16 [48, 12], |x| up to about 6: computed in float32, rounded once",
         in_features=normal(48, 12, scale=2.0, dtype="float16"), dim=-1),
    case("run_softmax", "hidden-bf16", "", hidden=True, in_features=normal(10, 40, scale=2.0, dtype="bfloat16"), dim=0),
    case("run_softmax", "hidden-offset", "", hidden=True,
         in_features=normal(3, 4, scale=5.0, offset=1000.0), dim=-2),

    # ---- run_silu
    case("run_silu", "3d", "[2, 3, 4]", in_features=normal(2, 3, 4, scale=3.0)),
    case("run_silu", "1d", "[9]", in_features=normal(9, scale=3.0)),
    case("run_silu", "spread-large", "|x| up to hundreds: 1 / (1 + exp(-x)) overflows (use torch.sigmoid)",
         in_features=normal(3, 7, scale=60.0)),
    case("run_silu", "bf16", "bfloat16 [16, 40]: the output stays bfloat16",
         in_features=normal(16, 40, scale=3.0, dtype="bfloat16")),
    case("run_silu", "hidden-fp16", "", hidden=True, in_features=normal(12, 50, scale=3.0, dtype="float16")),
    case("run_silu", "hidden-4d", "", hidden=True, in_features=normal(2, 1, 2, 3, scale=3.0)),

    # ---- run_scaled_dot_product_attention: d_v != d_k, queries != keys, masks
    case("run_scaled_dot_product_attention", "square-no-mask", "Q, K, V [2, 4, 8], mask None",
         equal=("queries=keys", "d_k=d_v"),
         Q=normal(2, 4, 8), K=normal(2, 4, 8), V=normal(2, 4, 8), mask=None),
    case("run_scaled_dot_product_attention", "dv-ne-dk-nonsquare", "3 queries, 5 keys, d_k=8, d_v=6, random mask",
         Q=normal(2, 3, 8), K=normal(2, 5, 8), V=normal(2, 5, 6), mask=mask(2, 3, 5)),
    case("run_scaled_dot_product_attention", "4d-masked", "Q [2, 3, 4, 6], K [2, 3, 5, 6], V [2, 3, 5, 7], random mask",
         Q=normal(2, 3, 4, 6), K=normal(2, 3, 5, 6), V=normal(2, 3, 5, 7), mask=mask(2, 3, 4, 5)),
    case("run_scaled_dot_product_attention", "head-split-views",
         "Q, K, V are head-split views [batch 2, heads 3, seq, d] of [batch, seq, heads, d] storage",
         Q=normal(2, 3, 5, 4, layout="heads"), K=normal(2, 3, 6, 4, layout="heads"),
         V=normal(2, 3, 6, 7, layout="heads"), mask=mask(2, 3, 5, 6)),
    case("run_scaled_dot_product_attention", "no-batch", "Q [3, 4], K [5, 4], V [5, 2], no leading dims",
         Q=normal(3, 4), K=normal(5, 4), V=normal(5, 2), mask=mask(3, 5)),
    case("run_scaled_dot_product_attention", "padded-keys", "the last 2 of 7 keys are padding: no query sees them",
         Q=normal(2, 4, 6), K=normal(2, 7, 6), V=normal(2, 7, 3), mask=mask(2, 4, 7, padded=2)),
    case("run_scaled_dot_product_attention", "noncontiguous-k", "K is a transposed view; 6 queries, 4 keys",
         Q=normal(6, 8), K=normal(4, 8, layout="transposed"), V=normal(4, 3), mask=None),
    case("run_scaled_dot_product_attention", "sharp-scores", "Q, K scaled by 8: scores span hundreds inside one row",
         tolerance=SHARP,
         Q=normal(2, 3, 6, scale=8.0), K=normal(2, 4, 6, scale=8.0), V=normal(2, 4, 5), mask=None),
    # Whole numbers, d_k 16 (scale 1/4, and SDPA's sqrt(1/4) on each side, exact): every score is an exact
    # multiple of 1/4 near -14,000, below a finite fill such as -1e4 (blind trial 11: -1e4 passed every case)
    case("run_scaled_dot_product_attention", "far-negative-scores", "whole-number Q near +60 and K near -60, "
         "d_k 16: every score about -14,000, below a finite mask fill of -1e4; random mask", tolerance=FAR,
         gradient=False,
         Q=ints(2, 4, 16, low=55, high=66, dtype="float32"), K=ints(2, 5, 16, low=-65, high=-54, dtype="float32"),
         V=normal(2, 5, 3), mask=mask(2, 4, 5)),
    case("run_scaled_dot_product_attention", "fp16", "float16 Q [2, 3, 24, 16], K [2, 3, 20, 16], V [2, 3, 20, 12], "
         "random mask: scores and softmax in float32", Q=normal(2, 3, 24, 16, dtype="float16"),
         K=normal(2, 3, 20, 16, dtype="float16"), V=normal(2, 3, 20, 12, dtype="float16"), mask=mask(2, 3, 24, 20)),
    case("run_scaled_dot_product_attention", "hidden-bf16", "", hidden=True, Q=normal(3, 18, 12, dtype="bfloat16"),
         K=normal(3, 22, 12, dtype="bfloat16"), V=normal(3, 22, 10, dtype="bfloat16"), mask=None),
    case("run_scaled_dot_product_attention", "hidden-mixed", "", hidden=True,
         Q=normal(3, 6, 5), K=normal(3, 7, 5), V=normal(3, 7, 3), mask=mask(3, 6, 7)),

    # ---- run_attention_with_bias: a per-head bias broadcast over the batch, masks, 16 bits
    case("run_attention_with_bias", "per-head-bias",
         "Q, K, V [batch 2, heads 3, 5, d]; bias [3, 5, 5], one per head, broadcast over the batch",
         equal=("queries=keys",), Q=normal(2, 3, 5, 4), K=normal(2, 3, 5, 4), V=normal(2, 3, 5, 6),
         bias=normal(3, 5, 5), mask=None),
    case("run_attention_with_bias", "nonsquare-masked",
         "4 queries, 6 keys, d_k=8, d_v=3; bias [4, 6] for every batch row, random mask",
         Q=normal(2, 4, 8), K=normal(2, 6, 8), V=normal(2, 6, 3), bias=normal(4, 6), mask=mask(2, 4, 6)),
    case("run_attention_with_bias", "full-bias-no-batch", "Q [3, 4], K [5, 4], V [5, 2], bias [3, 5]",
         Q=normal(3, 4), K=normal(5, 4), V=normal(5, 2), bias=normal(3, 5), mask=None),
    case("run_attention_with_bias", "bias-spans-hundreds",
         "a bias spread by hundreds inside one row: only the row max bounds exp", tolerance=SHARP,
         Q=normal(2, 3, 6), K=normal(2, 4, 6), V=normal(2, 4, 5), bias=normal(2, 3, 4, scale=80.0), mask=mask(2, 3, 4)),
    case("run_attention_with_bias", "fp16",
         "float16 Q, K, V and bias [heads 2, 4, 6]: within 1 ulp of the float32 result rounded once",
         Q=normal(3, 2, 4, 8, dtype="float16"), K=normal(3, 2, 6, 8, dtype="float16"),
         V=normal(3, 2, 6, 5, dtype="float16"), bias=normal(2, 4, 6, scale=2.0, dtype="float16"), mask=mask(4, 6)),
    case("run_attention_with_bias", "hidden-mixed", "", hidden=True,
         Q=normal(3, 6, 5), K=normal(3, 7, 5), V=normal(3, 7, 3), bias=normal(6, 7), mask=mask(3, 6, 7)),
    case("run_attention_with_bias", "hidden-bf16", "", hidden=True,
         Q=normal(2, 5, 4, dtype="bfloat16"), K=normal(2, 6, 4, dtype="bfloat16"),
         V=normal(2, 6, 3, dtype="bfloat16"), bias=normal(5, 6, dtype="bfloat16"), mask=None),

    # ---- run_multihead_self_attention: heads > 1, batch != seq, any rank
    case("run_multihead_self_attention", "heads-4", "d_model=24, 4 heads of 6, batch 2 != seq 5",
         d_model=24, num_heads=4, q_proj_weight=weight(24, 24), k_proj_weight=weight(24, 24),
         v_proj_weight=weight(24, 24), o_proj_weight=weight(24, 24), in_features=normal(2, 5, 24)),
    case("run_multihead_self_attention", "no-batch", "x [6, 16], 2 heads, no leading dims",
         d_model=16, num_heads=2, q_proj_weight=weight(16, 16), k_proj_weight=weight(16, 16),
         v_proj_weight=weight(16, 16), o_proj_weight=weight(16, 16), in_features=normal(6, 16)),
    case("run_multihead_self_attention", "4d", "x [3, 1, 5, 8], 2 heads",
         d_model=8, num_heads=2, q_proj_weight=weight(8, 8), k_proj_weight=weight(8, 8),
         v_proj_weight=weight(8, 8), o_proj_weight=weight(8, 8), in_features=normal(3, 1, 5, 8)),
    case("run_multihead_self_attention", "sharp-scores", "x [2, 5, 12], 3 heads; large Wq, Wk: scores span hundreds",
         tolerance=SHARP, d_model=12, num_heads=3, q_proj_weight=normal(12, 12, scale=2.0), k_proj_weight=normal(12, 12, scale=2.0),
         v_proj_weight=weight(12, 12), o_proj_weight=weight(12, 12), in_features=normal(2, 5, 12)),
    case("run_multihead_self_attention", "bf16", "bfloat16 x [2, 20, 48] and weights, 4 heads: float32 throughout",
         d_model=48, num_heads=4, q_proj_weight=weight(48, 48, dtype="bfloat16"),
         k_proj_weight=weight(48, 48, dtype="bfloat16"), v_proj_weight=weight(48, 48, dtype="bfloat16"),
         o_proj_weight=weight(48, 48, dtype="bfloat16"), in_features=normal(2, 20, 48, dtype="bfloat16")),
    case("run_multihead_self_attention", "hidden-fp16", "", hidden=True,
         d_model=40, num_heads=5, q_proj_weight=weight(40, 40, dtype="float16"),
         k_proj_weight=weight(40, 40, dtype="float16"), v_proj_weight=weight(40, 40, dtype="float16"),
         o_proj_weight=weight(40, 40, dtype="float16"), in_features=normal(3, 16, 40, dtype="float16")),
    case("run_multihead_self_attention", "hidden-heads-3", "", hidden=True,
         d_model=12, num_heads=3, q_proj_weight=weight(12, 12), k_proj_weight=weight(12, 12),
         v_proj_weight=weight(12, 12), o_proj_weight=weight(12, 12), in_features=normal(2, 5, 12)),
]

UNIT_2_5 = [
    # ---- run_rope: positions are data, not arange
    case("run_rope", "arange", "positions 0..5, x [2, 6, 8]", tolerance=rope_tolerance,
         d_k=8, theta=10000.0, max_seq_len=32, in_query_or_key=normal(2, 6, 8), token_positions=given(list(range(6)))),
    case("run_rope", "offset-gaps-repeats", "positions offset (100+), gapped, repeated and non-monotonic",
         tolerance=rope_tolerance, d_k=8, theta=10000.0, max_seq_len=256, in_query_or_key=normal(2, 5, 8),
         token_positions=given([[100, 103, 103, 90, 250], [0, 7, 7, 3, 1]])),
    case("run_rope", "heads-broadcast", "x [2, 3, 4, 8] (batch, heads, seq, d_k), positions [2, 1, 4]",
         tolerance=rope_tolerance, d_k=8, theta=10000.0, max_seq_len=64, in_query_or_key=normal(2, 3, 4, 8),
         token_positions=given([[[5, 6, 7, 8]], [[40, 2, 33, 9]]])),
    case("run_rope", "theta-500-no-batch", "theta=500, d_k=16, x [3, 16]", tolerance=rope_tolerance,
         d_k=16, theta=500.0, max_seq_len=16, in_query_or_key=normal(3, 16), token_positions=given([3, 9, 15])),
    case("run_rope", "far-positions", "positions up to 4000", tolerance=rope_tolerance,
         d_k=8, theta=10000.0, max_seq_len=4096, in_query_or_key=normal(1, 4, 8),
         token_positions=given([0, 1000, 2048, 4000])),
    case("run_rope", "head-split-view", "x [2, 3, 5, 8] is a head-split view (batch, heads, seq, d_k), positions [2, 1, 5]",
         tolerance=rope_tolerance, d_k=8, theta=10000.0, max_seq_len=64, in_query_or_key=normal(2, 3, 5, 8, layout="heads"),
         token_positions=given([[[4, 9, 9, 0, 31]], [[50, 2, 7, 63, 1]]])),
    case("run_rope", "fp16", "float16 x [3, 20, 32], positions up to 200: rotated in float32, rounded once",
         d_k=32, theta=10000.0, max_seq_len=256, in_query_or_key=normal(3, 20, 32, dtype="float16"),
         token_positions=ints(3, 20, high=200)),
    case("run_rope", "hidden-bf16", "", hidden=True, d_k=24, theta=10000.0, max_seq_len=128,
         in_query_or_key=normal(2, 18, 24, dtype="bfloat16"), token_positions=ints(2, 18, high=128)),
    case("run_rope", "hidden-offset", "", hidden=True, tolerance=rope_tolerance,
         d_k=12, theta=10000.0, max_seq_len=128, in_query_or_key=normal(2, 4, 12),
         token_positions=given([[64, 65, 66, 67], [3, 1, 4, 1]])),

    # ---- run_multihead_self_attention_with_rope
    case("run_multihead_self_attention_with_rope", "default-positions", "token_positions=None (0..seq-1), 4 heads",
         tolerance=rope_tolerance, d_model=24, num_heads=4, max_seq_len=16, theta=10000.0,
         q_proj_weight=weight(24, 24), k_proj_weight=weight(24, 24), v_proj_weight=weight(24, 24),
         o_proj_weight=weight(24, 24), in_features=normal(2, 5, 24), token_positions=None),
    # Shift-only positions cannot catch ignored positions (RoPE attention is shift-invariant):
    # every other case's positions are not arange plus a constant.
    case("run_multihead_self_attention_with_rope", "offset-positions", "positions 50..55 shared by the batch",
         tolerance=rope_tolerance, d_model=20, num_heads=2, max_seq_len=64, theta=10000.0,
         q_proj_weight=weight(20, 20), k_proj_weight=weight(20, 20), v_proj_weight=weight(20, 20),
         o_proj_weight=weight(20, 20), in_features=normal(3, 6, 20), token_positions=given(list(range(50, 56)))),
    case("run_multihead_self_attention_with_rope", "gapped-repeated",
         "per-row positions [3, 5], gapped, repeated, unsorted; batch 3 != heads 2",
         tolerance=rope_tolerance, d_model=16, num_heads=2, max_seq_len=128, theta=10000.0,
         q_proj_weight=weight(16, 16), k_proj_weight=weight(16, 16), v_proj_weight=weight(16, 16),
         o_proj_weight=weight(16, 16), in_features=normal(3, 5, 16),
         token_positions=given([[0, 2, 2, 9, 4], [100, 30, 31, 31, 7], [6, 60, 1, 33, 12]])),
    case("run_multihead_self_attention_with_rope", "theta-500-sharp",
         "theta=500, 3 heads of 4, gapped positions; large Wq, Wk: scores span hundreds",
         tolerance=SHARP, d_model=12, num_heads=3, max_seq_len=32, theta=500.0,
         q_proj_weight=normal(12, 12, scale=2.0), k_proj_weight=normal(12, 12, scale=2.0),
         v_proj_weight=weight(12, 12), o_proj_weight=weight(12, 12), in_features=normal(2, 5, 12),
         token_positions=given([3, 0, 7, 7, 12])),
    case("run_multihead_self_attention_with_rope", "bf16", "bfloat16 x [2, 18, 40] and weights, 5 heads: float32 "
         "throughout", d_model=40, num_heads=5, max_seq_len=64, theta=10000.0,
         q_proj_weight=weight(40, 40, dtype="bfloat16"), k_proj_weight=weight(40, 40, dtype="bfloat16"),
         v_proj_weight=weight(40, 40, dtype="bfloat16"), o_proj_weight=weight(40, 40, dtype="bfloat16"),
         in_features=normal(2, 18, 40, dtype="bfloat16"), token_positions=ints(2, 18, high=64)),
    case("run_multihead_self_attention_with_rope", "hidden-fp16", "", hidden=True,
         d_model=48, num_heads=4, max_seq_len=32, theta=10000.0,
         q_proj_weight=weight(48, 48, dtype="float16"), k_proj_weight=weight(48, 48, dtype="float16"),
         v_proj_weight=weight(48, 48, dtype="float16"), o_proj_weight=weight(48, 48, dtype="float16"),
         in_features=normal(3, 14, 48, dtype="float16"), token_positions=None),
    case("run_multihead_self_attention_with_rope", "hidden-positions", "", hidden=True,
         tolerance=rope_tolerance, d_model=12, num_heads=3, max_seq_len=64, theta=1000.0,
         q_proj_weight=weight(12, 12), k_proj_weight=weight(12, 12), v_proj_weight=weight(12, 12),
         o_proj_weight=weight(12, 12), in_features=normal(2, 5, 12),
         token_positions=given([[20, 3, 17, 17, 9], [0, 40, 41, 12, 5]])),
]

MODEL = [
    # ---- run_rmsnorm: gains, eps, dtypes
    case("run_rmsnorm", "gains", "gains != 1, x [2, 3, 8]",
         d_model=8, eps=1e-5, weights=gain(8), in_features=normal(2, 3, 8)),
    case("run_rmsnorm", "1d", "x [8]", d_model=8, eps=1e-5, weights=gain(8), in_features=normal(8, scale=2.0)),
    case("run_rmsnorm", "4d", "x [2, 2, 2, 8]",
         d_model=8, eps=1e-5, weights=gain(8), in_features=normal(2, 2, 2, 8)),
    case("run_rmsnorm", "tiny-inputs", "|x| about 1e-3 with eps=1e-4: eps dominates, so it must be the argument",
         d_model=8, eps=1e-4, weights=gain(8), in_features=normal(3, 8, scale=1e-3)),
    case("run_rmsnorm", "fp16-large", "float16 inputs of magnitude about 300: x**2 overflows fp16",
         tolerance=(1e-3, 2e-3), d_model=8, eps=1e-5, weights=normal(8, scale=0.3, offset=1.0, dtype="float16"),
         in_features=normal(2, 8, scale=300.0, dtype="float16")),
    case("run_rmsnorm", "bf16-input-fp32-gains", "bfloat16 x with float32 gains (mixed precision): the output is bfloat16",
         tolerance=(1e-2, 1.6e-2), d_model=8, eps=1e-5, weights=gain(8), in_features=normal(3, 8, dtype="bfloat16")),
    case("run_rmsnorm", "noncontiguous-3d", "x [3, 5, 8] is a view with its first two axes swapped (seq-major storage)",
         d_model=8, eps=1e-5, weights=gain(8), in_features=normal(3, 5, 8, layout="heads")),
    case("run_rmsnorm", "bf16", "bfloat16 inputs: the output stays bfloat16",
         tolerance=(1e-2, 1.6e-2), d_model=8, eps=1e-5, weights=normal(8, scale=0.3, offset=1.0, dtype="bfloat16"),
         in_features=normal(3, 8, dtype="bfloat16")),
    case("run_rmsnorm", "bf16-d12-eps-1e-3", "bfloat16 x [4, 6, 12], eps=1e-3: within 1 ulp of float32 rounded once",
         d_model=12, eps=1e-3, weights=normal(12, scale=0.3, offset=1.0, dtype="bfloat16"),
         in_features=normal(4, 6, 12, dtype="bfloat16")),
    case("run_rmsnorm", "hidden-fp16-wide", "", hidden=True, d_model=48, eps=1e-5,
         weights=gain(48, dtype="float16"), in_features=normal(10, 48, dtype="float16")),
    case("run_rmsnorm", "hidden-wide", "", hidden=True,
         d_model=16, eps=1e-6, weights=gain(16), in_features=normal(2, 4, 16, scale=0.5)),

    # ---- run_swiglu: d_ff is given, not derived
    case("run_swiglu", "3d", "d_model=8, d_ff=12, x [2, 3, 8]",
         d_model=8, d_ff=12, w1_weight=weight(12, 8), w2_weight=weight(8, 12), w3_weight=weight(12, 8),
         in_features=normal(2, 3, 8)),
    case("run_swiglu", "1d", "x [8], d_ff=20", d_model=8, d_ff=20, w1_weight=weight(20, 8),
         w2_weight=weight(8, 20), w3_weight=weight(20, 8), in_features=normal(8)),
    case("run_swiglu", "noncontiguous", "x is a transposed view [6, 8]",
         d_model=8, d_ff=12, w1_weight=weight(12, 8), w2_weight=weight(8, 12), w3_weight=weight(12, 8),
         in_features=normal(6, 8, layout="transposed")),
    case("run_swiglu", "large-gate", "d_model=6, d_ff=10, large W1: SiLU's input spans hundreds",
         d_model=6, d_ff=10, w1_weight=normal(10, 6, scale=30.0), w2_weight=weight(6, 10), w3_weight=weight(10, 6),
         in_features=normal(3, 6)),
    case("run_swiglu", "bf16", "bfloat16 x [12, 32] and weights, d_ff=80: float32 throughout, rounded once",
         d_model=32, d_ff=80, w1_weight=weight(80, 32, dtype="bfloat16"), w2_weight=weight(32, 80, dtype="bfloat16"),
         w3_weight=weight(80, 32, dtype="bfloat16"), in_features=normal(12, 32, dtype="bfloat16")),
    case("run_swiglu", "hidden-fp16", "", hidden=True,
         d_model=24, d_ff=64, w1_weight=weight(64, 24, dtype="float16"), w2_weight=weight(24, 64, dtype="float16"),
         w3_weight=weight(64, 24, dtype="float16"), in_features=normal(2, 9, 24, dtype="float16")),
    case("run_swiglu", "hidden-4d", "", hidden=True,
         d_model=8, d_ff=16, w1_weight=weight(16, 8), w2_weight=weight(8, 16), w3_weight=weight(16, 8),
         in_features=normal(2, 2, 2, 8)),

    # ---- run_transformer_block
    case("run_transformer_block", "block", "d_model=24, 4 heads, d_ff=40, batch 2 != seq 7",
         d_model=24, num_heads=4, d_ff=40, max_seq_len=16, theta=10000.0,
         weights=block_weights(24, 40), in_features=normal(2, 7, 24)),
    case("run_transformer_block", "one-sequence", "batch 1, seq 9, 2 heads",
         d_model=8, num_heads=2, d_ff=20, max_seq_len=12, theta=10000.0,
         weights=block_weights(8, 20), in_features=normal(1, 9, 8)),
    case("run_transformer_block", "theta-500-sharp", "theta=500, 3 heads of 4; large Wq, Wk: scores span hundreds",
         tolerance=SHARP_NORMED, d_model=12, num_heads=3, d_ff=20, max_seq_len=10, theta=500.0,
         weights=sharp(block_weights(12, 20), "attn."), in_features=normal(2, 7, 12)),
    case("run_transformer_block", "bf16", "bfloat16 x [2, 14, 32] and weights, 4 heads, d_ff=72: float32 throughout",
         d_model=32, num_heads=4, d_ff=72, max_seq_len=16, theta=10000.0,
         weights=block_weights(32, 72, dtype="bfloat16"), in_features=normal(2, 14, 32, dtype="bfloat16")),
    case("run_transformer_block", "hidden-fp16", "", hidden=True,
         d_model=24, num_heads=3, d_ff=56, max_seq_len=12, theta=10000.0,
         weights=block_weights(24, 56, dtype="float16"), in_features=normal(2, 10, 24, dtype="float16")),
    case("run_transformer_block", "hidden-block", "", hidden=True,
         d_model=12, num_heads=3, d_ff=16, max_seq_len=8, theta=1000.0,
         weights=block_weights(12, 16), in_features=normal(2, 5, 12)),

    # ---- run_transformer_lm: random non-unit weights; full and truncated inputs
    case("run_transformer_lm", "full-context", "V=32, T=12, d_model=16, 2 layers, 2 heads; ids [3, 12] fill the context",
         tolerance=(1e-4, 1e-4), vocab_size=32, context_length=12, d_model=16, num_layers=2, num_heads=2,
         d_ff=24, rope_theta=10000.0, weights=lm_weights(32, 16, 2, 24), in_indices=ints(3, 12, high=32)),
    case("run_transformer_lm", "truncated", "V=26, d_model=12, 2 layers, 3 heads; ids [2, 5]: fewer tokens than "
         "context_length=11", tolerance=(1e-4, 1e-4), vocab_size=26, context_length=11, d_model=12, num_layers=2,
         num_heads=3, d_ff=20, rope_theta=10000.0, weights=lm_weights(26, 12, 2, 20), in_indices=ints(2, 5, high=26)),
    case("run_transformer_lm", "theta-500-sharp", "V=36, T=10, d_model=16, 1 layer, 2 heads, theta=500; large Wq, Wk",
         tolerance=SHARP_NORMED, vocab_size=36, context_length=10, d_model=16, num_layers=1, num_heads=2,
         d_ff=28, rope_theta=500.0, weights=sharp(lm_weights(36, 16, 1, 28), "layers.0.attn."),
         in_indices=ints(3, 6, high=36)),
    case("run_transformer_lm", "bf16", "bfloat16 weights, V=48, d_model=24, 1 layer, 3 heads: float32 throughout, "
         "the logits rounded once", vocab_size=48, context_length=16, d_model=24, num_layers=1, num_heads=3,
         d_ff=40, rope_theta=10000.0, weights=lm_weights(48, 24, 1, 40, dtype="bfloat16"), in_indices=ints(2, 12, high=48)),
    case("run_transformer_lm", "hidden-fp16", "", hidden=True, vocab_size=40, context_length=12, d_model=16,
         num_layers=1, num_heads=2, d_ff=36, rope_theta=10000.0, weights=lm_weights(40, 16, 1, 36, dtype="float16"),
         in_indices=ints(3, 10, high=40)),
    case("run_transformer_lm", "hidden-lm", "", hidden=True, tolerance=(1e-4, 1e-4),
         vocab_size=30, context_length=8, d_model=12, num_layers=1, num_heads=3, d_ff=20, rope_theta=500.0,
         weights=lm_weights(30, 12, 1, 20), in_indices=ints(2, 7, high=30)),
]

GPT2 = [
    # ---- run_layernorm: mean subtracted, biased variance, eps inside the root, bias, dtypes
    case("run_layernorm", "gain-bias", "gains != 1, biases != 0, x [2, 3, 8]",
         d_model=8, weight=gain(8), bias=bias(8), in_features=normal(2, 3, 8)),
    case("run_layernorm", "1d", "x [10], no leading dims", d_model=10, weight=gain(10), bias=bias(10),
         in_features=normal(10, scale=2.0)),
    case("run_layernorm", "4d", "x [2, 1, 3, 6]", d_model=6, weight=gain(6), bias=bias(6),
         in_features=normal(2, 1, 3, 6)),
    case("run_layernorm", "tiny-inputs-eps", "|x| about 1e-3 with eps=1e-3: eps dominates var, so where it goes shows",
         d_model=8, eps=1e-3, weight=gain(8), bias=bias(8), in_features=normal(3, 8, scale=1e-3)),
    # float32 x near 500 is stored to 3e-5, so a correct float32 mean is off by about that: atol 1e-4.
    # One-pass E[x^2] - E[x]^2 loses about 0.5% of the variance here, 25 times more.
    case("run_layernorm", "offset-500", "x about 500 +- 3 in every slice: E[x^2] - E[x]^2 cancels in float32",
         tolerance=(1e-4, 1e-4), d_model=12, weight=gain(12), bias=bias(12), in_features=normal(4, 12, scale=3.0, offset=500.0)),
    case("run_layernorm", "fp16-large", "float16 x of magnitude about 300: (x - mean)^2 overflows fp16",
         tolerance=(1e-3, 2e-3), d_model=8, weight=normal(8, scale=0.3, offset=1.0, dtype="float16"),
         bias=normal(8, scale=0.3, dtype="float16"), in_features=normal(2, 8, scale=300.0, dtype="float16")),
    case("run_layernorm", "bf16-input-fp32-params", "bfloat16 x with float32 weight and bias: the output is bfloat16",
         tolerance=(1e-2, 1.6e-2), d_model=8, weight=gain(8), bias=bias(8), in_features=normal(3, 8, dtype="bfloat16")),
    case("run_layernorm", "noncontiguous-3d", "x [3, 5, 8] is a view with its first two axes swapped",
         d_model=8, weight=gain(8), bias=bias(8), in_features=normal(3, 5, 8, layout="heads")),
    case("run_layernorm", "fp16-wide", "float16 x [8, 64], weight and bias: normalise and apply the affine in float32",
         d_model=64, weight=gain(64, dtype="float16"), bias=bias(64, dtype="float16"),
         in_features=normal(8, 64, scale=2.0, dtype="float16")),
    case("run_layernorm", "hidden-bf16-wide", "", hidden=True, d_model=48, weight=gain(48, dtype="bfloat16"),
         bias=bias(48, dtype="bfloat16"), in_features=normal(2, 6, 48, scale=2.0, dtype="bfloat16")),
    case("run_layernorm", "hidden-wide", "", hidden=True,
         d_model=16, eps=1e-6, weight=gain(16), bias=bias(16), in_features=normal(2, 4, 16, scale=0.5)),

    # ---- run_gelu: the exact form, and tanh only when asked
    case("run_gelu", "3d", "[2, 3, 4], exact", in_features=normal(2, 3, 4, scale=3.0)),
    case("run_gelu", "tanh-1d", "[9], approximate='tanh'", in_features=normal(9, scale=3.0), approximate="tanh"),
    case("run_gelu", "wide-range", "[5, 7], |x| up to about 20", in_features=normal(5, 7, scale=8.0)),
    case("run_gelu", "fp16", "float16 [16, 48], |x| up to about 10: computed in float32, rounded once",
         in_features=normal(16, 48, scale=3.0, dtype="float16")),
    case("run_gelu", "hidden-bf16-tanh", "", hidden=True, in_features=normal(20, 30, scale=3.0, dtype="bfloat16"),
         approximate="tanh"),
    case("run_gelu", "hidden-4d", "", hidden=True, in_features=normal(2, 1, 2, 3, scale=3.0)),
    raises("run_gelu", "unknown-approximate", "approximate='sigmoid' is neither 'none' nor 'tanh'",
           in_features=normal(4), approximate="sigmoid"),

    # ---- run_gpt2_mlp: biases, GELU form, d_ff given
    case("run_gpt2_mlp", "3d", "d_model=8, d_ff=20, x [2, 3, 8]",
         d_model=8, d_ff=20, c_fc_weight=weight(20, 8), c_fc_bias=bias(20), c_proj_weight=weight(8, 20),
         c_proj_bias=bias(8), in_features=normal(2, 3, 8)),
    case("run_gpt2_mlp", "tanh-1d", "x [10], d_ff=12, approximate='tanh' (GPT-2's GELU)",
         d_model=10, d_ff=12, c_fc_weight=weight(12, 10), c_fc_bias=bias(12), c_proj_weight=weight(10, 12),
         c_proj_bias=bias(10), in_features=normal(10), approximate="tanh"),
    case("run_gpt2_mlp", "noncontiguous", "x is a transposed view [6, 8]",
         d_model=8, d_ff=12, c_fc_weight=weight(12, 8), c_fc_bias=bias(12), c_proj_weight=weight(8, 12),
         c_proj_bias=bias(8), in_features=normal(6, 8, layout="transposed")),
    case("run_gpt2_mlp", "bf16", "bfloat16 x [10, 24], weights and biases, d_ff=64: float32 throughout, rounded once",
         d_model=24, d_ff=64, c_fc_weight=weight(64, 24, dtype="bfloat16"), c_fc_bias=bias(64, dtype="bfloat16"),
         c_proj_weight=weight(24, 64, dtype="bfloat16"), c_proj_bias=bias(24, dtype="bfloat16"),
         in_features=normal(10, 24, dtype="bfloat16")),
    case("run_gpt2_mlp", "hidden-fp16", "", hidden=True,
         d_model=20, d_ff=72, c_fc_weight=weight(72, 20, dtype="float16"), c_fc_bias=bias(72, dtype="float16"),
         c_proj_weight=weight(20, 72, dtype="float16"), c_proj_bias=bias(20, dtype="float16"),
         in_features=normal(2, 7, 20, dtype="float16")),
    case("run_gpt2_mlp", "hidden-wide", "", hidden=True,
         d_model=12, d_ff=40, c_fc_weight=weight(40, 12), c_fc_bias=bias(40), c_proj_weight=weight(12, 40),
         c_proj_bias=bias(12), in_features=normal(2, 5, 12)),

    # ---- run_grouped_query_attention: groups > 1 (repeat_interleave), MQA, plain MHA, RoPE
    case("run_grouped_query_attention", "gqa-8-2",
         "8 query heads share 2 kv heads (groups of 4), d_k=3, batch 4 != seq 5; large Wq, Wk: scores span hundreds",
         tolerance=SHARP, d_model=24, num_heads=8, num_kv_heads=2, q_proj_weight=normal(24, 24, scale=2.0),
         k_proj_weight=normal(6, 24, scale=2.0),
         v_proj_weight=weight(6, 24), o_proj_weight=weight(24, 24), in_features=normal(4, 5, 24)),
    case("run_grouped_query_attention", "mqa", "multi-query: 4 query heads, 1 kv head, x [7, 20] (no batch)",
         equal=("d_head=d_kv",),
         d_model=20, num_heads=4, num_kv_heads=1, q_proj_weight=weight(20, 20), k_proj_weight=weight(5, 20),
         v_proj_weight=weight(5, 20), o_proj_weight=weight(20, 20), in_features=normal(7, 20)),
    case("run_grouped_query_attention", "mha", "num_kv_heads == num_heads == 3: plain multi-head attention",
         equal=("d_kv=d_model", "heads=kv_heads"),
         d_model=12, num_heads=3, num_kv_heads=3, q_proj_weight=weight(12, 12), k_proj_weight=weight(12, 12),
         v_proj_weight=weight(12, 12), o_proj_weight=weight(12, 12), in_features=normal(2, 5, 12)),
    case("run_grouped_query_attention", "rope-gapped-positions",
         "RoPE (theta=500), 6 query heads in groups of 2, positions [2, 7] gapped, repeated, unsorted",
         tolerance=rope_tolerance, d_model=24, num_heads=6, num_kv_heads=3, q_proj_weight=weight(24, 24),
         k_proj_weight=weight(12, 24), v_proj_weight=weight(12, 24), o_proj_weight=weight(24, 24),
         in_features=normal(2, 7, 24), theta=500.0, max_seq_len=64,
         token_positions=given([[0, 9, 9, 3, 40, 1, 17], [60, 2, 33, 34, 5, 5, 11]])),
    case("run_grouped_query_attention", "rope-default-positions", "RoPE with token_positions=None (0..seq-1), 4d x",
         tolerance=rope_tolerance, d_model=32, num_heads=4, num_kv_heads=2, q_proj_weight=weight(32, 32),
         k_proj_weight=weight(16, 32), v_proj_weight=weight(16, 32), o_proj_weight=weight(32, 32),
         in_features=normal(3, 1, 6, 32), theta=10000.0, max_seq_len=24, token_positions=None),
    case("run_grouped_query_attention", "fp16", "float16 x [3, 12, 32] and weights, 4 query heads, 2 kv heads: "
         "float32 throughout", d_model=32, num_heads=4, num_kv_heads=2, q_proj_weight=weight(32, 32, dtype="float16"),
         k_proj_weight=weight(16, 32, dtype="float16"), v_proj_weight=weight(16, 32, dtype="float16"),
         o_proj_weight=weight(32, 32, dtype="float16"), in_features=normal(3, 12, 32, dtype="float16")),
    case("run_grouped_query_attention", "hidden-bf16", "", hidden=True,
         d_model=40, num_heads=4, num_kv_heads=2, q_proj_weight=weight(40, 40, dtype="bfloat16"),
         k_proj_weight=weight(20, 40, dtype="bfloat16"), v_proj_weight=weight(20, 40, dtype="bfloat16"),
         o_proj_weight=weight(40, 40, dtype="bfloat16"), in_features=normal(3, 11, 40, dtype="bfloat16"),
         theta=10000.0, max_seq_len=16),
    case("run_grouped_query_attention", "hidden-rope", "", hidden=True, tolerance=rope_tolerance,
         d_model=40, num_heads=4, num_kv_heads=2, q_proj_weight=weight(40, 40), k_proj_weight=weight(20, 40),
         v_proj_weight=weight(20, 40), o_proj_weight=weight(40, 40), in_features=normal(3, 7, 40),
         theta=10000.0, max_seq_len=32, token_positions=given([4, 0, 30, 12, 12, 7, 1])),

    # ---- run_gpt2_block: pre-LN, biases everywhere, eps passed through
    case("run_gpt2_block", "block", "d_model=20, 4 heads, d_ff=36, batch 2 != seq 7",
         d_model=20, num_heads=4, d_ff=36, weights=gpt2_block_weights(20, 36), in_features=normal(2, 7, 20)),
    case("run_gpt2_block", "eps-1e-3", "eps=1e-3, 2 heads, batch 3 != seq 5; large Wq, Wk: scores span hundreds",
         tolerance=SHARP_NORMED, d_model=8, num_heads=2, d_ff=20, eps=1e-3, weights=sharp(gpt2_block_weights(8, 20), "attn."),
         in_features=normal(3, 5, 8)),
    case("run_gpt2_block", "bf16", "bfloat16 x [2, 10, 24] and weights, 3 heads, d_ff=56: float32 throughout",
         d_model=24, num_heads=3, d_ff=56, weights=gpt2_block_weights(24, 56, dtype="bfloat16"),
         in_features=normal(2, 10, 24, dtype="bfloat16")),
    case("run_gpt2_block", "hidden-fp16", "", hidden=True, d_model=20, num_heads=4, d_ff=48,
         weights=gpt2_block_weights(20, 48, dtype="float16"), in_features=normal(3, 9, 20, dtype="float16")),
    case("run_gpt2_block", "hidden-block", "", hidden=True,
         d_model=12, num_heads=3, d_ff=16, weights=gpt2_block_weights(12, 16), in_features=normal(2, 5, 12)),

    # ---- run_gpt2_lm: learned positions, tied head
    case("run_gpt2_lm", "full-context", "V=32, T=12, d_model=20, 2 layers, 4 heads; ids [2, 12] fill the context",
         tolerance=(1e-4, 1e-4), vocab_size=32, context_length=12, d_model=20, num_layers=2, num_heads=4, d_ff=28,
         weights=gpt2_lm_weights(32, 12, 20, 2, 28), in_indices=ints(2, 12, high=32)),
    case("run_gpt2_lm", "truncated", "one layer, ids [2, 5]: fewer tokens than context_length=10; large Wq, Wk",
         tolerance=SHARP_NORMED, vocab_size=30, context_length=10, d_model=12, num_layers=1, num_heads=3, d_ff=20,
         weights=sharp(gpt2_lm_weights(30, 10, 12, 1, 20), "layers.0.attn."), in_indices=ints(2, 5, high=30)),
    case("run_gpt2_lm", "tiny-stream", "V=26, T=8, d_model=18, 1 layer: a residual stream near 1e-3, where each "
         "LayerNorm's eps (1e-5) shows", vocab_size=26, context_length=8, d_model=18, num_layers=1, num_heads=3,
         d_ff=28, weights=tiny_stream(gpt2_lm_weights(26, 8, 18, 1, 28)), in_indices=ints(2, 5, high=26)),
    case("run_gpt2_lm", "bf16", "bfloat16 weights, V=40, T=14, d_model=16, 1 layer, 2 heads: float32 throughout, "
         "the logits rounded once", vocab_size=40, context_length=14, d_model=16, num_layers=1, num_heads=2, d_ff=36,
         weights=gpt2_lm_weights(40, 14, 16, 1, 36, dtype="bfloat16"), in_indices=ints(3, 10, high=40)),
    case("run_gpt2_lm", "hidden-fp16", "", hidden=True, vocab_size=36, context_length=12, d_model=24, num_layers=1,
         num_heads=3, d_ff=40, weights=gpt2_lm_weights(36, 12, 24, 1, 40, dtype="float16"), in_indices=ints(2, 9, high=36)),
    case("run_gpt2_lm", "hidden-lm", "", hidden=True, tolerance=(1e-4, 1e-4),
         vocab_size=25, context_length=9, d_model=8, num_layers=1, num_heads=2, d_ff=12,
         weights=gpt2_lm_weights(25, 9, 8, 1, 12), in_indices=ints(3, 7, high=25)),
    raises("run_gpt2_lm", "longer-than-context", "seq 7 > context_length 6: there is no position vector for it",
           vocab_size=10, context_length=6, d_model=8, num_layers=1, num_heads=2, d_ff=12,
           weights=gpt2_lm_weights(10, 6, 8, 1, 12), in_indices=ints(1, 7, high=10)),
]

ACCOUNTING = [
    case("run_transformer_accounting", "gpt2-xl", "GPT-2 XL shape (V=50257, T=1024, L=48, d=1600, H=25, d_ff=6400)",
         vocab_size=50257, context_length=1024, d_model=1600, num_layers=48, num_heads=25, d_ff=6400),
    case("run_transformer_accounting", "gpt2-small", "GPT-2 small shape (L=12, d=768, H=12, d_ff=3072)",
         vocab_size=50257, context_length=1024, d_model=768, num_layers=12, num_heads=12, d_ff=3072),
    case("run_transformer_accounting", "tinystories", "TinyStories (V=10000, T=256, L=4, d=512, H=16, d_ff=1344)",
         vocab_size=10000, context_length=256, d_model=512, num_layers=4, num_heads=16, d_ff=1344),
    case("run_transformer_accounting", "fixture-lm", "the config of the run_transformer_lm fixtures",
         vocab_size=40, context_length=12, d_model=24, num_layers=2, num_heads=4, d_ff=36),
    case("run_transformer_accounting", "hidden-config", "", hidden=True,
         vocab_size=32000, context_length=2048, d_model=1024, num_layers=16, num_heads=16, d_ff=2816),
    case("run_transformer_accounting", "llama2-70b-gqa",
         "Llama 2 70B shape with GQA (64 query heads, 8 kv heads), 4 sequences of 4096, bfloat16 cache",
         vocab_size=32000, context_length=4096, d_model=8192, num_layers=80, num_heads=64, d_ff=28672,
         num_kv_heads=8, batch_size=4, kv_cache_dtype="bfloat16"),
    case("run_transformer_accounting", "tinystories-mqa", "TinyStories shape with multi-query attention, float16 cache",
         vocab_size=10000, context_length=256, d_model=512, num_layers=4, num_heads=16, d_ff=1344,
         num_kv_heads=1, batch_size=32, kv_cache_dtype="float16"),
    case("run_transformer_accounting", "hidden-gqa", "", hidden=True,
         vocab_size=50000, context_length=2048, d_model=2048, num_layers=24, num_heads=32, d_ff=5632,
         num_kv_heads=4, batch_size=8, kv_cache_dtype="bfloat16"),
    case("run_gpt2_accounting", "gpt2-small", "GPT-2 small (V=50257, T=1024, d=768, 12 layers, 12 heads, d_ff=3072)",
         vocab_size=50257, context_length=1024, d_model=768, num_layers=12, num_heads=12, d_ff=3072),
    case("run_gpt2_accounting", "gpt2-medium-bf16", "GPT-2 medium (d=1024, 24 layers, 16 heads), 8 sequences, bfloat16 cache",
         vocab_size=50257, context_length=1024, d_model=1024, num_layers=24, num_heads=16, d_ff=4096,
         batch_size=8, kv_cache_dtype="bfloat16"),
    case("run_gpt2_accounting", "fixture-lm", "the config of the run_gpt2_lm fixtures, 2 sequences, float16 cache",
         vocab_size=40, context_length=12, d_model=24, num_layers=2, num_heads=4, d_ff=36,
         batch_size=2, kv_cache_dtype="float16"),
    case("run_gpt2_accounting", "hidden-xl", "", hidden=True,
         vocab_size=50257, context_length=1024, d_model=1600, num_layers=48, num_heads=25, d_ff=6400,
         batch_size=3, kv_cache_dtype="bfloat16"),
    case("run_training_accounting", "gpt2-small-fp32", "GPT-2 small shape, 8 sequences, everything in float32 "
         "(16 bytes a parameter)", vocab_size=50257, context_length=1024, d_model=768, num_layers=12, num_heads=12,
         d_ff=3072, batch_size=8, param_dtype="float32", optimizer_dtype="float32"),
    case("run_training_accounting", "gpt2-xl-bf16", "GPT-2 XL shape, 4 sequences, bfloat16 parameters and gradients, "
         "float32 moments", vocab_size=50257, context_length=1024, d_model=1600, num_layers=48, num_heads=25,
         d_ff=6400, batch_size=4, param_dtype="bfloat16", optimizer_dtype="float32"),
    case("run_training_accounting", "tinystories-bf16-moments", "TinyStories shape, 32 sequences, float32 parameters, "
         "bfloat16 moments", vocab_size=10000, context_length=256, d_model=512, num_layers=4, num_heads=16,
         d_ff=1344, batch_size=32, param_dtype="float32", optimizer_dtype="bfloat16"),
    case("run_training_accounting", "gpt2-medium-fp16", "GPT-2 medium shape, 2 sequences, float16 parameters and "
         "gradients (2 bytes each), float32 moments", vocab_size=50257, context_length=1024, d_model=1024,
         num_layers=24, num_heads=16, d_ff=4096, batch_size=2, param_dtype="float16", optimizer_dtype="float32"),
    case("run_training_accounting", "fixture-lm", "the config of the run_transformer_lm fixtures, one sequence, "
         "the default dtypes", vocab_size=40, context_length=12, d_model=24, num_layers=2, num_heads=4, d_ff=36),
    case("run_training_accounting", "hidden-xl-like", "", hidden=True,
         vocab_size=50304, context_length=2048, d_model=1280, num_layers=36, num_heads=20, d_ff=5120,
         batch_size=16, param_dtype="float16", optimizer_dtype="float32"),
    case("run_training_accounting", "hidden-small-like", "", hidden=True,
         vocab_size=32000, context_length=512, d_model=640, num_layers=8, num_heads=10, d_ff=2560,
         batch_size=12, param_dtype="float32", optimizer_dtype="float32"),
]

# Confident predictions: the target's logit 12 above the others (blind trial: a cross-entropy computed in
# float16 returned 0.0 for a loss of 5.5e-6, and no random case caught it: a mean of larger losses hides it).
CONFIDENT_TARGETS = [(5 * i + 3) % 16 for i in range(16)]
CONFIDENT = [[12.0 if j == t else 0.25 * ((3 * i + 5 * j) % 7) for j in range(16)] for i, t in enumerate(CONFIDENT_TARGETS)]

# Train it: the loss, clipping, batches, checkpoints.
TRAIN_PIECES: list[Spec] = [
    # ---- run_cross_entropy: any leading dims, large logits, low precision
    case("run_cross_entropy", "batch-vocab", "logits [6, 11], CS336's [batch, vocab] layout",
         inputs=normal(6, 11, scale=2.0), targets=ints(6, high=11)),
    case("run_cross_entropy", "lm-3d", "LM logits [2, 5, 13] and targets [2, 5]: the mean over all 10 positions",
         inputs=normal(2, 5, 13, scale=2.0), targets=ints(2, 5, high=13)),
    case("run_cross_entropy", "4d", "logits [2, 1, 3, 7]", inputs=normal(2, 1, 3, 7), targets=ints(2, 1, 3, high=7)),
    case("run_cross_entropy", "offset-1000", "logits about +1000 (rows 4 x 9): exp(1000) overflows float32",
         inputs=normal(4, 9, scale=3.0, offset=1000.0), targets=ints(4, high=9)),
    case("run_cross_entropy", "offset-minus-1000", "logits about -1000: exp(-1000) underflows to 0, log(0) = -inf",
         inputs=normal(3, 10, scale=3.0, offset=-1000.0), targets=ints(3, high=10)),
    case("run_cross_entropy", "spread-1000", "logits spanning about +-1000 inside each row [5, 8]",
         inputs=normal(5, 8, scale=500.0), targets=ints(5, high=8)),
    case("run_cross_entropy", "bf16", "bfloat16 logits [24, 16]: the loss is bfloat16, computed in float32",
         inputs=normal(24, 16, scale=3.0, dtype="bfloat16"), targets=ints(24, high=16)),
    case("run_cross_entropy", "fp16-confident", "float16 logits [16, 16], each target 12 above the rest: a loss "
         "of about 1e-4 that 1 + exp(-12) in 16 bits rounds to 0", inputs=given(CONFIDENT, dtype="float16", fresh="noise"),
         targets=given(CONFIDENT_TARGETS, fresh="keep")),
    case("run_cross_entropy", "fp16-large", "float16 logits of size about 30 [3, 14]: exp overflows float16 above 11",
         inputs=normal(3, 14, scale=30.0, dtype="float16"), targets=ints(3, high=14)),
    case("run_cross_entropy", "hidden-lm", "", hidden=True,
         inputs=normal(3, 4, 17, scale=5.0), targets=ints(3, 4, high=17)),

    # ---- run_clip_gradients (run_gradient_clipping): one global norm, frozen parameters, low precision
    case("run_clip_gradients", "above-max", "3 gradients of joint norm about 5 > 0.5, one frozen parameter",
         gradients={"w": normal(4, 3), "b": normal(5), "e": normal(2, 3, 2)}, max_l2_norm=0.5, num_without_grad=1),
    case("run_clip_gradients", "below-max", "joint norm about 4 < 100: the gradients stay exactly as they are",
         tolerance=EXACT, gradients={"w": normal(3, 4), "b": normal(6)}, max_l2_norm=100.0),
    case("run_clip_gradients", "cs336", "CS336's test: 6 gradients [5, 5] (5 with .grad), max 0.01, 1 frozen",
         gradients={f"p{i}": normal(5, 5) for i in range(5)}, max_l2_norm=0.01, num_without_grad=1),
    case("run_clip_gradients", "mixed-norms", "one large gradient, two small ones below the max on their own",
         gradients={"big": normal(4, 4, scale=3.0), "small": normal(3, scale=0.05), "tiny": normal(2, 2, scale=0.01)},
         max_l2_norm=1.0, num_without_grad=2),
    case("run_clip_gradients", "small-norm", "joint norm about 1e-3 > max 1e-4: there CS336's + 1e-6 in the scale "
         "moves it by 1e-3, which a scale without it misses", tolerance=(1e-12, 1e-5),
         gradients={"w": normal(3, 4, scale=2e-4), "b": normal(5, scale=2e-4)}, max_l2_norm=1e-4),
    case("run_clip_gradients", "fp16-large", "float16 gradients of size about 300: their squares overflow float16",
         gradients={"w": normal(4, 5, scale=300.0, dtype="float16"), "b": normal(5, scale=300.0, dtype="float16")},
         max_l2_norm=1.0),
    case("run_clip_gradients", "bf16", "bfloat16 gradients, norm about 4 > 2",
         gradients={"w": normal(3, 5, dtype="bfloat16"), "b": normal(2, dtype="bfloat16")}, max_l2_norm=2.0),
    case("run_clip_gradients", "hidden-mixed", "", hidden=True,
         gradients={"a": normal(6, 2), "b": normal(3, scale=0.1), "c": normal(2, 2, 2)}, max_l2_norm=0.3,
         num_without_grad=1),

    # ---- run_sample_batches (run_get_batch): with one possible start the batches are determined; the
    # random draws (uniform starts, every start, none past the end) are tests/test_training.py's
    case("run_sample_batches", "one-start", "9 ids, context_length 8: start 0 is the only one, so x = ids[:8], "
         "y = ids[1:]", dataset=ints(9, high=60000), batch_size=3, context_length=8, num_batches=2, seed=0,
         memmap=False),
    case("run_sample_batches", "one-start-memmap", "the same from a uint16 np.memmap, one row a batch: 6 ids, "
         "context_length 5, batch_size 1 (x is [1, 5], not [5])",
         dataset=ints(6, high=60000), batch_size=1, context_length=5, num_batches=3, seed=1, memmap=True),
    case("run_sample_batches", "hidden-memmap", "", hidden=True,
         dataset=ints(12, high=60000), batch_size=2, context_length=11, num_batches=2, seed=2, memmap=True),

    # ---- run_resume_training (run_save_checkpoint, run_load_checkpoint): a resumed run equals the unbroken one
    case("run_resume_training", "bytesio", "5 steps of the harness's momentum optimizer, saved to an io.BytesIO "
         "after step 2",
         w1=weight(6, 4), w2=weight(3, 6), inputs=normal(5, 2, 4), targets=normal(5, 2, 3), save_at=2, lr=0.01,
         to_file=False),
    case("run_resume_training", "file", "6 steps, saved to a file after step 4",
         w1=weight(5, 3), w2=weight(2, 5), inputs=normal(6, 4, 3), targets=normal(6, 4, 2), save_at=4, lr=0.05,
         to_file=True),
    case("run_resume_training", "hidden-file", "", hidden=True,
         w1=weight(7, 3), w2=weight(4, 7), inputs=normal(5, 2, 3), targets=normal(5, 2, 4), save_at=3, lr=0.02,
         to_file=True),
]



def adamw_inputs(steps: int, **shapes) -> dict:
    """Initial parameters, mostly-zero gradients and which steps give each parameter a gradient
    (about half: a skipped parameter keeps its moments and step count)."""
    return dict(params={k: normal(*shape) for k, shape in shapes.items()},
                grads={k: sparse(steps, *shape, density=0.3) for k, shape in shapes.items()},
                has_grad={k: mask(steps) for k in shapes})


# lr^2 x weight_decay x steps stays under the tolerance's 1e-5: the CS336 handout's order (decay after the
# update) moves a parameter by lr^2 x weight_decay a step more than torch's, and both are correct.
ADAMW = dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=1e-3)  # torch's betas and eps, a larger lr
ADAMW_OTHER = dict(lr=3e-3, beta1=0.8, beta2=0.95, eps=1e-6, weight_decay=0.01)

# Train it: AdamW, the schedule, the end-to-end run.
TRAIN_RUN: list[Spec] = [
    # ---- run_adamw_steps: a trajectory over many steps, several shapes, skipped and mostly-zero gradients
    case("run_adamw_steps", "three-shapes", "matrix [6, 4], vector [5], 3-D [2, 3, 2]; 40 steps, torch's betas",
         **ADAMW, **adamw_inputs(40, matrix=(6, 4), vector=(5,), cube=(2, 3, 2))),
    case("run_adamw_steps", "other-settings", "betas (0.8, 0.95), eps 1e-6, weight_decay 0.01; embedding-like "
         "table [12, 3] and a gain [3]; 60 steps", **ADAMW_OTHER, **adamw_inputs(60, table=(12, 3), gain=(3,))),
    case("run_adamw_steps", "one-parameter", "a single [7] parameter; 25 steps", **ADAMW,
         **adamw_inputs(25, weight=(7,))),
    # gradients of about 1e-2, none near 0, against eps 1e-6: eps under the root, sqrt(v_hat + eps), moves each
    # step by 0.5%; the handout's eps on sqrt(v) (eps / sqrt(1 - beta2^t) on sqrt(v_hat)) stays within the
    # tolerance, as beta2 0.8 ends its bias correction within a few steps
    case("run_adamw_steps", "small-gradients", "gradients about 1e-2 (late in training), none near 0, eps 1e-6, "
         "beta2 0.8: eps under the square root would move every step; table [8, 3]; 30 steps",
         lr=3e-3, beta1=0.9, beta2=0.8, eps=1e-6, weight_decay=0.01, params={"table": normal(8, 3)},
         grads={"table": normal(30, 8, 3, scale=2e-3, offset=1e-2)}, has_grad={"table": mask(30)}),
    # gradients about eps (a rarely seen token's row): the group's eps 1e-6 halves each step where a hard-coded
    # 1e-8 would not (blind trial 7: eps fixed at 1e-8 passed every case). beta2 0.5 ends the bias correction
    # in a few steps, so the handout's eps on sqrt(v) stays within the tolerance (0.3x), a fixed eps 18x over it
    case("run_adamw_steps", "gradients-near-eps", "gradients about 1e-6, as large as eps 1e-6 (a rarely seen "
         "token's row): the group's eps halves every step; beta2 0.5, lr 5e-5; table [8, 3]; 40 steps",
         lr=5e-5, beta1=0.9, beta2=0.5, eps=1e-6, weight_decay=0.01, params={"table": normal(8, 3)},
         grads={"table": normal(40, 8, 3, scale=1e-6)}, has_grad={"table": mask(40)}),
    # the smallest case: the device probe runs it (three steps on meta tensors, not 25 to 60)
    case("run_adamw_steps", "first-steps", "a [3] parameter, 3 steps, betas (0.8, 0.95): the first steps, where the "
         "bias corrections are largest", **ADAMW_OTHER, **adamw_inputs(3, weight=(3,))),
    case("run_adamw_steps", "hidden-shapes", "", hidden=True, **ADAMW_OTHER,
         **adamw_inputs(50, a=(3, 5), b=(4,), c=(2, 2, 3))),

    # ---- run_adamw_resumed: state_dict() into a fresh optimizer half way
    case("run_adamw_resumed", "resume-at-10", "matrix [5, 3] and vector [4], resumed before step 10 of 30",
         **ADAMW, resume_at=10, **adamw_inputs(30, matrix=(5, 3), vector=(4,))),
    case("run_adamw_resumed", "resume-at-23", "betas (0.8, 0.95); table [9, 2], resumed before step 23 of 40",
         **ADAMW_OTHER, resume_at=23, **adamw_inputs(40, table=(9, 2), gain=(2,))),
    case("run_adamw_resumed", "resume-at-1", "a [2, 2] parameter, resumed right after the first of 3 steps",
         **ADAMW_OTHER, resume_at=1, **adamw_inputs(3, weight=(2, 2))),
    case("run_adamw_resumed", "hidden-resume", "", hidden=True, **ADAMW, resume_at=17,
         **adamw_inputs(35, a=(4, 3), b=(6,))),

    # ---- run_adamw_param_groups: per-group settings, and the class's defaults where a group gives none. A default
    # eps of 1e-6 is not judged: at the default beta2 (0.999) the handout's eps on sqrt(v) weighs up to 30x more
    # in the first steps, as much as the wrong default does
    case("run_adamw_param_groups", "two-groups", "a first group [4, 3] with lr 3e-3, betas (0.8, 0.95), eps 1e-6, "
         "weight_decay 0.1; a second ([5] and [2, 2]) with lr 1e-2 and the defaults; 20 steps", lr=1e-2,
         first_lr=3e-3, first_beta1=0.8, first_beta2=0.95, first_eps=1e-6, first_weight_decay=0.1,
         **adamw_inputs(20, a=(4, 3), b=(5,), c=(2, 2))),
    case("run_adamw_param_groups", "first-steps", "one [3] parameter in each group, 3 steps; the first with beta2 0.5 "
         "and no weight decay", lr=5e-3, first_lr=2e-2, first_beta1=0.7, first_beta2=0.5, first_eps=1e-7,
         first_weight_decay=0.0, **adamw_inputs(3, first=(3,), second=(3,))),
    case("run_adamw_param_groups", "hidden-groups", "", hidden=True, lr=4e-3, first_lr=1e-2, first_beta1=0.85,
         first_beta2=0.9, first_eps=1e-6, first_weight_decay=0.05, **adamw_inputs(25, a=(3, 2), b=(6,))),

    # ---- run_lr_schedule: every iteration, every boundary
    case("run_lr_schedule", "cs336-handout", "CS336's public test (max 1, min 0.1, warmup 7, cycle 21), 30 iterations",
         max_learning_rate=1.0, min_learning_rate=0.1, warmup_iters=7, cosine_cycle_iters=21, num_iters=30),
    case("run_lr_schedule", "small-lr", "max 3e-3, min 3e-4, warmup 10, cycle 40, 60 iterations",
         max_learning_rate=3e-3, min_learning_rate=3e-4, warmup_iters=10, cosine_cycle_iters=40, num_iters=60),
    case("run_lr_schedule", "no-warmup-min-0", "warmup 0 (the cosine from it = 0), min 0, cycle 12, 20 iterations",
         max_learning_rate=0.5, min_learning_rate=0.0, warmup_iters=0, cosine_cycle_iters=12, num_iters=20),
    case("run_lr_schedule", "hidden-long", "", hidden=True,
         max_learning_rate=6e-4, min_learning_rate=6e-5, warmup_iters=20, cosine_cycle_iters=90, num_iters=120),

    # ---- run_training_steps: the reference's trajectory on given batches. Gradient norms run about 1.2 to
    # 3 here, so some steps clip and some do not. Warmup from lr 0, a tiny eps and a small weight decay keep
    # a correct float32 run within 0.1 of the tolerance (300 draws of each case; its docstring says why)
    case("run_training_steps", "warmup-cosine-floor", "V=24, 1 layer; 6 steps of [4, 7] batches: warmup over "
         "steps 0-1, cosine to step 4, the minimum after; clipped at 1.5",
         weights=lm_weights(24, 16, 1, 32), inputs=ints(6, 4, 7, high=24), targets=ints(6, 4, 7, high=24),
         vocab_size=24, context_length=8, d_model=16, num_layers=1, num_heads=2, d_ff=32, rope_theta=10000.0,
         max_learning_rate=1e-2, min_learning_rate=1e-3, warmup_iters=2, cosine_cycle_iters=4, beta1=0.9,
         beta2=0.999, eps=1e-12, weight_decay=1e-3, max_l2_norm=1.5),
    case("run_training_steps", "two-layers-short-warmup", "V=20, 2 layers, 3 heads, sequences of 5 (context 6); 6 "
         "steps of [2, 5] batches: warmup over step 0, cosine to step 3, the minimum after; betas (0.8, 0.95); "
         "clipped at 2.5", weights=lm_weights(20, 12, 2, 16), inputs=ints(6, 2, 5, high=20),
         targets=ints(6, 2, 5, high=20), vocab_size=20, context_length=6, d_model=12, num_layers=2, num_heads=3,
         d_ff=16, rope_theta=500.0, max_learning_rate=5e-3, min_learning_rate=5e-4, warmup_iters=1,
         cosine_cycle_iters=3, beta1=0.8, beta2=0.95, eps=1e-11, weight_decay=2e-3, max_l2_norm=2.5),
    case("run_training_steps", "hidden-three-rows", "", hidden=True,
         weights=lm_weights(28, 16, 1, 20), inputs=ints(5, 3, 7, high=28), targets=ints(5, 3, 7, high=28),
         vocab_size=28, context_length=8, d_model=16, num_layers=1, num_heads=2, d_ff=20, rope_theta=10000.0,
         max_learning_rate=8e-3, min_learning_rate=8e-4, warmup_iters=1, cosine_cycle_iters=3, beta1=0.9,
         beta2=0.99, eps=1e-12, weight_decay=3e-3, max_l2_norm=2.0),

    # ---- run_train_tiny_lm: judged by what it trains (a public case and its hidden twin: a fresh corpus,
    # fresh weights); 60 steps are 0.2 s, and bring the reference from about ln V to about 0.003
    case("run_train_tiny_lm", "cycle-16-of-24", "V=24, 16 tokens occur (a fixed cycle), T=8, d_model=16, 1 layer, "
         "2 heads; 60 steps of 8 windows", check="train",
         weights=lm_weights(24, 16, 1, 32), corpus=chain(256, vocab=24, used=16), vocab_size=24, context_length=8,
         d_model=16, num_layers=1, num_heads=2, d_ff=32, rope_theta=10000.0, steps=60, batch_size=8,
         max_learning_rate=5e-2, min_learning_rate=5e-3, warmup_iters=6, weight_decay=0.1, max_l2_norm=1.0, seed=0),
]

CATALOGUE: list[Spec] = UNIT_2_1 + UNIT_2_2 + UNIT_2_5 + MODEL + GPT2 + ACCOUNTING + TRAIN_PIECES + TRAIN_RUN

