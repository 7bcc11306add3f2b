"""Known-mistake variants and correct alternatives of the reference, as data.

A variant is the reference with a few named pieces replaced ("attention.softmax"
means reference.attention.softmax) while each adapter call runs, so a mistake in
softmax also reaches attention, the block and the LM, as it would in a student's
code. The selftest runs the student suite against every variant: a mistake must
fail at least one test, a correct alternative must pass them all. Run one with
`pytest --adapters reference.variants:NAME`.
"""

import contextlib
import functools
import importlib
import math
from dataclasses import dataclass, field
from unittest import mock

import torch
import torch.nn.functional as F
from einops import rearrange, reduce
from torch import nn

import reference.adapters as ref
from reference import accounting, attention, embeddings as emb, gpt2, model, positions, rope


@dataclass
class Variant:
    name: str
    title: str
    mistake: int | None = None  # entry number in MISTAKES.md; None for extra ones
    correct: bool = False       # a correct alternative: must pass everything
    patches: dict = field(default_factory=dict)
    hint: str = ""              # what a matching output is diagnosed as, in the student's words
    named_by: str = ""          # or: a phrase of the probe or check message that names this mistake

    def __getattr__(self, adapter: str):
        fn = getattr(ref, adapter)

        def patched(*args, **kwargs):
            with self.applied():
                out = fn(*args, **kwargs)
            return self._keep_applied(out) if isinstance(out, nn.Module) else out
        return patched

    def _keep_applied(self, module: nn.Module) -> nn.Module:
        """A returned module runs its forward with the patches applied too: a student's
        F.embedding in Embedding.forward is in the model's forward, not only in the build."""
        forward = module.forward

        @functools.wraps(forward)
        def applied_forward(*args, **kwargs):
            with self.applied():
                return forward(*args, **kwargs)
        module.forward = applied_forward
        return module

    @contextlib.contextmanager
    def applied(self):
        with _patched(self.patches):
            yield

    def reaches(self, used: set[str]) -> bool:
        """Can this variant differ from the reference where the reference used `used`?"""
        return not used.isdisjoint(self.patches)


@contextlib.contextmanager
def _patched(patches: dict):
    with contextlib.ExitStack() as stack:
        for target, value in patches.items():
            module, attr = target.rsplit(".", 1)
            stack.enter_context(mock.patch.object(importlib.import_module(f"reference.{module}"), attr, value))
        yield


@contextlib.contextmanager
def spying():
    """Every piece that some variant patches, replaced by a stand-in that records its use
    into the yielded set and then does what the piece does.

    A variant changes a call only through a patched piece, so where the reference call
    used none of a variant's pieces, that variant's call runs the same code and returns the
    same thing: the term build and the coverage table skip it there. A function is used
    when it is called, a class when it is instantiated: a variant that changes a class
    attribute read without building the class would be missed (the selftest compares a
    full build, and whole-suite runs of some variants, with the skipping ones)."""
    used: set[str] = set()
    pieces = {t: None for v in VARIANTS.values() for t in v.patches}
    for target in pieces:
        module, attr = target.rsplit(".", 1)
        pieces[target] = _spy(getattr(importlib.import_module(f"reference.{module}"), attr), target, used)
    with _patched(pieces):
        yield used


def _spy(piece, target: str, used: set[str]):
    if isinstance(piece, type):  # a class is used when it is instantiated
        def __init__(self, *args, **kwargs):
            used.add(target)
            piece.__init__(self, *args, **kwargs)
        return type(piece.__name__, (piece,), {"__init__": __init__, "__module__": piece.__module__,
                                               "__qualname__": piece.__qualname__})

    @functools.wraps(piece)
    def spy(*args, **kwargs):
        used.add(target)
        return piece(*args, **kwargs)
    return spy


VARIANTS: dict[str, Variant] = {}


def register(name: str, title: str, *, mistake: int | None = None, correct: bool = False,
             hint: str = "", named_by: str = "", **patches):
    if name in VARIANTS:  # a second registration would replace the first and renumber MISTAKES.md silently
        raise ValueError(f"variant {name!r} is registered twice ({VARIANTS[name].title!r} and {title!r}): "
                         "choose a new name for the new one")
    patches = {k.replace("__", "."): v for k, v in patches.items()}
    VARIANTS[name] = Variant(name, title, mistake, correct, patches, hint, named_by)


def __getattr__(name: str) -> Variant:
    try:
        return VARIANTS[name]
    except KeyError:
        raise AttributeError(f"no variant {name!r}; known: {', '.join(VARIANTS)}") from None


def _set(base: type, **knobs) -> type:
    """A subclass of one of the knob classes below with some knobs turned."""
    return type(base.__name__.lstrip("_"), (base,), knobs)


def widen(x):  # the reference's upcast, never patched: knob classes compute as the reference does
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _float32_inside(forward):
    """A knob class's forward computes as the reference does on 16-bit inputs (float32 inside, rounded
    once at the end), so each of its mistakes differs from the reference by its knob alone."""
    @functools.wraps(forward)
    def wrapped(self, x, *args, **kwargs):
        return forward(self, widen(x), *args, **kwargs).to(x.dtype)
    return wrapped


# ================================================================ Unit 2.1

def _sinusoidal(d, positions, *, layout="interleaved", exponent="pair", swap=False, base=10000.0):
    """Sinusoidal encodings with one knob per known way of getting them wrong (and only
    that: on the positions' device, so no variant also fails the meta-device probe)."""
    p = positions.to(torch.float64)[..., None]
    if layout in ("concatenated", "halves"):  # tensor2tensor / fairseq; or [sin | cos] with this assignment's w_i
        half = d // 2
        i = torch.arange(half, dtype=torch.float64, device=p.device)
        inv = torch.exp(-math.log(10000.0) * (i / (half - 1) if layout == "concatenated" else 2 * i / d))
        return torch.cat([(p * inv).sin(), (p * inv).cos()], dim=-1).float()
    if layout == "sin_only":  # d/2 sines: half the width
        i = torch.arange(d // 2, dtype=torch.float64, device=p.device)
        return (p * torch.exp(-math.log(10000.0) * 2 * i / d)).sin().float()
    j = torch.arange(d, dtype=torch.float64, device=p.device)
    power = j if exponent == "raw" else (j - j % 2) / 2 if exponent == "pair_index" else j - j % 2
    angles = p / torch.pow(base, power / d)
    even, odd = (angles.cos(), angles.sin()) if swap else (angles.sin(), angles.cos())
    return torch.where(j % 2 == 0, even, odd).float()


class _ParameterTable(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.table = nn.Parameter(emb.sinusoidal_positions(d_model, torch.arange(max_len)))

    def forward(self, positions):
        return self.table[positions]


class _PersistentTable(emb.SinusoidalPositions):
    def __init__(self, max_len, d_model):
        nn.Module.__init__(self)
        self.register_buffer("table", emb.sinusoidal_positions(d_model, torch.arange(max_len)))


class _UncheckedEmbedding(emb.Embedding):
    def forward(self, token_ids):
        return self.weight[token_ids]


class _AttributeTable(_ParameterTable):
    def __init__(self, max_len, d_model):
        nn.Module.__init__(self)
        self.table = emb.sinusoidal_positions(d_model, torch.arange(max_len))


def _embed_at(position_fn):
    """embed_with_positions whose positions come from position_fn(token_ids, seq)."""
    def embed(token_weights, position_weights, token_ids):
        positions = position_fn(token_ids, token_ids.shape[-1])
        pos = (emb.sinusoidal_positions(token_weights.shape[1], positions) if position_weights is None
               else position_weights[positions])
        return token_weights[token_ids] + pos
    return embed


_lookup = emb.embedding_lookup  # the reference lookup, which the patches below replace


def _two_d(weights, token_ids):
    B, T = token_ids.shape
    return _lookup(weights, token_ids.reshape(B * T)).view(B, T, -1)


def _mutating(weights, token_ids):
    with torch.no_grad():
        weights[-1] = 0.0
    return _lookup(weights, token_ids)


register("one_hot_matmul", "embedding as a one-hot matmul",
         hint="a one-hot [..., vocab_size] matmul instead of indexing the table", named_by="one-hot", mistake=1,
         embeddings__embedding_lookup=lambda w, ids: F.one_hot(ids, w.shape[0]).to(w.dtype) @ w)
register("lookup_returns_float32", "the lookup returns float32 rows whatever the table's dtype",
         named_by="return the dtype the contract states",
         embeddings__embedding_lookup=lambda weights, token_ids: _lookup(weights, token_ids).float())
register("hard_coded_2d_ids", "B, T = ids.shape: only 2-D ids work", named_by="fixed number of dimensions",
         hint="code that assumes 2-D ids (B, T = ids.shape); ids may have any rank", mistake=2,
         embeddings__embedding_lookup=_two_d)
register("negative_ids_wrap", "plain weights[ids]: negative ids wrap to the last rows",
         hint="plain weights[ids], which wraps negative ids to the last rows instead of raising", mistake=3,
         embeddings__embedding_lookup=lambda w, ids: w[ids])
register("detached_table", "the table is detached, so it gets no gradient",
         hint="a detached table: no gradient reaches the weights", named_by="no gradient reaches", mistake=4,
         embeddings__embedding_lookup=lambda w, ids: _lookup(w.detach(), ids))
register("embedding_padding_idx", "F.embedding(..., padding_idx=0): row 0 gets no gradient (blind trial 6)",
         named_by="padding_idx",
         embeddings__embedding_lookup=lambda w, ids: F.embedding(ids, w, padding_idx=0))
register("bf16_round_trip", "the table goes through bf16 and back",
         hint="a table rounded through bfloat16 and back: a lookup must copy rows bit-exactly", mistake=5,
         embeddings__embedding_lookup=lambda w, ids: _lookup(w.to(torch.bfloat16), ids).to(w.dtype))
def _embed_rounding_positions(token_weights, position_weights, token_ids):
    """A 16-bit table plus position vectors rounded to its dtype first: two roundings (blind trial)."""
    positions = torch.arange(token_ids.shape[-1])
    pos = emb.sinusoidal_positions(token_weights.shape[1], positions) if position_weights is None \
        else emb.learned_positions(position_weights, positions)
    return _lookup(token_weights, token_ids) + pos.to(token_weights.dtype)


register("positions_rounded_before_the_sum", "sinusoidal vectors rounded to the 16-bit table's dtype, then added",
         hint=("position vectors rounded to the table's 16-bit dtype before the addition: the sum rounds twice; "
               "add in float32 and round the sum once"),
         embeddings__embed_with_positions=_embed_rounding_positions)
register("positions_indexed_by_ids", "position vectors indexed by token ids",
         hint="position vectors indexed by token ids instead of by positions 0..seq-1", mistake=6,
         embeddings__embed_with_positions=_embed_at(lambda ids, seq: ids))
register("one_based_positions", "positions start at 1",
         hint="positions that start at 1; they start at 0", mistake=7,
         embeddings__embed_with_positions=_embed_at(lambda ids, seq: torch.arange(1, seq + 1, device=ids.device)))
register("concatenated_sin_cos", "sinusoidal [sin | cos] layout (tensor2tensor/fairseq)",
         hint=("the [sin | cos] concatenated layout (tensor2tensor/fairseq); this assignment interleaves sin on even"
               " and cos on odd dimensions"),
         mistake=8,
         embeddings__sinusoidal_positions=lambda d, p: _sinusoidal(d, p, layout="concatenated"))
register("swapped_sin_cos", "cos on even dims, sin on odd dims",
         hint="sin and cos swapped: your even dimensions hold cos and your odd ones sin; even dimensions hold sin, odd ones cos",
         mistake=9,
         embeddings__sinusoidal_positions=lambda d, p: _sinusoidal(d, p, swap=True))
register("raw_dimension_exponent", "exponent uses the raw dimension j instead of 2i",
         hint="an exponent that uses the raw dimension j; both dimensions of pair i use 2i/d_model", mistake=10,
         embeddings__sinusoidal_positions=lambda d, p: _sinusoidal(d, p, exponent="raw"))
register("position_table_parameter", "sinusoidal table stored as an nn.Parameter",
         hint="a sinusoidal table stored as an nn.Parameter", named_by="0 parameters", mistake=11,
         embeddings__SinusoidalPositions=_ParameterTable)
register("position_table_attribute", "sinusoidal table as a plain attribute, not a buffer",
         hint="a sinusoidal table kept as a plain attribute", named_by="register_buffer", mistake=12,
         embeddings__SinusoidalPositions=_AttributeTable)
register("unchecked_learned_positions", "learned positions are not range-checked",
         hint="learned positions without a range check", named_by="instead of raising", mistake=13,
         embeddings__learned_positions=lambda w, p: w[p])


# ---- relative positions: ALiBi's slopes and bias, T5's buckets

_alibi_slopes = positions.alibi_slopes  # the reference's, which the patches below replace


def _geometric_slopes(num_heads):
    """2^(-8 h / n) for every head count: Press et al.'s rule only for powers of two."""
    return 2.0 ** (-8.0 * torch.arange(1, num_heads + 1, dtype=torch.float64) / num_heads).float()


def _odd_slopes(num_heads):
    """The extra heads take 2c's slopes 2, 4, 6, ... instead of 1, 3, 5, ..."""
    c = 2 ** math.floor(math.log2(num_heads))
    return torch.cat([_geometric_slopes(c), _geometric_slopes(2 * c)[1::2][:num_heads - c]])


def _first_extra_slopes(num_heads):
    """The extra heads take 2c's first slopes 1, 2, 3, ... instead of every other one (blind trial 6)."""
    c = 2 ** math.floor(math.log2(num_heads))
    return torch.cat([_geometric_slopes(c), _geometric_slopes(2 * c)[:num_heads - c]])


def _press_get_slopes(n):
    """Press et al.'s get_slopes as published: products of Python (float64) floats."""
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + _press_get_slopes(2 * closest)[0::2][:n - closest]


def _float32_slopes(num_heads):
    c = 2 ** math.floor(math.log2(num_heads))
    first = torch.pow(2.0, -8.0 * torch.arange(1, c + 1, dtype=torch.float32) / c)
    extra = torch.pow(2.0, -4.0 * (2 * torch.arange(num_heads - c, dtype=torch.float32) + 1) / c)
    return torch.cat([first, extra])


def _alibi_from(offset):
    """ALiBi's bias as -slope x offset(i, j), i the query and j the key position."""
    def bias(num_heads, seq_len):
        i, j = torch.arange(seq_len)[:, None], torch.arange(seq_len)[None, :]
        return -positions.alibi_slopes(num_heads)[:, None, None] * offset(i, j)
    return bias


def _alibi_tril_loop(num_heads, seq_len):
    """The lower triangle row by row from torch.tril, then mirrored into the upper one."""
    slopes, lower = positions.alibi_slopes(num_heads), torch.zeros(num_heads, seq_len, seq_len)
    for i in range(seq_len):
        lower[:, i, :] = -slopes[:, None] * (i - torch.arange(seq_len))
    lower = torch.tril(lower)
    return lower + lower.transpose(-1, -2)


def _t5_log_buckets(relative, bidirectional, num_buckets, max_distance, *, dtype=torch.float32, key_minus_query=True,
                    zero_above=False, rounding=torch.floor, causal_abs=False, clamp=True, log_of_max=False,
                    exact_of_all=False):
    """T5's bucket rule as Hugging Face writes it, with floor(log(...)) in `dtype`, and a knob per mistake."""
    r = relative if key_minus_query else -relative
    all_buckets = num_buckets
    if bidirectional:
        num_buckets //= 2
        offset, n = ((r >= 0) if zero_above else (r > 0)).long() * num_buckets, r.abs()
    else:
        offset, n = torch.zeros_like(r), r.abs() if causal_abs else -torch.min(r, torch.zeros_like(r))
    exact = (all_buckets if exact_of_all else num_buckets) // 2
    scaled = torch.log(n.to(dtype) / exact) / math.log(max_distance if log_of_max else max_distance / exact) * \
        (num_buckets - exact)
    large = exact + rounding(scaled).long()
    large = torch.clamp(large, max=num_buckets - 1) if clamp else large
    return offset + torch.where(n < exact, n, large)


class _T5Embedding(positions.T5RelativeBias):
    """The table read through F.embedding, buckets from T5's float32 log."""
    def forward(self, seq_len):
        p = torch.arange(seq_len, device=self.weight.device)
        buckets = _t5_log_buckets(p[None, :] - p[:, None], self.bidirectional, self.num_buckets, self.max_distance)
        return rearrange(F.embedding(buckets, self.weight), "q k h -> h q k")


register("alibi_slopes_reversed", "ALiBi slopes in reverse order",
         hint=("ALiBi slopes in reverse order; for a power of 2, head h = 1 .. num_heads gets 2^(-8 h / num_heads), "
               "so head 1 has the largest"),
         positions__alibi_slopes=lambda num_heads: _alibi_slopes(num_heads).flip(0))
register("alibi_slopes_from_zero", "ALiBi slopes counted from head 0",
         hint="slopes counted from h = 0 (the first slope is 1); head h = 1 .. num_heads gets 2^(-8 h / num_heads)",
         positions__alibi_slopes=lambda num_heads: 2.0 ** (-8.0 * torch.arange(num_heads) / num_heads))
register("alibi_slopes_geometric_for_any_count", "2^(-8h/n) for a head count that is not a power of two",
         hint=("slopes 2^(-8 h / n) for a head count that is not a power of 2; Press et al. take the slopes of the "
               "closest lower power of 2, then every other slope of the next one"),
         positions__alibi_slopes=_geometric_slopes)
register("alibi_slopes_every_other_from_second", "the extra heads take 2c's slopes 2, 4, 6, ...",
         hint=("the extra heads take every other slope of 2c heads from its second; Press et al. take them from its "
               "first (slopes 1, 3, 5, ... of 2c heads)"),
         positions__alibi_slopes=_odd_slopes)
register("alibi_slopes_first_of_2c", "the extra heads take 2c's first slopes 1, 2, 3, ... (blind trial 6)",
         hint=("the extra heads take the first slopes of 2c heads; Press et al. take every other one, its slopes "
               "1, 3, 5, ..."),
         positions__alibi_slopes=_first_extra_slopes)
register("alibi_bias_positive", "ALiBi's bias with the sign of the distance flipped: +slope x |i - j|",
         hint="a bias of +slope x |i - j|: the sign is flipped; ALiBi subtracts slope x distance, so far keys weigh less",
         positions__alibi_bias=_alibi_from(lambda i, j: -(i - j).abs()))
register("alibi_bias_key_minus_query", "ALiBi's distance as key minus query, j - i",
         hint=("a bias of -slope x (j - i), key minus query: keys before the query are rewarded; the distance is "
               "|i - j|, which is i - j (query minus key) under a causal mask"),
         positions__alibi_bias=_alibi_from(lambda i, j: j - i))
register("alibi_bias_signed", "ALiBi's -slope x (i - j) without the absolute value",
         hint=("a bias of -slope x (i - j) without the absolute value: right where j <= i, but keys after the query "
               "get +slope x (j - i); the bias is -slope x |i - j| in both triangles"),
         positions__alibi_bias=_alibi_from(lambda i, j: i - j))
register("alibi_bias_row_shift", "Press et al.'s code: slope x j on every row",
         hint=("slope x j on every row (Press et al.'s code, equal after a causal softmax); the bias is "
               "-slope x |i - j|, 0 on the diagonal"),
         positions__alibi_bias=_alibi_from(lambda i, j: -j + 0 * i))
register("t5_query_minus_key", "T5 buckets of i - j (query minus key)",
         hint=("buckets of i - j, query minus key; T5 takes r = j - i (key minus query): keys after the query use "
               "the upper half, and causal buckets count i - j for keys before it"),
         positions__t5_buckets=functools.partial(_t5_log_buckets, key_minus_query=False))
register("t5_bucket_off_by_one", "T5's log buckets one too high (ceil for floor)",
         hint=("log buckets one too high (ceil, or max_exact + 1 + ...); distance n >= max_exact goes to "
               "max_exact + floor(log(n / max_exact) / log(max_distance / max_exact) * (half - max_exact))"),
         positions__t5_buckets=functools.partial(_t5_log_buckets, rounding=torch.ceil))
register("t5_log_over_max_distance", "T5's log buckets divided by log(max_distance) (blind trial 9)",
         hint=("log buckets scaled by log(max_distance) instead of log(max_distance / max_exact): "
               "max_exact + floor(log(n / max_exact) / log(max_distance / max_exact) * (half - max_exact))"),
         positions__t5_buckets=functools.partial(_t5_log_buckets, log_of_max=True))
register("t5_query_itself_in_upper_half", "T5's bidirectional upper half from r >= 0",
         hint=("the query's own key (r = 0) in the upper half; only keys after the query (r = j - i > 0) use "
               "buckets half .. num_buckets - 1"),
         positions__t5_buckets=functools.partial(_t5_log_buckets, zero_above=True))

register("alibi_slopes_press_code", "ALiBi slopes from Press et al.'s get_slopes (Python floats)", correct=True,
         positions__alibi_slopes=lambda num_heads: torch.tensor(_press_get_slopes(num_heads)))
register("alibi_slopes_float32", "ALiBi slopes from torch.pow in float32", correct=True,
         positions__alibi_slopes=_float32_slopes)
register("alibi_bias_tril_loop", "ALiBi's bias row by row, torch.tril and a transpose", correct=True,
         positions__alibi_bias=_alibi_tril_loop)
register("t5_log_float32", "T5 buckets from floor(log(...)) in float32 (Hugging Face's code)", correct=True,
         positions__t5_buckets=_t5_log_buckets)
register("t5_log_float64", "T5 buckets from floor(log(...)) in float64", correct=True,
         positions__t5_buckets=functools.partial(_t5_log_buckets, dtype=torch.float64))
register("t5_f_embedding", "T5's table read with F.embedding, buckets from a float32 log", correct=True,
         positions__T5RelativeBias=_T5Embedding)

# ================================================================ Unit 2.2

def _softmax_no_max(x, dim):
    e = x.exp()
    return e / e.sum(dim=dim, keepdim=True)


def _attention(*, scale=True, invert=False, mask_after=False, dim=-1, swap_qk=False, scale_by="d_k",
               mask_required=False, causal_when_none=False, in_16_bits=False, root=True, fill=float("-inf")):
    def sdpa(Q, K, V, mask=None):
        if not in_16_bits:  # float32 inside, as the reference
            return sdpa_in(widen(Q), widen(K), widen(V), mask).to(Q.dtype)
        return sdpa_in(Q, K, V, mask)

    def sdpa_in(Q, K, V, mask=None):
        scores = (K @ Q.transpose(-1, -2)) if swap_qk else (Q @ K.transpose(-1, -2))
        width = V.shape[-1] if scale_by == "d_v" else Q.shape[-1]
        scores = scores / (math.sqrt(width) if root else width) if scale else scores
        if causal_when_none and mask is None:  # "no mask" read as "the usual causal mask"
            mask = torch.ones(Q.shape[-2], K.shape[-2], dtype=torch.bool, device=Q.device).tril()
        if mask_required:  # ~None raises: the None case was never tried
            return attention.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ V
        keep = None if mask is None else (~mask if invert else mask)
        if keep is not None and not mask_after:
            scores = scores.masked_fill(~keep, fill)
        probs = attention.softmax(scores, dim=dim)
        if keep is not None and mask_after:
            probs = probs * keep
        return probs @ V
    return sdpa


class _MHA(attention.MultiHeadSelfAttention):
    """The reference MHA with a knob per mistake in building or splitting heads."""
    causal_mask = staticmethod(lambda seq, device: torch.ones(seq, seq, dtype=torch.bool, device=device).tril())
    transpose_heads, transpose_merge = True, True
    heads_layout = "h e"  # "e h": head h takes every num_heads-th column
    merge_layout = None  # the merge's own layout, where it differs from the split's
    rope_on_d_model = False
    rotate_values = False  # RoPE on V as well as Q and K
    output_projection = True  # False: the merged heads returned without W_o
    fused = False  # torch's scaled_dot_product_attention in place of the reference's own
    positions = "reference"  # or "meet_heads", "ignored", "skipped_when_none", "cpu_default", "unhandled_none",
    # "asserted"

    @_float32_inside
    def forward(self, x, token_positions=None):
        seq, d = x.shape[-2], x.shape[-1]
        h = self.num_heads
        rotate = not (token_positions is None and self.positions == "skipped_when_none")
        if self.positions == "asserted" and self.rope is not None:
            assert token_positions is not None, "token_positions must be given"
        if (token_positions is None and self.positions != "unhandled_none") or self.positions == "ignored":
            # cpu_default: torch.arange without device=; indexing device tables with it is allowed
            token_positions = torch.arange(seq) if self.positions == "cpu_default" else \
                torch.arange(seq, device=x.device)
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.rope is not None and self.rope_on_d_model:
            whole = rope.RotaryPositionalEmbedding(self.rope_theta, d, self.rope_len, device=x.device)
            q, k = whole(q, token_positions), whole(k, token_positions)

        def heads(t):
            if self.transpose_heads:
                return rearrange(t, f"... s ({self.heads_layout}) -> ... h s e", h=h)
            return t.reshape(*t.shape[:-2], h, seq, d // h)  # view without the transpose
        q, k, v = heads(q), heads(k), heads(v)
        if self.rope is not None and not self.rope_on_d_model and rotate:
            positions = token_positions if self.positions == "meet_heads" else token_positions.unsqueeze(-2)
            q, k = self.rope(q, positions), self.rope(k, positions)
            v = self.rope(v, positions) if self.rotate_values else v
        mask = self.causal_mask(seq, x.device)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask) if self.fused \
            else attention.scaled_dot_product_attention(q, k, v, mask)
        project = self.output_proj if self.output_projection else (lambda merged: merged)
        if not self.transpose_merge:  # [..., h, s, e] read as [..., s, h*e]: positions and heads mix
            return project(out.reshape(*out.shape[:-3], seq, d))
        return project(rearrange(out, f"... h s e -> ... s ({self.merge_layout or self.heads_layout})"))

    def __init__(self, d_model, num_heads, max_seq_len=None, theta=None, device=None, dtype=None):
        super().__init__(d_model, num_heads, max_seq_len, theta, device=device, dtype=dtype)
        self.rope_theta, self.rope_len = theta, max_seq_len



class _EinsumLinear3D(attention.Linear):
    def forward(self, x):
        return torch.einsum("btd,od->bto", x, self.weight)


register("softmax_without_max", "softmax without subtracting the max",
         hint="softmax without subtracting the max: exp overflows for large inputs",
         named_by="subtract the max", mistake=14,
         attention__softmax=_softmax_no_max)
register("attention_missing_scale", "no 1/sqrt(d_k) scale",
         hint="attention scores without the 1/sqrt(d_k) scale", mistake=15,
         attention__scaled_dot_product_attention=_attention(scale=False))
register("attention_inverted_mask", "True treated as masked out",
         hint="an inverted mask: True means the query MAY attend to that key", mistake=16,
         attention__scaled_dot_product_attention=_attention(invert=True))
register("attention_mask_after_softmax", "the mask zeroes probabilities after the softmax",
         hint="the mask applied after the softmax; put -inf in the scores before it", mistake=17,
         attention__scaled_dot_product_attention=_attention(mask_after=True))
register("attention_softmax_over_queries", "softmax over the query axis",
         hint="the softmax taken over the query axis; it runs over the keys (the last axis)", mistake=18,
         attention__scaled_dot_product_attention=_attention(dim=-2))
register("attention_causal_when_no_mask", "mask=None taken as a causal mask",
         hint="a causal mask where mask=None asks for none: every query attends to every key",
         attention__scaled_dot_product_attention=_attention(causal_when_none=True))
register("causal_mask_hides_diagonal", "causal mask from triu(diagonal=0) hides the diagonal",
         hint="a causal mask that also hides the diagonal (triu without diagonal=1): query i must see key i",
         named_by="diagonal", mistake=19,
         attention__MultiHeadSelfAttention=_set(_MHA, causal_mask=staticmethod(
             lambda seq, device: ~torch.ones(seq, seq, dtype=torch.bool, device=device).triu(0))))
# torch's SDPA gives a query with no key 0, not NaN: the NaN trace that names the mistake above finds nothing
register("causal_mask_hides_diagonal_sdpa", "causal mask hiding the diagonal, through torch's SDPA (blind trial 7)",
         hint=("a causal mask that also hides the diagonal (triu without diagonal=1): query i must see key i. Query 0 "
               "then sees no key at all, and scaled_dot_product_attention returns 0 for it (a softmax by hand: NaN)"),
         attention__MultiHeadSelfAttention=_set(_MHA, fused=True, causal_mask=staticmethod(
             lambda seq, device: ~torch.ones(seq, seq, dtype=torch.bool, device=device).triu(0))))
register("attention_not_causal", "multi-head attention without a causal mask",
         hint="attention without the causal mask: query i may only see keys 0..i", named_by="causal", mistake=20,
         attention__MultiHeadSelfAttention=_set(_MHA, causal_mask=staticmethod(lambda seq, device: None)))
register("heads_split_without_transpose", "view(B, H, T, d_k) without the transpose",
         hint=("a head split by view(..., h, seq, d_k) without the transpose; view(..., seq, h, d_k) then "
               "transpose(-2, -3)"),
         mistake=21,
         attention__MultiHeadSelfAttention=_set(_MHA, transpose_heads=False))
register("heads_split_d_h", "heads split and merged as (d_k h): strided columns (blind trial 6)",
         hint=("heads split as (d_k h), so head h takes every num_heads-th column; head h is columns h*d_k .. "
               "(h+1)*d_k - 1, as (h d_k)"),
         attention__MultiHeadSelfAttention=_set(_MHA, heads_layout="e h"))
register("heads_split_d_h_merged_h_d", "heads split as (d_k h) but merged as (h d_k) (blind trial 8)",
         hint=("heads split as (d_k h), strided columns, but merged back as (h d_k): split and merge must use one "
               "layout, and head h is columns h*d_k .. (h+1)*d_k - 1 ('... s (h d) -> ... h s d')"),
         named_by="merged back as (h d_k)", attention__MultiHeadSelfAttention=_set(_MHA, heads_layout="e h", merge_layout="h e"))
register("heads_split_h_d_merged_d_h", "heads split as (h d_k) but merged as (d_k h) (blind trial 9)",
         hint=("heads split as (h d_k) but merged back as (d_k h), strided columns: split and merge must use one "
               "layout, '... h s d -> ... s (h d)' to merge"),
         attention__MultiHeadSelfAttention=_set(_MHA, merge_layout="e h"))
register("heads_merged_without_transpose", "heads merged by reshape(..., seq, d_model) without the transpose",
         hint=("heads merged by reshape(..., seq, d_model) without the transpose; transpose [..., h, seq, d_k] "
               "back to [..., seq, h, d_k] first"),
         attention__MultiHeadSelfAttention=_set(_MHA, transpose_merge=False))
register("linear_hard_coded_rank", "einsum('btd,od->bto'): only 3-D inputs work",
         named_by="fixed number of dimensions",
         hint="a linear layer that assumes 3-D input; use einsum('...i,oi->...o') or x @ W.T", mistake=22,
         attention__Linear=_EinsumLinear3D)
register("attention_q_k_swapped", "scores computed as K Q^T",
         hint="scores computed as K Q^T instead of Q K^T", mistake=23,
         attention__scaled_dot_product_attention=_attention(swap_qk=True))


# ---- attention with an additive bias

def _biased(*, scale_bias=False, low_precision=False, after_softmax=False, mask_after=False):
    def sdpa(Q, K, V, bias, mask=None):
        work = Q.dtype if low_precision else torch.promote_types(Q.dtype, torch.float32)
        Q, K, V, bias = Q.to(work), K.to(work), V.to(work), bias.to(work)
        scores = Q @ K.transpose(-1, -2)
        scores = (scores + bias) / math.sqrt(Q.shape[-1]) if scale_bias else scores / math.sqrt(Q.shape[-1]) + bias
        if after_softmax:
            scores = scores - bias
        if mask is not None and not mask_after:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        if mask is not None and mask_after:  # the masked weights zeroed, the others not renormalised
            weights = weights * mask
        return ((weights + bias if after_softmax else weights) @ V).to(Q.dtype)
    return sdpa


def _torch_sdpa_with_bias(Q, K, V, bias, mask=None):
    attn = bias if mask is None else torch.where(mask, bias, float("-inf"))
    return F.scaled_dot_product_attention(Q, K, V, attn_mask=attn.to(Q.dtype))


def _float64_einsum_with_bias(Q, K, V, bias, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", Q.double(), K.double()) / math.sqrt(Q.shape[-1]) + bias.double()
    if mask is not None:
        scores = torch.where(mask, scores, float("-inf"))
    return torch.einsum("...qk,...kd->...qd", scores.softmax(-1), V.double()).to(Q.dtype)


register("attention_bias_scaled", "the bias divided by sqrt(d_k) with the scores",
         hint="the bias divided by sqrt(d_k) along with Q K^T; add it after the scale: Q K^T / sqrt(d_k) + bias",
         attention__attention_with_bias=_biased(scale_bias=True))
register("attention_bias_in_16_bits", "biased attention computed in float16/bfloat16",
         hint="scores and softmax computed in float16/bfloat16; compute in float32 and round the result once",
         attention__attention_with_bias=_biased(low_precision=True))
register("torch_sdpa_with_bias", "F.scaled_dot_product_attention with attn_mask = the bias (-inf where masked)",
         correct=True, attention__attention_with_bias=_torch_sdpa_with_bias)
register("float64_einsum_with_bias", "biased attention as einsum in float64", correct=True,
         attention__attention_with_bias=_float64_einsum_with_bias)


def _softmax_in_input_dtype(x, dim):
    shifted = x - x.amax(dim=dim, keepdim=True)  # a 16-bit x: every step rounds to 16 bits
    e = shifted.exp()
    return e / e.sum(dim=dim, keepdim=True)


_IN_16_BITS = ("upcast the 16-bit inputs (and weights) to float32, compute, and round once at the end with "
               ".to(x.dtype)")
register("softmax_in_16_bits", "softmax computed in the input's float16/bfloat16",
         hint=f"a softmax computed in float16/bfloat16 (x - max, exp and the sum each round to 16 bits); {_IN_16_BITS}",
         attention__softmax=_softmax_in_input_dtype)
register("softmax_not_cast_back", "softmax upcasts to float32 and returns float32 (blind trial 6)",
         named_by="your values are right, in float32",
         attention__softmax=lambda x, dim, softmax=attention.softmax: softmax(widen(x), dim))
register("attention_scores_in_16_bits", "attention scores and probabilities computed in float16/bfloat16",
         hint=("attention computed in float16/bfloat16: the scores Q K^T, the probabilities and their product "
               f"with V each round to 16 bits; {_IN_16_BITS}"),
         attention__scaled_dot_product_attention=_attention(in_16_bits=True))
register("attention_rounds_between_steps", "multi-head attention rounds to 16 bits after every projection",
         hint=("attention that rounds to float16/bfloat16 after every step (the projections, the attention, the "
               f"output projection): each piece may upcast, but the whole must run in float32; {_IN_16_BITS}"),
         attention__widen=lambda x: x)

# ================================================================ Unit 2.5

class _RoPE(nn.Module):
    """RoPE with a knob per known mistake; the correct settings match the reference."""
    pairing, freq_offset, learnable, tables_in_forward, fixed_theta, einsum = "interleaved", 0, False, False, None, False
    exponent = 2  # pair k turns at theta^(-exponent k / d_k)
    position_offset = 0  # position p turned by (p + offset): 1 for 1-based positions
    backwards = False  # turned by -p theta_k: sin's sign flipped
    tables_on_host = False  # rows looked up on the CPU: self.cos.cpu()[token_positions.cpu()]

    def __init__(self, theta, d_k, max_seq_len, device=None):
        super().__init__()
        self.theta, self.d_k, self.max_seq_len = self.fixed_theta or theta, d_k, max_seq_len
        if not self.tables_in_forward:
            cos, sin = self._tables(device)
            if self.learnable:
                self.cos, self.sin = nn.Parameter(cos), nn.Parameter(sin)
            else:
                self.register_buffer("cos", cos, persistent=False)
                self.register_buffer("sin", sin, persistent=False)

    def _tables(self, device):
        k = torch.arange(self.d_k // 2, dtype=torch.float64, device=device) + self.freq_offset
        angles = torch.arange(self.max_seq_len + self.position_offset, dtype=torch.float64, device=device)[:, None] * \
            self.theta ** (-self.exponent * k / self.d_k)
        return angles.cos().float(), angles.sin().float()

    @_float32_inside
    def forward(self, x, token_positions):
        cos, sin = self._tables(None) if self.tables_in_forward else (self.cos, self.sin)
        if self.tables_on_host:  # right on the CPU; on a GPU the CPU rows meet the GPU input
            cos, sin, token_positions = cos.cpu(), sin.cpu(), token_positions.cpu()
        cos, sin = cos[token_positions + self.position_offset], sin[token_positions + self.position_offset]
        sin = -sin if self.backwards else sin
        if self.pairing in ("half", "half_written_interleaved"):  # GPT-NeoX / Hugging Face rotate_half
            first, second = x[..., : self.d_k // 2], x[..., self.d_k // 2:]
            turned = [first * cos - second * sin, first * sin + second * cos]
            if self.pairing == "half_written_interleaved":  # pairs read as (i, i + d/2), written as (2i, 2i + 1)
                return torch.stack(turned, dim=-1).flatten(-2)
            return torch.cat(turned, dim=-1)
        even, odd = x[..., 0::2], x[..., 1::2]
        if self.einsum:  # elementwise products as einsum: broadcasts like `*`, fails with its own message
            mul = functools.partial(torch.einsum, "...sd,...sd->...sd")
            return torch.stack([mul(even, cos) - mul(odd, sin), mul(even, sin) + mul(odd, cos)], dim=-1).flatten(-2)
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)



register("rope_turns_backwards", "RoPE turns each pair by -p theta_k: the sine's sign flipped (blind trial 8)",
         hint=("each pair turned the other way, by -p theta_k (the sine's sign flipped): the rotation is "
               "(x1 cos - x2 sin, x1 sin + x2 cos)"),
         named_by="turned the other way", rope__RotaryPositionalEmbedding=_set(_RoPE, backwards=True))
register("rope_half_pairs_written_interleaved", "RoPE pairs read as (i, i + d/2), written back interleaved (blind trial 8)",
         hint=("pairs read as (x_i, x_(i + d/2)) but written back as (x_2i, x_2i+1): read and write the same pairs, "
               "adjacent dimensions (x0, x1), (x2, x3), ..."),
         named_by="written back as (x_2i, x_2i+1)", rope__RotaryPositionalEmbedding=_set(_RoPE, pairing="half_written_interleaved"))
register("rope_half_split", "rotate_half pairing (i, i + d/2) instead of interleaved",
         hint=("RoPE with half-split pairing (rotate_half, the GPT-NeoX/Hugging Face layout); this assignment pairs "
               "adjacent dimensions (x0, x1), (x2, x3), ..."),
         mistake=24,
         rope__RotaryPositionalEmbedding=_set(_RoPE, pairing="half"))
register("rope_frequency_off_by_one", "theta^(-2(k+1)/d)",
         hint="RoPE frequencies off by one: pair k (0-based) uses theta^(-2k/d_k)", mistake=25,
         rope__RotaryPositionalEmbedding=_set(_RoPE, freq_offset=1))
register("rope_exponent_without_2", "RoPE frequencies theta^(-k/d) (blind trial 6)",
         hint="RoPE frequencies theta^(-k / d_k) for pair k; pair k = 0 .. d_k/2 - 1 turns at theta^(-2k / d_k)",
         rope__RotaryPositionalEmbedding=_set(_RoPE, exponent=1))
register("rope_positions_from_1", "RoPE turns position p by (p + 1) theta_k: 1-based positions (blind trial 7)",
         hint=("RoPE angles from 1-based positions: position p turns by (p + 1) theta_k where it turns by p theta_k, "
               "so position 0 is not rotated at all"),
         rope__RotaryPositionalEmbedding=_set(_RoPE, position_offset=1))
register("rope_before_head_split", "RoPE over d_model before the head split",
         hint="RoPE applied over d_model before the head split; rotate each head with d_k", mistake=26,
         attention__MultiHeadSelfAttention=_set(_MHA, rope_on_d_model=True))
register("rope_learnable_tables", "RoPE cos/sin registered as learnable parameters",
         hint="RoPE tables registered as parameters; RoPE has none",
         named_by="parameters must be exactly", mistake=27,
         rope__RotaryPositionalEmbedding=_set(_RoPE, learnable=True))
register("rope_rows_looked_up_on_cpu", "RoPE's cos/sin rows looked up on the CPU, .cpu() in forward (blind trial 9)",
         named_by="copied to the CPU by .cpu()", rope__RotaryPositionalEmbedding=_set(_RoPE, tables_on_host=True))
register("rope_tables_on_cpu", "cos/sin built in forward without device=",
         hint="RoPE tables built in forward on the CPU", named_by="device", mistake=28,
         rope__RotaryPositionalEmbedding=_set(_RoPE, tables_in_forward=True))


class _RoPEIn16Bits(rope.RotaryPositionalEmbedding):
    def forward(self, x, token_positions):
        cos, sin = self.cos[token_positions].to(x.dtype), self.sin[token_positions].to(x.dtype)
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


register("rope_in_16_bits", "RoPE rotates a float16/bfloat16 x with 16-bit cos and sin",
         hint=("RoPE computed in float16/bfloat16 (cos and sin cast to x's dtype, every product and sum rounded to "
               "16 bits); rotate in float32 and round once: x.float(), then .to(x.dtype)"),
         rope__RotaryPositionalEmbedding=_RoPEIn16Bits)

# ================================================================ RMSNorm, SwiGLU

class _RMSNorm(model.RMSNorm):
    center, axis, use_gain, upcast, fixed_eps, module_dtype, einops_3d = False, -1, True, True, None, False, False
    eps_outside = False
    gain_first = False  # x * gain normalised: the gain divides out of its own RMS

    def forward(self, x):
        wide = x.float() if self.upcast is True or x.dtype == self.upcast else x
        if self.gain_first:
            gained = wide * self.weight
            return (gained / torch.sqrt(gained.pow(2).mean(dim=-1, keepdim=True) + self.eps)).to(x.dtype)
        if self.center:
            wide = wide - wide.mean(dim=self.axis, keepdim=True)
        eps = self.fixed_eps if self.fixed_eps is not None else self.eps
        square_mean = reduce(wide.pow(2), "b t d -> b t 1", "mean") if self.einops_3d else \
            wide.pow(2).mean(dim=self.axis, keepdim=True)
        out = wide / (torch.sqrt(square_mean) + eps) if self.eps_outside else wide / torch.sqrt(square_mean + eps)
        return (out * self.weight if self.use_gain else out).to(self.weight.dtype if self.module_dtype else x.dtype)



class _SwiGLU(model.SwiGLU):
    swap, activation = False, staticmethod(attention.silu)

    @_float32_inside
    def forward(self, x):
        a, b = (self.w3, self.w1) if self.swap else (self.w1, self.w3)
        return self.w2(self.activation(a(x)) * b(x))



_LOW_PRECISION_RMSNORM = ("RMSNorm computed in the input's float16/bfloat16: x**2 overflows float16, and "
                          "bfloat16 keeps 8 bits; upcast to float32 first")
register("rmsnorm_subtracts_mean", "the mean is subtracted (LayerNorm)",
         hint="RMSNorm that subtracts the mean (that is LayerNorm)", mistake=29,
         model__RMSNorm=_set(_RMSNorm, center=True))
register("rmsnorm_wrong_axis", "normalises over the wrong axis",
         hint="RMSNorm over the wrong axis; normalise over the last (d_model) axis",
         mistake=30, model__RMSNorm=_set(_RMSNorm, axis=0))
register("rmsnorm_mean_over_everything", "RMSNorm's mean of squares over the whole tensor (blind trial 9)",
         hint="one mean of squares over the whole tensor; each position is divided by its own RMS over d_model",
         model__RMSNorm=_set(_RMSNorm, axis=None))
register("rmsnorm_gain_ignored", "the gain is not applied",
         hint="RMSNorm without its gain; multiply by weights",
         mistake=31, model__RMSNorm=_set(_RMSNorm, use_gain=False))
register("rmsnorm_no_upcast", "no float32 upcast: fp16 squares overflow",
         hint=_LOW_PRECISION_RMSNORM, mistake=32,
         model__RMSNorm=_set(_RMSNorm, upcast=False))
register("rmsnorm_bf16_not_upcast", "RMSNorm upcasts float16 but computes bfloat16 in bfloat16",
         hint=_LOW_PRECISION_RMSNORM,
         model__RMSNorm=_set(_RMSNorm, upcast=torch.float16))
register("rmsnorm_eps_ignored", "eps hard-coded to 1e-6",
         hint="RMSNorm with a hard-coded eps instead of the eps argument",
         mistake=33, model__RMSNorm=_set(_RMSNorm, fixed_eps=1e-6))
register("rmsnorm_eps_outside_sqrt", "eps added outside the square root",
         hint="RMSNorm with eps outside the square root, sqrt(mean(x^2)) + eps; it goes inside: "
              "sqrt(mean(x^2) + eps)", model__RMSNorm=_set(_RMSNorm, eps_outside=True))
register("swiglu_w1_w3_swapped", "W1 and W3 swapped",
         hint="W1 and W3 swapped: SiLU applies to W1 x, W3 x is the gate",
         mistake=34, model__SwiGLU=_set(_SwiGLU, swap=True))
class _BufferTable(nn.Module):
    def __init__(self, vocab_size, d_model, device=None, dtype=None):
        super().__init__()
        self.register_buffer("weight", torch.randn(vocab_size, d_model, device=device, dtype=dtype))

    def forward(self, token_ids):
        return emb.embedding_lookup(self.weight, token_ids)


register("silu_as_sigmoid", "SiLU returns sigmoid(x), without the factor x",
         hint="sigmoid(x) alone; SiLU is x * sigmoid(x)",
         attention__silu=torch.sigmoid)
register("silu_sigmoid_detached", "SiLU as x * sigmoid(x).detach(): right values, wrong gradient",
         named_by="the output is right, only the gradient", attention__silu=lambda x: x * torch.sigmoid(x).detach())
register("position_table_persistent", "sinusoidal table a persistent buffer: it lands in every state dict",
         named_by="persistent=False", embeddings__SinusoidalPositions=_PersistentTable)
register("embedding_module_unchecked", "the embedding module indexes without a range check: id -1 wraps",
         named_by="raise on ids outside [0, vocab_size), as run_embedding does", embeddings__Embedding=_UncheckedEmbedding)
register("embedding_table_as_buffer", "the embedding table is a buffer, so it has no parameters and never trains",
         hint="an embedding table kept as a buffer; it is the module's one nn.Parameter",
         named_by="exactly 32,000 parameters", embeddings__Embedding=_BufferTable)
register("swiglu_gelu", "GELU in place of SiLU",
         hint="GELU in place of SiLU", mistake=35,
         model__SwiGLU=_set(_SwiGLU, activation=staticmethod(F.gelu)))
register("model_rounds_between_layers", "SwiGLU, the block and the LM round to 16 bits between their layers",
         hint=("a model that rounds to float16/bfloat16 between its layers (each Linear, norm and attention "
               "returns 16 bits to the next): upcast the input (or the embeddings) and every weight to float32 "
               "once at the start, and round once at the end"),
         model__widen=lambda x: x)

# ================================================================ block and LM

class _Block(model.TransformerBlock):
    post_norm, residual_from_norm = False, False
    second_residual = True  # False: the block returns FFN(RMSNorm(z)) alone (blind trial 13)

    @_float32_inside
    def forward(self, x):
        if self.post_norm:
            z = self.ln1(x + self.attn(x))
            return self.ln2(z + self.ffn(z))
        h = self.ln1(x)
        z = (h if self.residual_from_norm else x) + self.attn(h)
        h = self.ln2(z)
        if not self.second_residual:
            return self.ffn(h)
        return (h if self.residual_from_norm is True else z) + self.ffn(h)



class _LM(model.TransformerLM):
    probabilities, log_probabilities, dropout, plain_list = False, False, 0.0, False
    final_norm = True  # False: the last block's output goes to the head unnormalised
    tied_head = False  # the head shares the embedding table, as GPT-2's does and this LM's does not (blind trial 13)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.tied_head:
            self.lm_head.weight = self.token_embeddings.weight
        if self.plain_list:  # a Python list: its blocks are not registered submodules
            blocks = list(self.layers)
            del self.layers
            self.layers = blocks

    def forward(self, in_indices):
        rows = self.token_embeddings(in_indices)
        x = widen(rows)
        for layer in self.layers:
            x = F.dropout(layer(x), p=self.dropout, training=True) if self.dropout else layer(x)
        logits = self.lm_head(self.ln_final(x) if self.final_norm else x)
        if self.log_probabilities:
            return logits.log_softmax(dim=-1).to(rows.dtype)
        return (logits.softmax(dim=-1) if self.probabilities else logits).to(rows.dtype)



register("post_norm_block", "post-norm instead of pre-norm",
         hint="a post-norm block; this block is pre-norm: x + MHA(RMSNorm(x))", mistake=36,
         model__TransformerBlock=_set(_Block, post_norm=True))
register("first_residual_from_normalised", "the attention residual adds the normalised input (blind trial 6)",
         hint="an attention residual that adds the normalised input, z = RMSNorm(x) + MHA(RMSNorm(x)); add the raw x",
         model__TransformerBlock=_set(_Block, residual_from_norm="first"))
register("residual_from_normalised", "the residual adds the normalised input",
         hint="a residual that adds the normalised input; add the raw input x", mistake=37,
         model__TransformerBlock=_set(_Block, residual_from_norm=True))
register("lm_returns_probabilities", "the LM returns softmax probabilities",
         hint="probabilities (a softmax at the end); the LM returns logits", mistake=38,
         model__TransformerLM=_set(_LM, probabilities=True))
register("lm_returns_log_probabilities", "the LM returns log-probabilities",
         hint="log-probabilities (a log_softmax at the end: each row is the logits less their logsumexp); "
              "the LM returns logits", model__TransformerLM=_set(_LM, log_probabilities=True))
register("dropout_in_eval", "dropout stays active in eval mode",
         hint="dropout active in eval mode", named_by="eval-mode forwards differ", mistake=39,
         model__TransformerLM=_set(_LM, dropout=0.1))

# ================================================================ initialisation

class _AbsoluteBoundsLinear(attention.Linear):
    def __init__(self, in_features, out_features, device=None, dtype=None):
        nn.Module.__init__(self)
        self.weight = nn.Parameter(torch.empty(out_features, in_features, device=device, dtype=dtype))
        nn.init.trunc_normal_(self.weight, std=math.sqrt(2.0 / (in_features + out_features)))  # bounds +-2


class _ShallowResidualLM(model.TransformerLM):
    @torch.no_grad()
    def _init_gpt2(self, num_layers):
        for name, p in self.named_parameters():
            if p.dim() == 2:
                residual = name.endswith(("attn.output_proj.weight", "ffn.w2.weight"))
                p.normal_(0.0, 0.02 / math.sqrt(num_layers) if residual else 0.02)


register("trunc_normal_absolute_bounds", "trunc_normal_(std=s) keeps its absolute +-2 bounds",
         hint="trunc_normal_ with its default absolute bounds", named_by="a=-3*std", mistake=40,
         attention__Linear=_AbsoluteBoundsLinear)
register("gpt2_residual_scale_sqrt_l", "GPT-2 residual scale 1/sqrt(L) instead of 1/sqrt(2L)",
         hint="GPT-2 residual scale 1/sqrt(L) instead of 1/sqrt(2L)", named_by="0.02/sqrt(2*num_layers)", mistake=41,
         model__TransformerLM=_ShallowResidualLM)

# ================================================================ accounting

_reference_accounting = accounting.transformer_accounting  # the patch replaces the module attribute


def _accounting(adjust):
    def counts(vocab_size, context_length, d_model, num_layers, num_heads, d_ff, **extra):
        c = _reference_accounting(vocab_size, context_length, d_model, num_layers, num_heads, d_ff, **extra)
        adjust(c, vocab_size, context_length, d_model, num_layers)
        for kind in ("params", "flops"):
            c[f"{kind}.total"] = sum(v for k, v in c.items() if k.startswith(kind + ".") and not k.endswith("total"))
        return c
    return counts


def _halve(c, *_):
    for k in c:
        c[k] //= 2 if k.startswith("flops.") else 1


register("untied_head_counted_once", "the untied LM head counted as tied (once)",
         hint="the untied LM head left out of the parameter count (counted as tied)", mistake=42,
         accounting__transformer_accounting=_accounting(lambda c, *_: c.update({"params.lm_head": 0})))
register("macs_as_flops", "MACs reported as FLOPs",
         hint="MACs counted as FLOPs: a matmul costs 2*m*n*p FLOPs",
         named_by="MACs", mistake=43, accounting__transformer_accounting=_accounting(_halve))
register("missing_t_squared_terms", "the T^2 attention terms are omitted",
         hint="the T^2 attention terms (Q K^T and A V) left out", mistake=44,
         accounting__transformer_accounting=_accounting(
             lambda c, *_: c.update({"flops.attention_scores": 0, "flops.attention_values": 0})))
register("missing_lm_head_flops", "the LM-head matmul is omitted",
         hint="the LM-head matmul left out of the FLOPs", mistake=45,
         accounting__transformer_accounting=_accounting(lambda c, *_: c.update({"flops.lm_head": 0})))
register("position_params_with_rope", "learned position parameters counted for a RoPE model",
         hint="position parameters counted for a RoPE model, which has none", mistake=46,
         accounting__transformer_accounting=_accounting(
             lambda c, V, T, d, L: c.update({"params.token_embeddings": c["params.token_embeddings"] + T * d})))

_reference_training = accounting.training_accounting


def _training(adjust):
    """The reference's training counts with one part changed by `adjust(counts, args)`, totals re-added."""
    def counts(*args, **kwargs):
        c = _reference_training(*args, **kwargs)
        forward = accounting.transformer_accounting(*args[:6])
        adjust(c, dict(zip(("vocab_size", "context_length", "d_model", "num_layers", "num_heads", "d_ff"), args),
                       batch_size=kwargs.get("batch_size", 1), param_dtype=kwargs.get("param_dtype", "float32"),
                       optimizer_dtype=kwargs.get("optimizer_dtype", "float32"), forward=forward))
        c["memory.total"] = c["memory.parameters"] + c["memory.gradients"] + c["memory.adamw_moments"]
        c["flops.total"] = c["flops.forward"] + c["flops.backward"]
        return c
    return counts


register("adamw_one_moment", "AdamW's memory counts one moment",
         hint="AdamW's memory with one moment; it keeps two per parameter, m and v",
         accounting__training_accounting=_training(lambda c, a: c.update(
             {"memory.adamw_moments": c["memory.adamw_moments"] // 2})))
register("training_memory_without_gradients", "training memory without the gradients",
         hint="training memory without the gradients: every parameter has one, in param_dtype",
         accounting__training_accounting=_training(lambda c, a: c.update({"memory.gradients": 0})))
register("moments_in_param_dtype", "AdamW's moments counted in param_dtype",
         hint="AdamW's moments counted in param_dtype; they take optimizer_dtype's bytes",
         accounting__training_accounting=_training(lambda c, a: c.update(
             {"memory.adamw_moments": 2 * c["memory.parameters"]})))
register("backward_as_one_forward", "the backward pass counted as one forward",
         hint="a backward pass counted as one forward; it costs two (the gradients of each matmul's input and weight)",
         accounting__training_accounting=_training(lambda c, a: c.update({"flops.backward": c["flops.forward"]})))
register("training_flops_one_sequence", "training FLOPs for one sequence, whatever batch_size is",
         hint="training FLOPs for one sequence; a step runs batch_size of them",
         accounting__training_accounting=_training(lambda c, a: c.update(
             {"flops.forward": a["forward"]["flops.total"], "flops.backward": 2 * a["forward"]["flops.total"]})))
register("training_flops_6nd", "training FLOPs as 6 x parameters x tokens",
         hint=("training FLOPs as 6 x params.total x tokens: that counts the token embeddings as a matmul and "
               "leaves out attention's T^2 terms; use 3 x the forward FLOPs"),
         accounting__training_accounting=_training(lambda c, a: c.update(
             {"flops.forward": 2 * a["forward"]["params.total"] * c["tokens"],
              "flops.backward": 4 * a["forward"]["params.total"] * c["tokens"]})))

def _softmax_global_max(x, dim):
    e = (x - x.max()).exp()
    return e / e.sum(dim=dim, keepdim=True)


def _softmax_last_axis_max(x, dim):
    e = (x - x.amax(dim=-1, keepdim=True)).exp()  # the max of the last axis, whatever dim is
    return e / e.sum(dim=dim, keepdim=True)


def _softmax_mean(x, dim):
    e = (x - x.mean(dim=dim, keepdim=True)).exp()
    return e / e.sum(dim=dim, keepdim=True)


register("softmax_max_over_last_axis", "softmax subtracts the last axis's max whatever dim is",
         hint="softmax that subtracts the max over the last axis, not over dim: take x.amax(dim, keepdim=True)",
         attention__softmax=_softmax_last_axis_max)
register("softmax_subtracts_mean", "softmax subtracts each slice's mean instead of its max",
         named_by="not the mean", attention__softmax=_softmax_mean)
register("softmax_global_max", "softmax subtracts the global max, not each slice's", named_by="not the global max",
         hint=("softmax with the global max: slices far below it underflow to 0/0 (NaN). Subtract each slice's own "
               "max, x.amax(dim, keepdim=True)"),
         attention__softmax=_softmax_global_max)

# ================================================================ contract slips

register("forgot_return", "the adapter's function forgets to return", named_by="Add the missing `return` there",
         embeddings__embedding_lookup=lambda w, ids: None)
register("flattened_output", "the lookup flattens the leading dimensions", named_by="shape",
         embeddings__embedding_lookup=lambda w, ids: _lookup(w, ids.reshape(-1)))
register("float64_output", "positions returned in float64", named_by="dtype",
         embeddings__sinusoidal_positions=lambda d, p: _sinusoidal(d, p).double())
register("mutates_input", "the lookup writes into its weights", named_by="in place",
         embeddings__embedding_lookup=_mutating)

# ================================================================ found in independently written solutions

class _Linear(attention.Linear):
    transpose, variance_as_std, cast_back = True, False, True
    reshaped = False  # W.reshape(d_in, d_out) in place of W.T: the memory order kept, columns mixed

    def __init__(self, in_features, out_features, device=None, dtype=None):
        super().__init__(in_features, out_features, device=device, dtype=dtype)
        if self.variance_as_std:
            std = 2.0 / (in_features + out_features)
            nn.init.trunc_normal_(self.weight, std=std, a=-3 * std, b=3 * std)

    def forward(self, x):
        wide = widen(x)  # as the reference: float32 inside
        w = self.weight.to(wide.dtype)
        out = wide @ (w.reshape(w.shape[1], w.shape[0]) if self.reshaped else w.T if self.transpose else w)
        return out.to(x.dtype) if self.cast_back else out


class _RandomGainRMSNorm(model.RMSNorm):
    def __init__(self, d_model, eps=1e-5, device=None, dtype=None):
        super().__init__(d_model, eps, device=device, dtype=dtype)
        nn.init.trunc_normal_(self.weight, std=1.0, a=-3.0, b=3.0)


def _learned_at_arange(weights, token_positions):
    emb.check_range(token_positions, weights.shape[0], "position")
    rows = weights[torch.arange(token_positions.shape[-1], device=weights.device)]
    return rows.expand(*token_positions.shape, -1)


register("rope_positions_meet_heads", "[B, T] token_positions broadcast against [B, H, T, d_k]",
         hint=("token_positions [batch, seq] broadcast against [batch, heads, seq, d_k], so batch meets heads; add "
               "the heads axis: token_positions.unsqueeze(-2)"),
         named_by="against [batch, heads, seq, d_k]",
         attention__MultiHeadSelfAttention=_set(_MHA, positions="meet_heads"))
register("mha_rope_none_positions_crash", "attention with RoPE uses token_positions without handling None",
         named_by="None means 0 .. seq-1", attention__MultiHeadSelfAttention=_set(_MHA, positions="unhandled_none"))
register("mha_rope_asserts_positions", "attention with RoPE asserts that token_positions is given",
         named_by="None means 0 .. seq-1", attention__MultiHeadSelfAttention=_set(_MHA, positions="asserted"))
register("rope_einsum_positions_meet_heads", "einsum RoPE with [B, T] positions against [B, H, T, d_k]",
         named_by="against [batch, heads, seq, d_k]",
         attention__MultiHeadSelfAttention=_set(_MHA, positions="meet_heads"),
         rope__RotaryPositionalEmbedding=_set(_RoPE, einsum=True))
register("rope_on_values", "RoPE applied to V as well as to Q and K (blind trial 6)",
         hint="RoPE applied to V as well; rotate only Q and K: positions act through the scores, and V is never rotated",
         attention__MultiHeadSelfAttention=_set(_MHA, rotate_values=True))
register("mha_rope_ignores_positions", "attention with RoPE uses arange(seq), not token_positions",
         hint="attention with RoPE that ignores token_positions and rotates by arange(seq)",
         attention__MultiHeadSelfAttention=_set(_MHA, positions="ignored"))
register("rope_skipped_without_positions", "RoPE skipped when token_positions is None",
         hint="attention that skips RoPE when token_positions is None; None means positions 0..seq-1, still rotated",
         attention__MultiHeadSelfAttention=_set(_MHA, positions="skipped_when_none"))
register("attention_requires_mask", "SDPA uses ~mask even when mask is None", named_by="is None in this case",
         attention__scaled_dot_product_attention=_attention(mask_required=True))
register("rmsnorm_einops_3d", "RMSNorm reduces with an einops pattern 'b t d': only 3-D inputs work",
         named_by="fixed number of dimensions",
         model__RMSNorm=_set(_RMSNorm, einops_3d=True))
register("blocks_in_python_list", "TransformerLM keeps its blocks in a plain Python list", named_by="nn.ModuleList",
         model__TransformerLM=_set(_LM, plain_list=True))
register("init_variance_as_std", "Linear init passes the variance 2/(d_in+d_out) as the std",
         named_by="that is the variance", attention__Linear=_set(_Linear, variance_as_std=True))
register("rmsnorm_gains_not_one", "RMSNorm gains initialised randomly, not to 1",
         named_by="RMSNorm gains must start at 1", model__RMSNorm=_RandomGainRMSNorm)
register("rope_theta_ignored", "RoPE always uses theta=10000, whatever theta is given",
         hint="RoPE that ignores the theta argument and always uses 10000",
         rope__RotaryPositionalEmbedding=_set(_RoPE, fixed_theta=10000.0))
register("learned_positions_arange", "learned positions indexed with arange(seq), not token_positions",
         hint="learned positions indexed with arange(seq) instead of the given token_positions",
         embeddings__learned_positions=_learned_at_arange)
def _sinusoidal_at_arange(d, positions):
    seq = torch.arange(positions.shape[-1], device=positions.device).expand(positions.shape)
    return _sinusoidal(d, seq)


register("sinusoidal_ignores_positions", "sinusoidal positions computed at arange(seq), not token_positions",
         hint="sinusoidal encodings of arange(seq) instead of the given token_positions",
         embeddings__sinusoidal_positions=_sinusoidal_at_arange)
register("sinusoidal_halves_same_frequencies", "[sin | cos] halves with this assignment's frequencies",
         hint=("the [sin | cos] halves layout (all sines, then all cosines) with this assignment's frequencies; "
               "interleave them: sin on even dimensions, cos on odd ones"),
         embeddings__sinusoidal_positions=lambda d, p: _sinusoidal(d, p, layout="halves"))
register("sinusoidal_sin_only", "sinusoidal table of d_model/2 sines: half the width",
         named_by="half as wide on its last axis",
         embeddings__sinusoidal_positions=lambda d, p: _sinusoidal(d, p, layout="sin_only"))
register("sinusoidal_base_1000", "sinusoidal frequencies with base 1000 (blind trial 9)",
         hint="frequencies with base 1000; the base is 10000: pair i turns at 1 / 10000^(2i / d_model)",
         embeddings__sinusoidal_positions=lambda d, p: _sinusoidal(d, p, base=1000.0))
register("sinusoidal_exponent_pair_index", "sinusoidal exponent i/d_model over the pair index",
         hint="an exponent over the pair index, 10000^(i/d_model); pair i uses 10000^(2i/d_model)",
         embeddings__sinusoidal_positions=lambda d, p: _sinusoidal(d, p, exponent="pair_index"))
register("attention_scale_sqrt_dv", "scores scaled by 1/sqrt(d_v) instead of 1/sqrt(d_k)",
         hint="attention scores scaled by 1/sqrt(d_v); the scale uses d_k, the width of Q and K",
         attention__scaled_dot_product_attention=_attention(scale_by="d_v"))
register("attention_scale_1_over_dk", "scores scaled by 1/d_k instead of 1/sqrt(d_k) (blind trial 9)",
         hint="attention scores divided by d_k; the scale is 1/sqrt(d_k), the square root of Q's width",
         attention__scaled_dot_product_attention=_attention(root=False))
register("rmsnorm_returns_module_dtype", "RMSNorm returns the weights' dtype, not the input's",
         named_by="return the input's dtype", model__RMSNorm=_set(_RMSNorm, module_dtype=True))
class _UninitialisedLinear(attention.Linear):
    def __init__(self, in_features, out_features, device=None, dtype=None):
        nn.Module.__init__(self)
        self.weight = nn.Parameter(torch.empty(out_features, in_features, device=device, dtype=dtype))


register("linear_left_uninitialised", "Linear weights left as torch.empty, never initialised",
         named_by="they are not initialised", attention__Linear=_UninitialisedLinear)
register("linear_without_transpose", "Linear computes x @ W without the transpose",
         hint="a linear layer computing x @ W without the transpose; W is [d_out, d_in], so y = x @ W.T",
         named_by="without its transpose", attention__Linear=_set(_Linear, transpose=False))
register("linear_weight_reshaped", "Linear computes x @ W.reshape(d_in, d_out), not x @ W.T (blind trial 9)",
         hint=("the weight reshaped to [d_in, d_out] instead of transposed: reshape keeps W's memory order, so each "
               "column mixes rows of W; y = x @ W.T"),
         attention__Linear=_set(_Linear, reshaped=True))
register("linear_returns_float32", "Linear upcasts a 16-bit x to float32 and returns float32",
         named_by="return the dtype the contract states", attention__Linear=_set(_Linear, cast_back=False))

# ================================================================ from GPT-2 to modern models

class _LayerNorm(gpt2.LayerNorm):
    """LayerNorm with a knob per known mistake; the correct settings match the reference."""
    unbiased, eps_outside, use_bias, axis, center, one_pass, affine_in_input_dtype = \
        False, False, True, -1, True, False, False
    centred_numerator = True  # False: x / std, the variance centred but not x

    def forward(self, x):
        wide = x.float()
        mean = wide.mean(dim=self.axis, keepdim=True) if self.center else 0.0
        if self.one_pass:
            var = wide.pow(2).mean(dim=self.axis, keepdim=True) - mean ** 2
        else:
            var = wide.var(dim=self.axis, keepdim=True, unbiased=self.unbiased) if self.center else \
                wide.pow(2).mean(dim=self.axis, keepdim=True)
        scale = torch.sqrt(var) + self.eps if self.eps_outside else torch.sqrt(var + self.eps)
        normed = (wide - mean if self.centred_numerator else wide) / scale
        if self.affine_in_input_dtype:  # normalised in float32, then rounded before weight and bias
            normed = normed.to(x.dtype)
        out = normed * self.weight
        return (out + self.bias if self.use_bias else out).to(x.dtype)


_reference_gelu = gpt2.gelu


def _gelu_in_input_dtype(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x.pow(3))))
    if approximate == "none":
        return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
    raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")


class _GPT2MLP(gpt2.GPT2MLP):
    @_float32_inside
    def forward(self, x):
        return F.linear(gpt2.gelu(F.linear(x, self.c_fc.weight), self.approximate), self.c_proj.weight)


class _GQA(gpt2.GroupedQueryAttention):
    """Grouped-query attention with a knob per known mistake."""
    rope_on_values, group_from_d_model = False, False

    @_float32_inside
    def forward(self, x, token_positions=None):
        seq = x.shape[-2]
        q = rearrange(self.q_proj(x), "... s (h d) -> ... h s d", h=self.num_heads)
        k, v = (rearrange(p(x), "... s (h d) -> ... h s d", h=self.num_kv_heads) for p in (self.k_proj, self.v_proj))
        if self.rope is not None:
            positions = (torch.arange(seq, device=x.device) if token_positions is None else token_positions)
            q, k = (self.rope(t, positions.unsqueeze(-2)) for t in (q, k))
            v = self.rope(v, positions.unsqueeze(-2)) if self.rope_on_values else v
        group = x.shape[-1] // self.num_kv_heads if self.group_from_d_model else self.num_heads // self.num_kv_heads
        k, v = gpt2.expand_kv(k, group), gpt2.expand_kv(v, group)
        causal = torch.ones(seq, seq, dtype=torch.bool, device=x.device).tril()
        out = attention.scaled_dot_product_attention(q, k, v, causal)
        return self.output_proj(rearrange(out, "... h s d -> ... s (h d)"))


class _GPT2Block(gpt2.GPT2Block):
    @_float32_inside
    def forward(self, x):  # post-LN, as GPT-1 and the original Transformer
        z = self.ln1(x + self.attn(x))
        return self.ln2(z + self.mlp(z))


class _GPT2LM(gpt2.GPT2LM):
    final_norm, untied, residual_scale, final_eps = True, False, True, 1e-5
    positions = True  # the learned position vectors added to the token embeddings
    scaled_tokens = False  # token embeddings times sqrt(d_model), the original Transformer's scale

    def __init__(self, vocab_size, context_length, d_model, *args, **kwargs):
        super().__init__(vocab_size, context_length, d_model, *args, **kwargs)
        self.ln_final.eps = self.final_eps
        if self.untied:
            self.lm_head = attention.Linear(d_model, vocab_size)
            nn.init.normal_(self.lm_head.weight, 0.0, 0.02)
        if not self.residual_scale:
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, 0.0, 0.02)

    def forward(self, in_indices):
        positions = torch.arange(in_indices.shape[-1], device=in_indices.device)
        table = self.token_embeddings.weight
        x = widen(self.token_embeddings(in_indices))
        x = x * math.sqrt(x.shape[-1]) if self.scaled_tokens else x
        x = x + widen(self.position_embeddings(positions)) if self.positions else x
        for layer in self.layers:
            x = layer(x)
        x = self.ln_final(x) if self.final_norm else x
        return (self.lm_head(x) if self.untied else x @ table.to(x.dtype).T).to(table.dtype)


_reference_gpt2_accounting = accounting.gpt2_accounting


def _gpt2_accounting(adjust):
    def counts(vocab_size, context_length, d_model, num_layers, num_heads, d_ff, **extra):
        c = _reference_gpt2_accounting(vocab_size, context_length, d_model, num_layers, num_heads, d_ff, **extra)
        adjust(c, vocab_size, context_length, d_model, num_layers, d_ff)
        for kind in ("params", "flops"):
            c[f"{kind}.total"] = sum(v for k, v in c.items() if k.startswith(kind + ".") and not k.endswith("total"))
        return c
    return counts


register("layernorm_unbiased_variance", "LayerNorm with torch.var's default, the unbiased variance",
         hint=("LayerNorm with the unbiased variance (torch.var's default divides by d_model - 1); use the biased "
               "variance, mean((x - mean)^2), or var(unbiased=False)"),
         gpt2__LayerNorm=_set(_LayerNorm, unbiased=True))
register("layernorm_eps_outside_sqrt", "LayerNorm divides by sqrt(var) + eps",
         hint="LayerNorm with eps outside the square root, sqrt(var) + eps; it goes inside: sqrt(var + eps)",
         gpt2__LayerNorm=_set(_LayerNorm, eps_outside=True))
register("layernorm_bias_dropped", "LayerNorm without its bias",
         hint="LayerNorm without its bias; add `bias` after the gain", gpt2__LayerNorm=_set(_LayerNorm, use_bias=False))
register("layernorm_wrong_axis", "LayerNorm normalises over the first axis",
         hint="LayerNorm over the wrong axis; normalise over the last (d_model) axis",
         gpt2__LayerNorm=_set(_LayerNorm, axis=0))
register("layernorm_one_pass_variance", "LayerNorm variance as E[x^2] - E[x]^2 in float32",
         hint=("a one-pass variance, E[x^2] - E[x]^2, which cancels catastrophically in float32 when |mean| >> std; "
               "subtract the mean first, then average the squares"),
         gpt2__LayerNorm=_set(_LayerNorm, one_pass=True))
register("layernorm_without_mean", "RMSNorm where LayerNorm is asked: the mean is not subtracted",
         hint="RMSNorm in place of LayerNorm: subtract the mean, then divide by the standard deviation",
         gpt2__LayerNorm=_set(_LayerNorm, center=False))
register("layernorm_numerator_not_centred", "LayerNorm divides x, not x - mean, by the standard deviation (blind trial 9)",
         hint=("x itself divided by the standard deviation: the variance is centred, and so must x be: "
               "(x - mean) / sqrt(var + eps)"),
         gpt2__LayerNorm=_set(_LayerNorm, centred_numerator=False))
register("layernorm_affine_in_16_bits", "LayerNorm normalises in float32 but applies weight and bias in 16 bits",
         hint=("LayerNorm that normalises in float32 but rounds to float16/bfloat16 before the affine: the product "
               "with weight and the sum with bias each round to 16 bits; apply weight and bias in float32 too, "
               "then round once"),
         gpt2__LayerNorm=_set(_LayerNorm, affine_in_input_dtype=True))
register("gelu_tanh_for_exact", "GELU by the tanh approximation where the exact form is asked",
         hint="GELU by its tanh approximation where approximate='none' asks for the exact erf form",
         gpt2__gelu=lambda x, approximate="none": _reference_gelu(x, "tanh"))
register("gelu_approximate_ignored", "GELU ignores approximate='tanh'",
         hint="GELU that ignores approximate='tanh' and always computes the exact erf form",
         gpt2__gelu=lambda x, approximate="none": _reference_gelu(x))
register("gelu_in_16_bits", "GELU computed in the input's float16/bfloat16",
         hint=("GELU computed in float16/bfloat16 (x / sqrt(2), erf, 1 + erf and the products each round to 16 "
               "bits); compute in float32 and round once: gelu(x.float()).to(x.dtype)"),
         gpt2__gelu=lambda x, approximate="none": _gelu_in_input_dtype(x, approximate))
register("gpt2_rounds_between_layers", "the GPT-2 MLP, attention, block and LM round to 16 bits between layers",
         hint=("GPT-2 modules that round to float16/bfloat16 between their layers (each linear, GELU and "
               "attention returns 16 bits to the next): upcast the input (or the embeddings) and every weight "
               "and bias to float32 once at the start, and round once at the end"),
         gpt2__widen=lambda x: x)
register("gpt2_mlp_biases_dropped", "the GPT-2 MLP holds its biases but never adds them",
         hint="the GPT-2 MLP without its biases: c_fc and c_proj both add theirs",
         gpt2__GPT2MLP=_GPT2MLP)
register("gqa_repeat_not_interleave", "kv heads expanded with repeat: query head h reads kv head h % num_kv_heads",
         hint=("kv heads expanded with repeat (query head h reads kv head h % num_kv_heads); use repeat_interleave, "
               "so query head h reads kv head h // (num_heads / num_kv_heads)"),
         gpt2__expand_kv=lambda t, group: t.repeat(*[1] * (t.dim() - 3), group, 1, 1))
register("gqa_rope_on_values", "RoPE applied to V as well as Q and K",
         hint="RoPE applied to V; it rotates only Q and K", gpt2__GroupedQueryAttention=_set(_GQA, rope_on_values=True))
register("gqa_group_from_d_model", "GQA group size d_model // num_kv_heads instead of num_heads // num_kv_heads",
         named_by="the group size comes from the head counts",
         gpt2__GroupedQueryAttention=_set(_GQA, group_from_d_model=True))
register("gpt2_block_post_ln", "post-LN GPT-2 block (GPT-1 / original Transformer order)",
         hint="a post-LN block (GPT-1's order); GPT-2 is pre-LN: x + Attn(LayerNorm(x))", gpt2__GPT2Block=_GPT2Block)
register("gpt2_lm_no_final_norm", "the GPT-2 LM skips the final LayerNorm",
         hint="the final LayerNorm (ln_final) left out before the tied LM head", gpt2__GPT2LM=_set(_GPT2LM, final_norm=False))
register("gpt2_lm_without_positions", "the GPT-2 LM adds no position embeddings (blind trial 8)",
         hint=("no position embeddings: x = wte[ids] alone; GPT-2 adds the learned vector of each position, "
               "x = wte[ids] + wpe[0..seq-1], before the first block"),
         named_by="no position embeddings", gpt2__GPT2LM=_set(_GPT2LM, positions=False))
register("gpt2_lm_scales_token_embeddings", "the GPT-2 LM scales token embeddings by sqrt(d_model) (blind trial 9)",
         hint=("token embeddings multiplied by sqrt(d_model), the original Transformer's scale; GPT-2 adds them "
               "unscaled: wte[ids] + wpe[positions]"),
         gpt2__GPT2LM=_set(_GPT2LM, scaled_tokens=True))
register("gpt2_final_norm_eps_1e_6", "GPT-2's final LayerNorm with eps 1e-6 (blind trial 6)",
         hint="a final LayerNorm (ln_final) with eps 1e-6; GPT-2's LayerNorms all use eps 1e-5",
         gpt2__GPT2LM=_set(_GPT2LM, final_eps=1e-6))
register("gpt2_lm_untied_head", "the GPT-2 LM has its own lm_head matrix", named_by="tied",
         gpt2__GPT2LM=_set(_GPT2LM, untied=True))
register("gpt2_init_residual_unscaled", "GPT-2 init without the 1/sqrt(2 num_layers) residual scale",
         named_by="0.02/sqrt(2*num_layers)", gpt2__GPT2LM=_set(_GPT2LM, residual_scale=False))
register("gpt2_accounting_head_counted", "the tied GPT-2 head counted as a second matrix",
         hint="the tied LM head counted as its own vocab_size x d_model matrix; it is the token embedding",
         accounting__gpt2_accounting=_gpt2_accounting(lambda c, V, T, d, L, f: c.update({"params.lm_head": V * d})))
register("gpt2_accounting_no_biases", "GPT-2 parameters counted without the linear biases",
         hint="GPT-2's linear biases left out of the parameter count",
         accounting__gpt2_accounting=_gpt2_accounting(lambda c, V, T, d, L, f: c.update(
             {"params.attention": L * 4 * d * d, "params.mlp": L * 2 * d * f})))
register("accounting_kv_heads_ignored", "GQA accounting counts K and V projections d_model wide",
         hint="K and V projections counted d_model wide; with num_kv_heads they are num_kv_heads * d_k wide",
         accounting__transformer_accounting=lambda *a, num_kv_heads=None, **k: _reference_accounting(*a, **k))
register("kv_cache_dtype_ignored", "the KV cache counted at 4 bytes a value whatever its dtype",
         hint="a KV cache counted in float32 whatever kv_cache_dtype says (bfloat16 and float16 take 2 bytes)",
         accounting__transformer_accounting=lambda *a, kv_cache_dtype="float32", **k: _reference_accounting(*a, **k))

# ================================================================ found in blind trials: named, not vague

class _RoPEAtArange(rope.RotaryPositionalEmbedding):
    def forward(self, x, token_positions):
        return super().forward(x, torch.arange(x.shape[-2], device=x.device))


def _sdpa_float_mask(Q, K, V, mask=None):
    return F.scaled_dot_product_attention(Q, K, V, attn_mask=None if mask is None else mask.to(Q.dtype))


class _FusedQKV(attention.MultiHeadSelfAttention):
    """One [3 d_model, d_model] projection, split as `split`; the contract's q, k, v are stacked (3, h, d_k)."""
    split, mask_from_positions = "(three h e)", False

    def forward(self, x, token_positions=None):
        seq, h, wide = x.shape[-2], self.num_heads, attention.widen(x)  # float32 inside, rounded once
        fused = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight]).to(wide.dtype)
        q, k, v = rearrange(wide @ fused.T, f"... s {self.split} -> three ... h s e", three=3, h=h)
        if token_positions is None:
            token_positions = torch.arange(seq, device=x.device)
        if self.rope is not None:
            q, k = self.rope(q, token_positions.unsqueeze(-2)), self.rope(k, token_positions.unsqueeze(-2))
        if self.mask_from_positions == "values":  # "key j is visible when its position <= mine"
            mask = (token_positions[..., None, :] <= token_positions[..., :, None]).unsqueeze(-3)
        elif self.mask_from_positions:  # "key j is visible when j <= my position": indices against values
            mask = (torch.arange(seq, device=x.device) <= token_positions[..., :, None]).unsqueeze(-3)
        else:
            mask = torch.ones(seq, seq, dtype=torch.bool, device=x.device).tril()
        out = attention.scaled_dot_product_attention(q, k, v, mask)
        return self.output_proj(rearrange(out, "... h s e -> ... s (h e)")).to(x.dtype)


class _LayerNormFixedEps(_LayerNorm):
    def __init__(self, d_model, eps=1e-5, device=None, dtype=None):
        super().__init__(d_model, 1e-5, device=device, dtype=dtype)


register("rope_ignores_positions", "RoPE rotates by arange(seq), not token_positions",
         hint=("RoPE that rotates every token by its index 0..seq-1 and ignores token_positions; rotate each one by "
               "its own position, cos[token_positions], sin[token_positions]"),
         rope__RotaryPositionalEmbedding=_RoPEAtArange)
register("sdpa_float_mask", "a 0/1 float mask given to F.scaled_dot_product_attention",
         hint=("a 0/1 float mask passed to F.scaled_dot_product_attention: a float attn_mask is added to the scores, "
               "so masked keys get +0 and kept ones +1; pass the boolean mask itself (True = attend)"),
         attention__scaled_dot_product_attention=_sdpa_float_mask)
register("fused_qkv_heads_first", "fused QKV split as (heads, 3, d_k)",
         hint=("the fused QKV output split as (heads, 3, d_k); torch.cat([W_q, W_k, W_v]) stacks q, k and v first, "
               "so split it as (3, heads, d_k): '... s (three h e) -> three ... h s e'"),
         attention__MultiHeadSelfAttention=_set(_FusedQKV, split="(h three e)"))
register("causal_mask_from_position_values", "the causal mask compares key indices with token_positions' values",
         hint=("a causal mask built from token_positions' values (key j visible when j <= position): positions say "
               "how far RoPE rotates, not which keys a query sees; build it from indices, tril(ones(seq, seq))"),
         attention__MultiHeadSelfAttention=_set(_FusedQKV, mask_from_positions=True))
register("causal_mask_between_position_values", "the causal mask compares token_positions' values with each other",
         hint=("a causal mask built from token_positions' values (key j visible when its position <= the query's): "
               "positions say how far RoPE rotates, not which keys a query sees; build the mask from sequence order, "
               "tril(ones(seq, seq))"),
         attention__MultiHeadSelfAttention=_set(_FusedQKV, mask_from_positions="values"))
register("fused_qkv", "fused QKV projection, split (3, heads, d_k), positions by index", correct=True,
         attention__MultiHeadSelfAttention=_FusedQKV)
register("layernorm_eps_fixed", "LayerNorm with eps fixed at 1e-5",
         hint="LayerNorm with eps fixed at 1e-5; use the eps it is built with (run_layernorm's `eps`)",
         gpt2__LayerNorm=_LayerNormFixedEps)
register("gelu_tanh_sqrt_two_pi", "tanh GELU with sqrt(2 pi) for sqrt(2 / pi)",
         hint="the tanh GELU with sqrt(2*pi) inside; the formula has sqrt(2/pi): tanh(sqrt(2/pi) (x + 0.044715 x^3))",
         gpt2__gelu=lambda x, approximate="none": _reference_gelu(x) if approximate == "none" else
         0.5 * x * (1 + torch.tanh(math.sqrt(2 * math.pi) * (x + 0.044715 * x.pow(3)))))
register("gelu_erf_of_half_x", "exact GELU as erf(x / 2) for erf(x / sqrt(2)) (blind trial 9)",
         hint="the exact GELU with erf(x / 2); the normal CDF is (1 + erf(x / sqrt(2))) / 2",
         gpt2__gelu=lambda x, approximate="none": 0.5 * x * (1 + torch.erf(x / 2)) if approximate == "none" else
         _reference_gelu(x, approximate))
register("gelu_tanh_without_sqrt", "tanh GELU with 2 / pi for sqrt(2 / pi) (blind trial 9)",
         hint="the tanh GELU with 2/pi inside, not its square root: tanh(sqrt(2/pi) (x + 0.044715 x^3))",
         gpt2__gelu=lambda x, approximate="none": _reference_gelu(x) if approximate == "none" else
         0.5 * x * (1 + torch.tanh(2 / math.pi * (x + 0.044715 * x.pow(3)))))
register("gelu_erf_without_sqrt2", "exact GELU as erf(x) for erf(x / sqrt(2))",
         hint="the exact GELU with erf(x); the normal CDF is (1 + erf(x / sqrt(2))) / 2",
         gpt2__gelu=lambda x, approximate="none": 0.5 * x * (1 + torch.erf(x)) if approximate == "none" else
         _reference_gelu(x, approximate))


# ================================================================ correct alternatives

def _f_embedding(weights, token_ids):
    emb.check_range(token_ids, weights.shape[0], "token id")
    return F.embedding(token_ids, weights)


def _index_select(weights, token_ids):
    emb.check_range(token_ids, weights.shape[0], "token id")
    return weights.index_select(0, token_ids.reshape(-1)).reshape(*token_ids.shape, weights.shape[1])


def _sinusoidal_float32(d_model, token_positions):
    i = torch.arange(0, d_model, 2, dtype=torch.float32, device=token_positions.device)
    angles = token_positions[..., None].float() / torch.pow(10000.0, i / d_model)
    pe = torch.empty(*angles.shape[:-1], d_model, device=token_positions.device)
    pe[..., 0::2], pe[..., 1::2] = angles.sin(), angles.cos()
    return pe


register("functional_embedding", "F.embedding with an explicit range check", correct=True,
         embeddings__embedding_lookup=_f_embedding)
register("index_select_embedding", "index_select on flattened ids", correct=True,
         embeddings__embedding_lookup=_index_select)
register("float32_sinusoidal", "sinusoidal computed in float32 with pow and strided writes", correct=True,
         embeddings__sinusoidal_positions=_sinusoidal_float32)


# ---- einsum everywhere

# 16-bit weights meet a float32 x inside a model (float32 throughout): each weight is cast where it is used.
class _EinsumLinear(attention.Linear):
    def forward(self, x):
        return torch.einsum("...i,oi->...o", x, self.weight.to(x.dtype))


def _einsum_attention(Q, K, V, mask=None):
    q, k, v = (t.float() if t.dtype in (torch.float16, torch.bfloat16) else t for t in (Q, K, V))
    scores = torch.einsum("...qd,...kd->...qk", q, k) / Q.shape[-1] ** 0.5
    if mask is not None:
        scores = torch.where(mask, scores, float("-inf"))
    return torch.einsum("...qk,...kd->...qd", attention.softmax(scores, -1), v).to(Q.dtype)


register("einsum", "einsum for linear layers and attention", correct=True,
         attention__Linear=_EinsumLinear,
         attention__scaled_dot_product_attention=_einsum_attention)


# A blind student's softmax: exact, but float32 gradients under sharp scores drift by 2e-5 of
# the largest one (harness/student_run/checks.gradient_atol), which once failed it.
register("logsumexp_softmax", "softmax as exp(x - logsumexp(x))", correct=True,
         attention__softmax=lambda x, dim: (x.float() - x.float().logsumexp(dim=dim, keepdim=True)).exp().to(x.dtype)
         if x.dtype in (torch.float16, torch.bfloat16) else (x - x.logsumexp(dim=dim, keepdim=True)).exp())


# ---- float64 internally

class _Float64Linear(attention.Linear):
    def forward(self, x):
        return (x.double() @ self.weight.double().T).to(x.dtype)


class _Float64RMSNorm(model.RMSNorm):
    def forward(self, x):
        wide = x.double()
        return (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.double()).to(x.dtype)


def _float64_softmax(x, dim):
    return torch.softmax(x.double(), dim=dim).to(x.dtype)


def _float64_attention(Q, K, V, mask=None):
    scores = Q.double() @ K.double().transpose(-1, -2) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return (torch.softmax(scores, -1) @ V.double()).to(Q.dtype)


register("float64_internals", "float64 inside linear, softmax, attention and RMSNorm (rsqrt)", correct=True,
         attention__Linear=_Float64Linear, model__RMSNorm=_Float64RMSNorm,
         attention__softmax=_float64_softmax, attention__scaled_dot_product_attention=_float64_attention)


# ---- complex-number RoPE

class _ComplexRoPE(nn.Module):
    def __init__(self, theta, d_k, max_seq_len, device=None):
        super().__init__()
        freqs = theta ** (-torch.arange(0, d_k, 2, dtype=torch.float32, device=device) / d_k)
        angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float32, device=device), freqs)
        self.register_buffer("cis", torch.polar(torch.ones_like(angles), angles), persistent=False)

    def forward(self, x, token_positions):
        pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2).contiguous())
        return torch.view_as_real(pairs * self.cis[token_positions]).flatten(-2).to(x.dtype)


register("complex_rope", "RoPE as multiplication by complex exponentials", correct=True,
         rope__RotaryPositionalEmbedding=_ComplexRoPE)


# ---- torch's fused attention

def _torch_sdpa(Q, K, V, mask=None):
    return F.scaled_dot_product_attention(Q, K, V, attn_mask=mask)


register("torch_sdpa", "attention through torch.nn.functional.scaled_dot_product_attention", correct=True,
         attention__scaled_dot_product_attention=_torch_sdpa)


# ---- modules built inside the adapter call, as the template does for Linear

class _TemplateEmbedding(nn.Module):
    def __init__(self, num_embeddings, embedding_dim, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_embeddings, embedding_dim, device=device, dtype=dtype))
        nn.init.trunc_normal_(self.weight, std=1.0, a=-3.0, b=3.0)

    def forward(self, token_ids):
        emb.check_range(token_ids, self.weight.shape[0], "token id")
        return self.weight[token_ids]


def _module_in_call(weights, token_ids):
    return torch.func.functional_call(_TemplateEmbedding(*weights.shape), {"weight": weights}, (token_ids,))


def _nn_embedding_in_call(weights, token_ids):
    # F.embedding raises IndexError for ids outside [0, V) on its own.
    return torch.func.functional_call(nn.Embedding(*weights.shape), {"weight": weights}, (token_ids,))


register("embedding_module_in_call", "an Embedding module built inside the call, run with functional_call",
         correct=True, embeddings__embedding_lookup=_module_in_call)
register("nn_embedding_in_call", "nn.Embedding(V, D) built inside the call, run with functional_call",
         correct=True, embeddings__embedding_lookup=_nn_embedding_in_call)


# ---- range check written with assert

def _assert_range(ids, size, what):
    assert bool((ids >= 0).all()) and bool((ids < size).all()), f"{what} outside [0, {size})"


register("assert_range_check", "range checks written as assert (ids >= 0).all() and (ids < V).all()",
         correct=True, embeddings__check_range=_assert_range)


# ---- CPU indices into device tables

def _embed_cpu_positions(token_weights, position_weights, token_ids):
    positions = torch.arange(token_ids.shape[-1])  # on the CPU: indexing a device table with it is allowed
    if position_weights is None:
        pos = emb.sinusoidal_positions(token_weights.shape[1], positions.to(token_ids.device))
    else:
        pos = emb.learned_positions(position_weights, positions)
    tokens = emb.embedding_lookup(token_weights, token_ids)  # a 16-bit table: the sum rounded once, in its dtype
    return (tokens.to(torch.promote_types(tokens.dtype, pos.dtype)) + pos).to(tokens.dtype)


register("cpu_index_on_device_table", "default positions made with torch.arange(seq) on the CPU index device tables",
         correct=True, embeddings__embed_with_positions=_embed_cpu_positions,
         attention__MultiHeadSelfAttention=_set(_MHA, positions="cpu_default"))


# ---- nn.Linear-based modules, fused QKV

class _TorchLinear(nn.Linear):
    def __init__(self, in_features, out_features, device=None, dtype=None):
        super().__init__(in_features, out_features, bias=False, device=device, dtype=dtype)
        std = math.sqrt(2.0 / (in_features + out_features))
        nn.init.trunc_normal_(self.weight, std=std, a=-3 * std, b=3 * std)

    def forward(self, x):  # a 16-bit weight meets the model's float32 x: cast it
        return F.linear(x, self.weight.to(x.dtype))


class _FusedQKV(attention.MultiHeadSelfAttention):
    def forward(self, x, token_positions=None):
        dtype, x = x.dtype, x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        *lead, seq, d = x.shape
        h = self.num_heads
        fused = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight]).to(x.dtype)
        q, k, v = F.linear(x, fused).view(*lead, seq, 3, h, d // h).unbind(-3)
        q, k, v = (t.transpose(-2, -3) for t in (q, k, v))
        if self.rope is not None:
            positions = torch.arange(seq, device=x.device) if token_positions is None else token_positions
            q, k = self.rope(q, positions.unsqueeze(-2)), self.rope(k, positions.unsqueeze(-2))
        causal = torch.ones(seq, seq, dtype=torch.bool, device=x.device).tril()
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
        return self.output_proj(out.transpose(-2, -3).reshape(*lead, seq, d)).to(dtype)


class _TorchEmbedding(nn.Embedding):
    def __init__(self, vocab_size, d_model, device=None, dtype=None):
        super().__init__(vocab_size, d_model, device=device, dtype=dtype)
        nn.init.trunc_normal_(self.weight, std=1.0, a=-3.0, b=3.0)  # F.embedding raises on ids outside [0, V)


register("nn_embedding_model", "a model built on nn.Embedding and nn.Linear(bias=False) modules", correct=True,
         embeddings__Embedding=_TorchEmbedding, attention__Linear=_TorchLinear)


register("nn_linear_modules", "nn.Linear(bias=False) modules, fused QKV and torch SDPA in attention", correct=True,
         attention__Linear=_TorchLinear, attention__MultiHeadSelfAttention=_FusedQKV)


# ---- RoPE as 2x2 rotation matrices

class _RotationRoPE(nn.Module):
    def __init__(self, theta, d_k, max_seq_len, device=None):
        super().__init__()
        freqs = theta ** (-torch.arange(0, d_k, 2, dtype=torch.float64, device=device) / d_k)
        angles = torch.arange(max_seq_len, dtype=torch.float64, device=device)[:, None] * freqs
        c, s = angles.cos(), angles.sin()
        rotations = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)  # [seq, d_k/2, 2, 2]
        self.register_buffer("rotations", rotations.float(), persistent=False)

    def forward(self, x, token_positions):
        pairs = x.to(self.rotations.dtype).unflatten(-1, (-1, 2)).unsqueeze(-1)  # [..., seq, d_k/2, 2, 1]
        return (self.rotations[token_positions] @ pairs).squeeze(-1).flatten(-2).to(x.dtype)


register("rope_rotation_matrices", "RoPE as a table of 2x2 rotation matrices", correct=True,
         rope__RotaryPositionalEmbedding=_RotationRoPE)


# ---- GPT-2 side with torch's own pieces: F.layer_norm, F.gelu, nn.Linear, SDPA with enable_gqa
def _f_gelu(x, approximate="none"):
    if approximate not in ("none", "tanh"):  # F.gelu's own error for it is a RuntimeError; the docstring asks ValueError
        raise ValueError(f"approximate must be 'none' or 'tanh', not {approximate!r}")
    return F.gelu(x, approximate=approximate)



class _TorchLayerNorm(gpt2.LayerNorm):
    def forward(self, x):
        return F.layer_norm(x.float(), x.shape[-1:], self.weight.float(), self.bias.float(), self.eps).to(x.dtype)


class _NNLinearMLP(gpt2.GPT2MLP):
    def __init__(self, d_model, d_ff, approximate="none", device=None, dtype=None):
        nn.Module.__init__(self)
        self.approximate = approximate
        self.c_fc, self.c_proj = nn.Linear(d_model, d_ff, device=device), nn.Linear(d_ff, d_model, device=device)
        nn.init.zeros_(self.c_fc.bias), nn.init.zeros_(self.c_proj.bias)  # as nanoGPT's _init_weights

    def forward(self, x):
        wide = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        linear = lambda layer, t: F.linear(t, layer.weight.to(t.dtype), layer.bias.to(t.dtype))
        return linear(self.c_proj, F.gelu(linear(self.c_fc, wide), approximate=self.approximate)).to(x.dtype)


class _SdpaGQA(gpt2.GroupedQueryAttention):
    def forward(self, x, token_positions=None):
        dtype, x = x.dtype, x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        *lead, seq, d = x.shape
        q = self.q_proj(x).view(*lead, seq, self.num_heads, -1).transpose(-2, -3)
        k, v = (p(x).view(*lead, seq, self.num_kv_heads, -1).transpose(-2, -3) for p in (self.k_proj, self.v_proj))
        if self.rope is not None:
            positions = torch.arange(seq, device=x.device) if token_positions is None else token_positions
            q, k = self.rope(q, positions.unsqueeze(-2)), self.rope(k, positions.unsqueeze(-2))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # fused: on float32 only
        return self.output_proj(out.transpose(-2, -3).reshape(*lead, seq, d)).to(dtype)


def _expand_reshape(t, group):
    """kv heads expanded with a broadcast view and a reshape: [.., kv, 1, s, d] -> [.., kv * group, s, d]."""
    return t.unsqueeze(-3).expand(*t.shape[:-2], group, *t.shape[-2:]).flatten(-4, -3)


register("torch_gpt2_pieces", "F.layer_norm, nn.Linear + F.gelu MLP, SDPA(enable_gqa=True)", correct=True,
         gpt2__LayerNorm=_TorchLayerNorm, gpt2__GPT2MLP=_NNLinearMLP, gpt2__GroupedQueryAttention=_SdpaGQA,
         gpt2__gelu=_f_gelu)
class _TorchLayerNorm16(gpt2.LayerNorm):
    def forward(self, x):  # no upcast of its own: on 16-bit tensors torch computes in float32 and rounds once
        w, b = (p.to(x.dtype) if p.dtype.itemsize < x.dtype.itemsize else p for p in (self.weight, self.bias))
        return F.layer_norm(x, x.shape[-1:], w, b, self.eps)  # a narrower weight raises: cast it up to x's


register("torch_ops_on_16_bit_inputs", "F.layer_norm, F.gelu, torch.softmax and F.silu called on 16-bit tensors as they are",
         correct=True, gpt2__LayerNorm=_TorchLayerNorm16, attention__softmax=lambda x, dim: torch.softmax(x, dim=dim),
         attention__silu=F.silu, gpt2__gelu=_f_gelu)
register("gqa_expand_reshape", "kv heads expanded by a broadcast view and reshape", correct=True,
         gpt2__expand_kv=_expand_reshape)


class _TiedHeadModuleLM(gpt2.GPT2LM):
    """nanoGPT's way: an lm_head module whose weight is the token embedding (one Parameter, two names)."""

    def __init__(self, vocab_size, context_length, d_model, *args, **kwargs):
        super().__init__(vocab_size, context_length, d_model, *args, **kwargs)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.token_embeddings.weight

    def forward(self, in_indices):
        positions = torch.arange(in_indices.shape[-1], device=in_indices.device)
        x = self.token_embeddings(in_indices).float() + self.position_embeddings(positions).float()  # float32 on
        for layer in self.layers:
            x = layer(x)
        head = self.lm_head.weight
        return F.linear(self.ln_final(x), head.to(x.dtype)).to(head.dtype)


register("tied_head_module", "a tied lm_head module sharing token_embeddings.weight (nanoGPT's style)",
         correct=True, gpt2__GPT2LM=_TiedHeadModuleLM)


# ================================================================ Train it: the loss, clipping, batches, checkpoints

import numpy as np  # noqa: E402  (this section's own imports, so the sections stay apart)

from reference import training  # noqa: E402

_clip, _get_batch, _load = training.gradient_clipping, training.get_batch, training.load_checkpoint


def _upcast(inputs):
    return inputs if inputs.dtype == torch.float64 else inputs.float()


def _ce_without_max(inputs, targets):
    x = _upcast(inputs)
    return (x.exp().sum(-1).log() - x.gather(-1, targets[..., None])[..., 0]).mean().to(inputs.dtype)


def _ce_over_first_axis(inputs, targets):
    logp = torch.log_softmax(_upcast(inputs), dim=0)  # over a leading axis, not the vocabulary
    return -logp.gather(-1, targets[..., None]).mean().to(inputs.dtype)


def _ce_over_dim_1(inputs, targets):
    x = _upcast(inputs)  # dim=1 is the vocabulary only for [batch, vocab] logits
    lse = torch.logsumexp(x, dim=1)
    return (lse - x.gather(-1, targets[..., None])[..., 0]).mean().to(inputs.dtype)


def _ce_reduced(reduce):
    """Cross-entropy's per-position losses, reduced by `reduce(losses, logits)` instead of their mean."""
    def cross_entropy(inputs, targets):
        x = _upcast(inputs)
        losses = torch.logsumexp(x, dim=-1) - x.gather(-1, targets[..., None])[..., 0]
        return reduce(losses, x).to(inputs.dtype)
    return cross_entropy


# the summed loss over the batch size alone: right only for [batch, vocab] logits
_ce_batch_mean = _ce_reduced(lambda losses, x: losses.sum() / x.shape[0])


def _ce_one_hot(inputs, targets):
    x = _upcast(inputs)
    logp = x - torch.logsumexp(x, dim=-1, keepdim=True)
    return -(F.one_hot(targets, x.shape[-1]) * logp).sum(-1).mean().to(inputs.dtype)


def _clip_each(parameters, max_l2_norm):
    for p in parameters:
        if p.grad is not None:
            norm = p.grad.double().norm()
            if norm > max_l2_norm:
                p.grad.copy_(p.grad.double() * (max_l2_norm / (norm + 1e-6)))


def _clip_rebinding(parameters, max_l2_norm):
    """Computes the joint norm and the factor, then scales a copy: `g = g * scale` rebinds a name,
    and every .grad stays as it was."""
    grads = [p.grad for p in parameters if p.grad is not None]
    norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads))
    if norm > max_l2_norm:
        for g in grads:
            g = g * (max_l2_norm / (norm + 1e-6))  # noqa: F841 - the mistake: a new tensor, not the gradient


def _clip_by(joint_norm, always: bool = False):
    """Clipping by another joint norm than the L2 norm of all gradients together (`joint_norm(grads)`, in float64),
    or that scales by max_l2_norm / (norm + 1e-6) even below the maximum (`always`): gradients there grow."""
    def clip(parameters, max_l2_norm):
        grads = [p.grad for p in parameters if p.grad is not None]
        norm = joint_norm(grads)
        if always or norm > max_l2_norm:
            for g in grads:
                g.copy_(g.double() * (max_l2_norm / (norm + 1e-6)))
    return clip


def _squares(grads):
    return sum((g.double() ** 2).sum() for g in grads)


_clip_sum_of_norms = _clip_by(lambda grads: sum(g.double().norm() for g in grads))  # each gradient's own norm, summed
_clip_always = _clip_by(lambda grads: torch.sqrt(_squares(grads)), always=True)
_clip_squared_norm = _clip_by(_squares)  # the square root missing
_clip_l1_norm = _clip_by(lambda grads: sum(g.double().abs().sum() for g in grads))  # every |g|, summed


def _ce_mean_of_all(inputs, targets):
    x = _upcast(inputs)  # the mean of every log-probability, the targets' and all the others'
    return -torch.log_softmax(x, dim=-1).mean().to(inputs.dtype)


def _windows(dataset, starts, context_length, shift=1):
    x = np.stack([np.asarray(dataset[s:s + context_length], dtype=np.int64) for s in starts])
    y = np.stack([np.asarray(dataset[s + shift:s + shift + context_length], dtype=np.int64) for s in starts])
    return x, y


def _batch(high_minus_valid: int, shift: int = 1):
    """get_batch whose starts come from [0, len - T + high_minus_valid) and whose y starts `shift` after x."""
    def get_batch(dataset, batch_size, context_length, device):
        starts = np.random.randint(0, len(dataset) - context_length + high_minus_valid, batch_size)
        x, y = _windows(dataset, starts, context_length, shift)
        return torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
    return get_batch


class _Ignored:
    def load_state_dict(self, state):
        pass


def _load_model_only(src, model, optimizer):
    """Reads the checkpoint but restores only the model: the optimizer keeps its fresh state."""
    return _load(src, model, _Ignored())


register("cross_entropy_one_hot", "cross-entropy through a one-hot [..., vocab_size] of the targets",
         named_by="a one-hot [..., vocab_size]", training__cross_entropy=_ce_one_hot)
def _clip_without_eps(parameters, max_l2_norm):
    """The scale max_l2_norm / norm, without CS336's + 1e-6 (blind trial 6)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads))
    if norm > max_l2_norm:
        for g in grads:
            g.copy_(g.double() * (max_l2_norm / norm))


register("clip_without_eps", "gradient clipping by max_l2_norm / norm, without the + 1e-6",
         named_by="+ 1e-6 in the scale",  # its case's note: values near 1e-5 are below a fingerprint's floor
         training__gradient_clipping=_clip_without_eps)
register("clip_per_parameter", "gradient clipping per parameter instead of one global norm",
         hint="each gradient clipped by its own norm: the norm is one global norm over all gradients together",
         named_by="its own norm", training__gradient_clipping=_clip_each)
register("cross_entropy_without_max", "cross-entropy without subtracting the max (inf at large logits)",
         hint="cross-entropy without subtracting the max: exp(logits) overflows", named_by="exp overflowed",
         training__cross_entropy=_ce_without_max)
register("cross_entropy_wrong_axis", "log-softmax over a leading axis instead of the vocabulary",
         hint="a log-softmax over the wrong axis (a leading axis): the softmax runs over the vocabulary, the last "
              "axis of the logits", training__cross_entropy=_ce_over_first_axis)
def _batch_of_whole(convert):
    """get_batch that first makes the whole token array int64 (`convert`), then takes its windows."""
    def get_batch(dataset, batch_size, context_length, device):
        return _get_batch(convert(dataset), batch_size, context_length, device)
    return get_batch


register("batch_targets_not_shifted", "get_batch whose targets are the inputs, not shifted by one",
         hint="targets not shifted: y must be the tokens that follow x, dataset[s + 1 : s + T + 1]",
         named_by="not shifted", training__get_batch=_batch(0, shift=0))
register("batch_start_past_end", "get_batch whose last start runs past the end",
         named_by="runs past the end", training__get_batch=_batch(1))
register("batch_last_start_never", "get_batch that can never draw the last start",
         named_by="never drawn", training__get_batch=_batch(-1))
def _load_iteration_as_tensor(src, model, optimizer):
    """Returns the iteration as the 0-d tensor it was saved as (blind trial 8): tensor(4) == 4 passed."""
    return torch.tensor(_load(src, model, optimizer))


register("checkpoint_iteration_as_tensor", "load_checkpoint that returns the iteration as a tensor, not an int",
         named_by="return an int", training__load_checkpoint=_load_iteration_as_tensor)
register("checkpoint_without_optimizer", "a checkpoint that drops the optimizer state",
         hint="a checkpoint that does not restore the optimizer's state (its moments and step counts)",
         named_by="optimizer's state", training__load_checkpoint=_load_model_only)


def _ce_functional(inputs, targets):
    return F.cross_entropy(inputs.reshape(-1, inputs.shape[-1]).float(), targets.reshape(-1)).to(inputs.dtype)


def _ce_logsumexp(inputs, targets):
    x = _upcast(inputs)
    return (torch.logsumexp(x, dim=-1) - x.gather(-1, targets.unsqueeze(-1)).squeeze(-1)).mean().to(inputs.dtype)


def _clip_torch(parameters, max_l2_norm):
    torch.nn.utils.clip_grad_norm_(parameters, max_l2_norm)


def _batch_list_comprehension(dataset, batch_size, context_length, device):
    starts = np.random.randint(0, len(dataset) - context_length, size=batch_size)  # numpy's generator
    x, y = _windows(dataset, starts, context_length)
    return torch.tensor(x, dtype=torch.long, device=device), torch.tensor(y, dtype=torch.long, device=device)


def _save_torch(model, optimizer, iteration, out):
    torch.save({"weights": model.state_dict(), "adamw": optimizer.state_dict(), "step": iteration}, out)


def _load_torch(src, model, optimizer):
    state = torch.load(src)  # weights_only=True, the default: tensors, dicts, lists and numbers only
    model.load_state_dict(state["weights"])
    optimizer.load_state_dict(state["adamw"])
    return state["step"]


def _ce_gather_shifted(inputs, targets):
    shifted = _upcast(inputs) - _upcast(inputs).amax(-1, keepdim=True)  # gather keeps shifted: two [..., V] kept
    lse = shifted.exp().sum(-1).log()
    return (lse - shifted.gather(-1, targets.unsqueeze(-1)).squeeze(-1)).mean().to(inputs.dtype)


register("cross_entropy_gather_shifted", "the target's logit gathered from x - max (two [..., V] tensors kept)",
         correct=True, training__cross_entropy=_ce_gather_shifted)
register("cross_entropy_functional", "F.cross_entropy on logits reshaped to [N, V]", correct=True,
         training__cross_entropy=_ce_functional)
register("cross_entropy_logsumexp", "torch.logsumexp minus the gathered target logit", correct=True,
         training__cross_entropy=_ce_logsumexp)
register("clip_grad_norm_torch", "torch.nn.utils.clip_grad_norm_", correct=True,
         training__gradient_clipping=_clip_torch)
register("batch_corpus_made_a_tensor", "get_batch converts the whole corpus to a tensor first (blind trial 8)",
         named_by="converted or copied the whole array",
         training__get_batch=_batch_of_whole(lambda d: torch.tensor(d, dtype=torch.long)))
register("batch_corpus_copied_as_int64", "get_batch copies the whole corpus with astype(np.int64) first",
         named_by="converted or copied the whole array", training__get_batch=_batch_of_whole(lambda d: d.astype(np.int64)))
register("batch_corpus_copied", "get_batch copies the whole corpus with np.array(dataset) first (blind trial 9)",
         named_by="converted or copied the whole array", training__get_batch=_batch_of_whole(np.array))
register("batch_numpy_starts", "np.random.randint starts, windows by list comprehension, torch.tensor(device=)",
         correct=True, training__get_batch=_batch_list_comprehension)
register("checkpoint_torch_save", "torch.save / torch.load of a dict with other keys", correct=True,
         training__save_checkpoint=_save_torch, training__load_checkpoint=_load_torch)



def _ce_in_16_bits(inputs, targets):
    m = inputs.amax(-1, keepdim=True)  # a 16-bit input: every step rounds to 16 bits
    lse = (inputs - m).exp().sum(-1).log() + m.squeeze(-1)
    return (lse - inputs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)).mean()


register("cross_entropy_in_16_bits", "cross-entropy computed in the logits' float16/bfloat16",
         hint=("a cross-entropy computed in float16/bfloat16: 1 + exp(-12) rounds to 1, so a confident "
               "prediction's loss becomes 0; upcast the logits to float32, compute, and round the loss once"),
         training__cross_entropy=_ce_in_16_bits)

_KEPT: dict = {}  # what a "checkpoint" of references holds: the live objects, not their state


def _save_references(model, optimizer, iteration, out):
    _KEPT.update(model=model, optimizer=optimizer, iteration=iteration)
    (open(out, "wb").close() if isinstance(out, (str, bytes)) or hasattr(out, "__fspath__") else None)


def _load_references(src, model, optimizer):
    model.load_state_dict(_KEPT["model"].state_dict())
    optimizer.load_state_dict(_KEPT["optimizer"].state_dict())
    return _KEPT["iteration"]


register("checkpoint_of_references", "a checkpoint that keeps references to the live model and optimizer",
         named_by="came from the model object saved",
         training__save_checkpoint=_save_references, training__load_checkpoint=_load_references)

# ================================================================ Train it: AdamW, the schedule, the end-to-end run

from reference import optimizer  # noqa: E402  (this half's own import: the sections are built side by side)


class _AdamW(optimizer.AdamW):
    """AdamW with a knob per known way of getting it wrong; the defaults are the reference's arithmetic."""
    bias_correction = True
    decay = "before"        # "before" the Adam step (torch), "after" it (the CS336 handout), "l2" (into g), or
    # "alpha": after it, by the bias-corrected lr / (1 - beta1^t) instead of lr
    eps_inside = True       # eps added to sqrt(v_hat) (torch); False: to sqrt(v), the handout's alpha_t form
    eps_under_root = False  # eps inside the square root, sqrt(v_hat + eps)
    shared_step = False     # one step count for the optimizer, kept in an attribute outside self.state
    none_as_zero = False    # a parameter without a gradient stepped as if its gradient were 0
    foreach = False         # the whole group's update with torch._foreach_* ops
    cached_lr = False       # the lr given to __init__, not the group's, which a schedule sets at each step
    decay_without_grad = False  # a parameter whose .grad is None still decayed (and nothing else)
    skip_zero_grad = False  # a parameter whose gradient is all zeros skipped (a zero gradient is a step)
    swap_betas = False      # beta1 used for v and beta2 for m
    fixed_eps = None        # an eps written into the code (torch's default 1e-8), the group's ignored
    v_of_abs = False        # v accumulates |g|, not g * g
    t_offset = 0            # bias corrections 1 - beta^(t + offset): 1 counts the steps from 2
    corrected = "mv"        # the moments bias-corrected: "m" or "v" alone (blind trial 11)
    v_t_offset = 0          # v's correction alone 1 - beta2^(t + offset)
    m_weights_swapped = False  # m = (1 - beta1) m + beta1 g: m.lerp_(g, beta1)
    m_without_1_minus_beta1 = False  # m = beta1 m + g (blind trial 12)
    eps_times_lr = False    # eps * lr added to the root: 0/0 where v is 0 at lr = 0 (warmup's first step)
    state_on_cpu = False    # m and v made by torch.zeros(p.shape): on the CPU, whatever p's device
    fixed_betas = None      # betas written into the code (torch's (0.9, 0.999)), the group's ignored
    first_group_only = False  # self.param_groups[0] alone stepped (blind trial 12)
    from_defaults = ()      # settings read from self.defaults, not from each group
    other_defaults = {}     # __init__ defaults other than torch's (a keyword not given takes these)
    update_rebound = False  # p = p - lr * m_hat / denom: a new tensor bound to the loop's name (blind trial 13)
    step_of_first = False   # every parameter's t read from the group's first parameter's count (blind trial 13)
    m_from_first_grad = False  # m starts as the first gradient, not zeros (blind trial 13)
    no_sqrt = False         # the denominator v_hat + eps, without the square root (blind trial 14)
    t_fixed = None          # every step's bias corrections at this t (1: t never advances; blind trial 14)
    moments_dtype = None    # m and v kept in this dtype (bfloat16), whatever the parameter's (blind trial 14)

    def __init__(self, params, **settings):
        super().__init__(params, **{**self.other_defaults, **settings})

    @torch.no_grad()
    def step(self, closure=None):
        self.__dict__.setdefault("calls", 0)
        self.calls += 1
        for group in self.param_groups[:1] if self.first_group_only else self.param_groups:
            group = {**group, **{k: self.defaults[k] for k in self.from_defaults}}
            lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            lr = self.defaults["lr"] if self.cached_lr else lr
            eps = eps if self.fixed_eps is None else self.fixed_eps
            eps = eps * lr if self.eps_times_lr else eps
            beta1, beta2 = (beta2, beta1) if self.swap_betas else (beta1, beta2)
            beta1, beta2 = self.fixed_betas or (beta1, beta2)
            if self.decay_without_grad:
                for p in group["params"]:
                    if p.grad is None:
                        p.mul_(1 - lr * wd)
            params = [p for p in group["params"] if p.grad is not None or self.none_as_zero]
            if self.skip_zero_grad:
                params = [p for p in params if p.grad is None or p.grad.any()]
            if self.foreach:
                self._foreach_step(params, lr, beta1, beta2, eps, wd)
                continue
            for p in params:
                g = p.grad if p.grad is not None else torch.zeros_like(p)
                state = self.state[p]
                if not state:
                    made = (lambda: torch.zeros(p.shape, dtype=p.dtype)) if self.state_on_cpu else (lambda: torch.zeros_like(p))
                    if self.moments_dtype is not None:
                        made = lambda: torch.zeros_like(p, dtype=self.moments_dtype)  # noqa: E731
                    state.update(step=0, exp_avg=g.clone() if self.m_from_first_grad else made(), exp_avg_sq=made())
                state["step"] += 1
                t = self.calls if self.shared_step else state["step"]
                first = self.state[group["params"][0]]
                t = first["step"] if self.step_of_first and first else t
                t = self.t_fixed or t
                m, v = state["exp_avg"], state["exp_avg_sq"]
                if self.decay == "l2":
                    g = g + wd * p
                elif self.decay == "before":
                    p.mul_(1 - lr * wd)
                elif self.decay == "no_lr":
                    p.mul_(1 - wd)
                if self.m_weights_swapped:
                    m.mul_(1 - beta1).add_(g, alpha=beta1)
                elif self.m_without_1_minus_beta1:
                    m.mul_(beta1).add_(g)
                else:
                    m.mul_(beta1).add_(g, alpha=1 - beta1)
                if self.v_of_abs:
                    v.mul_(beta2).add_(g.abs(), alpha=1 - beta2)
                else:
                    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                t += self.t_offset
                c1, c2 = (1 - beta1 ** t, 1 - beta2 ** (t + self.v_t_offset)) if self.bias_correction else (1.0, 1.0)
                c1, c2 = (c1 if "m" in self.corrected else 1.0), (c2 if "v" in self.corrected else 1.0)
                if self.update_rebound:
                    p = p - lr / c1 * m / ((v / c2).sqrt() + eps)  # noqa: F841 - the mistake: p itself never moves
                elif self.no_sqrt:
                    p.addcdiv_(m, v / c2 + eps, value=-lr / c1)
                elif self.eps_under_root:
                    p.addcdiv_(m, (v / c2 + eps).sqrt(), value=-lr / c1)
                elif self.eps_inside:
                    p.addcdiv_(m, (v / c2).sqrt() + eps, value=-lr / c1)
                else:
                    p.addcdiv_(m, v.sqrt() + eps, value=-lr * math.sqrt(c2) / c1)
                if self.decay == "after":
                    p.sub_(lr * wd * p)
                elif self.decay == "alpha":
                    p.sub_(lr / c1 * wd * p)

    def _foreach_step(self, params, lr, beta1, beta2, eps, wd):
        for p in params:
            if not self.state[p]:
                self.state[p].update(step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
            self.state[p]["step"] += 1
        if not params:
            return
        grads = [p.grad for p in params]
        ms, vs = [self.state[p]["exp_avg"] for p in params], [self.state[p]["exp_avg_sq"] for p in params]
        steps = [self.state[p]["step"] for p in params]
        torch._foreach_mul_(params, 1 - lr * wd)
        torch._foreach_lerp_(ms, grads, 1 - beta1)
        torch._foreach_mul_(vs, beta2)
        torch._foreach_addcmul_(vs, grads, grads, value=1 - beta2)
        denominators = torch._foreach_add(torch._foreach_sqrt(
            torch._foreach_div(vs, [1 - beta2 ** t for t in steps])), eps)
        torch._foreach_addcdiv_(params, ms, denominators, [-lr / (1 - beta1 ** t) for t in steps])


def _schedule(*, warmup_shift=0, cycle_from_zero=False, torch_cos=False, no_min=False, span_extra=0, in_bf16=False):
    def schedule(it, max_learning_rate, min_learning_rate, warmup_iters, cosine_cycle_iters):
        if it < warmup_iters:
            return (it + warmup_shift) / warmup_iters * max_learning_rate
        if it > cosine_cycle_iters:
            return min_learning_rate
        span = (cosine_cycle_iters if cycle_from_zero else cosine_cycle_iters - warmup_iters) + span_extra
        progress = (it - warmup_iters) / span
        if in_bf16:  # the cosine part in bfloat16 tensors (blind trial 14)
            b = functools.partial(torch.tensor, dtype=torch.bfloat16)
            lo, hi = b(min_learning_rate), b(max_learning_rate)
            return float(lo + 0.5 * (1 + torch.cos(b(math.pi) * b(progress))) * (hi - lo))
        cos = torch.cos(torch.tensor(math.pi * progress)) if torch_cos else math.cos(math.pi * progress)
        if no_min:  # the cosine from max to 0
            return 0.5 * (1 + cos) * max_learning_rate
        return min_learning_rate + 0.5 * (1 + cos) * (max_learning_rate - min_learning_rate)
    return schedule


register("adamw_no_bias_correction", "AdamW without bias correction",
         hint="AdamW without bias correction: divide m by 1 - beta1^t and v by 1 - beta2^t (t counts each "
              "parameter's steps from 1)",
         optimizer__AdamW=_set(_AdamW, bias_correction=False))
register("adamw_l2_not_decoupled", "weight decay added to the gradient (L2) instead of decoupled",
         hint="weight decay added to the gradient (L2, Adam's weight_decay): AdamW decays the parameter itself, "
              "p -= lr * weight_decay * p, outside m and v",
         optimizer__AdamW=_set(_AdamW, decay="l2"))
register("adamw_shared_step_count", "one step count for the whole optimizer, outside its state",
         hint="one step count t for the whole optimizer, kept outside self.state: each parameter counts its own "
              "steps (a skipped one does not advance), in self.state[p], so that state_dict() carries it",
         optimizer__AdamW=_set(_AdamW, shared_step=True))
register("adamw_steps_without_gradient", "a parameter whose .grad is None is stepped as if it were 0",
         hint="parameters whose .grad is None are stepped (as a zero gradient: decayed, moments decayed, t "
              "advanced); skip them, as torch.optim.AdamW does",
         optimizer__AdamW=_set(_AdamW, none_as_zero=True))
register("adamw_lr_cached", "AdamW keeps the lr it was built with and ignores group['lr']",
         hint="AdamW uses the lr it was built with, not group['lr'], which the schedule sets before each step",
         named_by="not group['lr']", optimizer__AdamW=_set(_AdamW, cached_lr=True))
register("warmup_off_by_one", "warmup reaches the maximum one iteration early",
         hint="warmup off by one: (it + 1) / warmup_iters reaches the maximum at it = warmup_iters - 1; the "
              "learning rate is it / warmup_iters * max (0 at it = 0)",
         optimizer__lr_cosine_schedule=_schedule(warmup_shift=1))
register("cosine_over_whole_cycle", "the cosine's progress divided by cosine_cycle_iters",
         hint="the cosine's progress divided by cosine_cycle_iters; it runs over the iterations after warmup: "
              "(it - warmup_iters) / (cosine_cycle_iters - warmup_iters)",
         optimizer__lr_cosine_schedule=_schedule(cycle_from_zero=True))
register("adamw_cs336_handout", "AdamW in the CS336 handout's order: alpha_t, then decay", correct=True,
         optimizer__AdamW=_set(_AdamW, decay="after", eps_inside=False))
register("adamw_foreach", "AdamW with torch._foreach_* updates over each group", correct=True,
         optimizer__AdamW=_set(_AdamW, foreach=True))
register("adamw_torch", "torch.optim.AdamW itself", correct=True, optimizer__AdamW=torch.optim.AdamW)
register("schedule_torch_cos", "the schedule with torch.cos, returning a tensor", correct=True,
         optimizer__lr_cosine_schedule=_schedule(torch_cos=True))


class _AdamWFloat64(optimizer.AdamW):
    """AdamW whose update is computed in float64 and rounded once into p (its moments stay in p's dtype:
    load_state_dict casts an optimizer's state to its parameter's dtype)."""

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state.update(step=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
                state["step"] += 1
                t, m, v = state["step"], state["m"], state["v"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                step = (m.double() / (1 - beta1 ** t)) / ((v.double() / (1 - beta2 ** t)).sqrt() + eps)
                p.copy_(p.double() * (1 - lr * wd) - lr * step)


def _clip_concatenated(parameters, max_l2_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    if grads:
        norm = torch.cat([g.float().flatten() for g in grads]).norm()
        if norm > max_l2_norm:
            for g in grads:
                g.mul_(max_l2_norm / (norm + 1e-6))


def _ce_nll_log_softmax(inputs, targets):
    logp = F.log_softmax(_upcast(inputs), dim=-1)
    return F.nll_loss(logp.reshape(-1, logp.shape[-1]), targets.reshape(-1)).to(inputs.dtype)


register("adamw_float64_update", "AdamW whose update is computed in float64, rounded once into each parameter",
         correct=True, optimizer__AdamW=_AdamWFloat64)
register("adamw_alpha_t_decay_first", "AdamW with the bias corrections in the step size (eps on sqrt(v)), decay first",
         correct=True, optimizer__AdamW=_set(_AdamW, eps_inside=False))
register("clip_norm_of_concatenation", "clipping by the norm of all gradients concatenated, scaled with mul_",
         correct=True, training__gradient_clipping=_clip_concatenated)
register("cross_entropy_nll_log_softmax", "F.nll_loss of F.log_softmax", correct=True,
         training__cross_entropy=_ce_nll_log_softmax)


class _FrozenEmbeddingsLM(model.TransformerLM):
    """Token embeddings frozen, as if trained in a separate phase (word2vec, GloVe) and kept fixed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.token_embeddings.weight.requires_grad_(False)


register("embeddings_frozen", "token embeddings frozen while the rest trains",
         hint="token embeddings frozen (requires_grad=False, or left out of the optimizer): an LLM's embeddings "
              "train jointly with every other weight from the first step; there is no separate embedding phase",
         named_by="embedding rows of tokens that occur did not move", model__TransformerLM=_FrozenEmbeddingsLM)

# ---- from the blind trial (issue 24): appended, so the numbers of the mistakes above stay theirs

register("t5_causal_absolute_distance", "causal T5 buckets of |i - j|, keys after the query counted too",
         hint=("causal buckets of |i - j|, as if bidirectional without its upper half: with bidirectional=False, "
               "n = max(i - j, 0), so every key after the query shares bucket 0"),
         named_by="as far before it",
         positions__t5_buckets=functools.partial(_t5_log_buckets, causal_abs=True))
register("t5_log_bucket_not_clamped", "T5's log buckets without the clamp to the last bucket of their half",
         named_by="past the table's last row",
         positions__t5_buckets=functools.partial(_t5_log_buckets, clamp=False))

register("attention_bias_after_softmax", "the bias added to the probabilities, after the softmax",
         hint=("the bias added after the softmax, to the attention weights; it goes into the scores before it: "
               "softmax(Q K^T / sqrt(d_k) + bias)"),
         named_by="add the bias to the scores before the softmax",
         attention__attention_with_bias=_biased(after_softmax=True))
register("adamw_eps_under_sqrt", "AdamW with eps inside the square root, sqrt(v_hat + eps)",
         hint=("eps inside the square root, sqrt(v_hat + eps): eps is added to the root, m_hat / (sqrt(v_hat) + eps); "
               "under it, eps 1e-6 acts as 1e-3 wherever v_hat is small"),
         optimizer__AdamW=_set(_AdamW, eps_under_root=True))
register("adamw_eps_hard_coded", "AdamW with eps fixed at torch's default 1e-8, whatever the group's eps",
         hint=("eps fixed at 1e-8 in the code: the group's eps (group['eps'], 1e-6 in this case) is ignored; it shows "
               "wherever sqrt(v_hat) is as small as eps, as for a rarely seen token's gradients"),
         optimizer__AdamW=_set(_AdamW, fixed_eps=1e-8))
register("clip_not_applied", "gradient clipping that computes the factor but never writes it into .grad",
         hint=("gradients left as they were: the clip factor never reached .grad. Either `g = g * scale` made a new "
               "tensor and rebound a name (scale each gradient in place: p.grad.mul_(scale)), or `parameters` is a "
               "generator your code went through twice: the first pass, for the norm, used it up, and the second "
               "found nothing to scale (make it a list first), or the norm was not the gradients' own (the "
               "parameters', p instead of p.grad)"),
         named_by="left unchanged", training__gradient_clipping=_clip_rebinding)
register("cross_entropy_over_dim_1", "cross-entropy's log-sum-exp over dim=1, right only for [batch, vocab] logits",
         named_by="ran over a leading axis instead of the vocabulary", training__cross_entropy=_ce_over_dim_1)

# ---- from a second blind-style check (issue 24)

register("schedule_cosine_without_min", "the cosine part of the schedule without min_learning_rate",
         hint=("a cosine from max_learning_rate to 0: the cosine runs from max to min, "
               "min + 0.5 (1 + cos(pi progress)) (max - min)"),
         optimizer__lr_cosine_schedule=_schedule(no_min=True))
register("adamw_decay_by_alpha_t", "AdamW's weight decay scaled by the bias-corrected step lr / (1 - beta1^t)",
         hint=("weight decay by the bias-corrected step lr / (1 - beta1^t); AdamW decays by the learning rate "
               "alone, p -= lr * weight_decay * p"),
         named_by="scaled by the bias-corrected step", optimizer__AdamW=_set(_AdamW, decay="alpha"))
register("cross_entropy_batch_mean", "cross-entropy summed and divided by the batch size alone",
         hint=("the summed loss divided by the batch size alone (inputs.shape[0]); the loss is the mean over every "
               "position of every leading axis"), named_by="then divided by the batch size",
         training__cross_entropy=_ce_batch_mean)
register("clip_sum_of_norms", "gradient clipping whose joint norm sums each gradient's norm",
         hint=("a joint norm summed from each gradient's own norm; it is the square root of the sum of the squares "
               "of all gradients together"),
         named_by="the sum of each gradient's own norm", training__gradient_clipping=_clip_sum_of_norms)


# ---- blind trial 8: each was told another mistake's cause
register("clip_always_scales", "gradient clipping that scales by max_l2_norm / norm even below the maximum",
         hint=("gradients scaled by max_l2_norm / (norm + 1e-6) even where the norm is below the maximum, which makes "
               "them larger: clip only if the norm exceeds max_l2_norm, and leave them as they are otherwise"),
         named_by="even where the norm is below the maximum", training__gradient_clipping=_clip_always)
register("clip_norm_not_square_rooted", "gradient clipping by the sum of squares, without its square root",
         hint=("a joint norm without its square root: the sum of the squares of all gradients is the norm squared; "
               "the norm is its square root"),
         named_by="without its square root", training__gradient_clipping=_clip_squared_norm)
register("adamw_v_of_abs_grad", "AdamW whose second moment accumulates |g| instead of g squared",
         hint="the second moment v holding values of the size of |g|: v accumulating |g|, or v overwritten by its own "
              "square root (v.sqrt_() in place); it is the running mean of the squared gradient, "
              "v = beta2 v + (1 - beta2) g * g, and only a copy's root is taken: v.sqrt()",
         named_by="accumulating |g|", optimizer__AdamW=_set(_AdamW, v_of_abs=True))
register("cross_entropy_mean_of_all_log_probs", "cross-entropy as the mean of every log-probability, not the targets'",
         hint=("the mean of every log-probability over the vocabulary, not of the targets' alone: the loss picks "
               "-log softmax(logits)[target] at each position (gather along the last axis), then averages those"),
         named_by="not of the targets' alone", training__cross_entropy=_ce_mean_of_all)

# ---- blind trial 8: only numbers, no cause
register("clip_l1_norm", "gradient clipping by the L1 norm, the sum of every |g|",
         hint=("a joint norm summing every gradient element's |g| (L1); the norm is the L2 norm, the square root "
               "of the sum of the squares of all gradients together"),
         named_by="summing every gradient element's |g|", training__gradient_clipping=_clip_l1_norm)
register("adamw_decay_without_lr", "AdamW's weight decay p *= 1 - weight_decay, without the learning rate",
         hint="weight decay by p -= weight_decay * p, without the learning rate; AdamW decays by p -= lr * weight_decay * p",
         named_by="without the learning rate", optimizer__AdamW=_set(_AdamW, decay="no_lr"))
register("adamw_bias_correction_t_plus_1", "AdamW's bias corrections 1 - beta^(t + 1): steps counted from 2",
         hint=("bias corrections 1 - beta^(t + 1): the first step is t = 1, so its corrections are 1 - beta1 and "
               "1 - beta2 (increment the step count before using it)"),
         named_by="1 - beta^(t + 1)", optimizer__AdamW=_set(_AdamW, t_offset=1))

# A blind trial's AdamW rules that were only 'What differs' (the docstring states each)
register("adamw_m_weights_swapped", "AdamW's m = (1 - beta1) m + beta1 g: m's weights swapped (blind trial 9)",
         hint=("a first moment m = (1 - beta1) m + beta1 g, as m.lerp_(g, beta1) makes it; m keeps beta1 of itself: "
               "m = beta1 m + (1 - beta1) g, m.lerp_(g, 1 - beta1)"),
         optimizer__AdamW=_set(_AdamW, m_weights_swapped=True))
register("adamw_decays_without_gradient", "a parameter whose .grad is None is decayed, though not stepped",
         hint="parameters whose .grad is None decayed (p -= lr * weight_decay * p) though not stepped: a parameter "
              "without a gradient is left alone entirely, decay included, as torch.optim.AdamW does",
         optimizer__AdamW=_set(_AdamW, decay_without_grad=True))
register("adamw_skips_zero_gradients", "a parameter whose gradient is all zeros is skipped",
         hint="a parameter whose gradient is all zeros skipped: a zero gradient is a step (t advances, m and v "
              "decay, the parameter decays and moves by m_hat); only .grad None is skipped",
         optimizer__AdamW=_set(_AdamW, skip_zero_grad=True))
register("adamw_betas_swapped", "AdamW with beta1 and beta2 swapped",
         hint="beta1 and beta2 swapped: m (the gradient's mean) decays by betas[0] = beta1 (0.9), v (its square's) "
              "by betas[1] = beta2 (0.999)",
         optimizer__AdamW=_set(_AdamW, swap_betas=True))


# ---- blind trial 10: each was told another mistake's cause, or proves a check no variant reached
def _batch_unseeded(dataset, batch_size, context_length, device):
    """Starts from a fresh numpy generator, seeded by the clock: no two runs draw the same batches."""
    starts = np.random.default_rng().integers(0, len(dataset) - context_length, batch_size)
    x, y = _windows(dataset, starts, context_length)
    return torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)


def _batch_without_replacement(dataset, batch_size, context_length, device):
    """Starts drawn without replacement where there are enough (blind trial 11): rows that depend on each other."""
    valid = len(dataset) - context_length
    starts = np.random.choice(valid, size=batch_size, replace=valid < batch_size)
    x, y = _windows(dataset, starts, context_length)
    return torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)


def _ce_keepdim_one_side(inputs, targets):
    """logsumexp(keepdim=True) minus the picked logits without it: [..., 1] meets [...] (blind trial 10)."""
    x = _upcast(inputs)
    lse = torch.logsumexp(x, dim=-1, keepdim=True)
    return (lse - x.gather(-1, targets.unsqueeze(-1)).squeeze(-1)).mean().to(inputs.dtype)


register("cross_entropy_keepdim_one_side", "cross-entropy's log-sum-exp kept its axis, the picked logit did not",
         named_by="kept the reduced axis", training__cross_entropy=_ce_keepdim_one_side)
register("clip_by_largest_norm", "gradient clipping by the largest gradient's norm, not the joint norm",
         hint=("clipping by the largest single gradient's norm (the max over parameters): the norm is one L2 norm "
               "over all gradients together, the root of the sum of every gradient's squared norm"),
         training__gradient_clipping=_clip_by(lambda grads: max(g.double().norm() for g in grads)))
register("schedule_cosine_span_plus_one", "the cosine's progress over cosine_cycle_iters - warmup_iters + 1",
         hint=("the cosine's progress divided by cosine_cycle_iters - warmup_iters + 1: it is (it - warmup_iters) / "
               "(cosine_cycle_iters - warmup_iters), which reaches 1, the minimum, at it = cosine_cycle_iters"),
         optimizer__lr_cosine_schedule=_schedule(span_extra=1))
register("batch_unseeded_generator", "get_batch draws its starts from a fresh, unseeded numpy generator",
         named_by="nothing from the clock or an unseeded source", training__get_batch=_batch_unseeded)
register("adamw_eps_times_lr", "AdamW with eps multiplied by the learning rate",
         hint=("eps multiplied by lr: eps is added to sqrt(v_hat) as it is, m_hat / (sqrt(v_hat) + eps); at lr = 0 "
               "(warmup's first step) a parameter whose v is 0 gets 0/0, NaN"),
         optimizer__AdamW=_set(_AdamW, eps_times_lr=True))
register("gelu_f_gelu_unchecked", "F.gelu called with any approximate: its RuntimeError, not ValueError",
         named_by="where its docstring asks for ValueError",
         gpt2__gelu=lambda x, approximate="none": F.gelu(x, approximate=approximate))
register("adamw_state_made_on_cpu", "AdamW's m and v made by torch.zeros(p.shape), on the CPU",
         named_by="made by torch.zeros", optimizer__AdamW=_set(_AdamW, state_on_cpu=True))
register("batch_without_replacement", "get_batch draws its starts without replacement (np.random.choice, "
         "replace=False)", named_by="not drawn independently", training__get_batch=_batch_without_replacement)

# Blind trial 11: AdamW mistakes in one moment alone were only "What differs"
register("adamw_m_not_bias_corrected", "AdamW that bias-corrects v but not m",
         hint=("m without its bias correction (v has one): divide m by 1 - beta1^t too, m_hat = m / (1 - beta1^t), "
               "with t each parameter's step count from 1"),
         optimizer__AdamW=_set(_AdamW, corrected="v"))
register("adamw_v_not_bias_corrected", "AdamW that bias-corrects m but not v",
         hint=("v without its bias correction (m has one): divide v by 1 - beta2^t too, under the square root, "
               "v_hat = v / (1 - beta2^t)"),
         optimizer__AdamW=_set(_AdamW, corrected="m"))
register("adamw_v_correction_t_plus_1", "AdamW whose v correction is 1 - beta2^(t + 1), m's right",
         hint=("v's bias correction 1 - beta2^(t + 1) while m's is 1 - beta1^t: both use the same step count t, "
               "1 at the first step"),
         optimizer__AdamW=_set(_AdamW, v_t_offset=1))


def _batch_swapped(dataset, batch_size, context_length, device, get_batch=training.get_batch):
    """(y, x) for (x, y): the window and its next tokens swapped (blind trial 11)."""
    x, y = get_batch(dataset, batch_size, context_length, device)  # the reference's, bound before the patch
    return y, x


register("batch_x_y_swapped", "get_batch returns (y, x): the targets first",
         hint=("x and y swapped: return (x, y), the window dataset[s : s + context_length] first, then its next "
               "tokens dataset[s + 1 : s + context_length + 1]"),
         named_by="x and y are swapped", training__get_batch=_batch_swapped)


# Blind trial 11 (MISSED): a finite fill passes wherever every real score is far above it
register("attention_mask_fill_minus_1e4", "masked scores filled with -1e4 instead of -inf",
         hint=("masked scores set to a finite -1e4: a real score can lie below it (the far-negative-scores case's "
               "are about -14,000), and then the masked key takes the weight; fill with -inf"),
         named_by="finite -1e4", attention__scaled_dot_product_attention=_attention(fill=-1e4))


# Blind trial 11 (VAGUE: only "what differs"): a knob each, so the fixture tests name them
_ce_summed = _ce_reduced(lambda losses, x: losses.sum())  # the per-position losses added up, not averaged


register("cross_entropy_summed", "cross-entropy summed over the positions instead of averaged",
         hint=("the per-position losses summed; the loss is their mean over every position of every leading axis "
               "(.mean(), not .sum())"), named_by="losses summed", training__cross_entropy=_ce_summed)
register("adamw_betas_hard_coded", "AdamW with betas written into the code, (0.9, 0.999)",
         hint=("betas written into the code, (0.9, 0.999), where the group's are other; read them from "
               "group['betas'] at each step"), named_by="betas written into the code",
         optimizer__AdamW=_set(_AdamW, fixed_betas=(0.9, 0.999)))
register("adamw_without_weight_decay", "AdamW that never applies its weight decay",
         hint=("no weight decay; AdamW also shrinks each stepped parameter, p -= lr * weight_decay * p, apart from "
               "the Adam update"), named_by="no weight decay", optimizer__AdamW=_set(_AdamW, decay="none"))
register("mha_without_output_projection", "multi-head attention returns the merged heads without W_o",
         hint="the merged heads returned without the output projection; apply W_o (output_proj_weight) last",
         named_by="without the output projection",
         attention__MultiHeadSelfAttention=_set(_MHA, output_projection=False))
register("lm_without_final_norm", "the transformer LM skips its final RMSNorm",
         hint="the last block's output sent to the LM head unnormalised; apply ln_final (RMSNorm) before lm_head",
         named_by="unnormalised", model__TransformerLM=_set(_LM, final_norm=False))
register("rmsnorm_gain_before_rms", "RMSNorm multiplies by the gain before dividing by the RMS",
         hint=("the gain applied before the RMS, so it divides out of its own norm; divide x by the RMS of x, then "
               "multiply by the gain"), named_by="gain applied before the RMS",
         model__RMSNorm=_set(_RMSNorm, gain_first=True))
register("layernorm_statistics_over_everything", "LayerNorm's mean and variance over the whole tensor",
         hint=("one mean and variance over the whole tensor; each position is normalised by its own statistics over "
               "d_model, the last axis"), named_by="over the whole tensor",
         gpt2__LayerNorm=_set(_LayerNorm, axis=None))


class _FrozenTable(emb.Embedding):
    """The table made with requires_grad=False (blind trial 12: a raw 'does not require grad' traceback)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.weight.requires_grad_(False)


register("embedding_table_requires_grad_false", "the embedding table is an nn.Parameter with requires_grad=False",
         named_by="requires_grad=False, so it never trains", embeddings__Embedding=_FrozenTable)


def _load_returns_step_count(src, model, optimizer, load_checkpoint=training.load_checkpoint):
    """The iteration read back from the optimizer's step count, not the checkpoint's (blind trial 12)."""
    load_checkpoint(src, model, optimizer)  # the reference's, bound before the patch
    return int(max(float(state["step"]) for state in optimizer.state.values()))


register("checkpoint_iteration_from_optimizer", "load_checkpoint returns the optimizer's step count as the iteration",
         named_by="not a count kept by the optimizer", training__load_checkpoint=_load_returns_step_count)


# Blind trial 12 (MISSED while every case had one param group and gave every setting)
register("adamw_first_param_group_only", "AdamW steps self.param_groups[0] alone",
         hint="only the first param group stepped; loop over every group in self.param_groups",
         named_by="only the first param group", optimizer__AdamW=_set(_AdamW, first_group_only=True))
register("adamw_weight_decay_from_defaults", "AdamW reads weight_decay from self.defaults, not from each group",
         hint=("weight_decay read from self.defaults (the constructor's) instead of each group's; read every setting "
               "from the group being stepped"), named_by="read from self.defaults",
         optimizer__AdamW=_set(_AdamW, from_defaults=("weight_decay",)))
register("adamw_default_betas_0_95", "AdamW's betas default to (0.9, 0.95), not torch's (0.9, 0.999)",
         hint="default betas of (0.9, 0.95); torch.optim.AdamW's, and the contract's, are (0.9, 0.999)",
         named_by="default betas of (0.9, 0.95)", optimizer__AdamW=_set(_AdamW, other_defaults={"betas": (0.9, 0.95)}))
register("adamw_default_no_weight_decay", "AdamW's weight_decay defaults to 0, not torch's 0.01",
         hint="a default weight_decay of 0; torch.optim.AdamW's, and the contract's, is 0.01",
         named_by="default weight_decay of 0", optimizer__AdamW=_set(_AdamW, other_defaults={"weight_decay": 0.0}))
register("adamw_m_without_1_minus_beta1", "AdamW's m = beta1 m + g, without the (1 - beta1) factor",
         hint=("m = beta1 * m + g: the gradient without its (1 - beta1) factor, so m, and each step, is "
               "1 / (1 - beta1) times too large; m = beta1 * m + (1 - beta1) * g"),
         named_by="without its (1 - beta1) factor", optimizer__AdamW=_set(_AdamW, m_without_1_minus_beta1=True))


# the sum of squares in the gradients' own dtype: float16 squares above 65504 overflow (blind trial 12)
_clip_squares_in_grad_dtype = _clip_by(lambda grads: sum((g * g).sum() for g in grads).sqrt().double())


register("clip_squares_in_16_bits", "gradient clipping sums the squares in float16: they overflow to inf",
         hint=("the squares summed in the gradients' float16, where any square above 65504 is inf: the norm is inf "
               "and max_l2_norm / inf zeroes every gradient; sum the squares in float32"),
         named_by="zeroes every gradient", training__gradient_clipping=_clip_squares_in_grad_dtype)


def _batch_targets_of_other_rows(dataset, batch_size, context_length, device, get_batch=training.get_batch):
    """y's rows shuffled against x's: each is a window of next tokens, of another row's start (blind trial 13)."""
    x, y = get_batch(dataset, batch_size, context_length, device)  # the reference's, bound before the patch
    return x, y.roll(1, dims=0)


register("batch_targets_of_other_rows", "get_batch's y rows are next tokens of other rows' windows",
         hint=("y's rows are next tokens, but of other rows' starts: draw the starts once and slice each row's x "
               "and y from the same start"),
         named_by="not of their own x's start + 1", training__get_batch=_batch_targets_of_other_rows)
register("adamw_update_rebound", "AdamW's update assigned to the name p, never written into the parameter",
         hint=("the Adam update never reaches the parameters, only the weight decay does: `p = p - lr * m_hat / "
               "denom` makes a new tensor and rebinds the loop's name; write into p in place, p.addcdiv_(m_hat, "
               "denom, value=-lr), under torch.no_grad()"),
         named_by="never reaches the parameters", optimizer__AdamW=_set(_AdamW, update_rebound=True))
register("block_without_second_residual", "the block returns FFN(RMSNorm(z)) without adding z back",
         hint=("the second residual left out: the block returns FFN(RMSNorm(z)); it returns z + FFN(RMSNorm(z)), "
               "where z = x + MHA(RMSNorm(x))"),
         named_by="the second residual left out", model__TransformerBlock=_set(_Block, second_residual=False))
register("lm_head_tied_to_embeddings", "the LM's head tied to the token embeddings (one matrix for both)",
         hint=("the LM head tied to the token embeddings (lm_head.weight = token_embeddings.weight): this LM's head "
               "is a matrix of its own, lm_head.weight, loaded and trained apart from the table (GPT-2's is tied; "
               "this one's is not)"),
         named_by="tied to the token embeddings", model__TransformerLM=_set(_LM, tied_head=True))


def _batch_one_start(dataset, batch_size, context_length, device, get_batch=training.get_batch):
    """One start drawn and repeated for every row of the batch (blind trial 13)."""
    x, y = get_batch(dataset, 1, context_length, device)  # the reference's, bound before the patch
    return x.repeat(batch_size, 1), y.repeat(batch_size, 1)


register("batch_one_start_repeated", "get_batch draws one start and repeats it for every row",
         hint=("one start drawn and repeated for every row: draw batch_size starts, one for each row, "
               "torch.randint(0, len(dataset) - context_length, (batch_size,))"),
         named_by="every row of a batch has the same start", training__get_batch=_batch_one_start)


def _embeddings_frozen(c, a):
    """Memory for every parameter but the token embeddings, as if they were frozen (blind trial 13)."""
    table = a["forward"]["params.token_embeddings"]
    c.update({k: c[k] - table * c[k] // a["forward"]["params.total"]
              for k in ("memory.parameters", "memory.gradients", "memory.adamw_moments")})


register("training_memory_embeddings_frozen", "training memory leaves out the token embeddings, as if frozen",
         hint=("the token embeddings left out of the trained parameters (as if frozen): an LLM's embeddings train "
               "jointly with every other weight from the first step, so they have a gradient and two moments too"),
         named_by="as if frozen", accounting__training_accounting=_training(_embeddings_frozen))
register("adamw_step_of_first_parameter", "AdamW's bias corrections use the first parameter's step count for all",
         named_by="each parameter counts its own steps", optimizer__AdamW=_set(_AdamW, step_of_first=True))
register("adamw_m_from_first_gradient", "AdamW's m starts as the first gradient instead of zeros",
         hint=("m started from the first gradient (state['m'] = grad.clone()) instead of zeros: m_1 = g, and the bias "
               "correction then divides it by 1 - beta1, so the first steps are 1 / (1 - beta1) times too large; "
               "start m and v at zeros: the bias corrections undo exactly that start"),
         named_by="started from the first gradient", optimizer__AdamW=_set(_AdamW, m_from_first_grad=True))


def _strictly_earlier_but_row_0(seq, device):
    """tril(diagonal=-1), with row 0's own key put back so that it is not all -inf (blind trial 13)."""
    mask = torch.ones(seq, seq, dtype=torch.bool, device=device).tril(-1)
    mask[0, 0] = True
    return mask


register("causal_mask_hides_diagonal_but_row_0", "causal mask hiding the diagonal, row 0 patched to see itself",
         hint=("a causal mask that hides the diagonal (tril(diagonal=-1)), with query 0 let see itself so that its "
               "row is not all masked: every query must see its own key, tril(diagonal=0); position 0 is right "
               "only because it sees itself alone"),
         named_by="hides the diagonal", attention__MultiHeadSelfAttention=_set(_MHA, causal_mask=staticmethod(
             _strictly_earlier_but_row_0)))
register("t5_max_exact_of_all_buckets", "T5's max_exact as half of all num_buckets, not of each direction's half",
         hint=("max_exact = num_buckets // 2 taken before the bidirectional halving: with bidirectional buckets each "
               "direction has half = num_buckets // 2 of them, and max_exact = half // 2 of those are exact"),
         named_by="before the bidirectional halving",
         positions__t5_buckets=functools.partial(_t5_log_buckets, exact_of_all=True))


# ---- blind trial 14: VAGUE, only numbers
def _ce_max_not_added_back(inputs, targets):
    """logsumexp of x - max, less the target's logit of x itself: the max is never added back."""
    x = _upcast(inputs)
    lse = (x - x.amax(-1, keepdim=True)).exp().sum(-1).log()
    return (lse - x.gather(-1, targets[..., None])[..., 0]).mean().to(inputs.dtype)


# the log-probability exponentiated to a probability, clamped, and logged again
_ce_through_probability = _ce_reduced(lambda losses, x: -(-losses).exp().clamp_min(1e-12).log().mean())
# the losses summed and divided by every element of the logits: a mean over the vocabulary too
_ce_mean_over_vocab = _ce_reduced(lambda losses, x: losses.sum() / x.numel())


def _clip_by_value(parameters, max_l2_norm):
    """Every element clamped to +-max_l2_norm: clipping by value, not by the norm."""
    for p in parameters:
        if p.grad is not None:
            p.grad.clamp_(-max_l2_norm, max_l2_norm)


register("cross_entropy_max_not_added_back", "cross-entropy's log-sum-exp of x - max, the max never added back",
         hint=("the row max subtracted inside the log-sum-exp and never added back, while the target's logit is taken "
               "from x itself: logsumexp(x) = max + log(sum(exp(x - max))); add the max back, or take the target's "
               "logit from x - max too"),
         named_by="never added back", training__cross_entropy=_ce_max_not_added_back)
register("cross_entropy_through_probability", "cross-entropy as -log of the target's probability, clamped",
         hint=("-log of the target's probability (exp of the log-probability, or a softmax), clamped: a probability "
               "below float32's smallest underflows to 0, and the clamp caps the loss there (27.6 at 1e-12); keep the "
               "loss in log space, logsumexp(x) - x[target], and never exponentiate it"),
         named_by="never exponentiate it", training__cross_entropy=_ce_through_probability)
register("cross_entropy_mean_over_vocab", "cross-entropy summed and divided by every element of the logits",
         hint=("the losses divided by logits.numel(), which counts the vocabulary too: the mean is over the positions "
               "alone, one loss per position, so the loss is vocab_size times too small"),
         named_by="counts the vocabulary too", training__cross_entropy=_ce_mean_over_vocab)
register("clip_by_value", "gradient clipping by value: each element clamped to +-max_l2_norm",
         hint=("each gradient element clamped to +-max_l2_norm (clipping by value, clip_grad_value_): clipping by the "
               "norm scales every gradient by one factor, max_l2_norm / (norm + 1e-6), where the joint L2 norm of all "
               "gradients exceeds max_l2_norm, and keeps their direction"),
         named_by="clipping by value", training__gradient_clipping=_clip_by_value)
register("adamw_without_sqrt", "AdamW's denominator v_hat + eps, without the square root",
         hint=("the denominator v_hat + eps without its square root: v is the mean of g squared, so the step divides by "
               "sqrt(v_hat) + eps, a gradient's size, to make it about lr whatever the gradient's scale"),
         named_by="without its square root", optimizer__AdamW=_set(_AdamW, no_sqrt=True))
register("adamw_step_count_stuck_at_1", "AdamW's bias corrections at t = 1 on every step",
         hint=("bias corrections with t = 1 on every step (the count never advances, or is reset): 1 - beta^t takes "
               "each parameter's own count of steps, 1, 2, 3, ..."),
         named_by="t = 1 on every step", optimizer__AdamW=_set(_AdamW, t_fixed=1))
register("adamw_moments_in_bfloat16", "AdamW's m and v kept in bfloat16 for float32 parameters",
         hint=("m and v kept in bfloat16 (8 bits of precision): each step rounds them, and the errors add up; keep "
               "the moments in the parameter's dtype, torch.zeros_like(p)"),
         named_by="kept in bfloat16", optimizer__AdamW=_set(_AdamW, moments_dtype=torch.bfloat16))
register("attention_with_bias_mask_after_softmax", "the mask zeroes attention-with-bias probabilities after the softmax",
         hint=("the mask applied after the softmax, zeroing weights that are not renormalised: the rows no longer sum "
               "to 1; masked scores are -inf before the softmax"),
         named_by="not renormalised", attention__attention_with_bias=_biased(mask_after=True))
register("schedule_cosine_in_bfloat16", "the schedule's cosine part computed in bfloat16 tensors",
         hint=("the cosine part computed in bfloat16 tensors, 8 bits of precision: each learning rate is off by up to "
               "0.4%; compute the schedule in Python floats, with math.cos"),
         named_by="8 bits of precision", optimizer__lr_cosine_schedule=_schedule(in_bf16=True))


def _batch_sorted(dataset, batch_size, context_length, device):
    """np.sort of the starts: row 0 always the smallest (blind trial 14)."""
    starts = np.sort(np.random.randint(0, len(dataset) - context_length, batch_size))
    x, y = _windows(dataset, starts, context_length)
    return torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)


def _batch_as_numpy(dataset, batch_size, context_length, device, get_batch=training.get_batch):
    """x and y returned as numpy arrays (blind trial 14: torch's own TypeError said nothing of it)."""
    x, y = get_batch(dataset, batch_size, context_length, device)
    return x.numpy(force=True), y.numpy(force=True)


register("batch_starts_sorted", "get_batch sorts its starts: row 0 is always the smallest",
         named_by="come in increasing order", training__get_batch=_batch_sorted)
register("batch_returns_numpy", "get_batch returns numpy arrays, not tensors",
         named_by="must be torch tensors", training__get_batch=_batch_as_numpy)


def _ce_scatter_one_hot(inputs, targets):
    """A float one-hot made by zeros_like(x).scatter_ (blind trial 14: only F.one_hot's int64 was caught)."""
    x = _upcast(inputs)
    logp = x - torch.logsumexp(x, dim=-1, keepdim=True)
    return -(torch.zeros_like(x).scatter_(-1, targets[..., None], 1.0) * logp).sum(-1).mean().to(inputs.dtype)


register("cross_entropy_scatter_one_hot", "cross-entropy through a float one-hot from zeros_like(x).scatter_",
         named_by="a one-hot [..., vocab_size]", training__cross_entropy=_ce_scatter_one_hot)
