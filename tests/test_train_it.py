"""Train it: properties of AdamW and of the end-to-end training run that no stored answer shows.

The trajectories themselves are fixture cases (run_adamw_steps, run_adamw_resumed, run_lr_schedule), and
a training run's cases are judged by check_training (tests/test_fixtures.py). Here: resuming from
state_dict() changes nothing, and a training run is deterministic under its seed. Both compare the
student's own results with each other, as plain tensors, so they are judged the same in grading.
"""

import pytest
import torch

adapter = pytest.mark.adapter


def public(term, function):
    return [c for c in term.cases if c.function == function and not c.hidden]


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal, NaN in the same places included: two runs' NaN are the fixture tests' to report (blind trial 10's
    NaN weights were told to draw from the seeded generator)."""
    return a.shape == b.shape and a.dtype == b.dtype and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)


def first_difference(a: torch.Tensor, b: torch.Tensor) -> str:
    differs = (a != b).any(dim=-1).nonzero()
    if not len(differs):
        return ""
    step = int(differs[0])
    return f"from step {step} on (0-based; largest difference there {(a[step] - b[step]).abs().max().item():.3g})"


@adapter("run_adamw_resumed")
def test_resumed_trajectory_is_the_uninterrupted_one(adapters, term):
    cases = public(term, "run_adamw_resumed")
    if not cases:
        pytest.skip(f"term {term.name} has no public case of run_adamw_resumed")
    for case in cases:
        kwargs = term.inputs(case)
        kwargs["resume_at"] += 1  # not the case's own inputs: both runs are your code's, no stored answer's
        resumed = adapters.run_adamw_resumed(**kwargs)
        resume_at = kwargs.pop("resume_at")
        straight = adapters.run_adamw_steps(**kwargs)
        assert same(resumed, straight), (
            f"case {case.name!r}, resumed one step later than the case itself is: "  # blind trial 13 read two steps
            f"your AdamW resumed from its state_dict() before step {resume_at} "
            f"differs from the uninterrupted run {first_difference(resumed, straight)}. load_state_dict() must "
            "restore everything step() reads: m, v and each parameter's step count, kept in self.state[p] "
            "(an attribute such as self.t is not in the state_dict). State kept in another dtype than its "
            "parameter's (float64 moments for float32 weights) comes back cast: torch's "
            "Optimizer.load_state_dict() casts floating-point state to the parameter's dtype.")


@adapter("run_train_tiny_lm")
def test_training_is_deterministic_under_its_seed(adapters, term):
    cases = public(term, "run_train_tiny_lm")
    if not cases:
        pytest.skip(f"term {term.name} has no public case of run_train_tiny_lm")
    kwargs = {**term.inputs(cases[0]), "steps": 3}  # a short run: the same code (init, batches, steps), a few steps
    first, second = adapters.run_train_tiny_lm(**kwargs), adapters.run_train_tiny_lm(**kwargs)
    differ = sorted(k for k in first if k not in second or not same(first[k], second[k]))
    assert not differ, (f"two training runs with the same seed returned different weights ({', '.join(differ[:4])}): "
                        "draw every random number from the seeded generator the run is given, and nothing from "
                        "the clock or an unseeded source")
