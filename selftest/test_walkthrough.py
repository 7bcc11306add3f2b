"""The README's "Adding a function" walkthrough, replayed in a temporary copy of the
repository: each "Append to `FILE`:" block is appended to that file, each command runs
(NAME and SEED are the pinned term's), and the new functions are then held to what the
selftest demands: the reference passes their public and hidden tests, each mistake is
named in its own function's failure report, the selftest's own rules hold for them with no
edit, and nothing but the four files per function and the generated ones changed. So the
walkthrough cannot drift from the code."""

import hashlib
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


# The README's four files per function: the contract, the reference module, the catalogue, the variants.
HAND = {"harness/contract.py", "reference/attention.py", "reference/gpt2.py", "reference/rope.py",
        "harness/term/catalogue.py", "reference/variants.py"}


def test_walkthrough_has_its_steps():
    assert [p for p, _ in APPENDS] == [
        "harness/contract.py", "reference/attention.py", "harness/term/catalogue.py", "reference/variants.py",
        "harness/contract.py", "reference/gpt2.py", "harness/term/catalogue.py", "reference/variants.py",
        "harness/contract.py", "reference/rope.py", "harness/term/catalogue.py", "reference/variants.py"]
    assert any(c.startswith("python -m harness contract") for c in COMMANDS)
    assert any(c.startswith("python -m harness term new") for c in COMMANDS)
    assert "pytest selftest -n auto" in COMMANDS


# The checks of the new functions, in one interpreter of the copy (each start costs
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

def suite(adapters, *extra, function="run_squared_relu,run_geglu,run_rope_inverse_frequencies"):
    return pytest.main(["-q", "-p", "no:cacheprovider", "--adapters", adapters, *extra, "--function", function])

results = {}
for name, check in [("contract", contract), ("reference", lambda: suite("reference.adapters", "--hidden", "-rA")),
                    ("mistake", lambda: suite("reference.variants:relu_not_squared", function="run_squared_relu")),
                    ("module mistake", lambda: suite("reference.variants:geglu_w1_w3_swapped", function="run_geglu")),
                    ("no-tensor mistake", lambda: suite("reference.variants:rope_inverse_frequencies_from_one",
                                                        function="run_rope_inverse_frequencies"))]:
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


def test_the_function_without_tensors_passes_its_device_probe_and_gets_a_fresh_twin(added, checked):
    """RoPE's inverse frequencies take no tensor: the device probe judges them by torch's default device (it
    once failed the reference, with ALiBi's slopes), and the twin's d_k and theta are fresh (a twin once
    stayed equal: the same case)."""
    code, output = checked["reference"]
    assert re.search(r"PASSED tests/test_devices.py::test_function_runs_on_meta_device\[run_rope_inverse_frequencies\]", output), \
        output[-3000:]
    hidden = json.loads((added / "fixtures" / TERM / "hidden" / "manifest.json").read_text())["cases"]
    twins = {c["twin_of"]: c["args"] for c in hidden if c["function"] == "run_rope_inverse_frequencies"
             and c.get("twin_of")}
    assert twins["d-8"]["d_k"] != 8 and twins["d-6-theta-500"]["d_k"] != 6, twins
    assert twins["d-8"]["theta"] != 10000.0 and twins["d-6-theta-500"]["theta"] != 500.0, twins


def test_the_new_mistake_of_a_function_without_tensors_is_named(checked):
    code, output = checked["no-tensor mistake"]
    assert code == 1 and "frequencies counted from pair 1" in output, output[-3000:]


def test_new_functions_sort_into_their_units(added):
    """Appended last, each is listed with its unit: in adapters.py, and its mistake in MISTAKES.md."""
    adapters = (added / "adapters.py").read_text()
    order = ["run_multihead_self_attention", "run_squared_relu", "run_rope", "run_multihead_self_attention_with_rope",
             "run_rope_inverse_frequencies", "run_rmsnorm", "get_gpt2_lm", "run_geglu", "run_transformer_accounting"]
    assert [adapters.index(f"def {name}(") for name in order] == sorted(adapters.index(f"def {name}(") for name in order)
    units = {section.split("\n", 1)[0]: section for section in (added / "MISTAKES.md").read_text().split("\n## ")}
    assert "`relu_not_squared`" in units["Unit 2.2: attention"] and "`rope_inverse_frequencies_from_one`" in units["Unit 2.5: RoPE"]


def _digests(root) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and not any(".egg-info" in q for q in p.parts)}


def test_only_the_four_files_per_function_change_by_hand(added):
    """The README says four files by hand: the contract, the reference module, the catalogue and the
    variants. Everything else that changed is generated (adapters, stubs, MISTAKES.md, the term)."""
    before, after = _digests(PROJECT), _digests(added)
    changed = sorted(p for p in after if before.get(p) != after[p])
    generated = {"adapters.py", "reference/adapters.py", "MISTAKES.md"}
    other = [p for p in changed if p not in HAND | generated and not p.startswith(("student/", f"fixtures/{TERM}/"))]
    assert not other, f"changed besides the walkthrough's files: {other}"


def test_the_selftest_needs_no_edit_for_the_new_functions(added):
    """The selftest's rules for every contract function (cases, a device probe, docstrings that name a
    module's parameters, the catalogue's rules, MISTAKES.md) hold for the new ones as they stand."""
    shutil.copytree(PROJECT / "selftest", added / "selftest",
                    ignore=shutil.ignore_patterns("__pycache__", "hostile", "test_*.py"))
    for name in ("test_functions.py", "test_catalogue_rules.py", "test_mistakes_list.py"):
        shutil.copy(PROJECT / "selftest" / name, added / "selftest" / name)
    result = python(["-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "selftest/test_functions.py",
                     "selftest/test_catalogue_rules.py", "selftest/test_mistakes_list.py"], added)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    for test in ("test_function_has_a_device_probe[run_rope_inverse_frequencies]", "test_docstrings_name_every_parameter_the_"
                 "tests_load[GeGLU]", "test_every_scalar_and_optional_argument_varies_in_public_cases[run_geglu]"):
        assert f"PASSED selftest/test_{'catalogue_rules' if 'varies' in test else 'functions'}.py::{test}" \
            in result.stdout, test
