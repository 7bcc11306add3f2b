"""Rules the catalogue keeps, so that transposes, broadcasts and ignored values cannot hide;
checked where a maintainer first runs something: `term new`, `contract --check`, and the
selftest (instructor only). Derived from the contract, not from lists:

- Distinct axes get distinct sizes (batch != heads != seq, d_k != d_v, ...). A case whose point
  is an equality declares it: `case(..., equal=("queries=keys",))`; a declared pair the case
  does not have is an error too.
- Every scalar argument of an adapter takes two values across its public cases, and every
  optional one is both None and given.
- Every function whose reference applies exp, sigmoid or softmax to its inputs sees a spread
  of at least SPREAD inside one slice in a public case, not only a large offset (a trajectory of
  optimizer steps excepted: narrow_spread says why).
- A case names only its function's arguments, and all the required ones; sizes the contract
  divides (DIVISIBLE: d_model by num_heads, ...) divide; and its hidden twin can differ from it.
- Every function that takes float tensors (Adapter.float_args) has a public float16 or bfloat16
  case with at least LOW_PRECISION_ELEMENTS elements in one 16-bit tensor: enough that computing
  in 16 bits, which the 1-ulp judgement catches, fails in public.
Every broken rule is one line naming the case and the problem, never a traceback.
(Reduced precision judged within 1 ulp of the float32 result rounded once is the build's:
harness/term/build.py sets it on every float16/bfloat16 output.)
"""

import functools
import inspect
import math
import typing

import torch
from torch.overrides import TorchFunctionMode

from harness.term.catalogue import Gen, same_values, twin
from harness.contract import ADAPTERS, DIVISIBLE
from harness.paths import assemble, leaves


def _dims(annotation) -> list[str]:
    """Named axes of a jaxtyping annotation (or of the tensor member of `X | None`)."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if hasattr(candidate, "dim_str"):
            return candidate.dim_str.split()
    return []


def axis_sizes(spec) -> dict[str, set[int]]:
    """Every named axis of a case and the sizes its inputs give it, plus the head axes
    its scalar arguments imply (heads, kv_heads, d_head)."""
    generated, adapter = spec.generate(0), ADAPTERS[spec.function]
    sizes: dict[str, set[int]] = {}
    for name, param in adapter.signature.parameters.items():
        tensor = generated.get(name)
        dims = _dims(param.annotation)
        if tensor is None or not hasattr(tensor, "shape") or not dims:
            continue
        named = dims[1:] if dims[0] == "..." else dims
        for axis, size in zip(named, tensor.shape[len(tensor.shape) - len(named):]):
            sizes.setdefault(axis, set()).add(size)
        if dims[0] == "..." and tensor.dim() > len(named) and "num_heads" in spec.args:
            sizes.setdefault("batch", set()).add(tensor.shape[0])
    if "num_heads" in spec.args:
        sizes["heads"] = {spec.args["num_heads"]}
        if "d_model" in spec.args:  # ALiBi's slopes have heads and no width
            sizes["d_head"] = {spec.args["d_model"] // spec.args["num_heads"]}
    if spec.args.get("num_kv_heads") is not None:
        sizes["kv_heads"] = {spec.args["num_kv_heads"]}
    return sizes


def _pairs(spec) -> list[tuple[str, str]]:
    """Pairs of distinct axes of `spec` that share a size other than 1, sorted by name."""
    sizes = axis_sizes(spec)
    axes = sorted(sizes)
    return [(a, b) for i, a in enumerate(axes) for b in axes[i + 1:] if sizes[a] & sizes[b] - {1}]


def _declared(spec) -> set[tuple[str, str]]:
    return {tuple(sorted(p.split("="))) for p in spec.equal}


def clashes(spec) -> list[str]:
    """Axis pairs that share a size and are not declared equal, as 'a=[n] vs b=[n]'."""
    sizes, declared = axis_sizes(spec), _declared(spec)
    return [f"{a}={sorted(sizes[a])} vs {b}={sorted(sizes[b])}" for a, b in _pairs(spec) if (a, b) not in declared]


def problems(catalogue) -> list[str]:
    """Every broken rule of the catalogue, one line each naming the case or function (empty when all hold)."""
    out = [p for spec in catalogue for p in case_problems(spec)]
    functions = sorted({s.function for s in catalogue} & set(ADAPTERS))
    out += [f"{f}: {p}" for f in functions for p in _guarded(unvaried, f, catalogue)]
    out += [f"{f}: {p}" for f in functions if (p := _guarded(lambda: [low_precision(f, catalogue)], )[0])]
    return out + [f"{f}: {p}" for f in functions if (p := narrow_spread(f, catalogue))]


def _guarded(rule, *args) -> list[str]:
    """A rule's lines; a rule that fails on what it checks says so in one line (the caller names where)."""
    try:
        return rule(*args)
    except Exception as e:  # noqa: BLE001 - a malformed case is the news, not the rule's traceback
        return [f"the rules cannot check it ({type(e).__name__}: {e}); fix the case"]


def case_problems(spec) -> list[str]:
    """Every rule on one case, each line naming it."""
    where = f"{spec.function}/{spec.name}"
    if "/" in spec.name:  # the store keys a case's tensors "name/role"
        return [f"{where}: a case name may not hold '/'"]
    called = signature_problems(spec)
    if not called:
        called = _guarded(lambda: axis_problems(spec) + twin_problems(spec)
                          + (divisible_problems(spec) if spec.check == "output" else []))  # a must-raise may not
    return [p if p.startswith(where) else f"{where}: {p}" for p in called]


def signature_problems(spec) -> list[str]:
    """A case calls its function with the contract's arguments: none unknown, none required missing."""
    adapter = ADAPTERS.get(spec.function)
    if adapter is None:
        return [f"no contract function {spec.function!r} (harness/contract.py declares the adapters)"]
    params = adapter.signature.parameters
    unknown = sorted(set(spec.args) - set(params))
    missing = [n for n, p in params.items() if p.default is inspect.Parameter.empty and n not in spec.args]
    return ([f"{', '.join(unknown)}: not an argument of {spec.function}"] if unknown else []) + \
        ([f"missing {', '.join(missing)} (a required argument of {spec.function})"] if missing else [])


def divisible_problems(spec) -> list[str]:
    """Sizes the contract divides (DIVISIBLE) divide in the case."""
    args = spec.args
    return [f"{a}={args[a]} is not a multiple of {b}={args[b]}" for a, b in DIVISIBLE
            if isinstance(args.get(a), int) and isinstance(args.get(b), int) and args[b] and args[a] % args[b]]


def twin_problems(spec) -> list[str]:
    """A public case's hidden twin (harness/term/catalogue.twin) must differ from it, or an answer stored
    for the public case answers the twin too. (That it differs from the function's other public cases
    too, twin() sees to, drawing again.)"""
    if spec.hidden:
        return []
    tensors = [g for _, g in leaves(spec.args) if isinstance(g, Gen)]
    if tensors and all(g.kind == "given" and g.params.get("fresh", "shuffle") in ("shuffle", "keep") for g in tensors):
        return ["every tensor of it is given and its twin would only shuffle them: a lookup of the public "
                "outputs answers a shuffle; refresh one (given(..., fresh='noise') for floats, 'offset' for ints)"]
    if not same_values(spec, twin(spec, 0)):
        return []
    return ["its hidden twin would equal it: it has no random tensor, no given values a shuffle changes and "
            "no size of 2 or more; give it one, so the twin gets fresh values"]


def axis_problems(spec) -> list[str]:
    """The distinct-axis rule on one case."""
    if spec.check != "output":
        return []
    where, out = f"{spec.function}/{spec.name}", []
    if clashes(spec):
        out.append(f"{where}: distinct axes share a size ({', '.join(clashes(spec))}); give them different "
                   "sizes, or declare the equality the case is about: case(..., equal=(\"a=b\",))")
    for a, b in sorted(_declared(spec) - set(_pairs(spec))):
        out.append(f"{where}: declares {a}={b}, but its {a} and {b} do not share a size")
    return out


# ---------------------------------------------------------------- every value varies, exponentials spread

SPREAD = 100.0  # exp(x - mean) overflows float32 once x - mean > 88.7


def public(function: str, catalogue: list) -> list:
    return [s for s in catalogue if s.function == function and not s.hidden and s.check == "output"]


def _optional(param) -> bool:
    return param.default is None or type(None) in typing.get_args(param.annotation)


def unvaried(function: str, catalogue: list) -> list[str]:
    """Arguments of `function` (from its contract signature) that no public case varies: a scalar
    with one value only, an optional argument never None or never given, a default never left."""
    if ADAPTERS[function].check == "train":  # its scalars configure the glue's own loop, and no stored
        return []  # answer can be passed by a hard-coded size: it is judged by what it trains
    cases, problems = public(function, catalogue), []
    for name, param in ADAPTERS[function].signature.parameters.items():
        has_default = param.default is not inspect.Parameter.empty  # a case that leaves it out uses it
        values = [s.args.get(name, param.default) for s in cases if name in s.args or has_default]
        if _optional(param):
            if not (any(v is None for v in values) and any(v is not None for v in values)):
                problems.append(f"{name}: needs a public case with None and one with a value")
        elif param.annotation in (int, float, bool, str):
            if len(set(values)) < 2:
                problems.append(f"{name}: every public case uses {sorted(set(values))}")
        elif has_default and all(v is param.default or v == param.default for v in values):
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


def exponential_ranges(spec) -> list[float]:
    """Ranges of the exp/sigmoid/softmax operands of the reference's call on one case. The
    reference subtracts each slice's max before exp, so a range there is a spread inside a slice."""
    generated = spec.generate(0)
    grads = {p: t.requires_grad_(t.is_floating_point()) for p, t in leaves(generated)}
    kwargs = {**{k: v for k, v in spec.args.items() if k not in generated}, **assemble(generated, grads)}
    with _Exponentials() as mode:
        _reference()[spec.function](**kwargs)
    return mode.ranges


@functools.cache
def _reference() -> dict:
    """The reference adapters as the contract renders them now: `contract` checks the rules
    before it writes reference/adapters.py, and that file's module may be imported already."""
    from harness.contract import render_adapters
    namespace = {"__name__": "reference_adapters_as_rendered"}
    exec(compile(render_adapters("reference"), "reference/adapters.py, as rendered", "exec"), namespace)
    return namespace


def narrow_spread(function: str, catalogue: list) -> str | None:
    """Why `function`'s public cases miss the spread rule, or None (also when it exponentiates nothing).
    A trajectory of optimizer steps (gradients=False) is exempt: under a softmax spread by hundreds, steps
    amplify float32 rounding past the tolerance (a correct float32 run_training_steps with attention scores
    spread by hundreds left the float64 trajectory by 1.8 x its tolerance, 576 x without warmup), and the
    functions it steps meet the rule in their own cases."""
    if not ADAPTERS[function].gradients:
        return None
    try:
        ranges = [r for s in public(function, catalogue) for r in exponential_ranges(s)]
    except Exception as e:  # noqa: BLE001 - a reference that cannot run its cases is the news
        return f"the reference cannot run its public cases ({type(e).__name__}: {e})"
    if not ranges or max(ranges) >= SPREAD:
        return None
    return (f"the widest exp/sigmoid/softmax operand in a public case spans {max(ranges):.3g}; "
            f"add a case whose slice spans at least {SPREAD:g}")


# ---------------------------------------------------------------- low precision is judged in public

LOW_PRECISION = ("float16", "bfloat16")
LOW_PRECISION_ELEMENTS = 256  # a [8, 64] LayerNorm with its affine in float16 is off by 2 ulp or more at dozens


def _low_precision_size(spec) -> int:
    """The most elements of one float16/bfloat16 tensor of a case (0: it has none)."""
    return max((math.prod(gen.shape) for _, gen in spec.gens()
                if gen.kind == "normal" and gen.params.get("dtype") in LOW_PRECISION), default=0)


def low_precision(function: str, catalogue: list) -> str | None:
    """Why `function` lacks a public 16-bit case that can catch computing in 16 bits, or None (also
    when it takes no float tensor). The message says what to add: a case with every float tensor
    argument in bfloat16, and its hidden counterpart."""
    adapter = ADAPTERS[function]
    if not adapter.float_args:
        return None
    if any(_low_precision_size(s) >= LOW_PRECISION_ELEMENTS for s in public(function, catalogue)):
        return None
    example = ", ".join(f"{a}={_example_of(a, adapter.signature.parameters[a].annotation)}" for a in adapter.float_args)
    return (f"no public float16/bfloat16 case with {LOW_PRECISION_ELEMENTS} or more elements in one 16-bit tensor, "
            f"so computing in 16 bits (which the 1-ulp judgement catches) could pass in public. Add one with "
            f"every float tensor in 16 bits, e.g. case({function!r}, \"bf16\", \"bfloat16 inputs: float32 inside, "
            f"rounded once\", <its other arguments>, {example}), and a hidden one with other sizes (hidden=True)")


def _example_of(name: str, annotation) -> str:
    if annotation == dict[str, torch.Tensor]:
        return "<its weights helper>(..., dtype=\"bfloat16\")"
    dims = _dims(annotation)
    shape = ", ".join(d for d in dims if d != "...") or "16, 32"
    return f"normal({shape}, dtype=\"bfloat16\")"
