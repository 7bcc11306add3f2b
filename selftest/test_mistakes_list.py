"""MISTAKES.md, the numbered list of known mistakes, lives in the repository and is
generated from reference/variants.py: it cannot drift from the variants the selftest runs."""

import pytest
import re
from types import SimpleNamespace

from conftest import PROJECT
from harness.term.coverage import numbered, render_mistakes
from reference.variants import VARIANTS

ENTRY = re.compile(r"^- \*\*(\d+)\. (.+?)\*\* \(`(\w+)`\)$", re.M)


def test_mistakes_list_is_generated_from_the_variants():
    assert (PROJECT / "MISTAKES.md").read_text() == render_mistakes(VARIANTS), \
        "MISTAKES.md is stale: run `python -m harness contract`"


def test_every_mistake_has_one_number_and_every_number_one_variant():
    entries = ENTRY.findall((PROJECT / "MISTAKES.md").read_text())
    numbers = [int(n) for n, _, _ in entries]
    assert sorted(numbers) == list(range(1, len(numbers) + 1)), "numbers must run 1..N with no gap or repeat"
    assert sorted(name for _, _, name in entries) == sorted(v.name for v in VARIANTS.values() if not v.correct)
    for _, title, name in entries:
        assert title == VARIANTS[name].title


def test_a_variant_without_a_number_gets_the_next_free_one():
    fake = {n: SimpleNamespace(name=n, mistake=m, correct=c) for n, m, c in
            [("a", 2, False), ("b", None, False), ("ok", None, True), ("c", 1, False), ("d", None, False)]}
    assert [(n, v.name) for n, v in numbered(fake)] == [(1, "c"), (2, "a"), (3, "b"), (4, "d")]


def test_a_mistake_added_last_is_listed_under_its_functions_unit():
    """Appending a Unit 2.1 function's mistake to variants.py (as the README's walkthrough does) lists it
    among Unit 2.1's, keeping its number: the list is in course order, as every list of functions is."""
    from harness.contract import UNITS
    late = SimpleNamespace(name="late_lookup", title="a late lookup mistake", mistake=None, correct=False,
                           hint="", named_by="", patches={"embeddings.embedding_lookup": None})
    text = render_mistakes({**VARIANTS, late.name: late})
    sections = {s.split("\n", 1)[0]: s for s in text.split("\n## ")[1:]}
    number = len([v for v in VARIANTS.values() if not v.correct]) + 1
    assert f"- **{number}. a late lookup mistake** (`late_lookup`)" in sections[UNITS[0].title]
    assert [title for title in sections if title != "Correct alternatives"] == \
        [u.title for u in UNITS if u.title in sections], "units in the order of UNITS"


def test_a_variant_registered_twice_is_refused():
    """A TA reusing a name replaced mistake 19 and renumbered about 100 others, and every check passed."""
    from reference import variants
    name = next(iter(variants.VARIANTS))
    before = dict(variants.VARIANTS)
    with pytest.raises(ValueError, match="registered twice"):
        variants.register(name, "a second mistake under the first one's name")
    assert variants.VARIANTS == before


@pytest.mark.parametrize("name, said", [("run_softmax", "run_softmax is a contract function"),
                                        ("rope_half_splt", "did you mean rope_half_split")])
def test_mistakes_of_an_unknown_name_says_what_names_it_takes(name, said, capsys):
    """A TA typed a function's name where a variant's goes, and read "caught 0/0 mistakes"."""
    from harness.cli import mistakes_table
    assert mistakes_table(PROJECT, SimpleNamespace(names=[name])) == 2
    assert said in capsys.readouterr().err


def test_a_submission_of_an_unknown_variant_is_refused_when_made(tmp_path):
    """TA trial 13's typo (rope_halfsplit) made a submission that failed only at its import, in grading."""
    import pytest
    from reference.submission import variant_as_student
    with pytest.raises(KeyError, match="did you mean rope_half_split"):
        variant_as_student("rope_halfsplit", tmp_path / "sub")
    assert not (tmp_path / "sub").exists()
