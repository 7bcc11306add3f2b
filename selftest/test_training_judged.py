"""The trusted side of the training check: the driver's forward (harness/grading/forward.py) is the
contract's LM, and check_training judges by the forward it is given, never the submission's."""

import pytest
import torch

from harness.grading.drive import Grading
from harness.grading.forward import transformer_lm
from harness.runtime import Adapters
from harness.student_run.checks import check_training
from harness.student_run.compare import Mismatch, mismatched
from harness.store import Term
from conftest import PROJECT, TERM


@pytest.fixture(scope="module")
def term():
    return Term(PROJECT, TERM)


def test_the_drivers_forward_is_the_contracts_lm(term):
    cases = [c for c in term.cases if c.function == "run_transformer_lm" and c.check == "output"]
    assert cases, f"term {term.name} has no run_transformer_lm case"
    for case in cases:
        out = transformer_lm(**term.inputs(case))
        expected = term.expected(case)
        assert not mismatched(out, expected, case.atol, case.rtol, case.ulps).any(), \
            f"{case.id}: the driver's forward is off by {(out - expected).abs().max().item():.3g}"
    assert Grading.trusted_forward is transformer_lm  # what the held_out_forward fixture hands the check in grading


class _Liar:
    """The reference, except that its own forward claims a perfect model of anything trained."""

    def __init__(self):
        self.reference = Adapters("reference.adapters")

    def __getattr__(self, name):
        return getattr(self.reference, name)

    def run_train_tiny_lm(self, **kwargs):
        return {k: v.clone() for k, v in kwargs["weights"].items()}  # nothing trained

    def run_transformer_lm(self, **kwargs):
        return torch.zeros(*kwargs["in_indices"].shape, kwargs["vocab_size"])


def test_the_check_judges_with_the_forward_it_is_given(term):
    cases = [c for c in term.cases if c.function == "run_train_tiny_lm" and not c.hidden]
    if not cases:
        pytest.skip(f"term {term.name} has no run_train_tiny_lm case")
    reference = Adapters("reference.adapters")
    check_training(reference, term, cases[0], forward=transformer_lm)
    with pytest.raises(Mismatch, match="did not learn the corpus's rule"):
        check_training(_Liar(), term, cases[0], forward=transformer_lm)


class _Oversized(_Liar):
    """Returns a head of another shape (the red team's 1.5M-row lm_head made the driver's own forward
    take 4 GB), or weights on the meta device."""

    def __init__(self, how):
        super().__init__()
        self.how = how

    def run_train_tiny_lm(self, **kwargs):
        out = {k: v.clone() for k, v in kwargs["weights"].items()}
        head = out["lm_head.weight"]
        out["lm_head.weight"] = torch.zeros(head.shape[0] * 50, head.shape[1]) if self.how == "shape" else \
            head.to("meta") if self.how == "meta" else torch.full_like(head, float("nan"))
        return out


@pytest.mark.parametrize("how", ["shape", "meta", "nan"])
def test_returned_weights_of_another_shape_device_or_nan_fail_before_any_forward(term, how):
    [case, *_] = [c for c in term.cases if c.function == "run_train_tiny_lm" and not c.hidden]
    calls = []

    def forward(**kwargs):
        calls.append(1)
        return transformer_lm(**kwargs)
    with pytest.raises(Mismatch, match="must have the initial weights' shapes and dtypes, on the CPU and finite"):
        check_training(_Oversized(how), term, case, forward=forward)
    assert not calls  # judged before the driver's forward ran on them
