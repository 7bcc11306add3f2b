#!/usr/bin/env bash
# Gradescope runs this once, as root and with network, when it builds the autograder image;
# the zip (`python -m harness gradescope autograder.zip`) is unpacked to /autograder/source.
# The grader gets a Python >= 3.11 of its own, in a venv: Gradescope's own harness runs on the
# system python3 (3.10 on Ubuntu 22.04; pip refuses it on 24.04, PEP 668), which stays untouched.
# HARNESS_VENV: where the venv goes (run_autograder reads the same); HARNESS_PYTHON: a Python
# to use; HARNESS_TORCH_INDEX: the index torch comes from (empty: pip's own configuration).
set -euo pipefail
SOURCE=$(cd "$(dirname "$0")" && pwd)
VENV=${HARNESS_VENV:-/opt/harness-venv}
TORCH_INDEX=${HARNESS_TORCH_INDEX-https://download.pytorch.org/whl/cpu}  # CPU-only: gigabytes less

usable() {  # a Python >= 3.11 that can make a venv
    [ -x "$1" ] && "$1" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null
}
find_python() {  # system paths only: the worker's uid must be able to read the interpreter
    for py in ${HARNESS_PYTHON:-} /usr/bin/python3.11 /usr/bin/python3.12 /usr/bin/python3.13 /usr/bin/python3; do
        if usable "$py"; then echo "$py"; return 0; fi
    done
    return 1
}
if [ -n "${HARNESS_PYTHON:-}" ] && ! usable "$HARNESS_PYTHON"; then  # said, not skipped in silence (TA trial 11)
    echo "setup.sh: HARNESS_PYTHON=$HARNESS_PYTHON is not a Python >= 3.11 with venv (the harness needs 3.11); looking for another" >&2
fi
if ! PY=$(find_python); then
    apt-get update -qq
    # 22.04: python3.11 from universe; 24.04: its python3.12 needs only the venv module
    apt-get install -y -qq python3.11 python3.11-venv >/dev/null 2>&1 || apt-get install -y -qq python3-venv >/dev/null
    PY=$(find_python) || { echo "setup.sh: no Python >= 3.11 with venv could be installed" >&2; exit 1; }
fi
echo "setup.sh: the grader's Python is $PY ($("$PY" --version)), its venv $VENV"
rm -rf "$VENV"
"$PY" -m venv "$VENV"
torch=$(grep '^torch==' "$SOURCE/requirements.txt")  # pinned exactly: a range pulls a CUDA build
"$VENV/bin/python" -m pip install -q ${TORCH_INDEX:+--index-url "$TORCH_INDEX"} "$torch"
"$VENV/bin/python" -m pip install -q -r "$SOURCE/requirements.txt"
chmod -R a+rX "$VENV"  # the worker's unprivileged uid runs this Python; the harness itself stays in source/
# bubblewrap confines the worker where the container allows namespaces; where it does not, the
# worker still runs under an unprivileged uid (README, "Grading on Gradescope").
command -v bwrap >/dev/null || { apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; } \
    || echo "setup.sh: bubblewrap could not be installed; grading uses the uid drop alone"
cd "$SOURCE"
"$VENV/bin/python" -c "from pathlib import Path; from harness.store import Term, pinned_term; \
t = pinned_term(Path.cwd()); Term(Path.cwd(), t, hidden=True); print(f'setup.sh: term {t} verifies')"
"$VENV/bin/python" -c "from harness.grading.sandbox import Protections; print('setup.sh:', Protections.detect().describe())"
