"""Checks that watch a call rather than its result.

- `largest_allocation`: the biggest tensor any op allocates during a call. A
  one-hot [..., vocab_size] tensor shows up here even though its values are exact.
- `allocations`: every allocation as large as the call's largest input (a loss's one-hot
  is the size of its logits, as its honest intermediates are: its op and dtype tell).
- `footprint`: the largest tensor a call allocates and the most numpy and Python memory it
  held at once (tracemalloc): whether a sampler read its windows or the whole corpus.
- `run_on_meta`: runs a call on meta tensors and fails only on a device mismatch
  that a GPU would refuse too: a tensor made on the CPU inside the call and mixed
  with the inputs. CPU index tensors into a device tensor (`table[cpu_ids]`) are
  allowed, as CUDA allows them.
- `tables_indexed`: which parameters a forward looks rows up in (the role of a table).
"""

import re
import sys
import tracemalloc
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from harness.torch_imports import meta_kernels_lean

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


class _AllocationList(_Mode):
    """Every allocation at least as large as the largest tensor argument of the call."""

    def __init__(self, at_least: int):
        super().__init__()
        self.at_least, self.found = at_least, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in _tensors((args, kwargs))}
        self.found += [Allocation(func.overloadpacket.__name__, list(t.shape), t.dtype) for t in _tensors(out)
                       if t.numel() >= self.at_least and t.untyped_storage().data_ptr() not in inputs]
        return out


def allocations(fn, *args, **kwargs):
    """Call fn and return (result, every tensor allocated during the call that is at least as large as
    its largest tensor argument): a one-hot the size of the logits shows here by its op and dtype."""
    if getattr(fn, "remote_probe", None):  # code in a grading worker is watched there
        return fn.remote_probe("allocations", *args, **kwargs)
    at_least = max((t.numel() for t in _tensors((args, kwargs))), default=0)
    with _AllocationList(at_least) as recorder:
        result = fn(*args, **kwargs)
    return result, recorder.found


def largest_allocation(fn, *args, **kwargs):
    """Call fn and return (result, the largest tensor allocated during the call)."""
    if getattr(fn, "remote_probe", None):  # code in a grading worker is watched there
        return fn.remote_probe("allocation", *args, **kwargs)
    with _AllocationRecorder() as recorder:
        result = fn(*args, **kwargs)
    return result, recorder.largest


def footprint(fn, *args, **kwargs):
    """Call fn and return (result, the largest tensor it allocated, the peak bytes of numpy and Python memory
    it held at once): numpy traces its arrays' data with tracemalloc, torch's tensors the recorder sees."""
    if getattr(fn, "remote_probe", None):  # code in a grading worker is watched there
        return fn.remote_probe("footprint", *args, **kwargs)
    started = not tracemalloc.is_tracing()  # a run under PYTHONTRACEMALLOC keeps its own tracing
    if started:
        tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        with _AllocationRecorder() as recorder:
            result = fn(*args, **kwargs)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        if started:
            tracemalloc.stop()
    return result, recorder.largest, peak


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
        self.cpu_made: dict[int, str] = {}  # storage -> how the call made that CPU tensor

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        tensors = _tensors((args, kwargs))
        checked = _device_checked(func, args, kwargs, tensors)
        devices = {t.device.type for t in checked if t.dim() > 0}
        if "meta" in devices and "cpu" in devices:
            cpu = next(t for t in checked if t.device.type == "cpu" and t.dim() > 0)
            origin = self.cpu_made.get(cpu.untyped_storage().data_ptr())
            made = f", {origin} inside the call" if origin else ""
            raise DeviceMismatch(
                f"aten.{func.overloadpacket.__name__} mixed the caller's meta-device tensors with a cpu "
                f"tensor of shape {list(cpu.shape)}{made}. Create tensors on the input's device "
                "(device=x.device), and keep tables as buffers (register_buffer) so .to() moves them.")
        if func in _SCALAR_READS and tensors and tensors[0].device.type == "meta":
            # A range check like int(ids.max()) is correct code that meta tensors
            # cannot answer: pretend it passed and keep watching.
            return False if tensors[0].dtype == torch.bool else 0
        if func is aten._to_copy.default and tensors and tensors[0].device.type == "meta" and \
                str((kwargs or {}).get("device")) == "cpu":
            # .cpu() of the input's data (blind trial 9: RoPE's tables, self.cos.cpu()[...]) has no data to copy
            # here: zeros stand in, so a later mix with the inputs is caught, and a value read from them passes
            source = tensors[0]
            out = torch.zeros(source.shape, dtype=kwargs.get("dtype") or source.dtype)
            self.cpu_made[out.untyped_storage().data_ptr()] = "copied to the CPU by .cpu() or .to('cpu')"
            return out
        key = _meta_key(func, args, kwargs, tensors)
        if key is not None and key in _META_RESULTS:
            return _replay(_META_RESULTS[key], args)
        in_place = key is not None and _kind(func) == "self"
        layout = _described(args[0]) if in_place else None
        out = func(*args, **(kwargs or {}))
        # in place, only where the layout stays (not unsqueeze_, t_ or resize_): then the tensor is the answer
        if key is not None and not (in_place and _described(args[0]) != layout):
            if len(_META_RESULTS) >= META_RESULTS_KEPT:
                _META_RESULTS.clear()
            _META_RESULTS[key] = ("self",) if in_place else _recorded(out)
        # a CPU tensor the call made, and what it computes from one (a table's rows, a product), keep its origin
        origin = f"made by torch.{func.overloadpacket.__name__}(...)" if not tensors else next(
            (self.cpu_made[t.untyped_storage().data_ptr()] for t in tensors
             if t.device.type == "cpu" and t.untyped_storage().data_ptr() in self.cpu_made), None)
        if origin:
            for t in _tensors(out):
                if t.device.type == "cpu":
                    self.cpu_made[t.untyped_storage().data_ptr()] = origin
        return out


# Meta kernels are Python (torch._refs and prims): 0.1 to 1 ms an op, most of a probe's time. What one
# returns depends only on its arguments' shapes, strides, dtypes and plain values, and a watched call repeats
# those (layers, optimizer steps, a twin's probe): an op seen before is answered from this table. Only ops
# on meta tensors alone (a CPU tensor's origin is tracked op by op), returning new tensors or their own
# first argument (in place); never views, whose results share memory with their input.
_META_RESULTS: dict = {}
META_RESULTS_KEPT = 4096  # entries; student code that makes endless distinct shapes cannot grow it further
_PLAIN = (bool, int, float, str, type(None), torch.dtype, torch.device, torch.memory_format, torch.layout)


def _meta_key(func, args, kwargs, tensors):
    """A hashable description of an op on meta tensors, or None where its result must be computed."""
    if not tensors or any(t.device.type != "meta" for t in tensors) or _kind(func) is None:
        return None
    try:
        # the default dtype decides what int_tensor * 2.5 makes (a notebook may change it between checks)
        return func, _described(args), _described(kwargs or {}), torch.get_default_dtype()
    except _Unkeyable:
        return None


class _Unkeyable(Exception):
    pass


def _described(value):
    if isinstance(value, torch.Tensor):
        return ("T", tuple(value.shape), value.stride(), value.storage_offset(), value.dtype,
                value.is_conj(), value.is_neg())
    if isinstance(value, (list, tuple)):
        return type(value), tuple(_described(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _described(v)) for k, v in value.items())
    if type(value) in _PLAIN:
        return type(value), value  # 2 and 2.0 promote differently, and are equal keys without their type
    raise _Unkeyable


_KINDS: dict = {}


def _kind(func) -> str | None:
    """"new": an op that returns new tensors only; "self": one that writes its first argument and returns
    it; None: anything else (views, several written arguments, non-tensor results)."""
    if func not in _KINDS:
        schema, kind = func._schema, None
        returns = schema.returns
        if returns and all(str(r.type) == "Tensor" for r in returns):
            written = [a for a in schema.arguments if a.alias_info is not None]
            if all(r.alias_info is None for r in returns) and not written:
                kind = "new"
            elif len(returns) == 1 and len(written) == 1 and schema.arguments[0] is written[0] \
                    and written[0].alias_info.is_write and returns[0].alias_info is not None \
                    and returns[0].alias_info.before_set == written[0].alias_info.before_set:
                kind = "self"
        _KINDS[func] = kind
    return _KINDS[func]


def _recorded(out):
    """What replays an op's result: its tensors' layouts, or that it returned its first argument."""
    if isinstance(out, torch.Tensor):
        return ("T", tuple(out.shape), out.stride(), out.dtype)
    return ("tuple", tuple(_recorded(t) for t in out))


def _replay(recorded, args):
    kind, *rest = recorded
    if kind == "self":
        return args[0]
    if kind == "tuple":
        return tuple(_replay(r, args) for r in rest[0])
    shape, stride, dtype = rest
    return torch.empty_strided(shape, stride, dtype=dtype, device="meta")


def _device_checked(func, args, kwargs, tensors) -> list:
    """The tensors whose devices must agree: for indexing, CPU indices are exempt."""
    if func.overloadpacket not in _INDEXING or not args or not isinstance(args[0], torch.Tensor):
        return tensors
    indices = [t for t in _tensors(args[1]) if t.device.type != "cpu"] if len(args) > 1 else []
    return [args[0], *indices, *_tensors((args[2:], kwargs))]


def run_on_meta(fn, *args, **kwargs):
    """Call fn under the device watcher. Raises DeviceMismatch on a device mix.

    Other errors that meta tensors cause (data-dependent shapes, ops with no meta
    kernel, an `assert` on a value meta tensors cannot know) are not the student's
    fault: the probe then returns None.
    """
    if getattr(fn, "remote_probe", None):  # code in a grading worker is watched there
        return fn.remote_probe("meta", *args, **kwargs)
    try:
        with meta_kernels_lean(), _MetaWatcher():
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
    """The tensors in an op's arguments (tensors, lists, tuples and dicts of them): called on every op
    a watched call makes, where torch's general tree_flatten cost more than the op."""
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, (list, tuple)):
        return [t for item in tree for t in _tensors(item)]
    if isinstance(tree, dict):
        return [t for item in tree.values() for t in _tensors(item)]
    return []


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


GAIN_NAMES, SHIFT_NAMES = {"weight", "gamma", "scale", "g", "gain"}, {"bias", "beta", "shift", "b"}


def parameter_roles(module, *args, **kwargs) -> dict[str, str]:
    """Each parameter's role, from the module's structure and one eval-mode forward, whatever it is
    named: "table" (a forward looks rows up in it), "gain" and "shift" (a norm's: a module whose own
    parameters are all 1-D), "bias" (a 1-D parameter beside a matrix), "residual" (the matrix of a
    sublayer's output projection: a layer with one matrix whose output its parent returns, where that
    parent is a child of a block in a ModuleList), "matrix" (the matrix of any other such layer).
    A parameter whose role this cannot tell is left out."""
    if getattr(module, "remote_probe", None):  # code in a grading worker is watched there
        return {str(name): str(role) for name, role in module.remote_probe("roles", *args, **kwargs)}
    modules = dict(module.named_modules())
    parent = {m: modules[name.rpartition(".")[0]] for name, m in modules.items() if name}
    blocks = {child for m in modules.values() if isinstance(m, torch.nn.ModuleList) for child in m.children()}
    outputs = {}

    def keep(m, _inputs, out):
        if isinstance(out, torch.Tensor):
            outputs[m] = (out.untyped_storage().data_ptr(), tuple(out.shape))
    hooks = [m.register_forward_hook(keep) for m in modules.values()]
    training = {m: m.training for m in modules.values()}
    module.eval()
    try:
        with torch.no_grad(), _TableRecorder() as recorder:
            module(*args, **kwargs)
    finally:
        for hook in hooks:
            hook.remove()
        for m, mode in training.items():
            m.training = mode
    roles = {}
    owners = {}
    for name, m in modules.items():
        for leaf, p in m.named_parameters(recurse=False):
            owners.setdefault(p, (f"{name}.{leaf}" if name else leaf, m, leaf))
    for p, (name, m, leaf) in owners.items():
        own = dict(m.named_parameters(recurse=False))
        matrices = [q for q in own.values() if q.dim() == 2]
        if p.untyped_storage().data_ptr() in recorder.tables:
            roles[name] = "table"
        elif p.dim() == 1 and not matrices and all(q.dim() == 1 for q in own.values()):
            role = "gain" if leaf in GAIN_NAMES else "shift" if leaf in SHIFT_NAMES else None
            if role:
                roles[name] = role
        elif p.dim() == 1 and len(matrices) == 1:
            roles[name] = "bias"
        elif p.dim() == 2 and len(matrices) == 1 and m in outputs and parent.get(m) in outputs:
            up = parent[m]
            roles[name] = "residual" if parent.get(up) in blocks and outputs[m] == outputs[up] else "matrix"
    named = dict(module.named_parameters())  # the names a listing gives (a tied parameter under its first)
    first = {id(p): n for n, p in named.items()}
    return {first[id(p)]: roles[name] for p, (name, _, _) in owners.items() if name in roles and id(p) in first}


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


def first_nonfinite(fn, *args, **kwargs) -> "Trace | None":
    """Call fn and say where its first NaN/inf appears, and what fed it: where the first NaN
    comes from a slice that is all -inf (a query whose every key is masked), where those -inf
    were put and how their pattern relates to the masks (an inverted mask, a causal mask that
    hides the diagonal, a softmax over the other axis); otherwise the op that made one from
    finite operands, and the line of the caller's own code that ran it. None where nothing did,
    or where the code runs elsewhere (a grading worker)."""
    if getattr(fn, "remote_probe", None):
        return None
    masks = {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor) and v.dtype == torch.bool}
    recorder = _NonFiniteRecorder(masks)
    try:
        with recorder:
            fn(*args, **kwargs)
    except Exception:  # noqa: BLE001 - what ran before the error is still evidence
        pass
    return recorder.found


class Trace(str):
    """What first_nonfinite found, as the report's `Non-finite:` sentence; `cause` is the mistake
    its evidence names (or None), `op` the op that made the first NaN/inf, `largest` the largest
    finite |value| among that op's operands."""
    cause: str | None = None
    op: str = ""
    largest: float = 0.0


_HARNESS_FILES = ("site-packages", "/harness/", "/torch/", "<")
# Ops that pass a bool mask on without deciding its pattern: the mask was made where its input was.
_MASK_PASS = {"bitwise_not", "logical_not", "expand", "view", "_unsafe_view", "reshape", "unsqueeze", "squeeze",
              "transpose", "t", "permute", "clone", "alias", "detach", "_to_copy", "to", "lift_fresh", "contiguous",
              "slice", "select", "expand_as", "repeat", "lift_fresh_copy", "numpy_T", "mT"}
_SOFTMAXES = {"_softmax", "_log_softmax", "softmax", "log_softmax", "_safe_softmax"}


@dataclass
class _Infs:
    """Where a tensor's -inf values came from: the op and code that put them (`where`), the mask
    that op used (`mask`: the op and code that made its pattern, or ("", NAME) for the call's
    argument NAME), and their pattern now (`pattern`, the last tensor on the way that held them:
    a later exp turns them into zeros)."""
    op: str
    where: str
    mask: tuple[str, str] | None
    pattern: torch.Tensor

    def put(self, short: bool = False) -> str:
        """Where the -inf were put, and with which mask; `short`: file:line only."""
        cut = _short if short else (lambda where: where)
        text = f"aten.{self.op}{cut(self.where)}"
        if self.mask is None:
            return text
        op, where = self.mask
        if not op:
            return f"{text}, with the argument `{where}` as its mask"
        return text + (f", with a mask made on that line by aten.{op}" if where == self.where
                       else f", with a mask made by aten.{op}{cut(where)}")


class _NonFiniteRecorder(_Mode):
    def __init__(self, masks: dict | None = None):
        super().__init__()
        self.found: Trace | None = None
        self.masks = masks or {}  # the call's bool arguments, by name
        from torch.utils.weak import WeakIdKeyDictionary
        self.infs = WeakIdKeyDictionary()   # float tensor -> _Infs of the -inf on its way
        self.made = WeakIdKeyDictionary()   # bool tensor -> where its pattern was made

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.found is not None:
            return func(*args, **kwargs)
        # The operands as they were before the op: an in-place op's operand is its result after it (blind
        # trial 10's AdamW made its NaN in foreach ops that write their lists and return nothing), and a
        # complex operand holds NaN too (it was "finite operands" of the view_as_real after it).
        inputs = [t for t in _tensors((args, kwargs)) if _inexact(t) and t.device.type != "meta"]
        scalars = torch.tensor([a for a in tree_flatten((args, kwargs))[0] if isinstance(a, float)], dtype=torch.float64)
        nan_in = scalars.isnan().any() or any(t.isnan().any() for t in inputs)
        inf_in = scalars.isinf().any() or any(t.isinf().any() for t in inputs)
        out = func(*args, **kwargs)
        made = [t for t in _tensors(out) + _written(func, args, kwargs) if t.device.type != "meta"]
        name = func.overloadpacket.__name__
        if not made or "empty" in name:  # uninitialised memory
            return out
        floats = [t for t in made if _inexact(t)]
        if not nan_in and any(t.isnan().any() for t in floats):
            self.found = self._describe(func, args, kwargs, inputs, next(t for t in floats if t.isnan().any()),
                                        "NaN", inf_in)
        elif not nan_in and not inf_in and any(t.isinf().any() for t in floats):
            self.found = self._describe(func, args, kwargs, inputs, next(t for t in floats if t.isinf().any()),
                                        "inf", False)
        else:
            self._follow(func, args, kwargs, made, [t for t in floats if t.is_floating_point()])
        return out

    # ---------------------------------------------------------------- following -inf and masks

    def _follow(self, func, args, kwargs, made, floats) -> None:
        name = func.overloadpacket.__name__
        in_place = func._schema.is_mutable
        bools = [t for t in _tensors((args, kwargs)) if t.dtype == torch.bool]
        for t in made:
            if t.dtype == torch.bool:
                source = next((self.made[b] for b in bools if b in self.made), None) if name in _MASK_PASS else None
                if source is None and name in _MASK_PASS:
                    source = next((("", k) for b in bools for k, m in self.masks.items() if b is m), None)
                self.made[t] = source or (name, _where(_student_frames()))
        inputs = [t for t in _tensors((args, kwargs)) if t.is_floating_point() and t.device.type != "meta"]
        for t in floats:
            pattern = t.detach().isneginf()
            before = self.infs.get(t) if in_place else None
            sources = [(self.infs.get(i), i.detach().isneginf()) for i in inputs if i is not t and i.isneginf().any()]
            if not pattern.any():  # no -inf now (exp made zeros of them): keep the way they came
                kept = before or next((self.infs[i] for i in inputs if i in self.infs), None)
                if kept is not None:
                    self.infs[t] = kept
                continue
            if before is not None and _same_pattern(before.pattern, pattern):
                continue
            inherited = next((s for s, p in sources if s is not None and _same_pattern(p, pattern)), None)
            if inherited is not None:
                self.infs[t] = _Infs(inherited.op, inherited.where, inherited.mask, pattern)
                continue
            mask = next((b for b in bools), None)
            used = None if mask is None else self.made.get(mask) or next(
                (("", k) for k, m in self.masks.items() if mask is m), None)
            self.infs[t] = _Infs(name, _where(_student_frames()), used, pattern)

    # ---------------------------------------------------------------- the first NaN/inf

    def _describe(self, func, args, kwargs, inputs, made, kind: str, inf_in: bool) -> Trace:
        name = func.overloadpacket.__name__
        where = _where(_student_frames(), caller=True)
        finite = [t[t.isfinite()] for t in inputs]
        largest = max((t.detach().abs().max().item() for t in finite if t.numel()), default=0.0)
        operands = "operands that hold inf (e.g. -inf in masked scores)" if inf_in else "finite operands"
        text = (f"the first {kind} is made by aten.{name}{where}, from {operands} "
                f"whose largest finite |value| is {largest:.4g}{_operands_at(func, args, made, kind)}")
        cause = None
        if kind == "NaN":
            masked = self._masked_slice(func, args, inputs, made)
            if masked is not None:
                text, cause = self._masked_story(masked, name, where)
        trace = Trace(text)
        trace.cause, trace.op, trace.largest = cause, name, largest
        return trace

    def _masked_slice(self, func, args, inputs, made):
        """(the -inf record, the reduction axis, the first NaN's index) where the first NaN lies in
        a slice, along the axis this op reduces over, whose every value was -inf; else None."""
        name = func.overloadpacket.__name__
        infs = next((self.infs[t] for t in inputs if t in self.infs and t.isneginf().any()), None) or \
            next((self.infs[t] for t in inputs if t in self.infs), None)
        if infs is None or infs.pattern.shape != made.shape or made.dim() == 0:
            return None
        axis = None
        if name in _SOFTMAXES and len(args) > 1 and isinstance(args[1], int):
            axis = args[1] % made.dim()
        else:
            reduced = {d for t in inputs if t.dim() == made.dim() for d in range(made.dim())
                       if t.shape[d] == 1 and made.shape[d] > 1}
            axis = reduced.pop() if len(reduced) == 1 else None
        if axis is None:
            return None
        first = tuple(made.isnan().nonzero()[0].tolist())
        full = infs.pattern.all(dim=axis)
        rest = first[:axis] + first[axis + 1:]
        if not bool(full[rest]):
            return None
        return infs, axis, first

    def _masked_story(self, masked, op: str, where: str) -> tuple[str, str | None]:
        infs, axis, first = masked
        pattern = infs.pattern
        rank = pattern.dim()
        at = "[" + ", ".join(":" if d == axis else str(i) for d, i in enumerate(first)) + "]"
        put = infs.put(short=True)
        text = (f"the first NaN comes from a slice with no finite value: every value at {at} of a "
                f"{list(pattern.shape)} tensor is -inf where aten.{op}{where} reduces along axis "
                f"{axis - rank}, and a softmax over it is 0/0 (-inf - -inf). The -inf were put there by {infs.put()}")
        for mask_name, mask in self.masks.items():
            for transposed, m in ((False, mask), (True, mask.mT if mask.dim() >= 2 else None)):
                if m is None or not _broadcasts(m, pattern):
                    continue
                layout = " (transposed)" if transposed else ""
                if torch.equal(pattern, m.expand(pattern.shape)):
                    return text, (f"an inverted mask: the -inf are exactly where `{mask_name}` is True{layout}, "
                                  f"put by {put}. True means the query MAY attend to that key: put -inf where "
                                  f"`{mask_name}` is False (~{mask_name})")
                if torch.equal(pattern, (~m).expand(pattern.shape)):
                    keys = rank - 2 if transposed else rank - 1
                    if axis == keys:
                        return text, None
                    return text, (f"a softmax over the query axis: the -inf follow `{mask_name}` as they should, "
                                  f"but the softmax{_short(where)} runs along axis {axis - rank}, the queries, where a key "
                                  f"that no query may see has no finite value. Each query's weights over the keys "
                                  f"sum to 1: take the softmax over the keys, axis {keys - rank} here")
        if rank >= 2 and axis == rank - 1 and pattern.shape[-1] == pattern.shape[-2] > 1:
            n = pattern.shape[-1]
            ones = torch.ones(n, n, dtype=torch.bool, device=pattern.device)
            if torch.equal(pattern, ones.tril().expand(pattern.shape)):
                return text, (f"the causal mask is inverted: -inf hides keys 0..i from query i and keeps the "
                              f"later ones, so the last query sees no key (put by {put}). Query i may see "
                              "keys 0..i: hide only the keys j > i")
            if torch.equal(pattern, ones.triu().expand(pattern.shape)):
                return text, (f"a causal mask that also hides the diagonal: query 0 sees no key, not even itself "
                              f"(put by {put}). Query i must see key i: hide only the keys j > i "
                              "(triu(diagonal=1))")
        return text, None


_SIGNS = {"add": "+", "sub": "-", "mul": "x", "div": "/", "rsub": "-"}


def _inexact(t: torch.Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


def _written(func, args, kwargs) -> list[torch.Tensor]:
    """The tensors an in-place op writes (`add_`'s self, `_foreach_addcdiv_`'s list)."""
    if not func._schema.is_mutable:
        return []
    return [t for i, a in enumerate(func._schema.arguments) if a.alias_info is not None and a.alias_info.is_write
            for t in _tensors(args[i] if i < len(args) else kwargs.get(a.name))]


def _operands_at(func, args, made: torch.Tensor, kind: str) -> str:
    """For a binary arithmetic op, its two operands at the first NaN/inf: `; at [i, j]: -inf - -inf`
    (not for an in-place one: its first operand is the result by now)."""
    sign = _SIGNS.get(func.overloadpacket.__name__)
    if sign is None or func._schema.is_mutable or len(args) < 2 or not all(isinstance(a, (torch.Tensor, float, int)) for a in args[:2]):
        return ""
    bad = made.isnan() if kind == "NaN" else made.isinf()
    index = tuple(bad.nonzero()[0].tolist()) if made.dim() else ()
    values = []
    for a in args[:2]:
        if isinstance(a, torch.Tensor):
            try:
                a = a.detach().expand(made.shape)[index].item()
            except RuntimeError:
                return ""
        values.append(a)
    if func.overloadpacket.__name__ == "rsub":
        values.reverse()
    shown = [f"{v:g}" if isinstance(v, float) else str(v) for v in values]
    return f"; at [{', '.join(map(str, index))}] it computed {shown[0]} {sign} {shown[1]}"


def _short(where: str) -> str:
    """` in `f` (file:line: `code`)[, called from ...]` -> ` at file:line[, called from file:line]`."""
    found = re.findall(r"\(([^\s():]+:\d+): `", where)
    return (" at " + ", called from ".join(found)) if found else where


def _broadcasts(small: torch.Tensor, shape_of: torch.Tensor) -> bool:
    try:
        return torch.broadcast_shapes(small.shape, shape_of.shape) == shape_of.shape
    except RuntimeError:
        return False


def _same_pattern(before: torch.Tensor, after: torch.Tensor) -> bool:
    """Whether `after` holds the -inf of `before`, moved but not changed: broadcast, or the same
    number of them in a tensor of the same size (a transpose, a reshape)."""
    if _broadcasts(before, after):
        return torch.equal(before.expand(after.shape), after)
    return before.numel() == after.numel() and int(before.sum()) == int(after.sum())


def _student_frames() -> list:
    """The frames of the code under test, outermost first: not the harness, torch, libraries or
    the adapters' glue (students do not edit adapters.py)."""
    from harness.contract import ADAPTERS
    frames, frame = [], sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if not any(p in code.co_filename for p in _HARNESS_FILES) and code.co_name not in ADAPTERS \
                and code.co_name != "with_weights":
            frames.append(frame)
        frame = frame.f_back
    return frames[::-1]


def _where(frames: list, caller: bool = False) -> str:
    """` in `f` (file:line: `code`)` for the innermost frame, and with `caller` its caller's line
    where that is the student's code too (a softmax whose axis the caller chose)."""
    import linecache
    if not frames:
        return ""

    def at(frame) -> str:
        name = "/".join(frame.f_code.co_filename.rsplit("/", 2)[-2:])
        line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()[:80]
        return f"`{frame.f_code.co_name}` ({name}:{frame.f_lineno}: `{line}`)"
    text = f" in {at(frames[-1])}"
    if caller and len(frames) > 1:
        text += f", called from {at(frames[-2])}"
    return text
