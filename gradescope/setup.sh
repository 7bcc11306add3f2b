#!/usr/bin/env bash
# Gradescope setup: runs once when the autograder image is built. The autograder zip is
# this instructor repository (with fixtures/<term>/hidden/), unpacked to /autograder/source.
set -euo pipefail
cd /autograder/source
# Pin torch exactly; on an image without a GPU, point pip at PyTorch's CPU wheels to save GBs.
python3 -m pip install "torch==2.13.0"
python3 -m pip install -e .
python3 -m harness term verify "$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["tool"]["harness"]["term"])')"
