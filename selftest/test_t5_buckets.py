"""T5's buckets are exact in float32. run_t5_relative_bias's docstring states the rule with exact
boundaries (reference/positions.py computes them in integers); T5's own floor(log(...)) formula gives the
same buckets in float32 or float64 only where no distance sits on a boundary. So every setting the
suite uses (the catalogue's cases, the property tests') keeps each distance it reaches a margin away from
one: a case at T5's defaults (32 buckets, max_distance 128, bidirectional: boundaries on 16, 32, 64) fails
here, not in a student's float32 log."""

import math

import pytest

from harness.term.catalogue import CATALOGUE

MARGIN = 1e-3  # of a bucket; float32's log is off by about 1e-6 of one


def margin(num_buckets: int, max_distance: int, bidirectional: bool, seq_len: int) -> float:
    """How close T5's log expression comes to an integer at a distance these settings reach below max_distance
    (from max_distance on, the last bucket is taken either way)."""
    half = num_buckets // 2 if bidirectional else num_buckets
    exact, m = half // 2, half - half // 2
    values = [math.log(n / exact) / math.log(max_distance / exact) * m for n in range(exact + 1, min(seq_len, max_distance))]
    return min((abs(v - round(v)) for v in values), default=1.0)


def settings():
    from tests.test_relative_positions import LONG, T5
    cases = [(s.name, s.args["num_buckets"], s.args["max_distance"], s.args["bidirectional"], s.args["seq_len"])
             for s in CATALOGUE if s.function == "run_t5_relative_bias"]
    return cases + [(f"property-{p.id}", *p.values, LONG) for p in T5]


@pytest.mark.parametrize("name, num_buckets, max_distance, bidirectional, seq_len", settings())
def test_t5_settings_keep_every_distance_off_a_bucket_boundary(name, num_buckets, max_distance, bidirectional, seq_len):
    got = margin(num_buckets, max_distance, bidirectional, seq_len)
    assert got > MARGIN, (f"{name}: a distance sits {got:.2g} of a bucket from a boundary, where floor(log(...)) in "
                          "float32 and float64 may disagree; choose num_buckets and max_distance whose boundaries "
                          "fall on no integer")


def test_t5_defaults_would_be_refused():
    assert margin(32, 128, True, 200) < 1e-9  # 16, 32, 64 are boundaries


def test_reference_boundaries_are_t5s_rule_in_exact_arithmetic():
    """The smallest distance of each log bucket, from the reference's integer rule, against the rule read
    with exact rationals: n >= max_exact * (max_distance / max_exact)^(k / m)."""
    from fractions import Fraction
    from reference.positions import t5_boundaries
    for half, max_distance in [(16, 128), (8, 20), (12, 30), (10, 24), (7, 36), (18, 40), (16, 64)]:
        exact, m = half // 2, half - half // 2
        expected = [next(n for n in range(exact, 10 * max_distance)
                         if Fraction(n, exact) ** m >= Fraction(max_distance, exact) ** k) for k in range(1, m)]
        assert t5_boundaries(half, max_distance) == expected, (half, max_distance)
