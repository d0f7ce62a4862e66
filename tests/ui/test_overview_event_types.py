"""The Overview's section "By event type" (AppTest): the table's rows computed by hand, each
status named with the rule that set it, links to Events and Dead letters pre-filtered, the
unscoped rule above it, and the history split by event type."""

from pathlib import Path

import pandas as pd
import pytest
import yaml

from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.rules_file import RULES_ENV, load_rules
from tests.integration.test_by_event_type import RULES, seed


@pytest.fixture
def ruleset(environment: pytest.MonkeyPatch, tmp_path: Path):
    path = tmp_path / "alerts.yml"
    path.write_text(yaml.safe_dump(RULES))
    environment.setenv(RULES_ENV, str(path))
    return load_rules(path)


PAYMENT_FAILED = "payment-failed [payment.%, per event type, over 15m]"
"""A rule as the table names it: with its scope (issue 30 item 4)."""


def by_type(at) -> dict[str, dict]:
    (frame,) = [d.value for d in at.dataframe if "depth trend" in d.value.columns]
    return {row["event type"]: row for row in frame.to_dict("records")}


def test_the_table_names_each_type_its_status_and_the_rule_that_set_it(
    open_page, ruleset, db, rows, conn
):
    seed(rows, conn)
    rows.add(event_type="order.paid", created_ago=10)  # queue depth 6 > 5: backlog fires
    Evaluator(db, ruleset).run_once()

    at = open_page("overview")

    assert not at.exception
    table = by_type(at)
    # payment.captured first: a firing instance names it (then stuck, dead letters, depth)
    assert list(table) == [
        "payment.captured",
        "order.paid",
        "notification.email",
        "payment.refunded",
    ]
    shown = {name: (row["status"], row["set by"]) for name, row in table.items()}
    assert shown == {
        # no rule watches it apart: the backlog over all types (firing) holds its rows
        "order.paid": ("FIRING for all types", "backlog [all types]"),
        "payment.captured": ("failing", PAYMENT_FAILED),
        "notification.email": ("backlogged", "notifications-late [notification.%]"),
        "payment.refunded": ("healthy", PAYMENT_FAILED),
    }
    order = table["order.paid"]
    assert order["flow control"] == "paused"
    assert (order["queue depth"], order["pending"], order["processing"], order["stuck"]) == (
        4,
        4,
        1,
        1,
    )
    assert table["payment.captured"]["failed"] == 2
    assert table["notification.email"]["P95 latency"] == "48s"  # in its unit, seconds
    assert table["payment.captured"]["dead letters"] == (
        "dead_letters?event_type=payment.captured&window=1h"
    )
    assert table["order.paid"]["events"] == "events?event_type=order.paid&window=1h"
    # the unscoped backlog rule labels no type: it is shown above the table
    assert any("backlog" in w.value and "all event types" in w.value for w in at.warning)


def test_thirty_types_show_the_top_n_and_one_other_row(open_page, environment, ruleset, conn):
    from tests.integration.test_by_event_type import insert_types

    insert_types(conn, 30)
    environment.setenv("OUTBOX_MONITOR_OVERVIEW_TOP_EVENT_TYPES", "5")

    table = by_type(open_page("overview"))

    assert list(table) == ["t29", "t28", "t27", "t26", "t25", "other (25 event types)"]
    other = table["other (25 event types)"]
    assert (other["queue depth"], other["status"]) == (325, "ok for all types")  # backlog's
    assert pd.isna(other["events"]) and other["P95 latency"] == "–"


def test_history_split_by_event_type(open_page, ruleset, rows, conn):
    seed(rows, conn)
    for ago, depth in ((120, 1), (60, 2)):
        conn.execute(
            "INSERT INTO outbox_monitor.event_type_samples (table_name, sampled_at, event_type,"
            " queue_depth, failed_in_window, retrying)"
            " VALUES ('public.integration_outbox', now() - make_interval(secs => %s),"
            " 'order.paid', %s, 0, 0)",
            (ago, depth),
        )

    assert list(by_type(open_page("overview"))["order.paid"]["depth"]) == [1.0, 2.0]
    at = open_page("overview", view="Charts")

    assert not at.exception
    assert [d.key for d in at.dataframe] == ["overview.retry_groups"]  # the table's tab: not run
    split = at.multiselect(key="overview.split_event_types")
    assert split.value == ["order.paid"] and split.options == ["order.paid"]
    charts = len(at.get("vega_lite_chart"))
    at = split.unselect("order.paid").run()
    assert len(at.get("vega_lite_chart")) == charts - 1


def test_a_type_holding_a_percent_sign_links_nowhere_rather_than_to_a_pattern(open_page, rows):
    # on Events or Dead letters, "pay%day" is a LIKE pattern: it would list (and replay) payXday
    rows.add(event_type="pay%day", status="failed", processed_ago=30, attempts=10)
    rows.add(event_type="payXday", status="failed", processed_ago=30, attempts=10)

    table = by_type(open_page("overview"))

    assert pd.isna(table["pay%day"]["events"]) and pd.isna(table["pay%day"]["dead letters"])
    assert table["payXday"]["events"] == "events?event_type=payXday&window=1h"


@pytest.mark.parametrize("name", ["rows", "sampled_at"])
def test_a_type_named_like_the_charts_own_columns_is_drawn(open_page, rows, conn, name):
    # the split history pivoted types into column names: "rows" (the y axis) and
    # "sampled_at" (the x axis) collided with the chart's own
    rows.add(event_type=name, created_ago=30)
    for ago, depth in ((120, 1), (60, 2)):
        conn.execute(
            "INSERT INTO outbox_monitor.event_type_samples (table_name, sampled_at, event_type,"
            " queue_depth, failed_in_window, retrying)"
            " VALUES ('public.integration_outbox', now() - make_interval(secs => %s),"
            " %s, %s, 0, 0)",
            (ago, name, depth),
        )

    at = open_page("overview", view="Charts")

    assert not at.exception
    assert not [e.value for e in at.error]
    split = at.multiselect(key="overview.split_event_types")
    assert split.value == [name]
    charts = len(at.get("vega_lite_chart"))
    at = split.unselect(name).run()
    assert len(at.get("vega_lite_chart")) == charts - 1  # the split chart was drawn


def test_a_type_named_past_a_btree_entry_is_sampled_and_has_its_sparkline(open_page, rows, db):
    from outbox_monitor.service.sampler import record_sample
    from tests.integration.test_long_names import LONG

    rows.add(event_type=LONG, event_key="k:long", created_ago=30)
    record_sample(db)
    record_sample(db)

    at = open_page("overview")

    assert not at.exception and not [e.value for e in at.error]
    assert list(by_type(at)[LONG]["depth"]) == [1.0, 1.0]
