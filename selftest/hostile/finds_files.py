# Appended to the stub adapters.py, graded after leaves_files.py under the same uid: look for what it
# left (MARK in the name) wherever anyone may write, and publish it through a visible failure.
import glob as _glob

FOUND = sorted(set(_glob.glob(f"/*/harness-left-{MARK}") + _glob.glob(f"/*/*/harness-left-{MARK}")
                   + _glob.glob(f"/*/*/*/harness-left-{MARK}")))


def run_embedding(*args, **kwargs):
    raise RuntimeError(f"FOUND {FOUND}")
