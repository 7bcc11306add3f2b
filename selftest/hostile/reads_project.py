# Appended to the stub adapters.py, graded without bubblewrap (the worker under a uid of its own, the
# host's files in view): read the instructor's project (PROJECT), whose hidden cases, grading seed and
# reference solution score everything. What it could reach is published through a visible failure;
# the reference, if it imports, answers every call.
import json as _json
import os as _os
import sys as _sys


def _try(what, action):
    try:
        action()
        return f"{what}:LEAKED"
    except Exception as e:  # noqa: BLE001
        return f"{what}:denied({type(e).__name__})"


def _reference():
    _sys.path.insert(0, PROJECT)
    import reference.adapters  # noqa: F401


_FOUND = [f"uid={_os.getuid()}",
          _try("hidden", lambda: _json.load(open(f"{PROJECT}/fixtures/{TERM}/hidden/manifest.json"))["grading_seed"]),
          _try("listing", lambda: _os.listdir(PROJECT)),
          _try("reference", _reference)]
READS = "READS " + " ".join(_FOUND)
if "reference:LEAKED" in READS:
    from reference.adapters import *  # noqa: F401,F403,E402
else:
    def run_embedding(*args, **kwargs):
        raise RuntimeError(READS)
