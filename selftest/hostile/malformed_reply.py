# Appended to the stub adapters.py: replies that are valid on the wire but not what was asked
# for (a list, an error that is a string, mutated inputs that are not tensors, a module handle
# that is not a number, gradients that are not a list, a tensor reference to nothing, a meta
# tensor of shape ["a"], a handle that is infinite or not a number), to make the grader fail with
# its own traceback.
import itertools as _itertools
import json as _json

from harness.grading import wire as _wire

_send = _wire.send
_BAD = _itertools.cycle([
    ["not", "a", "dict"],
    {"$dict": {"error": "a string"}},
    {"$dict": {"value": None, "mutated": {"$dict": {"weights": 5, "token_ids": [1]}}}},
    {"$dict": {"module": "x"}},
    {"$dict": {"grads": 5}},
    {"$dict": {"value": {"$t": "t0"}}},
    {"$dict": {"value": {"$meta": ["a"], "dtype": "float32"}}},
    {"$dict": {"value": {"$meta": [2], "dtype": "save"}}},
    {"$dict": {"module": {"$float": "inf"}}},
    {"$dict": {"value": None, "graph": {"$float": "nan"}}},
    {"$dict": {"module": float("inf")}},  # Infinity: not JSON
    {"$dict": {"value": {"$meta": [1e999], "dtype": "float32"}}},
])


def _malformed(sock, value):
    if isinstance(value, dict) and "functions" in value:  # hello: let the import succeed
        return _send(sock, value)
    header = _json.dumps(next(_BAD)).encode()
    sock.sendall(_wire._HEAD.pack(len(header), 0) + header)


_wire.send = _malformed
