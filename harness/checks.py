"""The three checks a fixture case can make: output, gradient, raises.

The student suite and `harness term verify` both run these, so the reference is
held to exactly what students are held to.
"""

import torch

from harness.compare import Mismatch, assert_close, assert_same_counts, describe
from harness.diagnose import heuristic, matching_variant, overflow
from harness.store import Case, Term, at


def header(case: Case, kwargs: dict) -> str:
    if case.hidden:
        return f"{case.function}, a hidden case"
    parts = [f"{k}={describe(v)}" for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
    parts += [f"{k}={{{len(v)} tensors}}" for k, v in kwargs.items() if isinstance(v, dict)]
    parts += [f"{k}={v}" for k, v in kwargs.items() if not isinstance(v, (torch.Tensor, dict))]
    return f"{case.function}, case {case.name!r}: {case.note}\n  inputs: {', '.join(parts)}"


def check_output(adapters, term: Term, case: Case) -> None:
    kwargs = term.inputs(case)
    out = getattr(adapters, case.function)(**kwargs)
    _check_not_mutated(term, case, kwargs)  # first: a mutated input also spoils the output
    expected = term.expected(case)
    where = header(case, kwargs)
    try:
        if isinstance(expected, dict):
            assert_same_counts(out, expected, header=where, hidden=case.hidden)
        else:
            assert_close(out, expected, what="output", atol=case.atol, rtol=case.rtol,
                         header=where, hidden=case.hidden)
    except Mismatch as e:
        raise Mismatch(f"{e}{_diagnosis(term, case, out, expected)}") from None


def _diagnosis(term: Term, case: Case, out, expected) -> str:
    """A closing line naming the likely mistake, or nothing if the evidence is thin."""
    if case.hidden:
        return ""
    name = matching_variant(out, term.fingerprints(case), case.atol, case.rtol)
    if name and name in term.hints:
        return f"\nLikely cause: your output matches {_sentence(term.hints[name])}"
    guess = heuristic(out, expected, case.atol, case.rtol) if isinstance(expected, torch.Tensor) else None
    if guess is None and isinstance(expected, torch.Tensor):
        inputs = [t for t in term.tensors(case).items() if t[0].startswith("in/") and t[1].is_floating_point()]
        largest = max((t.abs().max().item() for _, t in inputs if t.numel()), default=0.0)
        guess = overflow(out, expected, largest)
    return f"\nLikely cause: {_sentence(guess)}" if guess else ""


def _sentence(text: str) -> str:
    return text if text.endswith(".") else text + "."


def check_gradient(adapters, term: Term, case: Case) -> None:
    kwargs = term.inputs(case, requires_grad=True)
    out = getattr(adapters, case.function)(**kwargs)
    stored = term.tensors(case)
    where = header(case, kwargs)
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        names = ", ".join(f"`{n}`" for n in case.grads)
        raise Mismatch(f"{where}\nno gradient reaches {names}: the output does not require grad. "
                       "Is the computation detached (.detach(), .data) or run under torch.no_grad()?")
    grads = torch.autograd.grad(out, [_leaf(kwargs, p) for p in case.grads], stored["cot"], allow_unused=True)
    for path, grad in zip(case.grads, grads):
        if grad is None:
            raise Mismatch(f"{where}\nno gradient reaches `{path}`: it is detached somewhere "
                           f"(.detach(), .data, a copy into a new tensor, or torch.no_grad()).")
        assert_close(grad, stored[f"grad/{path}"], what=f"gradient with respect to `{path}`",
                     atol=case.grad_atol, rtol=case.grad_rtol, header=where, hidden=case.hidden)


def check_raises(adapters, term: Term, case: Case) -> None:
    kwargs = term.inputs(case)
    try:
        out = getattr(adapters, case.function)(**kwargs)
    except NotImplementedError:
        raise
    except Exception:
        return
    raise Mismatch(f"{header(case, kwargs)}\n{case.function} returned {describe(out)} instead of raising. "
                   f"Invalid input must fail loudly: check the range yourself and raise "
                   f"(IndexError or ValueError) with a message that names the bad value."
                   + _diagnosis(term, case, out, None))


def _leaf(kwargs: dict, path: str) -> torch.Tensor:
    return at(kwargs, path)


def _check_not_mutated(term: Term, case: Case, kwargs: dict) -> None:
    for role, before in term.tensors(case).items():
        if not role.startswith("in/"):
            continue
        path = role[3:]
        after = _leaf(kwargs, path)
        after = after.transpose(-1, -2) if case.views.get(path) else after
        if not torch.equal(before, after.detach()):
            raise Mismatch(f"{header(case, kwargs)}\n{case.function} modified its input `{path}` in place. "
                           "Callers reuse their tensors: never write into an argument.")


CHECKS = {"output": check_output, "gradient": check_gradient, "raises": check_raises}


def checks_for(case: Case) -> list[str]:
    if case.check == "raises":
        return ["raises"]
    return ["output", "gradient"] if case.grads else ["output"]
