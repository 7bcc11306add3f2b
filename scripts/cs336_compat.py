"""Run CS336 Assignment 1's own public tests against this repository's adapters (not part of CI).

    python scripts/cs336_compat.py /path/to/assignment1-basics [--adapters reference.adapters] [pytest args]

Copies that repository's tests/ to a temporary folder, replaces its tests/adapters.py with a shim that
re-exports our adapters' functions of the same names (those we lack stay CS336's stubs, which raise
NotImplementedError), and runs pytest on the test files of the functions we have.
"""

import argparse
import importlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# CS336's tests of the "Train it" functions (the model's are snapshot tests; tokenizer and BPE: not in this course)
FILES = ("test_nn_utils.py", "test_data.py", "test_serialization.py", "test_optimizer.py")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("cs336", type=Path, help="a checkout of stanford-cs336/assignment1-basics")
    parser.add_argument("--adapters", default="reference.adapters")
    args, rest = parser.parse_known_args()
    sys.path.insert(0, str(ROOT))
    ours = importlib.import_module(args.adapters)
    with tempfile.TemporaryDirectory() as folder:
        tests = Path(folder) / "tests"
        shutil.copytree(args.cs336 / "tests", tests)
        stubs = (tests / "adapters.py").read_text()
        names = [n for n in dir(ours) if (n.startswith("run_") or n.startswith("get_")) and f"def {n}(" in stubs]
        shim = stubs + "\n\n# --- the shim: our adapters under CS336's names\n" + \
            f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nfrom {args.adapters} import {', '.join(names)}  # noqa\n"
        (tests / "adapters.py").write_text(shim)
        files = [str(tests / f) for f in FILES if (tests / f).exists()]
        print(f"shimmed {len(names)} functions: {', '.join(names)}", flush=True)
        # -p no:harness: these are CS336's tests, not ours; run from the copy's folder (its snapshots are relative)
        return subprocess.call([sys.executable, "-m", "pytest", "-p", "no:harness", "-p", "no:cacheprovider",
                                "--rootdir", folder, "-q", *files, *rest], cwd=folder)


if __name__ == "__main__":
    sys.exit(main())
