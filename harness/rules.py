"""Rules the public catalogue keeps so that code ignoring a value cannot pass (instructor only).

Derived from the contract, not from a list: every scalar argument of an adapter takes two
values across its public cases, every optional one is both None and given, and every
function whose reference applies exp, sigmoid or softmax to its inputs sees a spread of at
least SPREAD inside one slice. `term new` refuses a catalogue that breaks them;
selftest/test_catalogue_rules.py holds them too, with the distinct-axis rule.
"""

import inspect
import typing

import torch
from torch.overrides import TorchFunctionMode

from harness.catalogue import CATALOGUE, Spec
from harness.contract import ADAPTERS
from harness.paths import assemble, leaves

SPREAD = 100.0  # exp(x - mean) overflows float32 once x - mean > 88.7


def public(function: str) -> list[Spec]:
    return [s for s in CATALOGUE if s.function == function and not s.hidden and s.check == "output"]


def _optional(param) -> bool:
    return param.default is None or type(None) in typing.get_args(param.annotation)


def unvaried(function: str) -> list[str]:
    """Arguments of `function` (from its contract signature) that no public case varies: a scalar
    with one value only, an optional argument never None or never given, a default never left."""
    cases, problems = public(function), []
    for name, param in ADAPTERS[function].signature.parameters.items():
        values = [s.args.get(name) for s in cases if name in s.args]
        if _optional(param):
            if not (any(v is None for v in values) and any(v is not None for v in values)):
                problems.append(f"{name}: needs a public case with None and one with a value")
        elif param.annotation in (int, float, bool, str):
            if len(set(values)) < 2:
                problems.append(f"{name}: every public case uses {sorted(set(values))}")
        elif param.default is not inspect.Parameter.empty and all(v == param.default for v in values):
            problems.append(f"{name}: never leaves its default {param.default!r}")
    return problems


class _Exponentials(TorchFunctionMode):
    """Records the range of every operand of exp, sigmoid or softmax that depends on the inputs."""
    FUNCS = {torch.exp, torch.Tensor.exp, torch.sigmoid, torch.Tensor.sigmoid, torch.softmax,
             torch.Tensor.softmax, torch.nn.functional.softmax}

    def __init__(self):
        super().__init__()
        self.ranges: list[float] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        x = args[0] if args else None
        if func in self.FUNCS and isinstance(x, torch.Tensor) and x.requires_grad:
            finite = x.detach()[x.detach().isfinite()]
            self.ranges.append((finite.max() - finite.min()).item() if finite.numel() else 0.0)
        return func(*args, **(kwargs or {}))


def exponential_ranges(spec: Spec) -> list[float]:
    """Ranges of the exp/sigmoid/softmax operands of the reference's call on one case. The
    reference subtracts each slice's max before exp, so a range there is a spread inside a slice."""
    import reference.adapters as ref
    generated = spec.generate(0)
    grads = {p: t.requires_grad_(t.is_floating_point()) for p, t in leaves(generated)}
    kwargs = {**{k: v for k, v in spec.args.items() if k not in generated}, **assemble(generated, grads)}
    with _Exponentials() as mode:
        getattr(ref, spec.function)(**kwargs)
    return mode.ranges


def narrow_spread(function: str) -> str | None:
    """Why `function`'s public cases miss the spread rule, or None (also when it exponentiates nothing)."""
    ranges = [r for s in public(function) for r in exponential_ranges(s)]
    if not ranges or max(ranges) >= SPREAD:
        return None
    return (f"the widest exp/sigmoid/softmax operand in a public case spans {max(ranges):.3g}; "
            f"add a case whose slice spans at least {SPREAD:g}")


def catalogue_problems() -> list[str]:
    functions = sorted({s.function for s in CATALOGUE})
    problems = [f"{f}: {p}" for f in functions for p in unvaried(f)]
    return problems + [f"{f}: {p}" for f in functions if (p := narrow_spread(f))]
