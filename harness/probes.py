"""Checks that watch a call rather than its result.

- `largest_allocation`: the biggest tensor any op allocates during a call. A
  one-hot [..., vocab_size] tensor shows up here even though its values are exact.
- `run_on_meta`: runs a call on meta tensors and fails only on a device mismatch
  that a GPU would refuse too: a tensor made on the CPU inside the call and mixed
  with the inputs. CPU index tensors into a device tensor (`table[cpu_ids]`) are
  allowed, as CUDA allows them.
- `tables_indexed`: which parameters a forward looks rows up in (the role of a table).
"""

import contextlib
import sys
import types
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

aten = torch.ops.aten


@dataclass
class Allocation:
    op: str
    shape: list
    dtype: torch.dtype

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


class _Mode(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Nothing here is compiled; skipping would import torch._dynamo (about 1 s).
        return False


class _AllocationRecorder(_Mode):
    def __init__(self):
        super().__init__()
        self.largest: Allocation | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in _tensors((args, kwargs))}
        for t in _tensors(out):
            # Views and in-place results reuse an input's memory: not an allocation.
            if t.untyped_storage().data_ptr() in inputs:
                continue
            if self.largest is None or t.numel() > self.largest.numel:
                self.largest = Allocation(func.overloadpacket.__name__, list(t.shape), t.dtype)
        return out


def largest_allocation(fn, *args, **kwargs):
    """Call fn and return (result, the largest tensor allocated during the call)."""
    if getattr(fn, "remote_probe", None):  # code in a grading worker is watched there
        return fn.remote_probe("allocation", *args, **kwargs)
    with _AllocationRecorder() as recorder:
        result = fn(*args, **kwargs)
    return result, recorder.largest


class DeviceMismatch(AssertionError):
    """A tensor on the CPU met the meta-device inputs."""


_SCALAR_READS = {aten._local_scalar_dense.default, aten.is_nonzero.default, aten.item.default}
# Advanced indexing accepts CPU indices into a tensor on any device ("indices should be
# either on cpu or on the same device as the indexed tensor"): only `self` must match.
_INDEXING = {aten.index, aten.index_put, aten.index_put_, aten._index_put_impl_, aten._unsafe_index,
             aten._unsafe_index_put}


class _MetaWatcher(_Mode):
    def __init__(self):
        super().__init__()
        self.cpu_made: dict[int, str] = {}  # storage -> op that created a CPU tensor

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        tensors = _tensors((args, kwargs))
        checked = _device_checked(func, args, kwargs, tensors)
        devices = {t.device.type for t in checked if t.dim() > 0}
        if "meta" in devices and "cpu" in devices:
            cpu = next(t for t in checked if t.device.type == "cpu" and t.dim() > 0)
            origin = self.cpu_made.get(cpu.untyped_storage().data_ptr())
            made = f", made by torch.{origin}(...) inside the call" if origin else ""
            raise DeviceMismatch(
                f"aten.{func.overloadpacket.__name__} mixed the caller's meta-device tensors with a cpu "
                f"tensor of shape {list(cpu.shape)}{made}. Create tensors on the input's device "
                "(device=x.device), and keep tables as buffers (register_buffer) so .to() moves them.")
        if func in _SCALAR_READS and tensors and tensors[0].device.type == "meta":
            # A range check like int(ids.max()) is correct code that meta tensors
            # cannot answer: pretend it passed and keep watching.
            return False if tensors[0].dtype == torch.bool else 0
        out = func(*args, **(kwargs or {}))
        if not tensors:
            for t in _tensors(out):
                if t.device.type == "cpu":
                    self.cpu_made[t.untyped_storage().data_ptr()] = func.overloadpacket.__name__
        return out


def _device_checked(func, args, kwargs, tensors) -> list:
    """The tensors whose devices must agree: for indexing, CPU indices are exempt."""
    if func.overloadpacket not in _INDEXING or not args or not isinstance(args[0], torch.Tensor):
        return tensors
    indices = [t for t in _tensors(args[1]) if t.device.type != "cpu"] if len(args) > 1 else []
    return [args[0], *indices, *_tensors((args[2:], kwargs))]


@contextlib.contextmanager
def _without_dynamo_import():
    """Meta kernels written in Python wrap themselves in torch._disable_dynamo, whose
    first call imports torch._dynamo (about 1 s). Nothing is compiled here, so stand
    in a no-op `disable` for the duration of the probe, then remove the stand-in."""
    if "torch._dynamo" in sys.modules:
        yield
        return
    stand_in = types.ModuleType("torch._dynamo")
    stand_in.disable = lambda fn, recursive=True, wrapping=True: fn
    sys.modules["torch._dynamo"] = stand_in
    try:
        yield
    finally:
        if sys.modules.get("torch._dynamo") is stand_in:
            del sys.modules["torch._dynamo"]


def run_on_meta(fn, *args, **kwargs):
    """Call fn under the device watcher. Raises DeviceMismatch on a device mix.

    Other errors that meta tensors cause (data-dependent shapes, ops with no meta
    kernel, an `assert` on a value meta tensors cannot know) are not the student's
    fault: the probe then returns None.
    """
    if getattr(fn, "remote_probe", None):  # code in a grading worker is watched there
        return fn.remote_probe("meta", *args, **kwargs)
    try:
        with _without_dynamo_import(), _MetaWatcher():
            return fn(*args, **kwargs)
    except DeviceMismatch:
        raise
    except NotImplementedError as e:
        if "Meta" in str(e) or "meta" in str(e):
            return None
        raise
    except (RuntimeError, ValueError, IndexError, TypeError, AssertionError) as e:
        if "meta" in str(e).lower() and "device" in str(e).lower() and "cpu" in str(e).lower():
            raise DeviceMismatch(f"device mismatch on meta-device inputs: {e}") from None
        return None


def _tensors(tree) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


class AllocationTooLarge(AssertionError):
    """A call allocated far more memory than its result needs."""


def assert_no_large_allocation(name: str, fn, args: tuple, *, factor: int = 8,
                               vocab_size: int | None = None, ids_shape=None):
    """Call fn(*args); fail on a one-hot: an allocation shaped [*ids_shape, vocab_size],
    or anything more than `factor` x (the table + the output).

    The table itself ([vocab_size, d_model], e.g. a module's own weight built inside
    the call) is never counted as waste: only what is larger than both is.
    """
    result, largest = largest_allocation(fn, *args)
    table = vocab_size * result.shape[-1] if vocab_size and result.dim() else 0
    limit = factor * (max(result.numel(), 1) + table)
    one_hot = (vocab_size is not None and ids_shape is not None and largest is not None
               and largest.shape == [*ids_shape, vocab_size])
    if largest is None or (largest.numel <= limit and not one_hot):
        return result
    dtype = str(largest.dtype).removeprefix("torch.")
    text = (f"{name} allocated a {dtype}{largest.shape} tensor (aten.{largest.op}, {largest.numel:,} elements), "
            f"{largest.numel // max(result.numel(), 1):,}x its output {list(result.shape)}")
    text += f" and {largest.numel // table:,}x the table [{vocab_size}, {result.shape[-1]}]." if table else "."
    if one_hot:
        text += (f"\nThat is a one-hot [..., vocab_size] tensor. At GPT-2 scale ([8, 1024] ids, V=50257) "
                 f"it is {8 * 1024 * 50257 * 4 / 1e9:.1f} GB in fp32, to fetch 8,192 rows. "
                 "Index the table instead: weights[token_ids].")
    else:
        text += " A lookup needs nothing larger than its table and its output: index the table, weights[ids]."
    raise AllocationTooLarge(text)


def tables_indexed(module, *args, **kwargs) -> set[str]:
    """Names of the module's parameters that a forward looks rows up in (indexing, embedding, index_select)."""
    if getattr(module, "remote_probe", None):  # code in a grading worker is watched there
        return set(module.remote_probe("tables", *args, **kwargs))
    with _TableRecorder() as recorder:
        module(*args, **kwargs)
    return {name for name, p in module.named_parameters() if p.untyped_storage().data_ptr() in recorder.tables}


class _TableRecorder(_Mode):
    LOOKUPS = {aten.index, aten.embedding, aten.index_select, aten._unsafe_index}

    def __init__(self):
        super().__init__()
        self.tables: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in self.LOOKUPS:
            table = args[0]  # aten.embedding(weight, indices), aten.index(self, indices), ...
            self.tables.add(table.untyped_storage().data_ptr())
        return func(*args, **(kwargs or {}))


def first_nonfinite(fn, *args, **kwargs) -> str | None:
    """Call fn and say where its first NaN/inf appears: the op that made one from finite
    operands, and the line of the caller's own code that ran it. None where nothing did,
    or where the code runs elsewhere (a grading worker)."""
    if getattr(fn, "remote_probe", None):
        return None
    recorder = _NonFiniteRecorder()
    try:
        with recorder:
            fn(*args, **kwargs)
    except Exception:  # noqa: BLE001 - what ran before the error is still evidence
        pass
    return recorder.found


_HARNESS_FILES = ("site-packages", "/harness/", "/torch/", "<")


class _NonFiniteRecorder(_Mode):
    def __init__(self):
        super().__init__()
        self.found: str | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        made = [t for t in _tensors(out) if t.is_floating_point() and t.device.type != "meta"]
        if self.found is not None or not made or "empty" in func.overloadpacket.__name__:  # uninitialised memory
            return out
        inputs = [t for t in _tensors((args, kwargs)) if t.is_floating_point() and t.device.type != "meta"]
        scalars = torch.tensor([a for a in tree_flatten((args, kwargs))[0] if isinstance(a, float)], dtype=torch.float64)
        nan_in = scalars.isnan().any() or any(t.isnan().any() for t in inputs)
        inf_in = scalars.isinf().any() or any(t.isinf().any() for t in inputs)
        if not nan_in and any(t.isnan().any() for t in made):
            self.found = self._describe(func, inputs, "NaN", inf_in)
        elif not nan_in and not inf_in and any(t.isinf().any() for t in made):
            self.found = self._describe(func, inputs, "inf", False)
        return out

    @staticmethod
    def _describe(func, inputs, kind: str, inf_in: bool) -> str:
        import traceback
        frames = [f for f in traceback.extract_stack() if not any(p in f.filename for p in _HARNESS_FILES)]
        where = ""
        if frames:
            f = frames[-1]
            name = "/".join(f.filename.rsplit("/", 2)[-2:])
            where = f" in `{f.name}` ({name}:{f.lineno}: `{(f.line or '').strip()[:80]}`)"
        finite = [t[t.isfinite()] for t in inputs]
        largest = max((t.detach().abs().max().item() for t in finite if t.numel()), default=0.0)
        operands = "operands that hold inf (e.g. -inf in masked scores)" if inf_in else "finite operands"
        return (f"the first {kind} is made by aten.{func.overloadpacket.__name__}{where}, from {operands} "
                f"whose largest finite |value| is {largest:.4g}")

