"""The adapter contract, declared once.

Each spec below is the signature and docstring of one adapter function. Everything
else derives from it: `adapters.py` and `reference/adapters.py` are rendered from
these specs (`python -m harness contract render`), every adapter call is checked
against the annotations at run time, and the progress table groups functions by unit.

`glue` is the body the rendered adapters use, with `impl` standing for the package
that holds the implementation (`student` or `reference`).
"""

import inspect
import textwrap
from dataclasses import dataclass
from typing import Callable

import torch
from jaxtyping import AbstractArray, Float, Int
from torch import Tensor


@dataclass(frozen=True)
class Unit:
    key: str
    title: str
    next_step: str


UNITS = [
    Unit("2.1", "Unit 2.1: embeddings and positions",
         "Unit 2.2: project the token vectors into queries, keys and values."),
]


@dataclass(frozen=True)
class Adapter:
    name: str
    unit: str
    spec: Callable
    glue: str
    impl_module: str  # the student/ module that holds the implementation

    @property
    def signature(self) -> inspect.Signature:
        return inspect.signature(self.spec)

    @property
    def tensor_args(self) -> list[str]:
        return [n for n, p in self.signature.parameters.items() if _is_tensor(p.annotation)]

    @property
    def float_args(self) -> list[str]:
        """Arguments that carry gradients: every floating-point tensor."""
        return [n for n, p in self.signature.parameters.items() if _is_float(p.annotation)]

    @property
    def summary(self) -> str:
        return inspect.getdoc(self.spec).splitlines()[0]


ADAPTERS: dict[str, Adapter] = {}


def adapter(unit: str, module: str, glue: str):
    def register(spec):
        ADAPTERS[spec.__name__] = Adapter(spec.__name__, unit, spec, textwrap.dedent(glue).strip(), module)
        return spec
    return register


def _is_tensor(annotation) -> bool:
    return any(isinstance(a, type) and issubclass(a, AbstractArray) for a in _alternatives(annotation))


def _is_float(annotation) -> bool:
    return any(_is_tensor(a) and "float32" in a.dtypes for a in _alternatives(annotation))


def _alternatives(annotation):
    return getattr(annotation, "__args__", None) or (annotation,)


# ---------------------------------------------------------------- Unit 2.1

@adapter("2.1", "embeddings", "return impl.embeddings.embedding_lookup(weights, token_ids)")
def run_embedding(
    vocab_size: int,
    d_model: int,
    weights: Float[Tensor, "vocab_size d_model"],
    token_ids: Int[Tensor, "..."],
) -> Float[Tensor, "... d_model"]:
    """Look up the embedding vector of every token id: out = weights[token_ids].

    Token ids are labels, not coordinates: id 7 is no more like id 8 than like
    id 900. Each id selects one row of the [vocab_size, d_model] table, so ids
    shaped [2, 5] with V=1000, D=32 give an output shaped [2, 5, 32] from a table
    of 32,000 parameters. Repeated ids select identical rows.

    Args:
        vocab_size: V, the number of rows in the table.
        d_model: D, the width of each embedding vector.
        weights: the [vocab_size, d_model] embedding table.
        token_ids: int64 ids of any shape [...], including 1-D and 4-D.

    Returns:
        [..., d_model]: the selected rows, bit-exact copies of the table's rows
        (checked with torch.equal, not a tolerance).

    Rules:
        - Index the table. Never build a one-hot [..., vocab_size] tensor: at
          GPT-2 scale ([8, 1024] ids, V=50257) it is 1.6 GB in fp32.
        - Raise on ids outside [0, vocab_size). Plain weights[ids] silently wraps
          -1 to the last row.
        - Gradients must reach `weights`, summed over repeated ids.
    """


@adapter("2.1", "embeddings", "return impl.embeddings.learned_positions(weights, token_positions)")
def run_learned_positions(
    context_length: int,
    d_model: int,
    weights: Float[Tensor, "context_length d_model"],
    token_positions: Int[Tensor, "... seq"],
) -> Float[Tensor, "... seq d_model"]:
    """Look up learned absolute position vectors: out = weights[token_positions].

    A learned position table has one trainable row per position 0 .. context_length-1,
    trained jointly with everything else (GPT-2's approach). Positions are absolute
    and 0-based, and they need not be 0..seq-1: offsets and gaps are valid.

    Args:
        context_length: the number of rows, i.e. the longest sequence the table covers.
        d_model: the width of each position vector.
        weights: the [context_length, d_model] position table.
        token_positions: int64 positions shaped [..., seq].

    Returns:
        [..., seq, d_model]: the selected rows.

    Rules:
        - Raise a clear error for any position < 0 or >= context_length: there is
          no row for it, and wrapping would silently reuse another position's vector.
        - Gradients must reach `weights`.
    """


@adapter("2.1", "embeddings", "return impl.embeddings.sinusoidal_positions(d_model, token_positions)")
def run_sinusoidal_positions(
    d_model: int,
    token_positions: Int[Tensor, "... seq"],
) -> Float[Tensor, "... seq d_model"]:
    """Fixed sinusoidal position encodings (Vaswani et al., interleaved layout).

        PE[p, 2i]   = sin(p / 10000^(2i / d_model))
        PE[p, 2i+1] = cos(p / 10000^(2i / d_model))

    Even dimensions hold sines and odd dimensions cosines, one frequency per pair
    (2i, 2i+1). This is not the [sin | cos] concatenated layout of tensor2tensor or
    fairseq, which is a different convention and fails here.

    Args:
        d_model: the encoding width (even).
        token_positions: int64 absolute 0-based positions shaped [..., seq].

    Returns:
        float32 [..., seq, d_model], every value in [-1, 1].

    Notes:
        The formula has no parameters and extends to any position, so this must
        work for positions far beyond any training length. That the formula
        extends does not prove that a trained model extrapolates to longer inputs.
        For a fixed offset k, PE[p + k] is a fixed rotation of each (sin, cos) pair
        of PE[p]: that is what lets attention relate offsets, yet the encoding is
        still absolute, one vector per position. RoPE, unlike this, rotates Q and K.
    """


@adapter("2.1", "embeddings", """
    return impl.embeddings.embed_with_positions(token_weights, position_weights, token_ids)
""")
def run_embed_with_positions(
    vocab_size: int,
    context_length: int,
    d_model: int,
    token_weights: Float[Tensor, "vocab_size d_model"],
    position_weights: Float[Tensor, "context_length d_model"] | None,
    token_ids: Int[Tensor, "batch seq"],
) -> Float[Tensor, "batch seq d_model"]:
    """Token vectors plus position vectors: x = E[token_ids] + PE[positions].

    Positions are 0 .. seq-1 along the last axis, the same for every batch row.
    With position_weights given, PE is that learned table; with None, PE is the
    sinusoidal encoding of run_sinusoidal_positions.

    Repeated ids select identical token vectors; adding position vectors makes
    them differ. For ids [2, 0, 2], rows 0 and 2 of E[ids] are equal, and rows 0
    and 2 of the output are not: that is the information attention alone lacks.

    Args:
        vocab_size, context_length, d_model: table sizes.
        token_weights: the [vocab_size, d_model] token table.
        position_weights: the [context_length, d_model] learned table, or None
            for sinusoidal positions.
        token_ids: int64 ids shaped [batch, seq].

    Returns:
        [batch, seq, d_model].

    Rules:
        - The same id and range rules as run_embedding and run_learned_positions
          apply; with a learned table, seq > context_length must raise.
        - Gradients must reach both tables.
    """


@adapter("2.1", "embeddings", "return impl.embeddings.Embedding(vocab_size, d_model)")
def get_embedding(vocab_size: int, d_model: int) -> torch.nn.Module:
    """Build your token embedding module for a vocab_size x d_model table.

    Its parameters are exactly the [vocab_size, d_model] table (V=1000, D=32 gives
    exactly 32,000 parameters), and forward(token_ids [...]) returns [..., d_model]
    by indexing that table, as run_embedding does.
    """


@adapter("2.1", "embeddings", "return impl.embeddings.SinusoidalPositions(max_len, d_model)")
def get_sinusoidal_positions(max_len: int, d_model: int) -> torch.nn.Module:
    """Build your sinusoidal position module for positions 0 .. max_len-1.

    forward(token_positions [..., seq]) returns [..., seq, d_model], the values of
    run_sinusoidal_positions. The precomputed table is a buffer
    (register_buffer(..., persistent=False)), not a Parameter: the module has 0
    parameters, and .to(device) moves the table with it.
    """


def render_adapters(package: str) -> str:
    """The source of an adapters module wired to `package` (student or reference)."""
    modules = sorted({a.impl_module for a in ADAPTERS.values()})
    header = (
        f'"""Adapters: the glue between the test suite and the code in `{package}/`.\n\n'
        "Each function's signature and docstring is the contract the tests check.\n"
        "Do not change the signatures; change the code in the package if you need to.\n"
        'This file is rendered from harness/contract.py.\n"""\n\n'
        "import torch\n"
        "from jaxtyping import Float, Int\n"
        "from torch import Tensor\n\n"
        f"import {package} as impl\n"
        + "".join(f"import {package}.{m}  # noqa: F401\n" for m in modules)
    )
    return header + "".join("\n\n" + _render_one(a) for a in ADAPTERS.values())


def _render_one(a: Adapter) -> str:
    lines = inspect.getsource(a.spec).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("def "))
    body = textwrap.indent(a.glue, "    ")
    return "\n".join(lines[start:]) + "\n" + body + "\n"
