"""run_training_steps, the training loop compared with the reference's trajectory, on a term of its own
(its cases and run_train_tiny_lm's, built here): every correct alternative follows the trajectory on
every case, public, hidden and twin; each mistake in the loop's own pieces that changes it fails a
public case and is named; and weights built from the corpus's rule without training (the red team's A1,
selftest/hostile/constructs_weights.py) pass run_train_tiny_lm but none of these cases."""

import pytest

from conftest import PROJECT, reference_as_student
from harness.contract import ADAPTERS
from harness.runtime import Adapters
from harness.student_run.checks import check_output, check_training
from harness.term.catalogue import CATALOGUE
from reference.variants import VARIANTS

DRILL, RUN = "run_training_steps", "run_train_tiny_lm"
PIECES = ADAPTERS[DRILL].symbols  # the student code its glue calls: the LM, the loss, clipping, AdamW, schedule
LOOP_MISTAKES = [n for n, v in VARIANTS.items() if not v.correct and v.reaches(PIECES)]


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    """The two functions' cases (the drill's fingerprints are its own pieces' mistakes: names_own_pieces_only)."""
    import harness.term.build
    from harness.store import Term
    root = tmp_path_factory.mktemp("steps")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(harness.term.build, "CATALOGUE", [s for s in CATALOGUE if s.function in (DRILL, RUN)])
        harness.term.build.build_term(root, "steps", seed=11, grading_seed=12)
    return Term(root, "steps", hidden=True)


def cases(term, public_only=False):
    found = [c for c in term.cases if c.function == DRILL and not (public_only and c.hidden)]
    assert found and (public_only or any(c.twin_of for c in found)), [c.id for c in term.cases]
    return found


def reaching(correct: bool) -> list[str]:
    """The variants whose pieces a reference call of the drill uses (a spied run on its first case)."""
    from harness.paths import assemble, leaves
    from reference.variants import spying
    import reference.adapters as ref
    spec = next(s for s in CATALOGUE if s.function == DRILL)
    generated = spec.generate(0)
    with spying() as used:
        getattr(ref, DRILL)(**{**{k: v for k, v in spec.args.items() if k not in generated},
                               **assemble(generated, dict(leaves(generated)))})
    return [n for n, v in VARIANTS.items() if v.correct == correct and v.reaches(used)]


@pytest.mark.parametrize("name", ["reference.adapters"] + [f"reference.variants:{n}" for n in reaching(True)])
def test_every_correct_alternative_follows_every_trajectory(term, name):
    """float32 against the float64 trajectory; einsum, fused QKV, float64 inside, torch's SDPA, AdamW and
    clip_grad_norm_, the CS336 handout's AdamW order: all within the tolerance on every case."""
    adapters = Adapters(name)
    for case in cases(term):
        check_output(adapters, term, case)


def _random(name: str, case, term) -> bool:
    """Whether the variant's weights differ from one run to the next (dropout): no fingerprint can match."""
    import torch
    runs = [getattr(Adapters(f"reference.variants:{name}"), DRILL)(**term.inputs(case)) for _ in range(2)]
    return not torch.equal(*runs)


def _chaotic(name: str, case, term) -> bool:
    """Whether the variant's float32 run parts from its own float64 run (the build's fingerprint): a step that
    explodes (AdamW without the square root, at eps 1e-12) amplifies rounding, and no fingerprint can match."""
    import torch
    from torch.utils._pytree import tree_map
    run = getattr(Adapters(f"reference.variants:{name}"), DRILL)
    inputs = term.inputs(case)
    wide = tree_map(lambda t: t.double() if isinstance(t, torch.Tensor) and t.dtype == torch.float32 else t, inputs)
    narrow, exact = run(**inputs), run(**wide)
    return not torch.allclose(narrow.double(), exact.double(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("name", LOOP_MISTAKES)
def test_a_mistake_in_the_loop_that_moves_the_weights_fails_and_is_named(term, name):
    """A mistake in a piece the loop calls either leaves these weights as they are (a shared step count,
    where every parameter has a gradient at every step: its own drills name it), or fails a public case,
    whose report names it unless the mistake is random (dropout), chaotic (its float32 run parts from its
    float64 one) or crashes (its own tests name those)."""
    adapters, failures = Adapters(f"reference.variants:{name}"), []
    public = cases(term, public_only=True)
    for case in public:
        try:
            check_output(adapters, term, case)
        except Exception as e:  # noqa: BLE001 - the suite reports a crash as a failure too
            failures.append(f"{type(e).__name__}: {e}")
    fingerprinted = [c for c in public if name in c.diagnoses]  # the build saw it change these weights
    if not fingerprinted:
        return
    assert failures, f"{name} changes the trajectory on a public case, yet passed every one"
    if _random(name, fingerprinted[0], term) or _chaotic(name, fingerprinted[0], term):
        return
    said = VARIANTS[name].hint or VARIANTS[name].named_by
    assert any(said in f for f in failures), f"{name} failed, but no report named it:\n" + "\n\n".join(failures)


def test_weights_built_from_the_rule_pass_the_run_but_follow_no_trajectory(term, tmp_path, forget_other_repositories):
    """The reference with AdamW replaced by a step that writes weights built from the corpus get_batch saw
    (no training at all): run_train_tiny_lm's checks pass (hence its 2 points only), and no case of
    run_training_steps does, public or hidden (hence its 4)."""
    import sys
    sub = reference_as_student(tmp_path / "constructs")
    with (sub / "adapters.py").open("a") as f:
        f.write("\n\n" + (PROJECT / "selftest" / "hostile" / "constructs_weights.py").read_text())
    sys.path.insert(0, str(sub))
    for name in [m for m in sys.modules if m.split(".")[0] in ("adapters", "student")]:
        del sys.modules[name]
    cheat = Adapters(str(sub / "adapters.py"))
    runs = [c for c in term.cases if c.function == RUN]
    assert runs and any(c.twin_of for c in runs)
    for run in runs:  # the public case and its twin: held-out loss, embedding rows, decay, all as trained
        check_training(cheat, term, run, forward=Adapters("reference.adapters").run_transformer_lm)
    passed = []
    for case in cases(term):
        try:
            check_output(cheat, term, case)
            passed.append(case.id)
        except AssertionError:  # the weights it returns, not a crash
            pass
    assert not passed, f"weights built without training passed {passed}"
    assert ADAPTERS[DRILL].points > ADAPTERS[RUN].points
