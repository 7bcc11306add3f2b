"""The contract's annotations as checks: each adapter call's arguments and return value.

adapters.py declares shapes the way students know from jaxtyping (`Float[Tensor, "... d_model"]`).
This module reads those annotations once per function and checks every call against them: the
dtype kind, the rank and each named axis, bound across the arguments and the return value as
jaxtyping binds them. It does what `jaxtyped(typechecker=beartype)` did here at a fraction of its
cost (a few microseconds a call, against half a millisecond, and no beartype import at start-up),
and says which argument and which axis are wrong.

The annotation forms the contract uses are the ones supported; `Check.of` refuses any other,
so a new form fails `python -m harness contract --check`, never a student's run.
"""

import collections.abc
import types
import typing

import numpy as np
import torch
from jaxtyping import AbstractArray


class Mismatch(Exception):
    """A value that its annotation does not admit; the message says why, in a student's words."""


class Check:
    """A check of one annotation: `check(value, sizes)` raises Mismatch or binds axis sizes."""

    text = "?"

    def check(self, value, sizes: dict) -> None:
        raise NotImplementedError

    @staticmethod
    def of(annotation) -> "Check":
        if isinstance(annotation, type) and issubclass(annotation, AbstractArray):
            return TensorCheck(annotation)
        if annotation is None or annotation is type(None):
            return Exactly(None)
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
        if origin in (types.UnionType, typing.Union):
            return AnyOf([Check.of(a) for a in args])
        if origin is dict:
            return DictCheck(Check.of(args[1]))
        if origin is tuple and Ellipsis not in args:
            return TupleCheck([Check.of(a) for a in args])
        if origin is type:
            return SubclassCheck(args[0])
        if origin is collections.abc.Iterable:
            return InstanceCheck(collections.abc.Iterable, f"an iterable of {args[0].__name__}")
        if origin is np.ndarray:
            return InstanceCheck(np.ndarray, "a numpy array")
        if annotation in (typing.IO, typing.BinaryIO) or origin is typing.IO:
            return FileLike()
        if isinstance(annotation, type):
            return InstanceCheck(annotation, annotation.__name__)
        raise TypeError(f"the contract annotation {annotation!r} has no check in harness/typecheck.py")


class TensorCheck(Check):
    """Float/Int/Bool[Tensor, "dims"]: the dtype kind, then each axis: `...` any number of leading
    axes, a number that exact size, a name the size it is bound to by an earlier argument."""

    def __init__(self, annotation):
        self.kind, self.dtypes = annotation.__name__.split("[")[0], set(annotation.dtypes)
        self.text = f"{self.kind}[Tensor, {annotation.dim_str!r}]"
        self.dims = annotation.dim_str.split()
        for dim in self.dims:
            if dim != "..." and not dim.isidentifier() and not dim.isdigit():
                raise TypeError(f"{self.text}: axis {dim!r} is jaxtyping syntax harness/typecheck.py does not read")
        if self.dims.count("...") > 1:
            raise TypeError(f"{self.text}: more than one '...'")

    def check(self, value, sizes: dict) -> None:
        if not isinstance(value, torch.Tensor):
            raise Mismatch(f"not a tensor but {type(value).__name__}")
        dtype = str(value.dtype).removeprefix("torch.")
        if dtype not in self.dtypes:
            raise Mismatch(f"its dtype {dtype} is not {self.kind.lower()}")
        shape = list(value.shape)
        if "..." in self.dims:
            before = self.dims.index("...")
            after = len(self.dims) - before - 1
            if len(shape) < before + after:
                raise Mismatch(f"it has {len(shape)} axes, not at least {before + after} ({' '.join(self.dims)})")
            pairs = [*zip(self.dims[:before], shape), *zip(self.dims[before + 1:], shape[len(shape) - after:])]
        else:
            if len(shape) != len(self.dims):
                raise Mismatch(f"it has {len(shape)} axes, not {len(self.dims)} ({' '.join(self.dims) or 'a scalar'})")
            pairs = list(zip(self.dims, shape))
        for dim, size in pairs:
            if dim.isdigit():
                if size != int(dim):
                    raise Mismatch(f"an axis of size {size} must be {dim}")
            elif sizes.setdefault(dim, size) != size:
                raise Mismatch(f"its axis {dim} is {size}, but {dim}={sizes[dim]} was bound by the inputs")


class AnyOf(Check):
    def __init__(self, options: list[Check]):
        self.options = options
        self.text = " | ".join(o.text for o in options)

    def check(self, value, sizes: dict) -> None:
        reasons = []
        for option in self.options:
            trial = dict(sizes)
            try:
                option.check(value, trial)
            except Mismatch as e:
                reasons.append(str(e))
                continue
            sizes.update(trial)
            return
        raise Mismatch(next((r for r in reasons if not r.startswith("not ")), reasons[0]))


class Exactly(Check):
    def __init__(self, value):
        self.value, self.text = value, repr(value)

    def check(self, value, sizes: dict) -> None:
        if value is not self.value:
            raise Mismatch(f"not {self.text}")


class InstanceCheck(Check):
    def __init__(self, cls: type, text: str):
        self.cls, self.text = cls, text

    def check(self, value, sizes: dict) -> None:
        # The contract's floats are floats and its counts ints: not an int for a float (as beartype
        # refused it), nor a bool for an int (a count computed by a comparison).
        if not isinstance(value, self.cls) or (self.cls is float and isinstance(value, int)) \
                or (self.cls is int and isinstance(value, bool)):
            raise Mismatch(f"not {self.text} but {type(value).__name__}")


class SubclassCheck(Check):
    def __init__(self, cls: type):
        self.cls, self.text = cls, f"a subclass of {cls.__name__}"

    def check(self, value, sizes: dict) -> None:
        if not (isinstance(value, type) and issubclass(value, self.cls)):
            raise Mismatch(f"not {self.text}")


class FileLike(Check):
    text = "a file object"

    def check(self, value, sizes: dict) -> None:
        if not (hasattr(value, "read") or hasattr(value, "write")):
            raise Mismatch(f"not a path or a file object but {type(value).__name__}")


class DictCheck(Check):
    """Every entry, not one sampled: a count that is a float in one entry of many is caught."""

    def __init__(self, values: Check):
        self.values, self.text = values, f"dict[str, {values.text}]"

    def check(self, value, sizes: dict) -> None:
        if not isinstance(value, dict):
            raise Mismatch(f"not a dict but {type(value).__name__}")
        for key, entry in value.items():
            if not isinstance(key, str):
                raise Mismatch(f"its key {key!r} is not a str")
            try:
                self.values.check(entry, {})
            except Mismatch:
                hint = ": use // for integer division, or int(...)" if self.values.text == "int" and \
                    isinstance(entry, float) else ""
                raise Mismatch(f"{entry!r} ({type(entry).__name__}) for {key!r}, where every value must be "
                               f"{self.values.text}{hint}") from None


class TupleCheck(Check):
    def __init__(self, items: list[Check]):
        self.items, self.text = items, f"tuple[{', '.join(i.text for i in items)}]"

    def check(self, value, sizes: dict) -> None:
        if not isinstance(value, tuple) or len(value) != len(self.items):
            raise Mismatch(f"not a tuple of {len(self.items)}")
        for i, (item, entry) in enumerate(zip(self.items, value)):
            try:
                item.check(entry, sizes)
            except Mismatch as e:
                raise Mismatch(f"its item {i}: {e}") from None


def annotation_problems(adapters) -> list[str]:
    """Each annotation of the contract's functions that has no check here, said as a problem."""
    problems = []
    for adapter in adapters:
        signature = adapter.signature
        for name, annotation in [*((n, p.annotation) for n, p in signature.parameters.items()),
                                 ("return value", signature.return_annotation)]:
            try:
                Check.of(annotation)
            except TypeError as e:
                problems.append(f"{adapter.name}, {name}: {e}")
    return problems


def describe(value) -> str:
    """A value as a report shows it: `f32[2,4]` for a tensor (jaxtyping's short form)."""
    if isinstance(value, torch.Tensor):
        short = {"float": "f", "bfloat": "bf", "int": "i", "uint": "u", "bool": "bool", "complex": "c"}
        dtype = str(value.dtype).removeprefix("torch.")
        kind = dtype.rstrip("0123456789")
        return f"{short.get(kind, kind)}{dtype[len(kind):]}[{','.join(map(str, value.shape))}]"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
