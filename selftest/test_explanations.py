"""What a failure report explains, proved both ways: each sentence appears where its
evidence is, and correct code gets none (issue 16: say only what is true)."""

import torch

from conftest import run_suite


def _adapters(tmp_path, body: str) -> str:
    path = tmp_path / "partial_adapters.py"
    path.write_text("from reference.adapters import *  # noqa: F403\n\n" + body)
    return str(path)


def test_not_implemented_names_the_function_that_raised_it(tmp_path):
    target = _adapters(tmp_path, "def run_transformer_accounting(*args, **kwargs):\n"
                                 "    raise NotImplementedError('count them')\n")
    run = run_suite("--adapters", target, "--function", "get_transformer_lm")
    message = next(m for n, m in run.messages.items() if "test_parameter_count_matches_accounting" in n)
    assert message.startswith("run_transformer_accounting is not implemented yet"), message
    assert "which get_transformer_lm's test calls" in message
    assert [n for n, o in run.outcomes.items() if o == "failed"] == \
        [n for n in run.outcomes if "test_parameter_count_matches_accounting" in n]


def test_device_test_judges_only_code_that_works_on_the_cpu():
    run = run_suite("--adapters", "reference.variants:linear_without_transpose", "--function", "run_linear")
    device = next(m for n, m in run.messages.items() if "meta_device" in n)
    assert device.split(": ", 1)[1].startswith("not judged: run_linear passes none of its"), device
    assert "device=" not in device and "register_buffer" not in device
    run = run_suite("--adapters", "reference.variants:hard_coded_2d_ids", "--function", "run_embedding")
    assert not [n for n in run.failed if "meta_device" in n]  # it passes the 2-D case: probed there, passes
