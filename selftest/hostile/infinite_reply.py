# Appended to the stub adapters.py (red team 6): every reply after the import is a module handle that
# is infinite, as JSON's non-standard Infinity, which Python's json reads; int() of it once raised
# OverflowError in the grader, and some 700 tests said the grader had failed.
import json as _json

from harness.grading import wire as _wire

_send = _wire.send


def _infinite(sock, value):
    if isinstance(value, dict) and "functions" in value:  # hello: let the import succeed
        return _send(sock, value)
    header = _json.dumps({"$dict": {"module": float("inf"), "graph": float("nan"), "value": None}}).encode()
    sock.sendall(_wire._HEAD.pack(len(header), 0) + header)


_wire.send = _infinite
