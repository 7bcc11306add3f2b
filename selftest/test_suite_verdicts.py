"""The student suite accepts the reference and every correct alternative, and rejects
every known mistake and the shipped stubs."""

import re
from pathlib import Path

import pytest

from conftest import run_suite
from reference.variants import VARIANTS

MISTAKES_MD = Path(__file__).resolve().parents[2] / "shared" / "MISTAKES.md"
KNOWN = range(1, 47)  # every entry of MISTAKES.md

MISTAKES = [v for v in VARIANTS.values() if not v.correct]
CORRECT = [v for v in VARIANTS.values() if v.correct]


def test_reference_passes_every_public_and_hidden_test():
    run = run_suite("--adapters", "reference.adapters", "--hidden")
    assert run.exit_code == 0, "\n\n".join(run.messages.values())
    assert len(run.outcomes) >= 150


def test_stubs_fail_every_test_as_not_implemented():
    run = run_suite("--adapters", "adapters")
    assert run.exit_code == 1, f"expected test failures only, got exit code {run.exit_code}"
    assert run.outcomes and not [n for n, o in run.outcomes.items() if o == "passed"]
    for nodeid, message in run.messages.items():
        assert "is not implemented yet" in message, f"{nodeid}:\n{message}"
        assert "Traceback" not in message and len(message.splitlines()) == 1


def test_every_test_is_attributed_to_a_contract_function():
    run = run_suite("--adapters", "reference.adapters", "--collect-only")
    assert run.adapters and all(run.adapters.values()), \
        [n for n, a in run.adapters.items() if not a]


@pytest.mark.parametrize("variant", MISTAKES, ids=lambda v: v.name)
def test_known_mistake_fails_the_suite(variant):
    run = run_suite("--adapters", f"reference.variants:{variant.name}")
    assert run.failed, f"mistake {variant.mistake} ({variant.title}) passed the whole suite"
    print(f"{variant.name}: caught by {run.caught_by()}")


@pytest.mark.parametrize("variant", CORRECT, ids=lambda v: v.name)
def test_correct_alternative_passes(variant):
    run = run_suite("--adapters", f"reference.variants:{variant.name}", "--hidden")
    assert run.exit_code == 0, "\n\n".join(run.messages.values())


def test_every_known_mistake_has_a_variant():
    covered = {v.mistake for v in MISTAKES}
    missing = [n for n in KNOWN if n not in covered]
    assert not missing, f"MISTAKES.md entries without a variant: {missing}"


@pytest.mark.skipif(not MISTAKES_MD.is_file(), reason="shared/MISTAKES.md is not beside this checkout")
def test_variant_numbers_name_real_entries():
    titles = dict(re.findall(r"^(\d+)\. \*\*(.+?)\*\*", MISTAKES_MD.read_text(), re.M))
    unknown = [v.name for v in MISTAKES if v.mistake is not None and str(v.mistake) not in titles]
    assert not unknown, unknown
    assert set(map(int, titles)) <= set(KNOWN), f"MISTAKES.md has entries beyond {KNOWN}: add variants"
