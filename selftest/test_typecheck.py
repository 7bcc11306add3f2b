"""The contract's annotations as checks (harness/typecheck.py): each form admits what jaxtyping and
beartype admitted, refuses what they refused, and says which argument and axis are wrong."""

import collections.abc
import io
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from harness.contract import ADAPTERS
from harness.runtime import Adapters, ContractViolation
from harness.typecheck import Check, Mismatch, annotation_problems

CASES = [  # annotation, values it admits, values it refuses
    (Float[Tensor, "... d"], [torch.zeros(3), torch.zeros(2, 5, 3, dtype=torch.bfloat16), torch.zeros(3, 2).T],
     [torch.zeros(3, dtype=torch.long), [0.0, 1.0], None, torch.zeros(())]),
    (Int[Tensor, "batch seq"], [torch.zeros(2, 3, dtype=torch.long), torch.zeros(1, 1, dtype=torch.int32)],
     [torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.bool), torch.zeros(2, 3, dtype=torch.uint8), torch.zeros(6, dtype=torch.long)]),
    (Bool[Tensor, "... q k"], [torch.ones(2, 2, dtype=torch.bool)], [torch.ones(2, 2), torch.ones(2, dtype=torch.bool)]),
    (Float[Tensor, ""], [torch.tensor(1.0)], [torch.tensor([1.0])]),
    (Float[Tensor, "n 2 b"], [torch.zeros(4, 2, 1)], [torch.zeros(4, 3, 1)]),
    (Float[Tensor, "..."] | None, [None, torch.zeros(())], [torch.zeros(2, dtype=torch.long)]),
    (int, [3, 0], [3.0, True, "3", np.int64(3)]),
    (float, [3.0, float("inf")], [3, "3.0"]),
    (bool, [True], [1]),
    (int | None, [None, 4], [4.5]),
    (dict[str, int], [{}, {"a": 1}], [{"a": 1.0}, {"a": True}, {1: 1}, [("a", 1)]]),
    (dict[str, Tensor], [{"w": torch.zeros(2)}], [{"w": 2}]),
    (tuple[Tensor, Tensor], [(torch.zeros(1), torch.zeros(2))], [(torch.zeros(1),), [torch.zeros(1), torch.zeros(1)]]),
    (type[torch.optim.Optimizer], [torch.optim.SGD], [torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1),
                                                        int]),
    (collections.abc.Iterable[torch.nn.Parameter], [[], iter([])], [3]),
    (npt.NDArray, [np.zeros(3)], [torch.zeros(3), [1, 2]]),
    (torch.nn.Module, [torch.nn.Linear(1, 1)], [torch.zeros(1)]),
    (None, [None], [0]),
]


@pytest.mark.parametrize("annotation, good, bad", CASES, ids=[repr(c[0])[:40] for c in CASES])
def test_each_annotation_admits_and_refuses_what_it_says(annotation, good, bad):
    check = Check.of(annotation)
    for value in good:
        check.check(value, {})
    for value in bad:
        with pytest.raises(Mismatch):
            check.check(value, {})


def test_a_checkpoint_target_may_be_a_path_or_any_file_object():
    check = Check.of(ADAPTERS["run_save_checkpoint"].signature.parameters["out"].annotation)
    for value in ["ckpt.pt", Path("ckpt.pt"), io.BytesIO()]:
        check.check(value, {})
    with pytest.raises(Mismatch):
        check.check(3, {})


def test_named_axes_bind_across_arguments():
    sizes = {}
    Check.of(Float[Tensor, "d_out d_in"]).check(torch.zeros(4, 3), sizes)
    Check.of(Float[Tensor, "... d_in"]).check(torch.zeros(7, 2, 3), sizes)
    assert sizes == {"d_out": 4, "d_in": 3}
    with pytest.raises(Mismatch, match="its axis d_in is 5, but d_in=3 was bound by the inputs"):
        Check.of(Float[Tensor, "... d_in"]).check(torch.zeros(2, 5), sizes)


def test_an_option_that_fails_binds_nothing():
    sizes = {}
    with pytest.raises(Mismatch):
        Check.of(Float[Tensor, "a b"] | Float[Tensor, "a"]).check(torch.zeros(2, 3, 4), sizes)
    assert sizes == {}


def test_every_contract_annotation_has_a_check_and_an_unknown_form_is_refused():
    assert annotation_problems(ADAPTERS.values()) == []
    with pytest.raises(TypeError, match="'\\*batch'"):
        Check.of(Float[Tensor, "*batch d"])
    with pytest.raises(TypeError, match="no check"):
        Check.of(collections.abc.Mapping[str, int])


def test_a_wrong_argument_is_named_with_its_axis(tmp_path):
    module = tmp_path / "adapters_any.py"
    module.write_text("def run_linear(d_in, d_out, weights, in_features):\n    return in_features @ weights.T\n")
    with pytest.raises(ContractViolation) as e:
        Adapters(str(module)).run_linear(16, 12, torch.randn(12, 16), torch.randn(4, 15))
    text = str(e.value)
    assert "run_linear was called with in_features=f32[4,15]" in text
    assert "its axis d_in is 15, but d_in=16 was bound by the inputs" in text
