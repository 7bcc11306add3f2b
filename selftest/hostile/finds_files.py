# Appended to the stub adapters.py, graded after leaves_files.py under the same uid: look for what it
# left (MARK in its name) in PLACES, and the folders' own times, and publish them through a visible failure.
import os as _os

FOUND = [_os.path.join(_f, f"harness-left-{MARK}") for _f in PLACES
         if _os.path.exists(_os.path.join(_f, f"harness-left-{MARK}"))]


TIMES = {_f: _os.stat(_f).st_mtime_ns for _f in PLACES}


def run_embedding(*args, **kwargs):
    raise RuntimeError(f"FOUND {FOUND} TIMES {TIMES}")
