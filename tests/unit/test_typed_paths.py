"""How a typed page path is matched to a page (issue 30 item 7)."""

from types import SimpleNamespace

import pytest

from outbox_monitor.ui.typed_paths import meant_page, spelling

PAGES = [
    SimpleNamespace(url_path="", title="Overview"),
    SimpleNamespace(url_path="overview", title="Overview"),
    SimpleNamespace(url_path="dead_letters", title="Dead letters"),
    SimpleNamespace(url_path="events", title="Events"),
]


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("dead-letters", "dead_letters"),
        ("Dead_Letters", "dead_letters"),
        ("dead letters", "dead_letters"),
        ("DEADLETTERS", "dead_letters"),
        ("Overview", "overview"),
        ("event", None),
        ("letters", None),
        ("", None),
    ],
)
def test_a_spelling_names_one_page_or_none(typed, expected):
    page = meant_page(typed, PAGES)
    assert (page.url_path if page else None) == expected


def test_spelling_keeps_letters_and_digits_only():
    assert spelling("Dead-Letters_2 ") == "deadletters2"
