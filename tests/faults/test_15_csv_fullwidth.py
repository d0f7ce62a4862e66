"""Issue 10 item 15: the Events CSV export neutralises formulas written with the full-width
signs (＝ ＋ － ＠, which spreadsheets in CJK locales take as = + - @) as it does the ASCII
ones (real Postgres, `events.events_csv`)."""

import csv
import io

import pytest

from outbox_monitor.browse import events
from outbox_monitor.browse.events import EventFilter
from outbox_monitor.privacy.redaction import redactor_for

FORMULAS = [
    '＝HYPERLINK("http://x.example","y")',
    "＋1+cmd|' /C calc'!A0",
    "－2+3",
    "＠SUM(1+1)*cmd|' /C calc'!A0",
    "﹦1+1",  # the small form of =, also folded to = by NFKC
    "=1+1",
    "\t=1+1",
]
PLAIN = ["order:42", "ｏｒｄｅｒ：42", "café＝ok"]


@pytest.mark.parametrize("key", FORMULAS + PLAIN)
def test_a_formula_in_any_width_is_exported_as_text(db, rows, key):
    row = rows.add(status="failed", processed_ago=30, event_key=key, last_error=key)

    text = events.events_csv(db, redactor_for(db.settings), EventFilter(event_type="order.paid"))
    [exported] = list(csv.DictReader(io.StringIO(text)))

    assert int(exported["id"]) == row
    expected = "'" + key if key in FORMULAS else key
    assert (exported["event_key"], exported["last_error"]) == (expected, expected)
