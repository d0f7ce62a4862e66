"""The crossover estimator of benchmarks/paired.py (claim.py --crossover), pure: the index's
effect cleared of the two copies' own speeds, and those speeds themselves, from rounds whose
ratios are computed here by hand."""

import doctest

import pytest

from benchmarks import paired
from benchmarks.paired import copy_effect, crossover_ratio, paired_ratio

# Copy A runs 25 % slower than copy B (a/b = 1.25), the index costs nothing: phase 1 times A
# with the index against B without it, each round 1.25; phase 2 B with against A without, 0.8.
A_WITH = [2.5, 5.0, 3.75]
B_WITHOUT = [2.0, 4.0, 3.0]
B_WITH = [1.6, 3.2, 2.4]
A_WITHOUT = [2.0, 4.0, 3.0]


def test_a_copy_effect_alone_is_cancelled_by_the_crossover_and_reported_as_such():
    assert paired_ratio(A_WITH, B_WITHOUT) == pytest.approx((1.25, 1.25, 1.25))  # phase 1
    assert paired_ratio(B_WITH, A_WITHOUT) == pytest.approx((0.8, 0.8, 0.8))  # phase 2
    assert crossover_ratio(A_WITH, B_WITHOUT, B_WITH, A_WITHOUT) == pytest.approx((1, 1, 1))
    # sqrt(1.25 / 0.8) = sqrt(1.5625) = 1.25: copy A's own slowness
    assert copy_effect(A_WITH, B_WITHOUT, B_WITH, A_WITHOUT) == pytest.approx((1.25, 1.25, 1.25))


def test_the_crossover_pairs_rounds_by_number_and_takes_the_median_of_their_geometric_means():
    # phase 1 ratios 1.21, 1.44, 1.00; phase 2 all 1.00: per round sqrt(1.21) = 1.1,
    # sqrt(1.44) = 1.2, sqrt(1) = 1.0; median 1.1. A bootstrap median of three rounds is one
    # of them; each extreme has chance 7/27 (two or three of three draws), far above the
    # 2.5 % tail, so the interval is [1.0, 1.2].
    phase1_with, phase1_without = [1.21, 2.88, 3.0], [1.0, 2.0, 3.0]
    phase2_with, phase2_without = [5.0, 5.0, 5.0], [5.0, 5.0, 5.0]
    assert crossover_ratio(
        phase1_with, phase1_without, phase2_with, phase2_without
    ) == pytest.approx((1.1, 1.0, 1.2))
    # the copy effect of the same rounds: sqrt(1.21 / 1) etc., the same numbers here
    assert copy_effect(phase1_with, phase1_without, phase2_with, phase2_without) == pytest.approx(
        (1.1, 1.0, 1.2)
    )
    # phase 2 now 1.21, 1.00, 1.44: rounds sqrt(1.21 · 1.21) = 1.21, sqrt(1.44) = 1.2,
    # sqrt(1.44) = 1.2, median 1.2; the copy effect 1, 1.2, 1/1.2, median 1.0
    phase2_with = [6.05, 5.0, 7.2]
    assert crossover_ratio(phase1_with, phase1_without, phase2_with, phase2_without)[
        0
    ] == pytest.approx(1.2)
    assert copy_effect(phase1_with, phase1_without, phase2_with, phase2_without)[
        0
    ] == pytest.approx(1.0)


def test_phases_of_different_lengths_are_refused():
    with pytest.raises(ValueError):
        crossover_ratio([1.0, 2.0], [1.0, 2.0], [1.0], [1.0])
    with pytest.raises(ValueError):
        copy_effect([1.0], [1.0, 2.0], [1.0], [1.0])


def test_the_docstrings_examples_hold():
    assert doctest.testmod(paired).failed == 0
