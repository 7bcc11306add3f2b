"""The grader <-> worker message format: a JSON header and a safetensors blob, never pickle.

A message is a length-prefixed JSON document whose tensors are replaced by
references into one safetensors blob sent after it. Decoding therefore builds only
plain JSON values and plain `torch.Tensor`s: nothing the sender controls can run
code in the receiver, and a Tensor subclass cannot cross. Layouts survive the trip
(a transposed or permuted view arrives as the same view of a contiguous tensor), and
meta tensors travel as shape and dtype alone.
"""

import ctypes
import json
import math
import socket
import struct
import time

import torch
from safetensors.torch import load, save

from harness.paths import leaves

MAX_HEADER = 4 << 20     # bytes of JSON: structure and small values only (tensors travel in the blob)
MAX_VALUES = 100_000     # JSON values in one message: each costs its reader Python time (red team 13: 150,000
MAX_TEXTS = 4_096        # keys); and strings, dict keys too, which the grader reads for posed diagnoses (50 us each)
MAX_MESSAGE = 512 << 20  # bytes in all; a larger message is refused, not allocated
# bytes of the blob's own JSON header (its tensor list): thousands of tensors, where a state dict holds
# hundreds; a million empty tensors in 56 MB took safetensors a minute and 2 GB to parse (red team 5)
MAX_BLOB_HEADER = 1 << 20
_HEAD = struct.Struct("!QQ")


class WireError(Exception):
    """A message that is malformed, too large, or cut short (the peer died)."""


class TooLarge(WireError):
    """A message over the receiver's limit, refused from its length alone: nothing of it is read."""


def send(sock: socket.socket, value) -> None:
    tensors: dict[str, torch.Tensor] = {}
    header = json.dumps(_encode(value, tensors)).encode()
    blob = _blob(tensors) if tensors else b""
    sock.sendall(_HEAD.pack(len(header), len(blob)) + header + blob)


_CODES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
          torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
          torch.bool: "BOOL"}


def _blob(tensors: dict[str, torch.Tensor]) -> bytes:
    """The safetensors file of these contiguous CPU tensors, written here: safetensors' own `save` took 5x as
    long (its numpy round trip per tensor), on ~1,300 messages a submission each way. The receiver
    still parses it with safetensors' `load`. Other dtypes go through `save`."""
    if any(t.dtype not in _CODES for t in tensors.values()):
        return save(_unshared(tensors))
    header, chunks, offset = {}, [], 0
    for key, t in tensors.items():
        size = t.numel() * t.element_size()
        chunks.append(ctypes.string_at(t.data_ptr(), size) if size else b"")  # contiguous: its bytes in order
        header[key] = {"dtype": _CODES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # safetensors aligns the data to 8 bytes
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def _unshared(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors' `save` refuses shared memory: a tied weight under two state_dict names."""
    seen, unshared = set(), {}
    for key, t in tensors.items():
        ptr = t.untyped_storage().data_ptr()
        unshared[key] = t.clone() if ptr in seen else t
        seen.add(ptr)
    return unshared


def recv(sock: socket.socket, deadline: float | None = None, limit: int = MAX_MESSAGE):
    """One message of at most `limit` bytes. With a `deadline` (time.monotonic()), the whole message must
    have arrived by then, however it trickles in (TimeoutError otherwise). Whatever is malformed in it
    raises WireError, never another exception."""
    head_len, blob_len = _HEAD.unpack(_read(sock, _HEAD.size, deadline))
    if head_len > MAX_HEADER:
        raise TooLarge(f"a message header of {head_len:,} bytes exceeds the {MAX_HEADER:,}-byte limit")
    if head_len + blob_len > limit:
        raise TooLarge(f"a message of {head_len + blob_len:,} bytes exceeds the {limit:,}-byte limit")
    header = _read(sock, head_len, deadline)
    blob = _read(sock, blob_len, deadline) if blob_len else b""
    if blob and int.from_bytes(blob[:8], "little") > MAX_BLOB_HEADER:
        raise WireError(f"a tensor list of {int.from_bytes(blob[:8], 'little'):,} bytes exceeds the "
                        f"{MAX_BLOB_HEADER:,}-byte limit")
    try:
        return _decode(json.loads(header, parse_constant=_no_constant, parse_float=_finite),
                       load(blob) if blob else {}, _Budget())
    except WireError:
        raise
    except Exception as e:  # noqa: BLE001 - bad JSON, a bad blob, a reference to nothing, ...
        raise WireError(f"a malformed message ({type(e).__name__})") from None


def tensors(args: dict):
    """(leaf path, tensor) for every tensor of a call's keyword arguments."""
    return ((path, value) for path, value in leaves(args) if isinstance(value, torch.Tensor))


def _read(sock: socket.socket, n: int, deadline: float | None = None) -> bytes:
    chunks, left = [], n
    while left:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("the message did not arrive in time")
            sock.settimeout(remaining)
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise WireError("the connection closed mid-message")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _encode(value, tensors: dict):
    if isinstance(value, torch.Tensor):
        if type(value) is not torch.Tensor and not isinstance(value, torch.nn.Parameter):
            raise TypeError(f"a {type(value).__name__} (a Tensor subclass) cannot be sent; return a plain tensor")
        t = value.detach()
        if t.device.type == "meta":
            return {"$meta": list(t.shape), "dtype": _dtype_name(t.dtype)}
        if t.is_complex():
            raise TypeError(f"complex tensors ({t.dtype}) cannot be sent; return a real tensor")
        perm = _layout(t)
        key = f"t{len(tensors)}"
        sent = t.permute(perm).contiguous() if perm else t.contiguous()
        tensors[key] = sent if sent.device.type == "cpu" else sent.cpu()
        return {"$t": key, "perm": perm, "grad": value.requires_grad}
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError("dict keys must be strings")
        return {"$dict": {k: _encode(v, tensors) for k, v in value.items()}}
    if isinstance(value, (list, tuple)):
        return [_encode(v, tensors) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": repr(value)}  # JSON has no NaN or infinity: a reply holding one is refused
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"a {type(value).__name__} cannot be sent")


def _no_constant(name: str):
    raise WireError(f"{name} is not JSON (a non-finite float travels as $float)")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999
        raise WireError(f"{text[:20]} overflows a float")
    return value


class _Budget:
    """What one message may hold: MAX_VALUES values, MAX_TEXTS of them strings."""

    def __init__(self):
        self.values, self.texts = MAX_VALUES, MAX_TEXTS

    def spend(self, value) -> None:
        self.values -= 1
        self.texts -= isinstance(value, str)
        if self.values < 0 or self.texts < 0:
            raise TooLarge(f"a message of more than {MAX_VALUES:,} values or {MAX_TEXTS:,} strings")


def _decode(value, tensors: dict, budget: _Budget):
    budget.spend(value)
    if isinstance(value, list):
        return [_decode(v, tensors, budget) for v in value]
    if not isinstance(value, dict):
        return value
    if "$t" in value:
        t = tensors[value["$t"]]
        if value.get("perm"):
            t = t.permute(_inverse(value["perm"], t.dim()))
        return t.requires_grad_() if value.get("grad") and t.is_floating_point() else t
    if "$meta" in value:
        return torch.empty([int(s) for s in value["$meta"]], dtype=_dtype(value["dtype"]), device="meta")
    if "$dict" in value:
        decoded = {}
        for k, v in value["$dict"].items():
            budget.spend(k)  # a key is a string too
            decoded[str(k)] = _decode(v, tensors, budget)
        return decoded
    if "$float" in value and value["$float"] in ("nan", "inf", "-inf"):
        return float(value["$float"])
    raise WireError(f"unknown value {sorted(value)[:3]}")


def _layout(t: torch.Tensor) -> list[int] | None:
    """The permutation that makes a permuted view contiguous, or None if it already is."""
    if t.is_contiguous() or t.dim() < 2:
        return None
    perm = sorted(range(t.dim()), key=lambda i: -t.stride(i))
    return perm if t.permute(perm).is_contiguous() else None


def _inverse(perm: list, dim: int) -> list[int]:
    if sorted(perm) != list(range(dim)):
        raise WireError(f"bad permutation {perm} for a {dim}-D tensor")
    inverse = [0] * dim
    for i, p in enumerate(perm):
        inverse[p] = i
    return inverse


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype):
        raise WireError(f"unknown dtype {name!r}")
    return dtype
