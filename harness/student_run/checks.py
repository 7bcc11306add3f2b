"""The three checks a fixture case can make: output, gradient, raises.

The student suite and `harness term verify` both run these, so the reference is
held to exactly what students are held to.
"""

import pytest
import torch

from harness.contract import ADAPTERS
from harness.runtime import AdaptersError, ContractViolation
from harness.student_run.compare import Mismatch, assert_close, assert_same_counts, describe, mismatched
from harness.student_run.diagnose import diagnose, output_axes
from harness.student_run.probes import first_nonfinite
from harness.paths import at
from harness.store import Case, Term, swap_view


def header(case: Case, kwargs: dict) -> str:
    if case.hidden:
        return f"{case.function}, a hidden case"
    parts = [f"{k}={describe(v)}" for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
    parts += [f"{k}={{{len(v)} tensors}}" for k, v in kwargs.items() if isinstance(v, dict)]
    parts += [f"{k}={v}" for k, v in kwargs.items() if not isinstance(v, (torch.Tensor, dict))]
    return f"{case.function}, case {case.name!r}: {case.note}\n  inputs: {', '.join(parts)}"


def check_output(adapters, term: Term, case: Case) -> None:
    kwargs = term.inputs(case)
    try:
        out = getattr(adapters, case.function)(**kwargs)
    except ContractViolation as e:  # a wrong shape: say the one this case expects, with its axes
        raise ContractViolation(f"{e}{_expected_shape(term, case)}") from None
    _check_not_mutated(term, case, kwargs)  # first: a mutated input also spoils the output
    expected = term.expected(case)
    where = header(case, kwargs)
    try:
        if isinstance(expected, dict):
            assert_same_counts(out, expected, header=where, hidden=case.hidden)
        else:
            assert_close(out, expected, what="output", atol=case.atol, rtol=case.rtol,
                         header=where, hidden=case.hidden, ulps=case.ulps)
    except Mismatch as e:
        trace = None
        if isinstance(out, torch.Tensor) and isinstance(expected, torch.Tensor) and out.shape == expected.shape \
                and (~torch.isfinite(out.detach()) & torch.isfinite(expected)).any():
            trace = first_nonfinite(getattr(adapters, case.function), **term.inputs(case))
        shape = _expected_shape(term, case, out) if getattr(out, "shape", None) != getattr(expected, "shape", None) else ""
        raise Mismatch(f"{e}{shape}{diagnose(term, case, actual=out, expected=expected, nonfinite=trace)}") from None


def _expected_shape(term: Term, case: Case, out=None) -> str:
    if case.hidden or case.check != "output":
        return ""
    expected = term.expected(case)
    if not isinstance(expected, torch.Tensor):
        return ""
    axes = output_axes(case.function, expected.dim())
    named = ", ".join(f"{a}={n}" if not a.startswith("axis") else str(n) for a, n in zip(axes, expected.shape))
    said = f"\n  this case expects the output shape {list(expected.shape)}: [{named}]"
    shape = getattr(out, "shape", None)
    if shape is not None and tuple(shape[:-1]) == tuple(expected.shape[:-1]) and len(shape) == expected.dim() \
            and 2 * shape[-1] == expected.shape[-1]:  # sines alone, or one value a pair
        said += (f"; yours is half as wide on its last axis ({shape[-1]} of {expected.shape[-1]}): one value for "
                 "each pair where the pair's two are expected?")
    return said


def check_gradient(adapters, term: Term, case: Case) -> None:
    kwargs = term.inputs(case, requires_grad=True)
    try:
        out = getattr(adapters, case.function)(**kwargs)
    except ContractViolation as e:  # as the output check says it: with the shape this case expects
        raise ContractViolation(f"{e}{_expected_shape(term, case)}") from None
    stored = term.tensors(case)
    where = header(case, kwargs)
    if isinstance(out, torch.Tensor) and out.shape != stored["out"].shape:
        # autograd would refuse the cotangent with its own "Mismatch in shape": say it as the output check does
        try:
            assert_close(out, stored["out"], what="output", atol=case.atol, rtol=case.rtol, header=where,
                         hidden=case.hidden, ulps=case.ulps)
        except Mismatch as e:
            raise Mismatch(f"{e}{_expected_shape(term, case)}") from None
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        names = ", ".join(f"`{n}`" for n in case.grads)
        raise Mismatch(f"{where}\nno gradient reaches {names}: the output does not require grad. "
                       "Is the computation detached (.detach(), .data) or run under torch.no_grad()?")
    grads = torch.autograd.grad(out, [_leaf(kwargs, p) for p in case.grads], stored["cot"], allow_unused=True)
    unused = [path for path, grad in zip(case.grads, grads) if grad is None]
    if unused:  # before any gradient that differs: an unused input is why the others differ
        names = ", ".join(f"`{path}`" for path in unused)
        them = "it" if len(unused) == 1 else "them"
        raise Mismatch(f"{where}\nno gradient reaches {names}: the output does not depend on {them}. "
                       f"{'It is' if len(unused) == 1 else 'They are'} never used, or detached somewhere "
                       "(.detach(), .data, a copy into a new tensor, or torch.no_grad()).")
    for path, grad in zip(case.grads, grads):
        try:
            assert_close(grad, stored[f"grad/{path}"], what=f"gradient with respect to `{path}`",
                         atol=gradient_atol(case, stored[f"grad/{path}"]), rtol=case.grad_rtol, header=where,
                         hidden=case.hidden)
        except Mismatch as e:
            if case.hidden or not _close(out, stored["out"], case):
                raise
            off = _beyond_rounding(out, stored["out"], case)
            if off is not None:  # within tolerance, but not the reference's computation: not "the output is right"
                raise Mismatch(f"{e}\nWhat differs: the output differs too, within its tolerance: by up to {off:.2g} of "
                               f"its largest value, far more than float32 rounding (about 1e-7). The forward "
                               "computation differs, so its gradient does too.") from None
            expected = stored[f"grad/{path}"].double()
            gross = (grad.detach().double() - expected).abs().max() > 0.1 * expected.abs().max()
            why = (": the backward pass does not follow the forward computation (look for .detach(), .data, "
                   "torch.no_grad() or a hand-written backward on the path to it)" if gross else "")
            why = _zero_rows(grad.detach(), expected, case, path) or why
            raise Mismatch(f"{e}\nWhat differs: the output is right, only the gradient with respect to `{path}` "
                           f"is wrong{why}.") from None


def _zero_rows(grad: torch.Tensor, expected: torch.Tensor, case: Case, path: str) -> str | None:
    """Where the wrong gradient is exactly 0 in whole rows and right in every other: what stops it there
    (a blind trial's padding_idx=0 was told to look for .detach())."""
    if grad.dim() < 2 or grad.shape != expected.shape:
        return None
    wrong = mismatched(grad, expected.to(grad.dtype), gradient_atol(case, expected), case.grad_rtol)
    rows = wrong.flatten(1).any(1).nonzero().flatten().tolist()
    if not rows or len(rows) == grad.shape[0] or grad[rows].count_nonzero() or not expected[rows].count_nonzero():
        return None
    shown = ", ".join(map(str, rows[:8])) + (", ..." if len(rows) > 8 else "")
    return (f": it is 0 in row{'s' if len(rows) > 1 else ''} {shown} of `{path}` and right in every other row, so "
            "something stops the gradient for exactly those rows: `padding_idx` in F.embedding or nn.Embedding, "
            "a mask, or an in-place write into those rows")


def gradient_atol(case: Case, expected: torch.Tensor) -> float:
    """A gradient element is a sum of products; in float32 its rounding error follows the size of
    the largest terms, which the tensor's largest element measures, not the element itself (a
    correct exp(x - logsumexp(x)) softmax under scores that span hundreds is off by 2e-5 of the
    largest gradient). So atol is at least rtol x the largest |expected| of that tensor."""
    return max(case.grad_atol, case.grad_rtol * expected.abs().max().item()) if expected.numel() else case.grad_atol


ROUNDING = 1e-5  # an output this close to the reference, relative to its largest value, is its computation:
# the reference's own float32 result is off by 2e-7 of the float64 one, and correct alternatives (einsum,
# fused QKV, float64 inside) stay near it; a tanh GELU in the GPT-2 LM is off by 7e-5, within the tolerance


def _beyond_rounding(actual: torch.Tensor, expected: torch.Tensor, case: Case) -> float | None:
    """How far a float32/float64 output within tolerance is from the expected one, relative to the
    expected tensor's largest |value|, where that is more than rounding explains; else None
    (float16/bfloat16 outputs are already judged within 1 ulp)."""
    if case.ulps or not expected.is_floating_point() or expected.dtype not in (torch.float32, torch.float64):
        return None
    scale = expected.double().abs().max().item()
    off = (actual.detach().double() - expected.double()).abs().max().item() / max(scale, 1e-30)
    return off if off > ROUNDING else None


def _close(actual: torch.Tensor, expected: torch.Tensor, case: Case) -> bool:
    actual = actual.detach()
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return False
    return not mismatched(actual, expected, case.atol, case.rtol, case.ulps).any()


def check_raises(adapters, term: Term, case: Case) -> None:
    kwargs = term.inputs(case)
    try:
        out = getattr(adapters, case.function)(**kwargs)
    except (NotImplementedError, AdaptersError, TimeoutError, ContractViolation):
        raise  # not a raise: unwritten code, a crash, a hang, or a return value outside the contract
    except Exception as e:
        wanted, raised = ADAPTERS[case.function].raises, exception_names(e)
        if not wanted or wanted in raised:
            return
        # blind trials 9 and 10: F.gelu's own RuntimeError for an unknown approximate passed as "a raise"
        raise Mismatch(f"{header(case, kwargs)}\n{case.function} raised {raised[0]} where its docstring "
                       f"asks for {wanted}: check the value yourself first (a library call may raise another "
                       f"exception for it) and raise {wanted} with a message that names it.") from None
    raise Mismatch(f"{header(case, kwargs)}\n{case.function} returned {describe(out)} instead of raising. "
                   f"Invalid input must fail loudly: check the range yourself and raise "
                   f"(IndexError or ValueError) with a message that names the bad value."
                   + diagnose(term, case, actual=out))


def exception_names(e: BaseException) -> list[str]:
    """The class names of an exception and its bases; in grading, as the worker named them (`kinds`)."""
    kinds = getattr(e, "kinds", None)
    return list(kinds) if kinds else [c.__name__ for c in type(e).__mro__]


def _leaf(kwargs: dict, path: str) -> torch.Tensor:
    return at(kwargs, path)


def _check_not_mutated(term: Term, case: Case, kwargs: dict) -> None:
    for role, before in term.tensors(case).items():
        if not role.startswith("in/"):
            continue
        path = role[3:]
        after = _leaf(kwargs, path)
        after = swap_view(after, case.views.get(path))
        if not torch.equal(before, after.detach()):
            raise Mismatch(f"{header(case, kwargs)}\n{case.function} modified its input `{path}` in place. "
                           "Callers reuse their tensors: never write into an argument.")


PROPERTY_DRAWS = {"offset": 0}  # moved in grading by the plugin: a value only the grading seed gives


def shaped(out, shape, function: str):
    """`out`, once it is a tensor of `shape`. A property test compares an output with another output,
    where broadcasting lets a wrong shape pass (softmax returning [16000, 1] and [1, 16000] was "shift
    invariant") and, in grading, makes two tiny replies a tensor of gigabytes in the driver (red team 11)."""
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(shape):
        got = f"shape {list(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise AssertionError(f"{function} returned {got} where its inputs make the output {list(shape)}: see the "
                             f"shapes in the docstring of {function}")
    return out


def generator(seed: int) -> torch.Generator:
    """The generator a property test draws its inputs from. In a student's run its seed is the one the
    test names; in grading it is moved by a value derived from the term's grading seed, so a table of
    answers to the public tests' own draws, laid over wrong code, answers nothing there."""
    return torch.Generator().manual_seed(seed + PROPERTY_DRAWS["offset"])


def oracle_passes(adapters, term: Term, oracle: str, judged: str) -> None:
    """For a property test that judges `judged` against another of the student's functions,
    `oracle` (GQA with every kv head against the student's MHA): check the oracle first, on its
    own public output cases. Where it fails one, the comparison says nothing about `judged`: the
    test is not run ("not run: fix ORACLE first"), not failed, and `judged` is not blamed. It earns
    nothing until it runs and passes; the progress table shows `judged` as blocked by `oracle`."""
    for case in [c for c in term.cases if c.function == oracle and c.check == "output" and not c.hidden]:
        try:
            check_output(adapters, term, case)
        except (NotImplementedError, TimeoutError, AdaptersError):
            raise  # unwritten, hanging or unloadable code is reported as such
        except Exception as e:  # noqa: BLE001 - any failure of the oracle is its own tests' to explain
            lines = [line.strip() for line in str(e).splitlines() if line.strip()]
            said = next((line for line in lines if line.startswith(("output:", "output is"))), lines[0] if lines else "")
            pytest.skip(f"not run: fix {oracle} first: this test compares {judged} with your {oracle}, which fails "
                        f"its own case {case.name!r} ({type(e).__name__}: {said[:200]}); its own tests say what is "
                        f"wrong, then this test judges {judged}")


TRAINED_BELOW = 0.1  # the held-out loss a training run must reach, as a share of the initial weights' loss;
# the reference reaches under 0.01 of it (0.003 from about 3), a model that learned nothing 1


def _described(t) -> str:
    if not isinstance(t, torch.Tensor):
        return type(t).__name__
    finite = "" if t.device.type == "meta" or bool(torch.isfinite(t).all()) else " with NaN or inf"
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)} on {t.device.type}{finite}"


def check_training(adapters, term: Term, case: Case, forward=None) -> None:
    """A training run's case ("train": run_train_tiny_lm), judged by the weights it returns, never by a
    loss it reports: the held-out loss under `forward` (in grading the driver's own forward; in a
    student's run their run_transformer_lm, which its own fixtures check), the embedding rows, and
    the same weights again under the same seed."""
    kwargs = term.inputs(case)
    out = getattr(adapters, case.function)(**kwargs)
    _check_not_mutated(term, case, kwargs)
    where = header(case, kwargs)
    initial = kwargs["weights"]
    if set(out) != set(initial):
        raise Mismatch(f"{where}\nthe returned state_dict's keys differ from the initial weights': missing "
                       f"{sorted(set(initial) - set(out))}, unexpected {sorted(set(out) - set(initial))}")
    wrong = [f"{k}: {_described(v)}, not {_described(initial[k])}" for k, v in out.items()
             if not isinstance(v, torch.Tensor) or v.shape != initial[k].shape or v.dtype != initial[k].dtype
             or v.device.type != "cpu" or not bool(torch.isfinite(v).all())]
    if wrong:  # before any forward: a weight of another shape (a 1.5M-row head) would be the grader's cost
        raise Mismatch(f"{where}\nthe returned weights must have the initial weights' shapes and dtypes, on the "
                       f"CPU and finite: {'; '.join(wrong[:3])}")
    forward = forward or adapters.run_transformer_lm
    windows = rule_windows(kwargs["corpus"], kwargs["context_length"])
    before, after = (held_out_loss(forward, kwargs, w, windows) for w in (initial, out))
    if not after < TRAINED_BELOW * before:
        raise Mismatch(f"{where}\nthe trained weights did not learn the corpus's rule: held-out cross-entropy "
                       f"{after:.4g} after training, {before:.4g} before (it must fall below {TRAINED_BELOW:g} x that; "
                       "the reference's falls below 0.01 x). Check AdamW, the schedule and that every weight trains.")
    key = "token_embeddings.weight"
    e0, e1 = initial[key].double(), out[key].detach().double()
    used = torch.zeros(e0.shape[0], dtype=torch.bool)
    used[kwargs["corpus"].unique()] = True
    decay = decay_factor(kwargs)
    scale = 1e-3 * e0[used].norm(dim=-1)  # a row that trained moves far more (about 0.1 of its norm)
    moved = ((e1[used] - e0[used] * decay).norm(dim=-1) > scale) & ((e1[used] - e0[used]).norm(dim=-1) > scale)
    if not moved.all():
        frozen = "; they did not change at all: are the embeddings frozen (requires_grad=False, left out of the " \
                 "optimizer, or detached)?" if torch.equal(e1[used], e0[used]) else "."
        raise Mismatch(f"{where}\nembedding rows of tokens that occur did not move: {int((~moved).sum())} of "
                       f"{int(used.sum())} rows stayed as they were, or changed by weight decay alone{frozen} An LLM's embeddings "
                       "train jointly with every other weight from the first step: there is no separate embedding phase.")
    expected = e0[~used] * decay
    off = (e1[~used] - expected).abs().max().item() if (~used).any() else 0.0
    if off > 1e-5 * max(expected.abs().max().item(), 1.0):
        said = " (unchanged: weight decay was not applied to them)" if torch.equal(e1[~used], e0[~used]) else ""
        big = e0[~used].abs() > 1e-2
        observed = (e1[~used][big] / e0[~used][big]).median().item() if big.any() else float("nan")
        constant = (1 - kwargs["max_learning_rate"] * kwargs["weight_decay"]) ** kwargs["steps"]
        corrected = decay_factor(kwargs, beta1=0.9)  # the contract's default beta1
        if abs(observed - constant) < 1e-4 * constant:
            said += (f".\nLikely cause: they decayed by (1 - max_learning_rate * weight_decay)^steps = {constant:.6g}: "
                     "your AdamW uses the lr it was built with, not group['lr'], which the schedule sets before each step")
        elif abs(observed - corrected) < 1e-4 * corrected:
            said += (f".\nLikely cause: they decayed by prod_t (1 - lr_t / (1 - beta1^t) * weight_decay) = "
                     f"{corrected:.6g}: your weight decay is scaled by the bias-corrected step lr_t / (1 - beta1^t); "
                     "AdamW decays by the learning rate alone, p -= lr_t * weight_decay * p")
        raise Mismatch(f"{where}\nembedding rows of tokens that never occur changed by more than weight decay: "
                       f"off by up to {off:.3g} from initial x prod_t (1 - lr_t * weight_decay) = {decay:.6g}{said}. "
                       "They get no gradient, so AdamW's step leaves them alone (m = v = 0) and only decays them.")


def rule_windows(corpus: torch.Tensor, context_length: int) -> torch.Tensor:
    """[tokens that occur, context_length + 1]: from each such token, the rule's continuation (the next
    token is a fixed function of the previous one, read off the corpus)."""
    following = dict(zip(corpus[:-1].tolist(), corpus[1:].tolist()))
    rows = []
    for token in sorted(following):
        row = [token]
        while len(row) <= context_length:
            row.append(following[row[-1]])
        rows.append(row)
    return torch.tensor(rows)


def held_out_loss(forward, kwargs: dict, weights: dict, windows: torch.Tensor) -> float:
    sizes = {k: kwargs[k] for k in ("vocab_size", "context_length", "d_model", "num_layers", "num_heads", "d_ff",
                                    "rope_theta")}
    with torch.no_grad():
        logits = forward(**sizes, weights={k: v.detach() for k, v in weights.items()}, in_indices=windows[:, :-1])
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1).double(), windows[:, 1:].flatten()).item()


def decay_factor(kwargs: dict, beta1: float | None = None) -> float:
    """prod_t (1 - lr_t * weight_decay) over the run's steps, lr_t from the cosine schedule (cycle = steps);
    with `beta1`, each lr_t divided by 1 - beta1^(t+1) (the decay of a mistake, not AdamW's)."""
    import math
    top, low, warmup, steps = (kwargs[k] for k in ("max_learning_rate", "min_learning_rate", "warmup_iters", "steps"))
    factor = 1.0
    for t in range(steps):
        lr = t / warmup * top if t < warmup else \
            low + 0.5 * (1 + math.cos(math.pi * (t - warmup) / (steps - warmup))) * (top - low)
        factor *= 1 - lr / (1 - beta1 ** (t + 1) if beta1 else 1) * kwargs["weight_decay"]
    return factor


CHECKS = {"output": check_output, "gradient": check_gradient, "raises": check_raises, "train": check_training}


