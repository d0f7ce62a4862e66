"""The controls file's problems name the file, the entry and the field (SPEC §5): YAML 1.2's
text (``yes``, ``1:30``) where a boolean or a duration goes, and numbers of the wrong kind;
a whole number written with a fraction (``5.0``) and ``1e3`` are numbers."""

from pathlib import Path

import pytest

from outbox_monitor.flow.controls_file import ControlsError, load_controls


def problems(path: Path, text: str) -> list[str]:
    path.write_text(text)
    with pytest.raises(ControlsError) as caught:
        load_controls(path)
    return caught.value.problems


def test_text_and_loose_numbers_are_named_by_entry_and_field(tmp_path):
    path = tmp_path / "controls.yml"
    text = (
        "controls:\n"
        '  - {event_type: "crm.%", pause: yes, concurrency: 2.5}\n'
        "  - event_type: sms.%\n"
        "    rate: {per_second: '10', burst: true}\n"
        "    breaker: {window: 1:30, min_attempts: '5', ratio: true}\n"
        "  - {event_type: mail, breaker: on}\n"
    )
    assert problems(path, text) == [
        f'{path}: controls[0] "crm.%": pause: expected true or false, got "yes"',
        f'{path}: controls[0] "crm.%": concurrency: expected a whole number, got 2.5',
        f'{path}: controls[1] "sms.%": rate.per_second: expected a number, got "10"',
        f'{path}: controls[1] "sms.%": rate.burst: expected a whole number, got true',
        f'{path}: controls[1] "sms.%": breaker.window: expected a duration such as 90s, 15m or '
        '1h, got "1:30"',
        f'{path}: controls[1] "sms.%": breaker.min_attempts: expected a whole number, got "5"',
        f'{path}: controls[1] "sms.%": breaker.ratio: expected a number, got true',
        f'{path}: controls[2] "mail": breaker: expected true or false, got "on"',
    ]


def test_whole_numbers_with_a_fraction_and_1e3_are_numbers(tmp_path):
    path = tmp_path / "controls.yml"
    path.write_text(
        "controls:\n"
        "  - event_type: crm.%\n"
        "    pause: True\n"
        "    concurrency: 1e3\n"
        "    rate: {per_second: 2.5e1, burst: 50.0}\n"
        "    breaker: {min_attempts: 5.0, ratio: 1}\n"
    )
    settings = load_controls(path)["crm.%"]
    assert (settings.paused, settings.concurrency_limit, settings.rate_per_second) == (
        True,
        1000,
        25.0,
    )
    assert (settings.burst, settings.breaker_min_attempts, settings.breaker_ratio) == (50, 5, 1.0)
    assert isinstance(settings.concurrency_limit, int) and isinstance(settings.burst, int)
