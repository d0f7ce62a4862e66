from datetime import UTC, datetime

import pytest

from outbox_monitor.durations import format_duration, parse_duration, parse_instant, until_label


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("15m", 900.0),
        ("1h", 3600.0),
        ("30d", 2_592_000.0),
        ("2w", 1_209_600.0),
        ("45", 45.0),
        (" 1.5h ", 5400.0),
        (7, 7.0),
        ("0s", 0.0),
    ],
)
def test_parse_duration_units(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["abc", "15 minutes", "-5m", "1h30m", "", "m"])
def test_parse_duration_rejects_with_the_accepted_forms(text):
    with pytest.raises(ValueError, match="90s, 15m, 1h or 30d"):
        parse_duration(text)


def test_parse_instant_relative_to_given_now():
    now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    assert parse_instant("2h", now) == datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def test_parse_instant_iso_without_zone_is_utc():
    assert parse_instant("2026-11-01T08:30:00") == datetime(2026, 11, 1, 8, 30, tzinfo=UTC)


def test_parse_instant_rejects_garbage():
    with pytest.raises(ValueError, match="ISO-8601"):
        parse_instant("yesterday")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "–"),
        (0.25, "0.2s"),
        (42.4, "42s"),
        (5400, "1h 30m"),
        (90061, "1d 1h"),
        (600, "10m 0s"),
        (7203, "2h 0m"),
    ],
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize("text", ["9999999d", "99999999999999999999d", 4e9])
def test_durations_beyond_100_years_are_refused(text):
    with pytest.raises(ValueError, match="longer than 100 years"):
        parse_duration(text)


def test_relative_instants_stay_in_range():
    now = datetime(2026, 11, 29, tzinfo=UTC)
    assert parse_instant("36500d", now).year == 1926
    with pytest.raises(ValueError, match="longer than 100 years"):
        parse_instant("9999999d", now)


NOW = datetime(2026, 12, 4, 13, 42, tzinfo=UTC)


@pytest.mark.parametrize(
    ("until", "now", "text"),
    [
        (datetime(2026, 12, 4, 14, 5, tzinfo=UTC), NOW, "14:05 UTC (in 23m 0s)"),
        (datetime(2026, 12, 5, 15, 42, tzinfo=UTC), NOW, "2026-12-05 15:42 UTC (in 1d 2h)"),
        (datetime(2026, 12, 4, 13, 40, tzinfo=UTC), NOW, "13:40 UTC (2m 0s ago)"),
        (datetime(2026, 12, 4, 14, 5, tzinfo=UTC), None, "2026-12-04 14:05 UTC"),
    ],
)
def test_until_label_says_when_something_ends_in_words(until, now, text):
    assert until_label(until, now) == text
