"""Keep torch from importing, on first use, machinery that only its compiler needs.

A bare `import torch` is the yardstick of the student suite's speed, and three lazy imports
inside torch would each cost more than most of the suite's tests together:
- torch._check (torch's own Python ops call it, and on meta tensors every kernel written in
  Python) imports the symbolic-shape machinery and sympy with it (0.5 s), to evaluate
  conditions that are symbolic only under torch.compile;
- meta kernels and torch.optim.Optimizer's methods wrap themselves in torch._disable_dynamo,
  whose first call imports torch._dynamo (1 to 2 s);
- meta kernels' type promotion imports sympy (0.4 s) to ask whether an argument is symbolic.

Nothing here compiles, and every size is a plain int. Each stand-in answers the plain cases
exactly as torch does and hands anything else (a SymInt, a name not covered, compiled student
code) to the real machinery, imported then.
"""

import contextlib
import functools
import importlib
import operator
import sys
import types

import torch

SYMBOLIC = "torch.fx.experimental.symbolic_shapes"
SYMBOLIC_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)


def _real_symbolic_shapes():
    """torch's own module, imported on first need in place of the stand-in."""
    module = sys.modules.get(SYMBOLIC)
    if module is not None and getattr(module, "__getattr__", None) is _symbolic_getattr:
        del sys.modules[SYMBOLIC]
        parent = sys.modules["torch.fx.experimental"]
        if getattr(parent, "symbolic_shapes", None) is module:
            delattr(parent, "symbolic_shapes")
        module = importlib.import_module(SYMBOLIC)
    return module


def _symbolic_getattr(name: str):
    """A name the stand-in does not answer (a module-level __getattr__, PEP 562: torch asks for
    `__path__` at each `from ... import f`, and a plain module answers that fastest)."""
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(_real_symbolic_shapes(), name)


# The functions of torch.fx.experimental.symbolic_shapes that torch's ops call with plain bools and
# ints (those a full run of the suite calls). The guards answer a bool as torch does and hand
# anything else to torch's own function.

def expect_true(a, skip: int = 0):
    return a if type(a) is bool else _real_symbolic_shapes().expect_true(a, skip + 1)


def guard_or_false(a):
    return a if type(a) is bool else _real_symbolic_shapes().guard_or_false(a)


def guard_or_true(a):
    return a if type(a) is bool else _real_symbolic_shapes().guard_or_true(a)


def guard_size_oblivious(expr):
    return expr if type(expr) is bool else _real_symbolic_shapes().guard_size_oblivious(expr)


def statically_known_true(x):
    return x if type(x) is bool else _real_symbolic_shapes().statically_known_true(x)


def guarding_hint_or_throw(a):
    return a if type(a) in (bool, int) else _real_symbolic_shapes().guarding_hint_or_throw(a)


# The rest never need the real module: torch's own code, as written there (a SymInt answers
# through its node, and == or & on one makes a SymBool).

def has_guarding_hint(a):
    return a.node.has_hint() if isinstance(a, SYMBOLIC_TYPES) else True


def is_nested_int(s):
    return isinstance(s, torch.SymInt) and s.node.is_nested_int()


def sym_and(x, *others):
    for y in others:
        x = operator.and_(x, y)
    return x


def sym_or(x, *others):
    for y in others:
        x = operator.or_(x, y)
    return x


def sym_eq(x, y):
    if isinstance(x, (tuple, list)) and isinstance(y, (list, tuple)):
        if len(x) != len(y):
            return False
        return functools.reduce(operator.and_, map(sym_eq, x, y), True)
    if isinstance(x, (int, torch.SymInt)) and isinstance(y, (int, torch.SymInt)):
        return x == y
    raise AssertionError(f"unexpected sym_eq between {type(x)} {type(y)}")


STAND_INS = (expect_true, guard_or_false, guard_or_true, guard_size_oblivious, statically_known_true,
             guarding_hint_or_throw, has_guarding_hint, is_nested_int, sym_and, sym_or, sym_eq)


def concrete_symbolic_shapes() -> None:
    """Stand in for torch's symbolic-shape module until something needs the real one."""
    if SYMBOLIC not in sys.modules:
        stand_in = types.ModuleType(SYMBOLIC, "stands in for torch's module: harness/torch_imports.py")
        stand_in.__dict__.update({f.__name__: f for f in STAND_INS}, __getattr__=_symbolic_getattr)
        sys.modules[SYMBOLIC] = stand_in
        torch.fx.experimental.symbolic_shapes = stand_in


class _NoSympy(types.ModuleType):
    """sympy as torch's type promotion asks for it on meta tensors: is an argument a sympy.Basic
    (a symbolic size)? None is, until sympy itself is imported; anything else imports it."""

    class _Basic:
        pass

    @property
    def Basic(self):
        module = sys.modules.get("sympy")
        return module.Basic if module is not None and module is not self else self._Basic

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if sys.modules.get("sympy") is self:
            del sys.modules["sympy"]
        return getattr(importlib.import_module("sympy"), name)


@contextlib.contextmanager
def meta_kernels_lean():
    """Meta kernels are written in Python: each wraps itself in torch._disable_dynamo, whose first
    call imports torch._dynamo, and their type promotion imports sympy (0.4 s) to ask whether an
    argument is symbolic. For the duration of a call on meta tensors stand in a no-op `disable` and
    a sympy that answers "no", then remove both."""
    stand_ins = {"torch._dynamo": types.ModuleType("torch._dynamo"), "sympy": _NoSympy("sympy")}
    stand_ins["torch._dynamo"].disable = lambda fn, recursive=True, wrapping=True: fn
    added = [name for name in stand_ins if name not in sys.modules]
    for name in added:
        sys.modules[name] = stand_ins[name]
    try:
        yield
    finally:
        for name in added:
            if sys.modules.get(name) is stand_ins[name]:
                del sys.modules[name]


def optimizers_without_dynamo() -> None:
    """torch.optim.Optimizer's add_param_group, state_dict, load_state_dict and zero_grad are wrapped by
    torch._disable_dynamo, whose first call imports torch._dynamo (1.8 s, in every process that builds an
    optimizer) to keep a compiler out of them. Nothing compiles here: hand each wrapper its cached
    answer, the method itself, so building an AdamW costs milliseconds. (torch.optim.AdamW's own step
    still imports it; an Optimizer subclass with its own step, as students write, does not.)"""
    if "torch._dynamo" in sys.modules:
        return
    for method in vars(torch.optim.Optimizer).values():
        wrapped = getattr(method, "__wrapped__", None)
        if wrapped is not None and getattr(getattr(method, "__code__", None), "co_filename", "").endswith("_compile.py"):
            setattr(wrapped, "__dynamo_disable", wrapped)
