"""The README's "Adding a function" walkthrough, replayed in a temporary copy of the
repository: each "Append to `FILE`:" block is appended to that file, each command runs
(NAME and SEED are the pinned term's), and the new function is then held to what the
selftest demands: the reference passes its public and hidden tests, and its mistake is
named in its own failure report. So the walkthrough cannot drift from the code."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from conftest import PROJECT, TERM

README = (PROJECT / "README.md").read_text()
SECTION = README.split("### Adding a function")[1].split("\n### ")[0]
APPENDS = re.findall(r"Append to `([^`]+)`:\n\n```python\n(.*?)```", SECTION, re.S)
COMMANDS = [line.split("#")[0].strip() for block in re.findall(r"```bash\n(.*?)```", SECTION, re.S)
            for line in block.splitlines() if line.strip()]


def python(args, cwd):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "HARNESS"))}
    # `python -m` and `-c` put the copy first on sys.path: its harness, reference and plugin are the ones imported.
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def added(tmp_path_factory):
    copy = tmp_path_factory.mktemp("walkthrough") / "repo"
    skip = shutil.ignore_patterns(".*", "__pycache__", "*.egg-info", "selftest", "benchmarks", "gradescope")
    shutil.copytree(PROJECT, copy, ignore=skip)
    for term in (copy / "fixtures").iterdir():
        if term.name != TERM:
            shutil.rmtree(term)
    for path, code in APPENDS:
        with open(copy / path, "a") as f:
            f.write("\n\n" + code)
    seed = json.loads((copy / "fixtures" / TERM / "manifest.json").read_text())["seed"]
    for command in COMMANDS:
        words = shlex.split(command.replace("NAME", TERM).replace("SEED", str(seed)))
        if words[:2] == ["pytest", "selftest"]:
            continue  # the checks below are the selftest's, for the new function
        result = python(["-m", *(words[2:] if words[:2] == ["python", "-m"] else words)], copy)
        assert result.returncode == 0, f"{command}:\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
    return copy


def test_walkthrough_has_its_steps():
    assert [p for p, _ in APPENDS] == ["harness/contract.py", "reference/attention.py", "harness/catalogue.py",
                                      "reference/variants.py"] + ["harness/contract.py", "reference/gpt2.py",
                                                                  "harness/catalogue.py", "reference/variants.py"]
    assert any(c.startswith("python -m harness contract") for c in COMMANDS)
    assert any(c.startswith("python -m harness term new") for c in COMMANDS)
    assert "pytest selftest -n auto" in COMMANDS


# The checks of the two new functions, in one interpreter of the copy (each start costs
# an import of torch): `contract --check`, then the suite against the reference and against
# each new mistake. Prints {check: [exit code, output]} as JSON.
CHECKS = """
import contextlib, io, json, sys
import pytest
from harness.cli import main

def contract():
    try:
        return main(["contract", "--check"])
    except SystemExit as e:
        return e.code

def suite(adapters, *extra, function="run_squared_relu,run_geglu"):
    return pytest.main(["-q", "-p", "no:cacheprovider", "--adapters", adapters, *extra, "--function", function])

results = {}
for name, check in [("contract", contract), ("reference", lambda: suite("reference.adapters", "--hidden")),
                    ("mistake", lambda: suite("reference.variants:relu_not_squared", function="run_squared_relu")),
                    ("module mistake", lambda: suite("reference.variants:geglu_w1_w3_swapped", function="run_geglu"))]:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = check()
    results[name] = [int(code or 0), buffer.getvalue()]
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def checked(added):
    result = python(["-c", CHECKS], added)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


def test_generated_files_are_up_to_date(added, checked):
    code, output = checked["contract"]
    assert code == 0, output
    assert "def run_squared_relu(" in (added / "adapters.py").read_text()
    assert "def run_geglu(" in (added / "adapters.py").read_text()
    assert "def squared_relu(" in (added / "student" / "attention.py").read_text()
    assert "class GeGLU(nn.Module):" in (added / "student" / "gpt2.py").read_text()
    assert "`relu_not_squared`" in (added / "MISTAKES.md").read_text()
    assert "`geglu_w1_w3_swapped`" in (added / "MISTAKES.md").read_text()


def test_reference_passes_the_new_functions_public_and_hidden_tests(checked):
    code, output = checked["reference"]
    assert code == 0, output[-3000:]
    passed = int(re.search(r"(\d+) passed", output).group(1))
    assert passed >= 9  # output and gradient of each public case, the hidden ones, the device probes


def test_the_new_mistake_is_named_in_the_new_functions_report(checked):
    code, output = checked["mistake"]
    assert code == 1, output[-3000:]
    assert "plain ReLU; run_squared_relu squares it" in output


def test_the_module_mistake_is_named_in_its_report(checked):
    code, output = checked["module mistake"]
    assert code == 1, output[-3000:]
    assert "W1 and W3 swapped in GEGLU" in output
