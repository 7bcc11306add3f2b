"""The probes and the diagnosis, each proved both ways on small hand-made calls:
correct code in the styles real students write passes, and each mistake is named."""

import pytest
import torch
import torch.nn.functional as F
from einops import reduce
from torch import nn

from harness.student_run.diagnose import crash, missing_return
from harness.student_run.probes import AllocationTooLarge, DeviceMismatch, assert_no_large_allocation, run_on_meta

V, D, ROWS = 4096, 4, (8, 16)


def _ids(device="cpu"):
    return torch.randint(0, V, ROWS, generator=torch.Generator().manual_seed(0)).to(device)


def test_allocation_probe_accepts_the_modules_own_table_built_in_the_call():
    def lookup(weights, ids):  # nn.Embedding allocates and initialises its own [V, D] weight
        return torch.func.functional_call(nn.Embedding(V, D), {"weight": weights}, (ids,))
    with torch.no_grad():
        assert_no_large_allocation("lookup", lookup, (torch.randn(V, D), _ids()), vocab_size=V, ids_shape=ROWS)


def test_allocation_probe_names_a_one_hot():
    def one_hot(weights, ids):
        return F.one_hot(ids, V).to(weights.dtype) @ weights
    with pytest.raises(AllocationTooLarge, match=r"one-hot \[..., vocab_size\]"):
        assert_no_large_allocation("lookup", one_hot, (torch.randn(V, D), _ids()), vocab_size=V, ids_shape=ROWS)


def test_meta_probe_accepts_cpu_indices_into_a_device_table():
    table = torch.empty(V, D, device="meta")
    assert run_on_meta(lambda ids: table[torch.arange(ids.shape[-1])], _ids("meta")).device.type == "meta"


def test_meta_probe_rejects_a_cpu_table_indexed_by_device_ids():
    with pytest.raises(DeviceMismatch, match="made by torch.randn"):
        run_on_meta(lambda ids: torch.randn(V, D)[ids], _ids("meta"))


def test_meta_probe_rejects_a_table_copied_to_the_cpu_and_mixed_with_the_inputs():
    """Blind trial 9: RoPE's tables looked up on the CPU (self.cos.cpu()[positions.cpu()]) passed, since .cpu()
    of a meta tensor raised "no data" and the probe called that not the code's fault; on a GPU the CPU rows
    then meet the GPU input."""
    table = torch.empty(V, D, device="meta")
    with pytest.raises(DeviceMismatch, match=r"copied to the CPU by \.cpu\(\)"):
        run_on_meta(lambda x: table.cpu()[torch.arange(x.shape[-2])] * x, torch.empty(5, D, device="meta"))


def test_meta_probe_accepts_a_value_read_through_the_cpu():
    """.cpu() for a value (a length, a range check) is slow but right on any device: it passes."""
    table = torch.empty(V, D, device="meta")
    out = run_on_meta(lambda ids: table[: int(ids.max().cpu()) + 1][ids.clamp(max=0)], _ids("meta"))
    assert out is not None and out.device.type == "meta"


def test_meta_probe_accepts_an_assert_range_check():
    table = torch.empty(V, D, device="meta")

    def lookup(ids):
        assert bool((ids >= 0).all()) and bool((ids < V).all()), "id out of range"
        return table[ids]
    assert run_on_meta(lookup, _ids("meta")) is None  # the answer is unknowable on meta: not a failure


def _error(fn, *args) -> BaseException:
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001 - the error is the test's subject
        return e
    raise AssertionError("expected an error")


def test_einops_rank_error_is_named():
    error = _error(lambda x: reduce(x, "b t d -> b t", "mean"), torch.zeros(8))
    assert "fixed number of dimensions" in crash(error, None, {})


def test_none_argument_is_named_only_when_the_raising_line_uses_it():
    def uses_mask(scores, mask):
        return scores.masked_fill(~mask, 0.0)

    def drops_a_result(scores, mask):
        rows = None
        return rows + scores
    case = type("Case", (), {"args": {}})()
    inputs = {"scores": torch.zeros(2, 2), "mask": None}
    assert "`mask` although it is None" in crash(_error(uses_mask, torch.zeros(2, 2), None), case, inputs)
    assert crash(_error(drops_a_result, torch.zeros(2, 2), None), case, inputs) is None


def test_missing_return_is_located_in_the_student_module(tmp_path):
    source = tmp_path / "attention.py"
    source.write_text("def softmax(x, dim):\n    return x\n\n\n"
                      "def scaled_dot_product_attention(Q, K, V, mask=None):\n    out = Q @ K.T @ V\n")
    said = missing_return("run_scaled_dot_product_attention returned None, but the contract says ...", source)
    assert "attention.py:5 `scaled_dot_product_attention` never returns a value" in said
    assert missing_return("run_softmax returned None, but ...", source) is None


def test_the_embedding_is_found_by_its_role_not_its_name_or_shape():
    from reference.model import TransformerLM
    from harness.student_run.probes import tables_indexed
    model = TransformerLM(50, 8, 16, 1, 2, 24, 10000.0)
    with torch.no_grad():
        found = tables_indexed(model, torch.zeros(1, 4, dtype=torch.long))
    assert found == {"token_embeddings.weight"}  # lm_head.weight has the same [V, d] shape


@pytest.mark.parametrize("style", ["nn.Embedding", "F.embedding", "indexing"])
def test_the_table_is_found_in_every_lookup_style(style):
    """aten.embedding takes the table first (weight, indices), as indexing does (self, indices)."""
    class Lookup(nn.Module):
        def __init__(self):
            super().__init__()
            self.ids_like = nn.Parameter(torch.zeros(3, 3))  # a parameter that is not looked up in
            self.table = nn.Embedding(10, 3) if style == "nn.Embedding" else nn.Parameter(torch.randn(10, 3))

        def forward(self, ids):
            if style == "nn.Embedding":
                return self.table(ids) + self.ids_like.sum()
            return (F.embedding(ids, self.table) if style == "F.embedding" else self.table[ids]) + self.ids_like.sum()
    from harness.student_run.probes import tables_indexed
    with torch.no_grad():
        found = tables_indexed(Lookup(), torch.tensor([[1, 2]]))
    assert found == {"table.weight" if style == "nn.Embedding" else "table"}


def _einx_rank_error(x) -> BaseException:
    """einx's RankError, or where einx is not installed, an exception of that name from its module."""
    try:
        import einx
    except ImportError:
        error = type("RankError", (Exception,), {"__module__": "einx.errors"})
        return error("The number of tensor dimensions and axes in the expression does not match.\n"
                     "The following equation(s) were determined for the expression:\n    b t (h d) = 3 8\n    h = 2")
    return _error(lambda t: einx.id("b t (h d) -> b h t d", t, h=2), x)


@pytest.mark.parametrize("style", ["einx", "torch.einsum", "indexing", "transpose", "shape-index"])
def test_a_rank_error_is_named_however_it_was_spelled(style):
    """Code that assumes 3-D inputs fails on 2-D ones in whatever library it was written with."""
    x = torch.zeros(3, 8)
    error = {
        "einx": lambda: _einx_rank_error(x),
        "torch.einsum": lambda: _error(lambda t: torch.einsum("btd,od->bto", t, torch.zeros(5, 8)), x),
        "indexing": lambda: _error(lambda t: t[:, :, 0::2], x),
        "transpose": lambda: _error(lambda t: t.transpose(1, 2), x),
        "shape-index": lambda: _error(lambda t: t.shape[2], x),
    }[style]()
    said = crash(error, None, {"in_features": x})
    assert said and "fixed number of dimensions" in said and "float32[3, 8]" in said, (style, error, said)


def test_none_is_judged_by_the_argument_that_was_none_whatever_its_name():
    """The student's parameter may be named otherwise than the contract's: `~attend_mask` with the
    case's mask=None is the None argument used, as `torch.where(mask, ...)` is."""
    def inverted(scores, attend_mask=None):
        return scores.masked_fill(~attend_mask, 0.0)

    def where(scores, mask=None):
        return torch.where(mask, scores, 0.0)

    def drops_a_result(scores, attend_mask=None):
        rows = None
        return rows + scores
    case = type("Case", (), {"args": {}, "function": "run_scaled_dot_product_attention"})()
    inputs = {"Q": torch.zeros(2, 2), "mask": None}
    for fn, name in ((inverted, "`attend_mask` (the argument `mask`)"), (where, "`mask`")):
        said = crash(_error(fn, torch.zeros(2, 2), None), case, inputs)
        assert said and f"uses {name} although it is None" in said and "the docstring says" in said, (fn, said)
    assert crash(_error(drops_a_result, torch.zeros(2, 2), None), case, inputs) is None


# ---------------------------------------------------------------- 16-bit results: rounding told from formulas

def test_a_16_bit_result_off_by_rounding_alone_is_said_to_be_rounding():
    """A 16-bit output that fails 1 ulp only by rounding-sized errors (16-bit internals) is said to be that;
    one whose errors are far larger (a wrong formula) is not."""
    from harness.student_run.diagnose import rounding_sized
    x = torch.randn(16, 48, generator=torch.Generator().manual_seed(1)) * 3
    expected = F.gelu(x.double()).half()
    in_16_bits = 0.5 * x.half() * (1 + torch.erf(x.half() / 2 ** 0.5))
    said = rounding_sized(in_16_bits, expected)
    assert said and "rounding-sized" in said and "Compute in float32 throughout" in said, said
    # which step lost it is unknown: a 16-bit step, or a float32 form that loses it too (a newcomer's
    # log(exp(x) / sum(exp(x))) in float32 was told only of float16), or an eps placed elsewhere: all are named
    assert "runs in float16" in said and "log-sum-exp" in said and "eps added elsewhere" in said, said
    assert rounding_sized(F.gelu(x.double(), approximate="tanh").half() * 1.1, expected) is None
    assert rounding_sized(in_16_bits.float(), expected) is None  # a dtype slip is said elsewhere


def test_a_float_result_rounded_to_16_bits_is_said_to_be():
    """Blind trial 14: a schedule whose cosine ran in bfloat16 tensors was told 'every value is 1.002 x the expected
    one: a missing or extra constant factor'. A float32/float64 output whose every value is a bfloat16 (or float16)
    number, with rounding-sized errors, is told so; small errors alone are not (an AdamW trajectory's are small
    beside its weights, whatever the mistake), nor are larger ones."""
    from harness.student_run.diagnose import rounded_to_16_bits
    it = torch.arange(30, dtype=torch.float64)
    expected = 0.1 + 0.45 * (1 + torch.cos(torch.pi * it / 29))
    in_bf16 = (0.1 + 0.45 * (1 + torch.cos((torch.pi * it / 29).bfloat16()))).bfloat16().double()
    said = rounded_to_16_bits(in_bf16, expected)
    assert said and "differs is exactly a bfloat16 number" in said and "Compute in float32, float64 or Python floats" in said, said
    assert "exactly a float16 number" in rounded_to_16_bits(expected.half().double(), expected)
    assert rounded_to_16_bits(expected + 1e-4, expected) is None  # small, but not rounded: a formula's
    assert rounded_to_16_bits((expected * 1.1).bfloat16().double(), expected) is None  # 10%: a formula's too
    assert rounded_to_16_bits(in_bf16.half(), expected.half()) is None  # 16-bit outputs: rounding_sized, in ulps
    warmup = torch.cat([expected[:5], in_bf16[5:]])  # the values that differ are bfloat16 numbers; the rest are right
    assert "exactly a bfloat16 number" in rounded_to_16_bits(warmup, expected)


def test_a_float32_x_meeting_a_16_bit_weight_is_named():
    """A model that upcasts x but not its nn.Linear's bfloat16 weight crashes in torch's words; the report
    says what the contract asks: cast each weight where it is used."""
    x, w = torch.randn(3, 8), torch.randn(4, 8).bfloat16()
    with pytest.raises(RuntimeError) as error:
        F.linear(x, w)
    said = crash(error.value, None, {"in_features": x.bfloat16(), "weights": {"w": w}})
    assert said and "F.linear(x, self.weight.to(x.dtype))" in said, (str(error.value), said)
    assert crash(error.value, None, {"in_features": x, "weights": {"w": w.float()}}) is None  # no 16-bit input: silent


def test_what_differs_names_each_output_axis_once():
    """`What differs:` names axes from the return annotation: two axes of one name ("heads seq seq", as
    ALiBi's bias was declared) read as one, and a student cannot tell queries from keys."""
    from harness.contract import ADAPTERS
    from harness.student_run.diagnose import output_axes
    for name, adapter in ADAPTERS.items():
        dims = getattr(adapter.signature.return_annotation, "dim_str", "").split()
        axes = output_axes(name, len([d for d in dims if d != "..."]) + 1)
        assert len(axes) == len(set(axes)), f"{name}: {axes}"


@pytest.mark.parametrize("factor, said", [(5.0, "(a factor of 5)"), (2.0, "(a factor of 2)"),
                                          (8 ** 0.5, "(a scale of sqrt(8))"), (1.37, "constant factor")])
def test_a_constant_factor_is_named_by_its_own_number(factor, said):
    """A loss summed over 5 examples is 5x its mean: 'a scale of sqrt(25)' (blind trial) says nothing."""
    from harness.student_run.diagnose import heuristic
    expected = torch.randn(4, 6, generator=torch.Generator().manual_seed(0))
    text = heuristic(expected * factor, expected, 1e-5, 1e-4)
    assert text.endswith(said) and "sqrt(25)" not in text and "sqrt(4)" not in text, text


@pytest.mark.parametrize("shape", [(), (1,), (3,)])
def test_one_value_is_no_evidence_of_a_constant_factor(shape):
    """A scalar loss is a multiple of any other: blind trial 10's cross-entropy of targets - 1 was told
    'every value is 1.368 x the expected one: a missing or extra constant factor'."""
    from harness.student_run.diagnose import heuristic
    expected = torch.zeros(shape)
    expected.view(-1)[:1] = 2.25
    text = heuristic(expected * 1.368, expected, 1e-5, 1e-4) or ""
    assert "constant factor" not in text, text


@pytest.mark.parametrize("shape", [(), (3, 4)])
def test_a_flipped_sign_is_said_even_of_one_value(shape):
    """Blind trial 13's cross-entropy picked - lse (a negative loss) was shown only its numbers."""
    from harness.student_run.diagnose import heuristic
    expected = torch.rand(shape, generator=torch.Generator().manual_seed(2)) + 0.5
    assert heuristic(-expected, expected, 1e-5, 1e-4) == "your output is the negative of the expected one: a sign is flipped"
    assert "sign" not in (heuristic(-0.9 * expected, expected, 1e-5, 1e-4) or "")


def test_an_all_zero_output_is_said_and_crashes_nothing():
    """Clipping whose fp16 norm overflowed writes zeros: the report crashed dividing by the zero scale (blind trial)."""
    from harness.student_run.diagnose import heuristic
    expected = torch.randn(3, 5, generator=torch.Generator().manual_seed(1))
    assert heuristic(torch.zeros(3, 5), expected, 1e-5, 1e-4) == \
        "every value of your output is 0, where the expected values are not"


@pytest.mark.parametrize("axes, blamed", [(["seq", "d_model"], True), (["queries", "d_v"], True),
                                          (["steps", "total"], False), (["axis 0", "axis 1"], False)])
def test_position_patterns_are_blamed_on_positions_only_along_a_sequence(axes, blamed):
    """AdamW decaying without lr is right at step 0 of a [steps, total] trajectory: 'only position 0 is
    right ... its rotation or position vector' sent a blind tester to RoPE for an optimizer bug."""
    from harness.student_run.diagnose import heuristic
    expected = torch.randn(6, 4, generator=torch.Generator().manual_seed(2))
    actual = expected.clone()
    actual[1:] += 1.0
    text = heuristic(actual, expected, 1e-5, 1e-4, axes=axes) or ""
    assert ("only position 0 is right" in text) == blamed, text
    shifted = torch.cat([expected[1:], expected[:1]])
    assert ("shifted by one position" in (heuristic(shifted, expected, 1e-5, 1e-4, axes=axes) or "")) == blamed


@pytest.mark.parametrize("axes, paired", [(["heads"], False), (["seq", "keys"], False), (["seq", "d_model"], True),
                                         (["axis 0"], True), (None, True)])
def test_values_in_another_order_are_a_pairing_of_dimensions_only_along_a_feature_axis(axes, paired):
    """ALiBi's slopes sorted (blind trial 9) were told 'how dimensions are paired, interleaved or concatenated':
    along heads or keys the order is the mistake, not a pairing of dimensions."""
    from harness.student_run.diagnose import heuristic
    expected = torch.arange(1.0, 7.0).reshape(1, 6) if axes and len(axes) == 2 else torch.arange(1.0, 7.0)
    text = heuristic(expected.flip(-1), expected, 1e-5, 1e-4, axes=axes) or ""
    assert text.startswith("the right values, in the wrong order along the last axis"), text
    assert ("how dimensions are paired" in text) == paired and (paired or f"({axes[-1]})" in text), text


def test_a_match_at_zero_error_reads_exactly():
    from harness.student_run.diagnose import match_evidence
    actual = torch.arange(6.0)
    assert match_evidence(actual, {"idx": torch.tensor([1, 4]), "val": torch.tensor([1.0, 4.0])}).startswith(
        "yours equals that mistake's output exactly at all 2 elements checked")
    assert "within 0.5" in match_evidence(actual, {"idx": torch.tensor([1]), "val": torch.tensor([1.5])})


def test_scattered_errors_get_no_pattern_and_a_constant_is_named():
    """TA trial 11: a SiLU clamped at -0.2 has wrong elements wherever silu(x) < -0.2. It was told "along axis 1,
    every index but the first; along axis 2, only 0-2": a pattern of a few scattered elements, and nothing of what
    they were. A slice pattern is said only where the slices that hold errors are mostly wrong; a constant is named."""
    from harness.student_run.diagnose import what_differs
    silu = torch.nn.functional.silu(torch.randn(2, 5, 4, generator=torch.Generator().manual_seed(0)))
    said = what_differs(silu.clamp(min=-0.25), silu, 1e-5, 1e-4, ["batch", "seq", "d"])  # 8 of 40 wrong
    assert "along" not in said and said.startswith("every wrong element is exactly -0.25"), said
    shifted = silu.clone()
    shifted[:, 1:] += 1  # every position but the first wrong, in every feature: a pattern, and no constant
    assert what_differs(shifted, silu, 1e-5, 1e-4, ["batch", "seq", "d"]) == \
        "along seq, every index but the first (index 0 is right)"


def test_counts_that_differ_by_a_hair_say_by_how_much():
    """Blind trial 14: 2,127,057,600 against 2,127,056,000 read 'yours/expected: 1'. A ratio that rounds to 1
    says the difference too; others keep their ratio alone."""
    from harness.student_run.compare import Mismatch, assert_same_counts
    with pytest.raises(Mismatch) as failure:
        assert_same_counts({"flops": 2_127_057_600, "params": 20}, {"flops": 2_127_056_000, "params": 10}, header="h")
    said = str(failure.value)
    assert "flops: 2,127,056,000, 2,127,057,600, 1.000000752, off by +1,600" in said, said
    assert "params: 10, 20, 2\n" in said + "\n" and "off by +10" not in said, said


def test_a_checkpoint_that_torch_load_refuses_is_explained():
    """Blind trial 14 stored torch.__version__ (a TorchVersion object) in its checkpoint: torch.load's default
    weights_only=True refused it with a page of torch's options. The report names the object and what to store."""
    import pickle
    from harness.student_run.diagnose import crash
    # torch's own words (2.13), not a load: no code of ours unpickles (test_store.test_no_pickle_anywhere)
    refused = pickle.UnpicklingError(
        "Weights only load failed. This file can still be loaded, to do so you have two options, do those steps "
        "only if you trust the source of the checkpoint.\n\t(1) In PyTorch 2.6, we changed the default value of the "
        "`weights_only` argument ... from `False` to `True`. ...\n WeightsUnpickler error: Unsupported "
        "global: GLOBAL torch.torch_version.TorchVersion was not an allowed global by default.")
    said = crash(refused, None, {})
    assert said and "torch.load refused an object in your checkpoint (torch.torch_version.TorchVersion)" in said, said
    assert "keep weights_only=True" in said, said
    assert crash(RuntimeError("something else"), None, {}) is None
