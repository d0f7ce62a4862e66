"""Paired rounds: the median of round-by-round ratios, its 95 % bootstrap interval, a verdict.

Shared by ``claim.py`` and ``flow_control.py``. Two variants timed back to back in one round
share the machine's state (load, caches), so the ratio of each round's pair is steadier than
the ratio of the two medians; the median of those ratios gets a 95 % interval by resampling
the rounds (``BOOTSTRAP`` times, seeded, so a report is reproducible from its samples).

Two copies of one table still differ in their placement (pages in memory, on disk), which moves
a paired ratio by itself. A crossover cancels that: phase 1 times copy A with the index and copy
B without, phase 2 (the index moved) B with and A without; ``crossover_ratio`` combines the
rounds of one number across the phases, ``copy_effect`` is what the copies' own speeds were.
"""

import math
import random
import statistics
from collections.abc import Sequence

BOOTSTRAP = 2000  # resamples of the round-by-round ratios for their median's 95 % interval


def paired_ratio(values: Sequence[float], bases: Sequence[float]) -> tuple[float, float, float]:
    """The median of ``values[i] / bases[i]`` and its 95 % bootstrap interval:
    ``(median, low, high)``."""
    return median_interval([value / base for value, base in zip(values, bases, strict=True)])


def crossover_ratio(
    phase1_with: Sequence[float],
    phase1_without: Sequence[float],
    phase2_with: Sequence[float],
    phase2_without: Sequence[float],
) -> tuple[float, float, float]:
    """The with/without ratio of a crossover, cleared of the two copies' own speeds.

    Args: four equally long sequences of one statement's times (any one unit), index ``i``
    being round ``i`` of its phase: phase 1 times copy A with the index (``phase1_with``) and
    copy B without it (``phase1_without``), phase 2 B with it and A without it. With ``I`` the
    index's effect and ``a``, ``b`` the copies' speeds, round ``i``'s two ratios are ``I·a/b``
    and ``I·b/a``; their geometric mean ``sqrt((A_with/B_without) · (B_with/A_without))`` is
    ``I``.

    Returns: ``(median, low, high)``: the median of those per-round geometric means and its
    95 % bootstrap interval (the round pairs resampled, as ``paired_ratio``).

    Raises: ValueError when the sequences' lengths differ (rounds must pair one to one).

    >>> crossover_ratio([2.5, 5.0], [2.0, 4.0], [1.6, 3.2], [2.0, 4.0])  # 1.25 and 0.8
    (1.0, 1.0, 1.0)
    """
    return median_interval(
        _phase_products(phase1_with, phase1_without, phase2_with, phase2_without, 1)
    )


def copy_effect(
    phase1_with: Sequence[float],
    phase1_without: Sequence[float],
    phase2_with: Sequence[float],
    phase2_without: Sequence[float],
) -> tuple[float, float, float]:
    """How much slower copy A ran than copy B in a crossover, whatever the index did.

    Args: as ``crossover_ratio``. Round ``i`` gives ``sqrt((A_with/B_without) /
    (B_with/A_without))`` = ``a/b``: 1.10 means every statement took 10 % longer on copy A, and
    each phase's plain paired ratio was off by that factor (phase 1 times it, phase 2 over it).

    Returns: ``(median, low, high)``: the median of those per-round factors and its 95 %
    bootstrap interval.

    Raises: ValueError when the sequences' lengths differ.

    >>> copy_effect([2.5, 5.0], [2.0, 4.0], [1.6, 3.2], [2.0, 4.0])  # sqrt(1.25 / 0.8)
    (1.25, 1.25, 1.25)
    """
    return median_interval(
        _phase_products(phase1_with, phase1_without, phase2_with, phase2_without, -1)
    )


def _phase_products(
    phase1_with: Sequence[float],
    phase1_without: Sequence[float],
    phase2_with: Sequence[float],
    phase2_without: Sequence[float],
    power: int,
) -> list[float]:
    """Per round ``sqrt(phase1 ratio · phase2 ratio ** power)``: ``power`` 1 the index's
    effect, -1 the copies'."""
    phase1 = [w / wo for w, wo in zip(phase1_with, phase1_without, strict=True)]
    phase2 = [w / wo for w, wo in zip(phase2_with, phase2_without, strict=True)]
    return [math.sqrt(one * two**power) for one, two in zip(phase1, phase2, strict=True)]


def median_interval(ratios: Sequence[float]) -> tuple[float, float, float]:
    """The median of ``ratios`` (one per round) and its 95 % bootstrap interval: ``(median,
    low, high)``, from ``BOOTSTRAP`` resamples of the rounds, seeded (the same samples give
    the same interval)."""
    rng = random.Random(0)
    medians = sorted(
        statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(BOOTSTRAP)
    )
    tail = int(BOOTSTRAP * 0.025)
    return statistics.median(ratios), medians[tail], medians[-tail - 1]


def verdict(low: float, high: float, bound: float = 1.05, *, higher_is_better: bool = False) -> str:
    """For a ratio whose harm lies above ``bound`` (a time; ``higher_is_better``: below it, a
    throughput): **HARM** when the whole interval is on the harmful side, "≤ bound" (or
    "≥ bound") when none of it is, otherwise the rounds cannot tell."""
    if higher_is_better:
        if high < bound:
            return " **HARM**"
        return f" ≥ {bound:.2f}" if low >= bound else " (undecided)"
    if low > bound:
        return " **HARM**"
    return f" ≤ {bound:.2f}" if high <= bound else " (undecided)"
