"""The Fleet page's table (drawn with ``unsafe_allow_html`` for its same-tab links): every
value from a database, the file or libpq is escaped, so none becomes markup or a cell."""

import re

from outbox_monitor.figures.diagnosis import Diagnosis, Line, Part
from outbox_monitor.figures.fleet_figures import OutboxRow
from outbox_monitor.ui.fleet import table

HOSTILE_LINE = Line(
    "<img src=x>",
    "cause unknown",
    (
        Part("<img src=x>", "events?event_type=%3Cimg+src%3Dx%3E", kind="event_type"),
        Part(" — 1 retrying with “"),
        Part("a|b <script>", kind="error"),
        Part("”; cause unknown"),
    ),
)


def test_values_are_escaped_and_the_link_keeps_the_window():
    rows = [
        OutboxRow(
            "billing",
            {"team": "<img src=x onerror=alert(1)>"},
            status="error",
            problem='relation "a|b" does not exist <script>',
        ),
        OutboxRow("orders", queue_depth=1234, oldest_pending_age=90.0, firing_alerts=2),
        OutboxRow("shipping", diagnosis=Diagnosis((HOSTILE_LINE,), "Nothing wrong")),
    ]

    text = table(rows, "6h")

    lines = text.splitlines()
    assert len(lines) == 5 and all(line.count(" | ") == 9 for line in lines[2:])
    # no "<" but the links' and the headline's own tags, each other one escaped (a
    # backslashed "<" is text)
    assert re.findall(r"(?<!\\)<(?!a href=|/a>|code>|/code>|em>|/em>)", text) == []
    assert "\\<script\\>" in text and "a\\|b" in text and "a|b" not in text
    assert '<a href="overview?outbox=billing&amp;window=6h" target="_self">billing</a>' in text
    assert lines[3].split(" | ")[1:8] == ["no alert firing", "–", "1,234", "1m 30s", "–", "–", "2"]
    assert lines[2].split(" | ")[2:8] == ["–"] * 6  # an error: no figure shown
    # the headline's line: its link opens the outbox, its texts escaped
    wrong = lines[4].split(" | ")[2]
    assert wrong.startswith(
        '<a href="events?event_type=%3Cimg+src%3Dx%3E&amp;outbox=shipping" target="_self">'
        "<code>\\<img src\\=x\\></code></a>"
    )
    assert "<em>a\\|b \\<script\\></em>" in wrong


def test_a_status_says_it_is_about_alerts_only():
    # the billing "ok" beside 6,474 failures in 1 h: no alert fired, which is all it says
    quiet = OutboxRow("billing", failed_in_window=6474, firing_alerts=0)
    firing = OutboxRow("orders", status="firing", firing_alerts=1)
    no_state = OutboxRow("shipping", failed_in_window=3)  # init-db not run: no alert state
    lines = table([quiet, firing, no_state], "1h").splitlines()
    statuses = [line.split(" | ")[1] for line in lines[2:]]
    assert statuses == ["no alert firing", ":red[alert firing]", "no alert state"]
    assert lines[2].split(" | ")[6] == "6,474"
