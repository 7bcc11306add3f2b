#!/usr/bin/env bash
# Gradescope setup: runs once, as root, when the autograder image is built. The autograder
# zip is this instructor repository (with fixtures/<term>/hidden/), unpacked to /autograder/source.
set -euo pipefail
cd /autograder/source
# bubblewrap confines the submission's worker (no network, no view of /autograder, its own
# PID namespace). Where the container forbids namespaces, the grader says so at start and
# still runs the worker under its own unprivileged uid with resource limits.
apt-get update -qq && apt-get install -y -qq bubblewrap
# Pin torch exactly; on an image without a GPU, PyTorch's CPU index saves gigabytes.
python3 -m pip install "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu
# System-wide and non-editable: the worker's unprivileged uid must read the packages,
# and must not read /autograder/source (run_autograder makes it root-only).
python3 -m pip install .
python3 -m harness term verify "$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["tool"]["harness"]["term"])')"
