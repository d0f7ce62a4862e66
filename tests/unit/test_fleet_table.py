"""The Fleet page's table (drawn with ``unsafe_allow_html`` for its same-tab links): every
value from a database, the file or libpq is escaped, so none becomes markup or a cell."""

import re

from outbox_monitor.figures.fleet_figures import OutboxRow
from outbox_monitor.ui.fleet import table


def test_values_are_escaped_and_the_link_keeps_the_window():
    rows = [
        OutboxRow(
            "billing",
            {"team": "<img src=x onerror=alert(1)>"},
            status="error",
            problem='relation "a|b" does not exist <script>',
        ),
        OutboxRow("orders", queue_depth=1234, oldest_pending_age=90.0, firing_alerts=2),
    ]

    text = table(rows, "6h")

    lines = text.splitlines()
    assert len(lines) == 4 and all(line.count(" | ") == 8 for line in lines[2:])
    # no "<" but the links' own, each other one escaped (a backslashed "<" is text)
    assert re.findall(r"(?<!\\)<(?!a href=|/a>)", text) == []
    assert "\\<script\\>" in text and "a\\|b" in text and "a|b" not in text
    assert '<a href="overview?outbox=billing&amp;window=6h" target="_self">billing</a>' in text
    assert lines[3].split(" | ")[1:7] == ["no alert firing", "1,234", "1m 30s", "–", "–", "2"]
    assert lines[2].split(" | ")[2:7] == ["–"] * 5  # an error: no figure shown


def test_a_status_says_it_is_about_alerts_only():
    # the billing "ok" beside 6,474 failures in 1 h: no alert fired, which is all it says
    quiet = OutboxRow("billing", failed_in_window=6474, firing_alerts=0)
    firing = OutboxRow("orders", status="firing", firing_alerts=1)
    no_state = OutboxRow("shipping", failed_in_window=3)  # init-db not run: no alert state
    lines = table([quiet, firing, no_state], "1h").splitlines()
    statuses = [line.split(" | ")[1] for line in lines[2:]]
    assert statuses == ["no alert firing", ":red[alert firing]", "no alert state"]
    assert lines[2].split(" | ")[5] == "6,474"
