"""Adapters loading, contract checks and the readable reports, proved on purpose-made mistakes."""

import os
import subprocess
import sys

import pytest
import torch

from conftest import PROJECT, TERM, run_suite
from harness.contract import render_adapters
from harness.runtime import Adapters, AdaptersError, ContractViolation


@pytest.mark.parametrize("package, path", [("student", "adapters.py"), ("reference", "reference/adapters.py")])
def test_adapters_are_rendered_from_the_contract(package, path):
    assert (PROJECT / path).read_text() == render_adapters(package), \
        f"{path} is stale: run `python -m harness contract`"


def test_none_return_names_the_adapter_and_the_axes():
    adapters = Adapters("reference.variants:forgot_return")
    with pytest.raises(ContractViolation) as e:
        adapters.run_embedding(10, 4, torch.randn(10, 4), torch.tensor([1, 2]))
    text = str(e.value)
    assert "run_embedding returned None" in text and "'... d_model'" in text and "d_model=4" in text


@pytest.mark.parametrize("body, message", [
    ("weights[token_ids][..., :2]", r"(?s)returned f32\[2,2\].*d_model=4"),  # wrong shape: the actual one named
    ("weights[token_ids].long()", r"(?s)returned i64\[2,4\].*Float"),       # wrong dtype
], ids=["shape", "dtype"])
def test_wrong_return_names_what_came_back_and_what_was_due(tmp_path, body, message):
    module = tmp_path / "wrong_adapters.py"
    module.write_text(f"def run_embedding(vocab_size, d_model, weights, token_ids):\n    return {body}\n")
    with pytest.raises(ContractViolation, match=message):
        Adapters(str(module)).run_embedding(10, 4, torch.randn(10, 4), torch.tensor([1, 2]))


def test_missing_function_is_named(tmp_path):
    module = tmp_path / "empty_adapters.py"
    module.write_text("")
    with pytest.raises(AdaptersError, match="has no function run_embedding"):
        Adapters(str(module)).run_embedding


def test_adapters_that_fail_to_import_are_one_usage_error_with_the_reason(tmp_path, capsys):
    """(In grading every test fails with the reason instead: selftest/test_grading.py.)"""
    module = tmp_path / "broken.py"
    module.write_text("def run_embedding(:\n")
    assert run_suite("--adapters", str(module)).exit_code == 4
    assert "SyntaxError" in capsys.readouterr().err


def test_a_hanging_adapter_fails_by_timeout(tmp_path):
    module = tmp_path / "hang.py"
    module.write_text("from reference.adapters import *\n"
                      "def run_sinusoidal_positions(d_model, token_positions):\n"
                      "    while True:\n        pass\n")
    run = run_suite("--adapters", str(module), "--case-timeout", "0.2", "-k", "run_sinusoidal_positions/arange")
    assert run.exit_code == 1 and len(run.failed) == 1
    assert "did not finish within 0.2 s" in next(iter(run.messages.values()))


def test_environment_variable_selects_adapters(monkeypatch):
    monkeypatch.setenv("HARNESS_ADAPTERS", "reference.variants:detached_table")
    run = run_suite("-k", "seed-exercise")
    assert any("no gradient reaches `weights`" in m for m in run.messages.values())


def test_adapters_path_option_works_from_the_tests_folder():
    """--adapters is registered by the installed plugin, so a path is not taken for a test path,
    and fixtures are found from the project root wherever pytest starts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "HARNESS"))}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "--adapters", "../reference/adapters.py",
                             "-k", "fixture"], cwd=PROJECT / "tests", env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"Progress: term {TERM}" in result.stdout


def test_progress_table_reports_each_state(capsys):
    run_suite("--adapters", "reference.variants:negative_ids_wrap")
    out = capsys.readouterr().out
    assert "Unit 2.1: embeddings and positions" in out
    assert "run_embedding                          failed" in out
    assert "run_learned_positions                  passed" in out
    assert "Hidden cases (+P hidden above" in out


def test_unit_completion_points_to_the_next_unit(capsys):
    run_suite("--adapters", "reference.adapters")
    assert "every function passes. Next: Unit 2.2" in capsys.readouterr().out


def test_running_another_term_than_the_release_pinned_is_said():
    from harness.student_run.progress import Progress
    from harness.store import Term
    progress = Progress(Term(PROJECT, TERM), "adapters", pinned="another-term")
    progress.record("run_embedding", "passed", False)
    assert f"this project pins term another-term; you ran {TERM}" in progress.render()


def test_an_adapters_path_uses_the_student_package_beside_it(tmp_path, forget_other_repositories):
    """A TA checking a submission with --adapters must test that submission's student/, not this one's."""
    from conftest import reference_as_student
    sub = reference_as_student(tmp_path / "submission")
    source = sub / "student" / "embeddings.py"
    source.write_text(source.read_text().replace("    return weights[token_ids]", "    weights[token_ids]"))
    run = run_suite("--adapters", str(sub / "adapters.py"), "-k", "seed-exercise and output")
    assert run.failed and "returned None" in next(iter(run.messages.values()))


@pytest.mark.parametrize("entry, message", [("7.0", r"7\.0 \(float\) for 'params.total'.*use // for integer division"),
                                            ("True", r"True \(bool\) for 'params.total'")],
                         ids=["float", "bool"])
def test_every_entry_of_a_returned_dict_is_checked(tmp_path, entry, message):
    """beartype samples one entry of a dict; a count that is a float in one entry of many is caught
    on every call, not by chance."""
    module = tmp_path / "wrong_adapters.py"
    module.write_text("def run_transformer_accounting(*args, **kwargs):\n"
                      f"    return {{**{{f'flops.k{{i}}': i for i in range(40)}}, 'params.total': {entry}}}\n")
    for _ in range(5):
        with pytest.raises(ContractViolation, match=message):
            Adapters(str(module)).run_transformer_accounting(10, 8, 8, 1, 2, 12)
