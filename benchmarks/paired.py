"""Paired rounds: the median of round-by-round ratios, its 95 % bootstrap interval, a verdict.

Shared by ``claim.py`` and ``flow_control.py``. Two variants timed back to back in one round
share the machine's state (load, caches), so the ratio of each round's pair is steadier than
the ratio of the two medians; the median of those ratios gets a 95 % interval by resampling
the rounds (``BOOTSTRAP`` times, seeded, so a report is reproducible from its samples).
"""

import random
import statistics
from collections.abc import Sequence

BOOTSTRAP = 2000  # resamples of the round-by-round ratios for their median's 95 % interval


def paired_ratio(values: Sequence[float], bases: Sequence[float]) -> tuple[float, float, float]:
    """The median of ``values[i] / bases[i]`` and its 95 % bootstrap interval:
    ``(median, low, high)``."""
    ratios = [value / base for value, base in zip(values, bases, strict=True)]
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
