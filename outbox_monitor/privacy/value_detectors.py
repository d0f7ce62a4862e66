"""Value detectors of payload redaction (``OUTBOX_MONITOR_REDACT_VALUES``): card numbers
(Luhn-valid runs of 13–19 digits), e-mail addresses (also URL-encoded) and regular
expressions, each a function from text to text with every match replaced by ``[redacted]``.

Nothing here imports Streamlit or the settings module (``config.settings`` imports
``check_value_detector`` to validate ``OUTBOX_MONITOR_REDACT_VALUES`` at load).
"""

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from itertools import accumulate

REDACTED = "[redacted]"
"""What a redacted value or a redacted part of a text becomes."""
CARD = "card"
EMAIL = "email"
CARD_MIN_DIGITS = 13
CARD_MAX_DIGITS = 19

# starts only where a local part can start, so a long word is not re-scanned from each char;
# the @ may be URL-encoded (frank%40example.com in a query string or a logged URL)
_EMAIL = re.compile(r"(?<![\w.+%-])[\w.+%-]+(?:@|%40)[\w-]+(?:\.[\w-]+)*\.[^\W\d_]{2,}")
# digit groups separated by 1–3 spaces or dashes ("4111 - 1111"); not inside a longer run
_DIGIT_RUN = re.compile(r"(?<![0-9])[0-9]+(?:[ -]{1,3}[0-9]+)*(?![0-9])")
_DIGIT_GROUP = re.compile(r"[0-9]+")

_DOUBLED = (0, 2, 4, 6, 8, 1, 3, 5, 7, 9)
"""A Luhn digit doubled (minus 9 when over 9)."""


def _parity_sums(values: list[int], parity: int) -> list[int]:
    """Prefix sums (with a leading 0) of ``values`` counting only positions of ``parity``."""
    return [0, *accumulate(v if i % 2 == parity else 0 for i, v in enumerate(values))]


def _card_spans(run: str) -> list[tuple[int, int]]:
    """``(start, end)`` in ``run`` (digit groups joined by spaces or dashes) of
    each card number: the longest Luhn-valid stretch of 13–19 digits of whole groups,
    left to right."""
    spans = [(g.start(), g.end()) for g in _DIGIT_GROUP.finditer(run)]
    if all(end - start > CARD_MAX_DIGITS for start, end in spans):
        return []
    starts, ends, count = [], [], 0  # digit offsets of each group among the run's digits
    for start, end in spans:
        starts.append(count)
        count += end - start
        ends.append(count)
    # the Luhn sum of any stretch in O(1): prefix sums of the digits and of their
    # doubles, each over the positions of one parity
    digits = [ord(char) - 48 for char in run if char not in " -"]
    twice = [_DOUBLED[digit] for digit in digits]
    plain = [_parity_sums(digits, parity) for parity in (0, 1)]
    doubled = [_parity_sums(twice, parity) for parity in (0, 1)]
    found: list[tuple[int, int]] = []
    group = 0
    while group < len(spans):
        first = starts[group]
        shortest = bisect_left(ends, first + CARD_MIN_DIGITS, lo=group)
        longest = bisect_right(ends, first + CARD_MAX_DIGITS, lo=group) - 1
        for last in range(longest, shortest - 1, -1):
            stop = ends[last]
            kept = (stop - 1) % 2  # the last digit's parity: those digits are not doubled
            total = plain[kept][stop] - plain[kept][first]
            total += doubled[1 - kept][stop] - doubled[1 - kept][first]
            if total % 10 == 0:
                found.append((spans[group][0], spans[last][1]))
                group = last
                break
        group += 1
    return found


def redact_cards(text: str) -> str:
    """Replace every card number in ``text`` with ``[redacted]``.

    A card number is 13–19 digits, Luhn-valid, written as one run or in groups separated
    by up to three spaces or dashes (``4111 1111 1111 1111``, ``4111-1111-1111-1111``),
    and not part of a longer digit run. Inside a longer run of groups (``2024-01-15 4111…``) the
    longest Luhn-valid stretch of whole groups is taken, left to right.
    """
    pieces: list[str] = []
    last = 0
    for run in _DIGIT_RUN.finditer(text):
        if len(run.group()) < CARD_MIN_DIGITS:
            continue
        for start, end in _card_spans(run.group()):
            pieces.append(text[last : run.start() + start])
            pieces.append(REDACTED)
            last = run.start() + end
    if not pieces:
        return text
    pieces.append(text[last:])
    return "".join(pieces)


def _regex_detector(pattern: re.Pattern[str]) -> Callable[[str], str]:
    return lambda text: pattern.sub(REDACTED, text)


def check_value_detector(entry: str) -> Callable[[str], str]:
    """The detector of one ``OUTBOX_MONITOR_REDACT_VALUES`` entry.

    Args:
        entry: ``card``, ``email`` (either in any case) or a Python regular expression
            (a comma cannot be written: the variable is a comma list).

    Returns:
        A function from text to text with every match replaced by ``[redacted]``.

    Raises:
        ValueError: the entry is not a valid regular expression, or it matches the empty
            text (it would redact between every character); the message names the entry.
    """
    name = entry.strip().lower()
    if name == CARD:
        return redact_cards
    if name == EMAIL:
        return _regex_detector(_EMAIL)
    try:
        pattern = re.compile(entry)
    except re.error as error:
        raise ValueError(
            f"{entry!r} is not a regular expression ({error}); entries are card, email or "
            "a Python regular expression"
        ) from None
    if pattern.search("") is not None:
        raise ValueError(
            f"{entry!r} matches the empty text, so it would redact everywhere; give a "
            "pattern that needs at least one character"
        )
    return _regex_detector(pattern)
