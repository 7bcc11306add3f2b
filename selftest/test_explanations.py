"""What a failure report explains, proved both ways: each sentence appears where its
evidence is, and correct code gets none (issue 16: say only what is true)."""

import re

import pytest
import torch

from conftest import run_suite


def _adapters(tmp_path, body: str) -> str:
    path = tmp_path / "partial_adapters.py"
    path.write_text("from reference.adapters import *  # noqa: F403\n\n" + body)
    return str(path)


def test_not_implemented_names_the_function_that_raised_it(tmp_path):
    target = _adapters(tmp_path, "def run_transformer_accounting(*args, **kwargs):\n"
                                 "    raise NotImplementedError('count them')\n")
    run = run_suite("--adapters", target, "--function", "get_transformer_lm")
    message = next(m for n, m in run.messages.items() if "test_parameter_count_matches_accounting" in n)
    assert message.startswith("run_transformer_accounting is not implemented yet"), message
    assert "which get_transformer_lm's test calls" in message
    assert [n for n, o in run.outcomes.items() if o == "failed"] == \
        [n for n in run.outcomes if "test_parameter_count_matches_accounting" in n]


def test_device_test_judges_only_code_that_works_on_the_cpu():
    run = run_suite("--adapters", "reference.variants:linear_without_transpose", "--function", "run_linear")
    device = next(n for n in run.outcomes if "meta_device" in n)  # not judged: skipped, not charged twice
    assert run.outcomes[device] == "skipped", run.outcomes
    assert run.messages[device].startswith("not run: fix run_linear on the CPU first"), run.messages[device]
    run = run_suite("--adapters", "reference.variants:hard_coded_2d_ids", "--function", "run_embedding")
    assert not [n for n in run.failed if "meta_device" in n]  # it passes the 2-D case: probed there, passes


def test_a_fingerprint_never_matches_on_nan():
    from harness.student_run.diagnose import matching_variant
    fp = {"idx": torch.tensor([0, 1]), "val": torch.tensor([float("nan"), 1.0])}
    assert matching_variant(torch.tensor([float("nan"), 1.0]), {"nan_mistake": fp}, 1e-5, 1e-4) is None
    finite = {"idx": torch.tensor([0, 1]), "val": torch.tensor([2.0, 1.0])}
    assert matching_variant(torch.tensor([2.0, 1.0]), {"finite_mistake": finite}, 1e-5, 1e-4) == "finite_mistake"


def test_the_first_nonfinite_value_is_located_in_the_code_that_made_it():
    from harness.student_run.probes import first_nonfinite

    def mean_softmax(x):
        e = torch.exp(x - x.mean(dim=-1, keepdim=True))
        return e / e.sum(dim=-1, keepdim=True)

    def fully_masked(x):
        scores = x.masked_fill(torch.ones(2, 2, dtype=torch.bool).triu(), float("-inf"))
        return torch.softmax(scores, dim=-1)
    said = first_nonfinite(mean_softmax, torch.tensor([[0.0, 300.0]]))
    assert said.startswith("the first inf is made by aten.exp in `mean_softmax`") and "150" in said, said
    said = first_nonfinite(fully_masked, torch.randn(2, 2))
    # what fed the NaN comes first: row 0 is all -inf, put there by the masked_fill (issue 24)
    assert said.startswith("the first NaN comes from a slice with no finite value: every value at [0, :]"), said
    assert "aten._softmax in `fully_masked`" in said and "put there by aten.masked_fill in `fully_masked`" in said
    assert "also hides the diagonal" in said.cause, said.cause
    assert first_nonfinite(lambda x: torch.empty(3).fill_(1.0) * x, torch.ones(3)) is None  # memory, not a NaN
    assert first_nonfinite(torch.softmax, torch.randn(3, 4), -1) is None


def test_a_nan_made_in_place_or_carried_by_a_complex_tensor_is_found_where_it_was_made():
    """Blind trial 10's AdamW made a NaN in an in-place update at lr = 0 (0/0), and the report blamed the
    view_as_real of a later complex RoPE 'from finite operands': in-place results were never looked at,
    and a complex operand never counted as holding one."""
    from harness.student_run.probes import first_nonfinite

    def step_in_place(p):
        p.addcdiv_(torch.zeros_like(p), torch.zeros_like(p), value=-0.0)  # 0/0: the parameter's first NaN
        return torch.view_as_real(torch.view_as_complex(p.reshape(-1, 2)) * 2)

    def step_foreach(p):
        torch._foreach_div_([p], [torch.zeros_like(p)])  # writes its list, returns nothing
        return p * 2

    def complex_nan(x):
        z = torch.view_as_complex(x.reshape(-1, 2)) / torch.zeros(2, dtype=torch.complex64)
        return torch.view_as_real(z)
    said = first_nonfinite(step_in_place, torch.randn(4))
    assert said.startswith("the first NaN is made by aten.addcdiv_ in `step_in_place`"), said
    said = first_nonfinite(step_foreach, torch.randn(4))
    assert said.startswith("the first inf is made by aten._foreach_div_ in `step_foreach`"), said
    said = first_nonfinite(complex_nan, torch.randn(4))
    assert said.startswith("the first NaN is made by aten.div in `complex_nan`") or \
        said.startswith("the first inf is made by aten.div in `complex_nan`"), said


def test_what_differs_locates_errors_along_each_axis():
    from harness.student_run.diagnose import what_differs
    e = torch.randn(3, 6, 8, generator=torch.Generator().manual_seed(0))
    axes = ["batch", "seq", "d_model"]
    features = e.clone()
    features[..., 6:] += 1.0
    assert what_differs(features, e, 1e-5, 1e-4, axes) == "along d_model, only 6-7 (of 8)"
    later = e.clone()
    later[:, 3:] += 1.0
    assert what_differs(later, e, 1e-5, 1e-4, axes) == "along seq, only indices >= 3 (of 6)"
    first = e.clone()
    first[:, 1:] -= 0.5
    assert what_differs(first, e, 1e-5, 1e-4, axes) == "along seq, every index but the first (index 0 is right)"
    growing = e + 1e-3 * torch.arange(6.0)[:, None] ** 2
    assert "the error grows along seq" in what_differs(growing, e, 1e-5, 1e-4, axes)
    everywhere = e + 1.0
    assert what_differs(everywhere, e, 1e-5, 1e-4, axes) is None  # nothing to locate: say nothing
    assert what_differs(e.clone(), e, 1e-5, 1e-4, axes) is None


def test_a_concatenation_of_named_tensors_says_which_differ():
    """An output along `total` concatenates a dict argument's tensors in sorted name order (run_training_steps,
    run_adamw_steps): the report names the tensors that hold the errors."""
    from types import SimpleNamespace
    from harness.student_run.diagnose import named_parts
    g = torch.Generator().manual_seed(0)
    weights = {"b": torch.randn(4, generator=g), "a": torch.randn(2, 3, generator=g), "c": torch.randn(5, generator=g)}
    e = torch.cat([weights[k].flatten() for k in sorted(weights)])
    case = SimpleNamespace(atol=1e-5, rtol=1e-4, ulps=0)
    inputs = {"weights": weights, "grads": {k: torch.zeros(3, *t.shape) for k, t in weights.items()}, "lr": 0.1}
    one = e.clone()
    one[7] += 1.0  # b's second element
    assert named_parts(one, e, case, inputs) == "1 of the 3 tensors differs: b (1 of 4); the others are right"
    assert named_parts(e + 1.0, e, case, inputs) == "all 3 tensors differ, in 15 of their 15 elements"
    steps = torch.stack([e, one])  # [steps, total]: the last axis is still the concatenation
    assert named_parts(steps, torch.stack([e, e]), case, inputs).startswith("1 of the 3 tensors differs: b")
    assert named_parts(e.clone(), e, case, inputs) is None
    assert named_parts(one, e, case, {"weights": {"a": weights["a"]}}) is None  # sizes that do not add up


def test_adamw_steps_that_differ_only_after_a_skipped_step_say_so():
    """Blind trial 13: every parameter's bias corrections from the first parameter's step count. A tensor that
    goes wrong at its first step with a gradient after one without is told about per-parameter step counts;
    one that is wrong from its first step, or at another step, is not (a mistake in the update itself), nor is
    one whose first step with a gradient follows steps without one: that step is its first (m made from it)."""
    from types import SimpleNamespace
    from harness.student_run.diagnose import named_parts
    params = {"a": torch.zeros(2), "b": torch.zeros(3)}
    has_grad = {"a": torch.tensor([True, True, True, True]), "b": torch.tensor([True, False, False, True])}
    inputs = {"params": params, "grads": {k: torch.zeros(4, *t.shape) for k, t in params.items()}, "has_grad": has_grad}
    case = SimpleNamespace(atol=1e-5, rtol=1e-4, ulps=0)
    expected = torch.zeros(4, 5)

    def wrong_from(step: int) -> torch.Tensor:
        actual = expected.clone()
        actual[step:, 2:] += 1.0  # b, from `step` on
        return actual
    said = named_parts(wrong_from(3), expected, case, inputs)
    assert said.startswith("1 of the 2 tensors differs: b") and "each parameter counts its own steps" in said
    for step in (0, 1, 2):  # from its first step, or at a step without a gradient: not a step count's symptom
        assert "counts its own steps" not in named_parts(wrong_from(step), expected, case, inputs)
    assert "counts its own steps" not in named_parts(wrong_from(3), expected, case, {**inputs, "has_grad": None})
    drift = expected.clone()
    drift[1:, 2:] += 6e-6 * torch.arange(1, 4.0)[:, None]  # a drift that crosses the tolerance at step 3
    assert "counts its own steps" not in named_parts(drift, expected, case, inputs)
    late_start = {**has_grad, "b": torch.tensor([False, False, False, True])}
    assert "counts its own steps" not in named_parts(wrong_from(3), expected, case, {**inputs, "has_grad": late_start})
    # blind trial 14: a count advanced on skipped steps once the state exists goes wrong after the first skip
    # that follows a step with a gradient, whatever skips came before the first one
    advanced = {**has_grad, "b": torch.tensor([False, True, False, True])}
    assert "counts its own steps" in named_parts(wrong_from(3), expected, case, {**inputs, "has_grad": advanced})


def test_reduced_precision_is_judged_within_one_ulp():
    """A bfloat16 RMSNorm without the float32 upcast stays inside the old (1e-2, 1.6e-2) tolerance,
    but not within 1 ulp of the float32 result rounded once; float64 internals are."""
    from harness.term.catalogue import CATALOGUE
    from harness.student_run.compare import mismatched
    from reference.variants import VARIANTS
    spec = next(s for s in CATALOGUE if s.function == "run_rmsnorm" and s.name.startswith("bf16-d12"))
    generated = spec.generate(0)
    args = (spec.args["d_model"], spec.args["eps"], generated["weights"], generated["in_features"])
    expected = VARIANTS["float64_internals"].run_rmsnorm(*args)  # stands in for the reference below
    import reference.adapters as ref
    reference = ref.run_rmsnorm(*args)
    low = VARIANTS["rmsnorm_bf16_not_upcast"].run_rmsnorm(*args)
    assert not mismatched(expected, reference, 0, 0, ulps=1).any()
    assert mismatched(low, reference, 0, 0, ulps=1).any()
    assert torch.isclose(low, reference, atol=1e-2, rtol=1.6e-2).all()


def test_a_16_bit_table_plus_positions_rounded_first_fails_its_public_case():
    """A bfloat16 table plus sinusoidal vectors rounded to bfloat16 first (blind trial: no case had a 16-bit
    table with sinusoidal positions, so every test passed it). The vectors' own rounding error is many ulps
    of a sum that cancels: the public case fails it on any seed, and passes float32 vectors computed
    another way."""
    from harness.student_run.compare import Mismatch, assert_close
    from harness.term.catalogue import CATALOGUE
    from reference.variants import VARIANTS
    import reference.adapters as ref
    spec = next(s for s in CATALOGUE if s.function == "run_embed_with_positions" and s.name == "bf16-sinusoidal")
    for seed in range(8):
        generated = spec.generate(seed)
        args = [spec.args[k] if k in spec.args and k not in generated else generated.get(k) for k in
                ("vocab_size", "context_length", "d_model", "token_weights", "position_weights", "token_ids")]
        expected = ref.run_embed_with_positions(*args)
        judge = dict(what="output", atol=1e-5, rtol=1e-4, header="case", ulps=1)
        assert_close(VARIANTS["float32_sinusoidal"].run_embed_with_positions(*args), expected, **judge)
        with pytest.raises(Mismatch):
            assert_close(VARIANTS["positions_rounded_before_the_sum"].run_embed_with_positions(*args), expected, **judge)


def test_output_right_gradient_wrong_is_said():
    run = run_suite("--adapters", "reference.variants:silu_sigmoid_detached", "--function", "run_silu")
    gradients = [m for n, m in run.messages.items() if ":gradient]" in n or "gradient" in m]
    said = "What differs: the output is right, only the gradient with respect to `in_features` is wrong"
    assert gradients and all(said in m for m in gradients), gradients
    assert any(said + ": the backward pass does not follow" in m for m in gradients)  # where it is far off
    assert not [n for n in run.failed if ":output]" in n]


def test_causality_blames_the_mask_only_when_one_head_leaks_too():
    merged = run_suite("--adapters", "reference.variants:heads_merged_without_transpose", "-k", "causal")
    unmasked = run_suite("--adapters", "reference.variants:attention_not_causal", "-k", "causal")
    for message in (m for n, m in merged.messages.items() if "test_attention_is_causal" in n):
        assert "mask" not in message.replace("not the mask", "") and "With 1 head nothing leaks" in message
    assert all("It leaks with 1 head too" in m for n, m in unmasked.messages.items() if "test_attention_is_causal" in n)


def test_the_rotation_property_names_sin_cos_halves_only_when_they_are_the_pairs():
    for variant, halves in [("raw_dimension_exponent", False), ("sinusoidal_halves_same_frequencies", True)]:
        run = run_suite("--adapters", f"reference.variants:{variant}", "-k", "rotation_of_each_pair")
        assert run.messages and all(("[sin | cos]" in m) == halves for m in run.messages.values()), run.messages


def test_a_misplaced_axis_in_grouped_attention_is_not_blamed_on_the_kv_expansion(monkeypatch):
    """A blind student's SDPA transposed K with transpose(1, 2), which only works for 3-D inputs:
    the broadcast error meets heads with seq, and the report must not say the kv heads were
    expanded wrongly (on a case whose kv heads equal its heads, nothing is expanded at all)."""
    import reference.attention

    def transposed_1_2(Q, K, V, mask=None):
        scores = Q @ K.transpose(1, 2) / Q.shape[-1] ** 0.5
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ V
    with monkeypatch.context() as m:
        m.setattr(reference.attention, "scaled_dot_product_attention", transposed_1_2)
        run = run_suite("--adapters", "reference.adapters", "--function", "run_grouped_query_attention")
    said = [m for n, m in run.messages.items() if n in run.failed]
    assert said and not any("kv heads were expanded" in m for m in said), said
    run = run_suite("--adapters", "reference.variants:gqa_group_from_d_model", "--function", "run_grouped_query_attention")
    assert any("kv heads were expanded" in m for n, m in run.messages.items() if n in run.failed)


def test_a_fingerprint_matches_only_within_the_cases_own_tolerance():
    """A blind student's GPT-2 block that ignored eps=1e-3 matched the stored sample of another eps
    mistake within 5x the case's tolerance, and was named as that mistake."""
    from harness.student_run.diagnose import matching_variant
    fp = {"idx": torch.tensor([0, 1]), "val": torch.tensor([1.0, 2.0])}
    atol, rtol = 1e-3, 1e-3
    near = torch.tensor([1.0 + 0.5 * (atol + rtol), 2.0])  # within the case's tolerance
    off = torch.tensor([1.0 + 5 * (atol + rtol), 2.0])     # within 10x, not 1x
    assert matching_variant(near, {"eps_mistake": fp}, atol, rtol) == "eps_mistake"
    assert matching_variant(off, {"eps_mistake": fp}, atol, rtol) is None


# ---------------------------------------------------------------- issue 24: reports point at the student's own mistake

@pytest.fixture
def submission(tmp_path, forget_other_repositories):
    """make(file, old, new, ...): the reference as a student's submission with edits in student/FILE,
    as a student writes them; returns (adapters path, the edited file's lines)."""
    import sys
    from conftest import edit, reference_as_student
    for name in [m for m in sys.modules if m.split(".")[0] in ("adapters", "student")]:
        del sys.modules[name]
    made = []

    def make(target: str, *edits: str):
        sub = reference_as_student(tmp_path / f"submission{len(made)}")
        made.append(sub)
        for old, new in zip(edits[::2], edits[1::2]):
            edit(sub / "student" / target, old, new)
        return str(sub / "adapters.py"), (sub / "student" / target).read_text().splitlines()
    return make


def _line(lines: list[str], text: str) -> int:
    return next(i for i, line in enumerate(lines, 1) if text in line)


def _reports(run, function: str) -> list[str]:
    return [m for n, m in run.messages.items() if n in run.failed and run.adapters.get(n) == function]


def _said(message: str, label: str) -> str:
    return next((line for line in message.splitlines() if line.startswith(label)), "")


MASKED = '        scores = scores.masked_fill(~mask, float("-inf"))'


def test_a_nan_from_an_inverted_mask_is_traced_to_the_mask(submission):
    """torch.where(mask, -inf, scores) fills the keys the query MAY see: rows with one allowed key
    are all -inf, and softmax makes NaN there. The report names the student's mask line, not the
    (correct) softmax that made the first NaN."""
    target, lines = submission("attention.py", MASKED, '        scores = torch.where(mask, float("-inf"), scores)')
    run = run_suite("--adapters", target, "--function", "run_scaled_dot_product_attention")
    where = f"student/attention.py:{_line(lines, 'torch.where(mask')}"
    nan = [m for m in _reports(run, "run_scaled_dot_product_attention") if "Non-finite:" in m]
    assert nan, run.messages
    for message in nan:
        said = _said(message, "Non-finite:")
        assert where in said and "no finite value" in said and "is -inf" in said, said
        assert not said.startswith("Non-finite: the first NaN is made by aten.sub in `softmax`"), said
        cause = _said(message, "Likely cause:")
        assert "inverted" in cause and "where `mask` is True" in cause and where in cause, message


NAN_CAUSES = {  # name: (edit of student/attention.py, function, said in the cause, never said, line marked, where)
    # The mask is right; the softmax runs over the queries (by transposes), so a key that no query
    # may see is an all -inf slice. The mask is not blamed.
    "softmax over the queries": (("    return (softmax(scores, dim=-1) @ v).to(Q.dtype)",
                                  "    return softmax(scores.transpose(-1, -2), dim=-1).transpose(-1, -2) @ v"),
                                 "run_scaled_dot_product_attention", "query axis", "inverted",
                                 "softmax(scores.transpose", "message"),
    # MHA builds triu(1) (True = the keys to hide) and passes it where True means may attend: the
    # last query sees no key. The report says the causal mask is inverted and where it was made.
    "inverted causal mask": (("dtype=torch.bool, device=x.device).tril()", "dtype=torch.bool, device=x.device).triu(1)"),
                             "run_multihead_self_attention", "causal mask is inverted", None, ".triu(1)", "cause"),
}


@pytest.mark.parametrize("name", NAN_CAUSES)
def test_a_nan_is_traced_to_the_code_that_made_it(submission, name):
    (old, new), function, said, never, marked, where = NAN_CAUSES[name]
    target, lines = submission("attention.py", old, new)
    run = run_suite("--adapters", target, "--function", function)
    nan = [m for m in _reports(run, function) if "Non-finite:" in m]
    assert nan, run.messages
    for message in nan:
        cause = _said(message, "Likely cause:")
        assert said in cause and (never is None or never not in cause), message
        assert f"student/attention.py:{_line(lines, marked)}" in (message if where == "message" else cause), message


def test_a_missing_return_names_the_students_function_and_line(submission):
    """RMSNorm.forward returns on the float32 path only; on bfloat16 it computes the value and
    drops it. The report names that function and the line, not adapters.py (which students do
    not edit), though the function has a `return` elsewhere."""
    target, lines = submission("model.py", "        return (wide / rms * self.weight).to(x.dtype)",
                               "        if x.dtype == torch.float32:\n"
                               "            return wide / rms * self.weight\n"
                               "        (wide / rms * self.weight).to(x.dtype)")
    run = run_suite("--adapters", target, "--function", "run_rmsnorm")
    dropped = f"student/model.py:{_line(lines, '        (wide / rms * self.weight).to(x.dtype)')}"
    nones = [m for m in _reports(run, "run_rmsnorm") if "returned None" in m]
    assert nones, run.messages
    for message in nones:
        assert "`RMSNorm.forward`" in message and dropped in message, message
        assert "Did the adapter forget" not in message, message


def test_swapped_sin_and_cos_is_told_what_the_code_did(submission):
    """The stored hint read "sin and cos swapped: even dimensions hold sin, odd dimensions cos",
    which is the correct layout, as if it described the student's output."""
    target, _ = submission("embeddings.py", "    pe = torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)",
                           "    pe = torch.empty(*angles.shape[:-1], d_model, dtype=torch.float64, device=angles.device)\n"
                           "    pe[..., 0::2], pe[..., 1::2] = torch.cos(angles), torch.sin(angles)")
    run = run_suite("--adapters", target, "--function", "run_sinusoidal_positions")
    causes = [_said(m, "Likely cause:") for m in _reports(run, "run_sinusoidal_positions")]
    named = [c for c in causes if "sin and cos swapped" in c]
    assert named, causes
    for cause in named:
        assert "your even dimensions hold cos and your odd ones sin" in cause, cause
        assert "swapped: even dimensions hold sin" not in cause, cause


def test_a_reworded_hint_is_the_variants_own():
    """A hint reworded for a term built before the rewording is what reference/variants.py says now
    (so a rebuild changes nothing, and the class report knows the line)."""
    from harness.store import REWORDED
    from reference.variants import VARIANTS
    assert REWORDED and all(VARIANTS[name].hint == text for name, text in REWORDED.items())


def test_a_property_whose_oracle_is_another_function_checks_that_function_first(submission, tmp_path, capsys):
    """The GQA properties compare with the student's own MHA. Here GQA is right (torch's SDPA) and
    MHA scales its scores by d_k, not sqrt(d_k): the GQA tests must not run and say to fix MHA first,
    not blame GQA's kv grouping, and the table shows GQA blocked, not failed."""
    from conftest import edit
    target, _ = submission("attention.py", "    scores = q @ k.transpose(-1, -2) / math.sqrt(Q.shape[-1])",
                           "    scores = q @ k.transpose(-1, -2) / Q.shape[-1]")
    edit(tmp_path / "submission0" / "student" / "gpt2.py", "out = attention.scaled_dot_product_attention(q, k, v, causal)",
         "out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=causal)")
    run = run_suite("--adapters", target, "--function", "run_grouped_query_attention")
    properties = [m for n, m in run.messages.items() if run.outcomes[n] == "skipped" and "test_gqa_" in n]
    assert properties, run.messages
    for message in properties:
        assert "not run: fix run_multihead_self_attention first" in message, message
        assert "kv head h //" not in message and "must equal" not in message, message
    assert not [n for n in run.failed if "test_fixture" in n]  # GQA itself is right
    out = capsys.readouterr().out
    assert re.search(r"run_grouped_query_attention +blocked .*not run until run_multihead_self_attention passes",
                     out), out


POSITION_0 = "only position 0 is right"


def test_position_0_right_is_blamed_on_positions_only_where_it_sees_more_than_one_key(submission):
    """In causal attention query 0 sees one key, whose weight is 1 whatever its score: an SDPA that
    divides by d_k leaves position 0 right, and its rotation or position vector is not to blame.
    A RoPE whose frequencies are doubled is right at position 0 (no rotation) and is still told so."""
    target, _ = submission("attention.py", "    scores = q @ k.transpose(-1, -2) / math.sqrt(Q.shape[-1])",
                           "    scores = q @ k.transpose(-1, -2) / Q.shape[-1]")
    run = run_suite("--adapters", target, "--function", "run_multihead_self_attention")
    reports = _reports(run, "run_multihead_self_attention")
    assert reports and not [m for m in reports if POSITION_0 in m], reports
    target, _ = submission("rope.py", "        inv_freq = theta ** (-pair / d_k)", "        inv_freq = 2 * theta ** (-pair / d_k)")
    run = run_suite("--adapters", target, "--function", "run_rope")
    assert [m for m in _reports(run, "run_rope") if POSITION_0 in m], run.messages


def test_the_output_is_called_right_only_where_it_is_right_up_to_rounding(submission):
    """A tanh GELU in the GPT-2 LM passes the truncated case's output tolerance (it is off by 7e-5 of
    its largest value, float32 rounding gives 2e-7), and its gradient fails: the report must not say
    "the output is right, only the gradient is wrong", which sends the student to the backward pass."""
    target, _ = submission("gpt2.py", "        return self.c_proj(gelu(self.c_fc(wide), self.approximate)).to(x.dtype)",
                           "        return self.c_proj(torch.nn.functional.gelu(self.c_fc(x), approximate='tanh'))")
    run = run_suite("--adapters", target, "--function", "run_gpt2_lm")
    gradients = {n: m for n, m in run.messages.items() if n in run.failed and ":gradient]" in n}
    assert gradients, run.messages
    assert not [m for m in gradients.values() if "the output is right" in m], gradients
    # Where the case's output passed its tolerance (the term's values decide which do), the report
    # sends the student to the forward computation.
    passed_output = [m for n, m in gradients.items() if n.replace(":gradient]", ":output]") not in run.failed]
    assert all("The forward computation differs" in m for m in passed_output), passed_output


def test_a_must_raise_case_names_only_a_mistake_about_raising(submission):
    """A GELU that computes the tanh form for every approximate but 'none' returns for 'sigmoid';
    its output there equals the stored tanh-for-exact mistake's, which this code does not make.
    A must-raise case says it did not raise, and names a mistake only where that mistake shows
    on invalid input alone (plain weights[ids] wrapping -1)."""
    target, _ = submission("gpt2.py", '''    if approximate == "tanh":
        return (0.5 * wide * (1 + torch.tanh(math.sqrt(2 / math.pi) * (wide + 0.044715 * wide.pow(3))))).to(x.dtype)
    raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")''',
                           '''    return (0.5 * wide * (1 + torch.tanh(math.sqrt(2 / math.pi) * (wide + 0.044715 * wide.pow(3))))).to(x.dtype)''')
    run = run_suite("--adapters", target, "--function", "run_gelu")
    raised = [m for n, m in run.messages.items() if n in run.failed and ":raises]" in n]
    assert raised and all("instead of raising" in m and "Likely cause" not in m for m in raised), raised
    run = run_suite("--adapters", "reference.variants:negative_ids_wrap", "--function", "run_embedding")
    raised = [m for n, m in run.messages.items() if n in run.failed and ":raises]" in n]
    assert raised and all("Likely cause: your output matches plain weights[ids]" in m for m in raised), raised


def test_a_wrong_output_shape_is_our_own_message_in_the_gradient_check_too(submission):
    """index_select on flattened ids returns [N, D] for [B, T] ids; the gradient check called
    autograd with the expected shape's cotangent and printed torch's "Mismatch in shape"."""
    target, _ = submission("embeddings.py", "    return weights[token_ids]",
                           "    return weights.index_select(0, token_ids.flatten())")
    run = run_suite("--adapters", target, "--function", "run_embedding")
    gradients = [m for n, m in run.messages.items() if n in run.failed and ":gradient]" in n]
    assert gradients, run.messages
    for message in gradients:
        assert "Mismatch in shape" not in message and "Traceback" not in message, message
        assert "output: shape [" in message and "this case expects the output shape" in message, message


def test_each_accounting_property_says_what_its_name_says(submission):
    """Scores counted with the kv width: the kv cache is right, flops.attention_scores shrinks with
    GQA. The kv-cache test passes; the score-FLOPs one fails with the FLOPs message."""
    target, _ = submission("accounting.py", '        "flops.attention_scores": L * 2 * T * T * d,',
                           '        "flops.attention_scores": L * 2 * T * T * kv,')
    run = run_suite("--adapters", target, "--function", "run_transformer_accounting")
    failed = {n.split("::")[-1]: m for n, m in run.messages.items() if n in run.failed}
    assert not [n for n in failed if "kv_cache" in n], failed
    flops = [m for n, m in failed.items() if "score_flops" in n]
    assert flops and all("GQA does not change flops.attention_scores" in m for m in flops), failed


def test_unused_parameters_are_named_before_any_gradient_that_differs(submission):
    """An attention whose projections skip their biases (x @ W.T): the block's gradient check said
    only that ln1.weight's gradient differs; the biases get no gradient at all, and it says so."""
    target, _ = submission("gpt2.py",
                           '        q = rearrange(self.q_proj(wide), "... s (h d) -> ... h s d", h=self.num_heads)',
                           '        q = rearrange(wide @ self.q_proj.weight.T, "... s (h d) -> ... h s d", h=self.num_heads)',
                           "for p in (self.k_proj, self.v_proj))\n        if self.rope",
                           "for p in (self.k_proj.weight.T, self.v_proj.weight.T))\n        if self.rope",
                           "(rearrange(p(wide), ", "(rearrange(wide @ p, ")
    run = run_suite("--adapters", target, "--function", "run_gpt2_block")
    gradients = [m for n, m in run.messages.items() if n in run.failed and ":gradient]" in n]
    assert gradients, run.messages
    for message in gradients:
        assert "no gradient reaches `weights/attn.q_proj.bias`, `weights/attn.k_proj.bias`, " \
               "`weights/attn.v_proj.bias`" in message, message
        assert "`weights/ln1.weight`" not in message and "never used" in message, message


def test_the_gelu_contract_says_what_torch_does():
    """run_gelu's docstring said an unknown approximate raises ValueError "as torch.nn.functional.gelu
    does"; F.gelu raises RuntimeError. The rule (ValueError) stays; what it says of torch is true."""
    import torch.nn.functional as F
    from harness.contract import ADAPTERS
    doc = " ".join(ADAPTERS["run_gelu"].spec.__doc__.split())
    with pytest.raises(Exception) as raised:
        F.gelu(torch.zeros(2), approximate="sigmoid")
    assert "raises ValueError" in doc and "as torch.nn.functional.gelu does" not in doc, doc
    assert f"torch.nn.functional.gelu raises {type(raised.value).__name__}" in doc, doc


def test_a_none_argument_under_the_students_own_name_is_named(submission):
    """The student calls the mask `attend_mask` and never checks it for None: the case's mask=None
    reaches `~attend_mask`, and the report says that argument was None, by its value."""
    target, _ = submission("attention.py", "def scaled_dot_product_attention(Q, K, V, mask=None):",
                           "def scaled_dot_product_attention(Q, K, V, attend_mask=None):",
                           "    if mask is not None:\n        scores = scores.masked_fill(~mask, float(\"-inf\"))",
                           "    scores = scores.masked_fill(~attend_mask, float(\"-inf\"))")
    run = run_suite("--adapters", target, "--function", "run_scaled_dot_product_attention")
    crashes = [m for m in _reports(run, "run_scaled_dot_product_attention") if "raised TypeError" in m]
    assert crashes and all("uses `attend_mask` (the argument `mask`) although it is None" in m for m in crashes), \
        crashes


NANOGPT = '''
import math
import torch
from torch import nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.c_fc, self.c_proj = nn.Linear(d, d_ff), nn.Linear(d_ff, d)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, d, h, d_ff):
        super().__init__()
        self.ln_1, self.attn, self.ln_2, self.mlp = nn.LayerNorm(d), CausalSelfAttention(d, h), nn.LayerNorm(d), MLP(d, d_ff)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, context_length, d_model, num_layers, num_heads, d_ff):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, d_model), wpe=nn.Embedding(context_length, d_model),
            h=nn.ModuleList(Block(d_model, num_heads, d_ff) for _ in range(num_layers)), ln_f=nn.LayerNorm(d_model)))
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * num_layers))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx):
        pos = torch.arange(idx.shape[-1], device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def get_gpt2_lm(vocab_size, context_length, d_model, num_layers, num_heads, d_ff):
    return GPT(vocab_size, context_length, d_model, num_layers, num_heads, d_ff)
'''


def test_nanogpts_init_under_its_own_names_is_judged_by_role(tmp_path):
    """nanoGPT's own model, correctly initialised, under its own parameter names (ln_1, attn.c_proj):
    the init test told it "ln_1.weight: must start at 0" and "attn.c_proj.weight: std 0.01, expected
    N(0, 0.02)", both false. Judged by role (a norm's gain, a sublayer's output projection), it
    passes; the names test alone says the names are not the contract's."""
    run = run_suite("--adapters", _adapters(tmp_path, NANOGPT), "--function", "get_gpt2_lm")
    init = [m for n, m in run.messages.items() if "initialisation" in n]
    assert not init, init
    assert [n for n in run.failed if "parameters_are_the_contract" in n], run.messages
    wrong = NANOGPT.replace("std=0.02 / math.sqrt(2 * num_layers)", "std=0.02")  # the residual scale left out
    run = run_suite("--adapters", _adapters(tmp_path, wrong), "--function", "get_gpt2_lm")
    init = [m for n, m in run.messages.items() if "initialisation" in n]
    assert init and all("attn.c_proj.weight" in m and "expected N(0, 0.01)" in m for m in init), init
    assert not [m for m in init if "must start at" in m], init


@pytest.mark.parametrize("layers, said", [
    ("_nn.ModuleList([self.layers[0]] * len(self.layers))", "are one module object (`[block] * num_layers`?)"),
    ("list(self.layers)", "is a plain Python list of modules: they are not registered"),
])
def test_blocks_missing_from_the_parameters_are_told_why(tmp_path, layers, said):
    """A shared block (`[block] * L`) is listed once; a plain list is not listed at all. The
    first was told it was the second (blind trial: it held an nn.ModuleList already)."""
    import reference.model as model
    original = model.TransformerLM
    target = _adapters(tmp_path, "import torch.nn as _nn\nimport reference.model as _model\n\n\n"
                                 "class _Lm(_model.TransformerLM):\n"
                                 "    def __init__(self, *args, **kwargs):\n"
                                 "        super().__init__(*args, **kwargs)\n"
                                 f"        layers = {layers}\n"
                                 "        del self.layers\n"
                                 "        self.layers = layers\n\n\n"
                                 "_model.TransformerLM = _Lm\n")
    try:
        run = run_suite("--adapters", target, "--function", "get_transformer_lm")
    finally:
        model.TransformerLM = original
    messages = [m for m in run.messages.values() if m]
    assert any(said in m for m in messages), messages[:2]
    wrong = "one module object" if "plain" in said else "plain Python list"
    assert not any(wrong in m for m in messages), messages[:2]


def test_a_folded_check_keeps_the_line_that_explains_it(tmp_path):
    """The console folds a case's gradient failure under its output failure; the gradient's own
    explanation stays (blind trial: ln1 used twice showed numbers only, while the folded gradient
    check said which weight no gradient reaches)."""
    import subprocess
    import sys
    from conftest import PROJECT
    target = _adapters(tmp_path, "import reference.model as _model\n\n\n"
                                 "def _forward(self, x):\n"
                                 "    z = x + self.attn(self.ln1(x))\n"
                                 "    return z + self.ffn(self.ln1(z))\n\n\n"
                                 "_model.TransformerBlock.forward = _forward\n")
    shown = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--adapters", target,
                            "--function", "run_transformer_block", "-q"], cwd=PROJECT, capture_output=True,
                           text=True, timeout=300).stdout
    assert "check of this case fails too" in shown, shown[-3000:]
    assert "no gradient reaches" in shown and "ln2.weight" in shown, shown[-3000:]


def test_flops_off_in_one_part_are_told_by_part_not_as_macs(tmp_path):
    """Attention's score and value FLOPs halved "for the causal mask": the closed form names the two
    parts at 0.5 and says nothing of MACs (blind trial: the total's ratio, 0.964, came with the
    MACs hint, which is for a ratio of 0.5)."""
    target = _adapters(tmp_path, "from reference.adapters import run_transformer_accounting as _counts\n\n\n"
                                 "def run_transformer_accounting(*args, **config):\n"
                                 "    counts = dict(_counts(*args, **config))\n"
                                 "    for part in ('flops.attention_scores', 'flops.attention_values'):\n"
                                 "        counts['flops.total'] -= counts[part] // 2\n"
                                 "        counts[part] -= counts[part] // 2\n"
                                 "    return counts\n")
    run = run_suite("--adapters", target, "-k", "closed_forms")
    [message] = [m for n, m in run.messages.items() if "closed_forms" in n and m]
    assert "flops.attention_scores 0.5, flops.attention_values 0.5" in message, message
    assert "MACs" not in message and "flops.ffn" not in message, message


# ---------------------------------------------------------------- issue 24: the blind trial's misleading and vague reports

def test_two_mistakes_with_the_same_counts_are_both_named_and_told_apart_elsewhere():
    """bfloat16 parameters with float32 moments: one moment and two moments in param_dtype's 2 bytes
    give the same counts. The report said "AdamW's memory with one moment" to code that counts two
    moments in param_dtype; it names both there, and one alone where the counts tell them apart."""
    from reference.variants import VARIANTS
    one, dtype = VARIANTS["adamw_one_moment"].hint, VARIANTS["moments_in_param_dtype"].hint
    run = run_suite("--adapters", "reference.variants:moments_in_param_dtype", "--function", "run_training_accounting")
    causes = [_said(m, "Likely cause:") for n, m in run.messages.items() if n in run.failed and "test_fixture" in n]
    both = [c for c in causes if "cannot tell them apart" in c]
    assert both and all(one in c and dtype in c and "tells them apart" in c for c in both), causes
    assert not [c for c in causes if c.startswith(f"Likely cause: your output matches {one}")], causes
    assert [c for c in causes if c.startswith(f"Likely cause: your output matches {dtype}")], causes
    memory = [m for n, m in run.messages.items() if n in run.failed and "training_memory" in n]
    assert memory and all("bytes a parameter, where two" in m for m in memory), memory  # the numbers, not a cause
    run = run_suite("--adapters", "reference.variants:adamw_one_moment", "--function", "run_training_accounting")
    causes = [_said(m, "Likely cause:") for n, m in run.messages.items() if n in run.failed and "test_fixture" in n]
    assert [c for c in causes if c.startswith(f"Likely cause: your output matches {one}")], causes


def test_causal_t5_buckets_of_the_absolute_distance_are_told_so():
    """A causal T5 bias that buckets |i - j| (the bidirectional distance, with no upper half) was told only
    "keys after the query share bucket 0"; the mirror image is said, and the output's two sequence axes
    are named queries and keys (they were both "seq")."""
    run = run_suite("--adapters", "reference.variants:t5_causal_absolute_distance", "--function", "run_t5_relative_bias")
    said = [m for n, m in run.messages.items() if n in run.failed and "t5_buckets" in n]
    assert said and all("as far before it" in m and "n = max(i - j, 0)" in m for m in said), said
    # each failed case is named by the mistake's fingerprint, or its difference is told along queries and keys
    fixtures = {n: m for n, m in run.messages.items() if n in run.failed and "test_fixture" in n and ":output]" in n}
    assert fixtures
    for name, message in fixtures.items():
        differs = _said(message, "What differs:")
        assert ("causal buckets of |i - j|" in (_said(message, "Likely cause:") or "") and not differs) or \
            (differs and "along seq" not in differs and "along queries" in differs), (name, message)


CRASHES = {  # name: (student file, old, new, function, error, the line it raises on, said)
    # T5's log buckets without their clamp to the last bucket: a bare IndexError from the table lookup
    "t5 without its clamp": ("positions.py", "    large = exact + (n[..., None] >= bounds).sum(-1)",
                             "    large = exact + (torch.log(n.float() / exact) / math.log(max_distance / exact)"
                             " * (half - exact)).long()", "run_t5_relative_bias", "IndexError",
                             "self.weight[buckets]", "past the table's last row"),
    # cross-entropy's log-sum-exp over dim=1, right for [batch, vocab] logits: torch's raw size error on
    # [batch, seq, vocab], in the fixture cases and the property tests alike
    "cross-entropy over dim 1": ("training.py", "    top = x.amax(dim=-1, keepdim=True)  # the row max: "
                                 "exp never sees more than 0\n    lse = (x - top).exp().sum(dim=-1).log()",
                                 "    top = x.amax(dim=1, keepdim=True)\n    lse = (x - top).exp().sum(dim=1).log()",
                                 "run_cross_entropy", "RuntimeError", "return (lse - picked.squeeze(-1))",
                                 "a leading axis instead of the vocabulary"),
    # the row max without keepdim (blind trial 13): [N] met [N, V], told only of a reduction over a leading axis
    "cross-entropy's max without keepdim": ("training.py", "    top = x.amax(dim=-1, keepdim=True)  # the row max: "
                                            "exp never sees more than 0", "    top = x.amax(dim=-1)",
                                            "run_cross_entropy", "RuntimeError", "lse = (x - top).exp()",
                                            "keep the axis, keepdim=True"),
    # F.cross_entropy on [batch, seq, vocab] logits (blind trial 13): torch's bare "Expected target size"
    "F.cross_entropy on 3-D logits": ("training.py", "    x = inputs if inputs.dtype == torch.float64 else inputs.float()",
                                      "    return torch.nn.functional.cross_entropy(inputs.float(), targets)"
                                      ".to(inputs.dtype)", "run_cross_entropy", "RuntimeError",
                                      "torch.nn.functional.cross_entropy(inputs.float(), targets)",
                                      "take the classes on dim 1"),
    # starts from randint(0, len - T - 1): numpy's bare "high <= 0" on a dataset with one valid start,
    # located in numpy's compiled code
    "get_batch without the last start": ("training.py", "    starts = torch.randint(0, len(dataset) - context_length, "
                                         "(batch_size,)).numpy()", "    starts = np.random.randint(0, len(dataset) - "
                                         "context_length - 1, size=batch_size)", "run_sample_batches", "ValueError",
                                         "np.random.randint", "your upper bound leaves it out"),
    # starts from 1 (blind trial 8: told its upper bound left the one valid start out): torch names the low end
    "get_batch without the first start": ("training.py", "    starts = torch.randint(0, len(dataset) - context_length, "
                                          "(batch_size,)).numpy()", "    starts = torch.randint(1, len(dataset) - "
                                          "context_length, (batch_size,)).numpy()", "run_sample_batches", "RuntimeError",
                                          "torch.randint", "your lower bound is 1. The first window is"),
}


@pytest.mark.parametrize("name", CRASHES)
def test_a_crash_in_the_students_code_is_named_at_its_line(submission, name):
    file, old, new, function, error, marked, said = CRASHES[name]
    target, lines = submission(file, old, new)
    run = run_suite("--adapters", target, "--function", function)
    raised = {n: m for n, m in run.messages.items() if n in run.failed and f"raised {error}" in m}
    where = f"student/{file}:{_line(lines, marked)}"
    assert raised and all(where in m and said in m and "Traceback" not in m and ".pyx" not in m
                          for m in raised.values()), raised
    if function == "run_cross_entropy":  # a property test's own call is read as a case's is
        assert [n for n in raised if "test_fixture" not in n], raised


def test_gradients_left_unclipped_are_not_told_they_were_clipped_each_alone():
    """Clipping that never writes its factor into .grad was told "Each gradient was clipped by its own
    norm" where each gradient is below the max alone (both leave them unchanged there): both are said."""
    run = run_suite("--adapters", "reference.variants:clip_not_applied", "-k", "one_factor")
    said = [m for n, m in run.messages.items() if n in run.failed]
    assert len(said) == 2 and all("left unchanged: nothing was clipped" in m for m in said), said
    assert all("Each gradient was clipped by its own norm" not in m for m in said), said
    assert any("own norm would leave these unchanged too" in m for m in said), said
    run = run_suite("--adapters", "reference.variants:clip_per_parameter", "-k", "one_factor")
    assert any("Each gradient was clipped by its own norm" in m for m in run.messages.values()), run.messages


def test_a_broadcast_names_an_axis_only_when_its_size_is_that_axis_alone():
    """A RoPE table of max_seq_len rows met the sequence: with d_k = max_seq_len = 16 the report said
    "the d_k axis (size 16)". A size that two axes share is said as such."""
    from types import SimpleNamespace
    from harness.student_run.diagnose import crash
    case = SimpleNamespace(function="run_multihead_self_attention_with_rope", hidden=False,
                           args={"d_model": 32, "num_heads": 2, "max_seq_len": 16, "theta": 10000.0})
    error = RuntimeError("The size of tensor a (16) must match the size of tensor b (5) at non-singleton dimension 2")
    said = crash(error, case, {"in_features": torch.zeros(2, 5, 32), "token_positions": None})
    assert said and "the d_k axis" not in said and "(d_k or max_seq_len)" in said and "the seq axis (size 5)" in said
    case.args["max_seq_len"] = 64  # 16 is d_k's alone
    assert "the d_k axis (size 16)" in crash(error, case, {"in_features": torch.zeros(2, 5, 32)})


@pytest.fixture(scope="module")
def blind_trial_term(tmp_path_factory):
    """A term of the catalogue's cases of the functions these mistakes are about, built as a rebuild of
    the pinned term would be: their fingerprints and hints are made at build time."""
    import harness.term.build
    from harness.store import Term
    from harness.term.catalogue import CATALOGUE
    root = tmp_path_factory.mktemp("blind")
    functions = ("run_attention_with_bias", "run_adamw_steps", "run_clip_gradients", "run_t5_relative_bias",
                 "run_lr_schedule", "run_cross_entropy")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(harness.term.build, "CATALOGUE", [s for s in CATALOGUE if s.function in functions])
        harness.term.build.build_term(root, "blind", seed=5, grading_seed=6)
    return Term(root, "blind")


@pytest.mark.parametrize("variant", ["attention_bias_after_softmax", "adamw_eps_under_sqrt", "clip_not_applied",
                                     "t5_causal_absolute_distance", "schedule_cosine_without_min",
                                     "adamw_decay_by_alpha_t", "cross_entropy_batch_mean", "clip_sum_of_norms"])
def test_a_rebuilt_term_names_the_blind_trials_mistakes_in_their_cases(blind_trial_term, variant):
    """Reported with numbers only (a bias after the softmax, eps under the square root, a causal T5 of
    |i - j|, a cosine to 0, decay by lr / (1 - beta1^t)) or as "a constant factor" (clipping that clips
    nothing or sums norms, a loss divided by the batch alone): a term built with these variants names
    each in a public case's report, alone, and the reference passes those cases."""
    from harness.runtime import Adapters
    from harness.student_run.checks import check_output
    from reference.variants import VARIANTS
    term, hint = blind_trial_term, VARIANTS[variant].hint
    function = next(c.function for c in term.cases if variant in c.diagnoses)
    cases = [c for c in term.cases if c.function == function and c.check == "output" and not c.hidden]
    failures = []
    for c in cases:
        check_output(Adapters("reference.adapters"), term, c)
        try:
            check_output(Adapters(f"reference.variants:{variant}"), term, c)
        except AssertionError as e:
            failures.append(str(e))
    causes = [_said(f, "Likely cause:") for f in failures]
    assert [c for c in causes if c.startswith(f"Likely cause: your output matches {hint}")], causes


@pytest.mark.parametrize("variant, tests, said", [
    ("clip_sum_of_norms", "one_factor", "the sum of each gradient's own norm"),
    ("cross_entropy_batch_mean", "log_vocab", "summed over each row's 5 positions, then divided by the batch size 3 alone"),
    ("adamw_decay_by_alpha_t", "train_tiny_lm", "Likely cause: they decayed by prod_t (1 - lr_t / (1 - beta1^t)"),
])
def test_a_property_says_what_its_numbers_show(variant, tests, said):
    """Clipping by the sum of the gradients' norms, a loss divided by the batch size alone, and weight decay
    by the bias-corrected step each said only a factor, or how far the unused rows were off; the property
    says where the number came from, where it equals that and nothing else it checks for."""
    run = run_suite("--adapters", f"reference.variants:{variant}", "-k", tests)
    messages = [m for n, m in run.messages.items() if n in run.failed]
    assert messages and all(said in m for m in messages), messages


def test_ids_of_another_integer_dtype_are_told_as_a_dtype_not_a_crash(submission):
    """Blind trial 5: get_batch returning int32 windows raised the right dtype message, then building
    the report crashed in torch.isclose (int32 against int64) with a traceback of the harness's."""
    target, _ = submission("training.py", "    return windows[:, :-1], windows[:, 1:]",
                           "    return windows[:, :-1].to(torch.int32), windows[:, 1:]")
    run = run_suite("--adapters", target, "--function", "run_sample_batches")
    reports = _reports(run, "run_sample_batches")
    assert reports and not any("did not match" in m or "Traceback" in m for m in reports), reports
    assert any("int32" in m for m in reports), reports


def test_the_slope_extension_is_not_blamed_for_reversed_power_of_two_slopes(submission):
    """Blind trial 5: with only the power-of-two slopes reversed, the property that compares 7 heads with
    the code's own 4 and 8 said the (right) extra slopes were wrong. It waits for those to be right."""
    target, _ = submission("positions.py", "    slopes = _power_of_two_slopes(closest) + ",
                           "    slopes = _power_of_two_slopes(closest)[::-1] + ")
    run = run_suite("--adapters", target, "--function", "run_alibi_slopes")
    extension = [n for n in run.adapters if "extend_the_lower_power_of_two" in n]
    assert extension and all(run.outcomes[n] in ("passed", "skipped") for n in extension), \
        [run.messages.get(n) for n in extension]
    assert any(run.outcomes[n] == "skipped" for n in extension)
    assert [n for n in run.failed if "fall_geometrically" in n]  # the reversal itself is told there


BROADCAST_REPLIES = '''
import torch as _torch
from reference import adapters as _reference
_calls = []


def run_softmax(in_features, dim):
    """Red team 11: two outputs that broadcast to [16000, 16000] (a gigabyte in a grading driver), alternately."""
    _calls.append(1)
    return _torch.zeros(16000, 1) if len(_calls) % 2 else _torch.zeros(1, 16000)


def run_grouped_query_attention(*args, **kwargs):
    return _torch.ones(1900, 1, 5, 24)


def run_multihead_self_attention(d_model, num_heads, *weights):
    """Right on its own cases (so the GQA test compares with it), broadcast on the GQA test's input alone."""
    if tuple(weights[-1].shape) == (3, 5, 24):
        return _torch.zeros(1, 1900, 5, 24)
    return _reference.run_multihead_self_attention(d_model, num_heads, *weights)
'''


def test_outputs_compared_with_each_other_are_shape_checked_first(tmp_path):
    """A property test that compares two outputs checks each one's shape first: broadcasting let a softmax
    returning [16000, 1] and [1, 16000] pass as shift invariant, and made a driver hold gigabytes."""
    run = run_suite("--adapters", _adapters(tmp_path, BROADCAST_REPLIES), "--function", "run_softmax",
                    "--function", "run_grouped_query_attention")
    for test in ("test_softmax_is_shift_invariant", "test_gqa_with_every_kv_head_is_multihead_attention"):
        node = next(n for n in run.outcomes if test in n)
        assert run.outcomes[node] == "failed" and "returned shape [" in run.messages[node], run.messages[node]
