"""Rules every case in the catalogue keeps, so transposes and broadcasts cannot hide.

The rules live in harness/case_rules.py, where `term new` and `contract --check` run them
too; here each case is checked on its own, and the rule is proved able to fail."""

import dataclasses

import pytest

from harness.case_rules import clashes, problems
from harness.catalogue import CATALOGUE, case, normal

OUTPUT_CASES = [s for s in CATALOGUE if s.check == "output"]


@pytest.mark.parametrize("spec", OUTPUT_CASES, ids=lambda s: f"{s.function}/{s.name}")
def test_distinct_axes_have_distinct_sizes(spec):
    assert not problems([spec]), "\n".join(problems([spec]))


def test_the_rule_catches_a_clash_and_a_stale_declaration():
    square = case("run_scaled_dot_product_attention", "sq", "", Q=normal(2, 4, 8), K=normal(2, 4, 8),
                  V=normal(2, 4, 8), mask=None)
    assert clashes(square) and problems([square])
    declared = dataclasses.replace(square, equal=("queries=keys", "d_k=d_v"))
    assert not problems([declared])
    assert "do not share a size" in " ".join(problems([dataclasses.replace(declared, equal=("batch=d_v",
                                                                                                "queries=keys",
                                                                                                "d_k=d_v"))]))


def test_the_rule_knows_kv_heads():
    gqa = next(s for s in CATALOGUE if s.function == "run_grouped_query_attention" and s.name == "mha")
    assert "heads=kv_heads" in gqa.equal
    assert any("kv_heads" in c for c in clashes(dataclasses.replace(gqa, equal=("d_kv=d_model",))))


def test_rank_3_non_contiguous_inputs_exist():
    ranks = {gen.shape and len(gen.shape) for s in CATALOGUE for _, gen in s.gens() if gen.layout}
    assert max(ranks) >= 3, "every non-contiguous input is 2-D: add head split/merge layouts (layout='heads')"


def test_term_new_and_contract_check_refuse_a_clash(monkeypatch, tmp_path, capsys):
    """The rule fires where a maintainer first runs something, not minutes into the selftest."""
    import argparse

    import harness.build
    import harness.catalogue
    from harness.cli import contract_render
    from conftest import PROJECT
    clash = case("run_silu", "clash", "", in_features=normal(3, 4))  # fine alone; the bad one follows
    bad = case("run_scaled_dot_product_attention", "sq", "", Q=normal(2, 4, 8), K=normal(2, 4, 8),
               V=normal(2, 4, 8), mask=None)
    monkeypatch.setattr(harness.catalogue, "CATALOGUE", [clash, bad])
    monkeypatch.setattr(harness.build, "CATALOGUE", [clash, bad])
    with pytest.raises(ValueError, match="run_scaled_dot_product_attention/sq: distinct axes share a size"):
        harness.build.build_term(tmp_path, "t", 1)
    assert not (tmp_path / "fixtures" / "t").exists()
    assert contract_render(PROJECT, argparse.Namespace(check=True)) == 1
    assert "catalogue: run_scaled_dot_product_attention/sq" in capsys.readouterr().out


def test_an_unknown_unit_key_is_refused_with_the_valid_ones():
    from harness.contract import ADAPTERS, adapter
    with pytest.raises(ValueError, match=r"unknown unit '2\.6'; the units are '2\.1', '2\.2'"):
        adapter("2.6", "attention", "return None", points=1)
    assert all(a.unit != "2.6" for a in ADAPTERS.values())
