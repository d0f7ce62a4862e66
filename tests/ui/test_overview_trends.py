"""One trend per series (issue 30 item 3), AppTest of the Overview on hand-made samples: the
queue-depth tile, the per-type row and the firing alert's card say the same depth trend and
drain ETA, stated once with its window; a rule without ``predict`` breaches by that trend, a
``predict`` rule by its own window, named; nothing says "grows by" beside it."""

from rendered import plain

from outbox_monitor.alerts.rules_file import RULES_ENV, load_rules
from tests.alerting import evaluate_as_scheduler, oncall_rules, rules_file
from tests.sampler_rows import sampler_pass

RULES = oncall_rules(
    """  - {name: backlog, metric: queue_depth, op: ">", threshold: 40, route: oncall}
  - {name: backlog-soon, metric: queue_depth, op: ">", threshold: 40, predict: 30m,
     route: oncall}
  - {name: type-backlog, metric: queue_depth, by: [event_type], op: ">", threshold: 5,
     severity: critical, route: oncall}
"""
)


def sample(conn, ago: int, depth: int, *, typed: bool = True) -> None:
    """One sampler pass ``ago`` seconds ago: order.paid is the only type (its depth the
    headline's); ``typed`` false: it had no row (none of its rows was open)."""
    sampler_pass(conn, ago, depth, types={"order.paid": (depth, 0)} if typed else None)


def captions(at) -> list[str]:
    return [plain(c.value) for c in at.caption]


def row_of(at, name: str) -> dict:
    (frame,) = [d.value for d in at.dataframe if "depth trend" in d.value.columns]
    (row,) = [r for r in frame.to_dict("records") if r["event type"] == name]
    return row


def card(at) -> str:
    (text,) = [plain(m.value) for m in at.markdown if plain(m.value).startswith("order.paid:")]
    return text


def test_the_tile_the_row_and_the_alert_say_one_trend(
    open_page, environment, rows, settings, db, conn, tmp_path
):
    path = rules_file(tmp_path, RULES)
    environment.setenv(RULES_ENV, str(path))
    for _ in range(10):  # 10 due now
        rows.add(event_type="order.paid", created_ago=600)
    # depth 0 (25 min ago: nothing pending), then 4, 7, 10 at −10, −5 and 0 min
    sample(conn, 1500, 0, typed=False)
    for ago, depth in ((600, 4), (300, 7), (0, 10)):
        sample(conn, ago, depth)
    evaluate_as_scheduler(settings, db, load_rules(path))

    # the tile over all types: the backlog rule's own scope; filtered: the rule's named apart
    for query, scope in (({}, ""), ({"event_type": "order.paid"}, "; all types at +0.60 rows/min")):
        at = open_page("overview", **query)

        assert not at.exception
        said = captions(at)
        # the last 15 min: +3 rows per 5 min = +0.60 rows/min, growing: never drains
        assert "Trend over 15m: +0.60 rows/min · drains never" in said, said
        # backlog breaks by that trend: (40 − 10) / 0.01 rows/s = 3,000 s = 50 min
        assert f"backlog (> 40{scope}): breaches in ≈ 50 min" in said
        # backlog-soon by its own 30 min, as the evaluator fits it, the 0 of 25 min ago in:
        # t̄ = −600, v̄ = 5.25; slope = 8,100 / 1,260,000 = 0.0064286/s = +0.39 rows/min,
        # 9.107 now; (40 − 9.107) / 0.0064286 = 4,806 s ≈ 80 min
        assert (
            "rule backlog-soon predicts over its 30m: breaches in ≈ 80 min at +0.39 rows/min"
            in said
        )
        assert "type-backlog (> 5, per event type): each type's trend is in the table below" in (
            said
        )
        assert not [c for c in said if "grows by" in c]
        row = row_of(at, "order.paid")
        assert (row["depth trend"], row["drain ETA"]) == ("+0.60 rows/min", "never")
        assert "trend over 15m: queue depth +0.60 rows/min, drains never" in card(at)


def test_a_draining_type_drains_at_the_same_time_everywhere(
    open_page, environment, rows, settings, db, conn, tmp_path
):
    path = rules_file(tmp_path, RULES)
    environment.setenv(RULES_ENV, str(path))
    for _ in range(10):
        rows.add(event_type="order.paid", created_ago=600)
    for ago, depth in ((600, 30), (300, 20), (0, 10)):  # −10 per 5 min = −2.00 rows/min
        sample(conn, ago, depth)
    evaluate_as_scheduler(settings, db, load_rules(path))

    at = open_page("overview", event_type="order.paid")

    assert not at.exception
    # 10 left at 2 rows/min: 5 min
    assert "Trend over 15m: −2.00 rows/min · drains in ≈ 5 min" in captions(at)
    assert "backlog (> 40; all types at −2.00 rows/min): no breach at this trend" in captions(at)
    row = row_of(at, "order.paid")
    assert (row["depth trend"], row["drain ETA"]) == ("−2.00 rows/min", "≈ 5 min")
    assert "trend over 15m: queue depth −2.00 rows/min, drains in ≈ 5 min" in card(at)


def test_without_samples_no_trend_is_made_up(open_page, rows):
    rows.add(event_type="order.paid", created_ago=60)

    at = open_page("overview")

    assert not at.exception
    said = captions(at)
    assert "Trend over 15m: none yet (0 samples, needs 3: the scheduler records them)" in said, said
    assert row_of(at, "order.paid")["drain ETA"] == "unknown"
    assert not [c for c in said if "Drain ETA" in c or "grows by" in c]


def test_a_pattern_has_no_trend_and_says_why(open_page, rows, conn):
    rows.add(event_type="order.paid", created_ago=60)
    for ago, depth in ((600, 4), (300, 7), (0, 10)):
        sample(conn, ago, depth)

    at = open_page("overview", event_type="order.%")

    assert not at.exception
    said = captions(at)
    assert "No trend for the pattern order.%: the samples are per event type." in said
    # its one type's row still has its own
    assert row_of(at, "order.paid")["depth trend"] == "+0.60 rows/min"
