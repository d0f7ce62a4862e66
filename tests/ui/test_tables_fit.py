"""Every page's tables at 1440 px and in words (issue 30 items 5 and 6), and every page's data
before its definitions (item 9), in AppTest on rows that fill every table
(``tests/tables_rows.py``). What "fits" and "in words" mean: ``tests/ui/grids.py``."""

import pandas as pd
import pytest
from grids import assert_page_tables
from rendered import plain

from outbox_monitor.alerts.rules_file import RULES_ENV
from outbox_monitor.durations import format_duration
from outbox_monitor.figures import error_grouping
from outbox_monitor.ui import headline
from tests.health import idle_in_transaction
from tests.tables_rows import KEYS, LONG_ERROR, seed_every_table, write_rules

DATA = {"metric", "dataframe", "arrow_vega_lite_chart", "vega_lite_chart"}
ALERTS = {"warning", "error", "info", "success"}
TEXT = {"caption", "markdown"}
ONE_LINE = 140
"""Characters of a line of text in the main area at 1440 px: a page's summary holds in one."""


@pytest.fixture
def seeded(environment, tmp_path, conn, db, rows) -> None:
    path = write_rules(tmp_path)
    environment.setenv(RULES_ENV, str(path))
    seed_every_table(conn, db, rows, path)


def long_error_group(db) -> str:
    [group] = [g for g in error_grouping.error_groups(db) if "HTTP 502" in g["fingerprint"]]
    return group["group_id"]


def open_seeded(open_page, page: str, db):
    """The page on the seeded rows: Dead letters with the long error's group chosen."""
    query = {"error_group": long_error_group(db)} if page == "dead_letters" else {}
    at = open_page(page, **query)
    assert not at.exception
    return at


def leaves(node):
    """The page's elements in order, an expander's or popover's content left out (help the
    reader opens)."""
    if getattr(node, "type", None) in ("expander", "popover"):
        return
    children = getattr(node, "children", None)
    if children is None:
        yield node
        return
    for index in sorted(children):
        yield from leaves(children[index])


@pytest.mark.parametrize("page", sorted(KEYS))
def test_every_table_shows_its_key_columns_in_words_within_1440_px(
    seeded, open_page, page, dsn, db
):
    with idle_in_transaction(dsn, "forgotten-report"):  # a holder of the xmin horizon
        at = open_seeded(open_page, page, db)
        assert_page_tables(at, KEYS[page])


def is_headline(element) -> bool:
    """A line of the Overview's "what is wrong" headline (``ui.headline``): data."""
    return element.type == "markdown" and element.value.startswith(headline.LINE_ICON + " ")


@pytest.mark.parametrize("page", sorted(KEYS))
def test_every_page_opens_with_data_and_keeps_definitions_in_help(seeded, open_page, page, db):
    at = open_seeded(open_page, page, db)
    elements = list(leaves(at.main))
    start = next(i for i, e in enumerate(elements) if e.type == "title") + 1
    before_data = []
    for element in elements[start:]:
        if element.type in DATA or element.type in ALERTS or is_headline(element):
            break
        if element.type in TEXT:
            before_data.append(plain(element.value))
    long = [text for text in before_data if len(text) > ONE_LINE]
    assert not long, f"{page}: definitions before the data: {long}"
    first = next(e for e in elements[start:] if e.type in DATA | ALERTS | TEXT)
    assert first.type in DATA | ALERTS or is_headline(first) or len(plain(first.value)) <= ONE_LINE


def test_values_are_written_with_their_units_and_never_none(seeded, open_page, db):
    controls = open_seeded(open_page, "controls", db)
    grids = {d.key: d.value for d in controls.dataframe}
    closed, opened = grids["controls.transitions"].to_dict("records")
    # timeline_rows: opened after 19 of 20 failed outcomes, 30 s cool-down; closed: no values,
    # drawn as "–" (the grid's placeholder), never "None"
    assert (opened["transition"], opened["outcomes"], opened["failures"]) == ("opened", 20, 19)
    assert (closed["transition"], closed["cooldown"], opened["cooldown"]) == ("closed", "–", "30s")
    assert pd.isna(closed["outcomes"]) and pd.isna(closed["failures"])
    assert controls.dataframe(key="controls.transitions").proto.placeholder == "–"
    breaker = {row["filter"]: row for row in grids["controls.in_force"].to_dict("records")}["crm.%"]
    # opened 30 s ago with a 2 min cool-down now: the probe goes out in about 1m 30s
    assert breaker["next probe"].startswith("in 1m 2") or breaker["next probe"].startswith(
        "in 1m 3"
    ), breaker

    alerts = open_seeded(open_page, "alerts", db)
    changes = {
        (t["rule"], t["change"]): t["value"]
        for t in alerts.dataframe(key="alerts.transitions").value.to_dict("records")
    }
    # notifications-late watches oldest_pending_age (seconds): its row created 1,200 s ago
    late = changes[("notifications-late", "inactive → firing")]
    assert late in {format_duration(seconds) for seconds in range(1200, 1206)}, late
    assert changes[("stuck-lock", "firing → inactive")] == "0"  # a rule not in the file

    actions = open_seeded(open_page, "actions", db)
    audit = actions.dataframe(key="actions.audit").value.to_dict("records")
    filters = {(row["actor"], row["action"]): row["filter"] for row in audit}
    assert filters[("alice@example.com", "pause")] == "event_type order.% · reason deploy"
    assert filters[("bob", "replay")] == "event_type order.paid · status failed"
    # a control change's before and after, in words: the breaker set on crm.% (open_breaker)
    change = filters[("oncall@example.com", "breaker")]
    assert "after (breaker yes · breaker_cooldown_seconds 30" in change, change


def test_a_long_value_is_wrapped_and_shown_whole_for_the_chosen_row(seeded, open_page, db):
    assert len(LONG_ERROR) == 200
    at = open_seeded(open_page, "dead_letters", db)
    rows = at.dataframe(key="dead_letters.rows")
    assert list(rows.value["last_error"]) == [LONG_ERROR]
    assert rows.proto.row_height >= 104  # wrapped: five lines of 14 px text at least

    at.session_state["dead_letters.rows"] = {"selection": {"rows": [0], "columns": []}}
    at.run()

    [row_id] = list(at.dataframe(key="dead_letters.rows").value["id"])
    assert any(e.label == f"Row {row_id}" for e in at.expander)
    assert f"Row {row_id} · full last error" in [plain(c.value) for c in at.caption]
    assert LONG_ERROR in [c.value for c in at.code]
