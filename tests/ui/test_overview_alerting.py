"""The Overview's alerting (issue 15 item 3): badges are the rules' own persisted state, scoped
like each rule (the issue's exact example: the tile over all event types reads 7m 26s while
`notifications-late` over `notification.%` is fine at 1m 4s; failures in 24 h while the payment
rule has no instance), the firing alerts section names the instance, a stale scheduler is said,
and keep_firing_for is said."""

import re
from datetime import UTC, datetime, timedelta

from rendered import plain

from outbox_monitor.alerts.rules_file import RULES_ENV, load_rules
from outbox_monitor.figures.error_grouping import error_groups
from outbox_monitor.ui import alert_rules, firing_alerts, rule_state
from tests.alerting import evaluate_as_scheduler, rules_file
from tests.flow import control
from tests.sampler_rows import sampler_pass

RULES = """
version: 1
defaults: {interval: 30s, for: 0s, keep_firing_for: 2m}
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL}
rules:
  - {name: notifications-late, metric: oldest_pending_age, event_type: "notification.%",
     op: ">", threshold: 5m, severity: critical, route: oncall}
  - {name: backlog, metric: queue_depth, op: ">", threshold: 1000, for: 10m, route: oncall}
  - {name: payment-failed, metric: failed_in_window, event_type: "payment.%", window: 15m,
     by: [event_type], op: ">", threshold: 0, severity: critical, route: oncall}
  - {name: stuck-lock, metric: stuck_locks, op: ">", threshold: 0, route: oncall}
"""


def seed(rows) -> None:
    rows.add(event_type="order.paid", created_ago=446)  # all types: oldest 7m 26s
    rows.add(event_type="notification.email", created_ago=63.7)  # the rule's scope: 1m 4s
    rows.add_failed(event_type="order.paid", processed_ago=2 * 3600)  # in 24 h, not payment.%
    rows.add(status="processing", created_ago=25 * 60, locked_ago=20 * 60)  # a stuck lock


def type_samples(conn, event_type: str, samples: list[tuple[int, int, int]]) -> None:
    """The sampler's passes: ``(seconds ago, queue depth, failed in window)`` each, of the
    only type (the headline depth the same)."""
    for ago, depth, failed in samples:
        sampler_pass(conn, ago, depth, types={event_type: (depth, failed)})


def card_text(at, rule: str, context: str) -> str:
    """A firing card's lines (the rule's markdown) and its type's context (written after the
    tiles, its own markdown), joined."""
    (head,) = [plain(m.value) for m in at.markdown if rule in plain(m.value)]
    (tail,) = [plain(m.value) for m in at.markdown if plain(m.value).startswith(context)]
    return f"{head}\n{tail}"


def tiles(at) -> dict[str, tuple[str, str]]:
    return {m.label: (m.value, m.delta) for m in at.metric}


def seconds_shown(text: str) -> int:
    """``"7m 26s"`` → 446: a duration as the page writes it (minutes and seconds)."""
    minutes, seconds = re.fullmatch(r"(\d+)m (\d+)s", text).groups()
    return int(minutes) * 60 + int(seconds)


def seconds_since(conn, instant: datetime) -> float:
    """Database seconds from ``instant`` to now."""
    return (conn.execute("SELECT now() AS now").fetchone()["now"] - instant).total_seconds()


def test_badges_are_the_rules_state_scoped_like_the_rule(
    open_page, environment, rows, settings, db, tmp_path
):
    path = rules_file(tmp_path, RULES)
    environment.setenv(RULES_ENV, str(path))
    seed(rows)
    evaluate_as_scheduler(settings, db, load_rules(path))
    evaluated = seconds_since(rows.conn, rows.t0)  # the evaluation was at most this after t0

    at = open_page("overview")

    opened = seconds_since(rows.conn, rows.t0)  # the page's figures, at most this after t0
    assert not at.exception
    shown = tiles(at)
    captions = [plain(c.value) for c in at.caption]
    value, badge = shown["Oldest pending age"]
    # the figure over all event types, read by the page: 446 s at t0, older by the page's time
    assert 446 - 0.5 <= seconds_shown(value) <= 446 + opened + 0.5
    # notifications-late watches notification.% only: no rule watches all types' age (issue 30
    # item 4), and the caption says what the narrower rule says
    assert badge == "no rule watches this"
    # the rule's persisted value, at the evaluation's instant: 63.7 s at t0 (1m 4s on a quiet
    # machine), older by the time the evaluation came after t0; whole seconds on the page
    head = "No rule watches all of this; notifications-late: ok for notification.% only: "
    (state,) = [c for c in captions if c.startswith(head)]
    age = re.fullmatch(re.escape(head) + r"(.+)", state)
    assert age, state
    assert 63.7 - 0.5 <= seconds_shown(age.group(1)) <= 63.7 + evaluated + 0.5
    assert shown["Failed (24 h)"] == ("1", "no rule watches this")
    assert (
        "No rule watches all of this; payment-failed: ok for each payment.% type over 15m only"
        in captions
    )
    assert shown["Queue depth"] == ("2", "ok for all types: 2")
    assert "backlog [all types]: 2 vs > 1,000" in captions
    assert shown["Stuck locks"] == ("1", "FIRING for all types: 1")
    assert "stuck-lock [all types]: 1 vs > 0" in captions
    assert shown["P95 latency"] == ("–", "no rule watches this")
    assert shown["xmin horizon held"][1] == "no rule watches this"
    assert shown["Retrying"][1] == "no rule watches this"  # the rules file watches none
    assert captions.count("No rule watches this figure.") == 3
    assert (
        "notifications-late (> 5m 0s for notification.%): no trend of a pattern (the samples "
        "are per event type)" in captions
    )
    colours = {m.label: m.proto.color for m in at.metric if m.delta}
    assert colours["Stuck locks"] != colours["Oldest pending age"]

    section = [plain(m.value) for m in at.markdown if "stuck-lock" in plain(m.value)]
    assert len(section) == 1
    assert section[0].startswith(
        ":material/local_fire_department: **FIRING** · warning · stuck-lock [all types]: 1 vs > 0"
    )
    links = [link for link in at.get("page_link") if link.proto.label == "Open alert"]
    assert len(links) == 1 and links[0].proto.page == "alerts"
    assert links[0].proto.query_string == "rule=stuck-lock&instance="
    # no samples: no trend, so no drain ETA nor breach time made up from the window's rates
    trend = "Trend over 15m: none yet (0 samples, needs 3: the scheduler records them)"
    assert captions.count(trend) == 2  # queue depth and oldest age
    assert "backlog (> 1,000): no forecast" in captions


def test_a_stalled_scheduler_is_said_instead_of_stale_badges(
    open_page, environment, rows, settings, db, conn, tmp_path
):
    path = rules_file(tmp_path, RULES)
    environment.setenv(RULES_ENV, str(path))
    seed(rows)
    evaluate_as_scheduler(settings, db, load_rules(path))
    conn.execute(
        "UPDATE outbox_monitor.leader_leases SET evaluated_at = now() - interval '10 minutes',"
        " acquired_at = now() - interval '1 hour'"
    )

    at = open_page("overview")

    shown = tiles(at)
    assert shown["Stuck locks"] == ("1", "state unknown")
    assert shown["P95 latency"][1] == "no rule watches this"
    assert "Alerting is not running: see above." in [plain(c.value) for c in at.caption]
    assert any("Alert states unknown" in w.value for w in at.warning)
    assert any("Alerting is stalled" in e.value for e in at.error)
    assert not [m for m in at.markdown if "stuck-lock" in plain(m.value)]


def test_no_scheduler_yet_is_said(open_page, environment, rows, tmp_path):
    environment.setenv(RULES_ENV, str(rules_file(tmp_path, RULES)))
    seed(rows)

    at = open_page("overview")

    assert tiles(at)["Queue depth"][1] == "state unknown"
    (note,) = [i for i in at.info if "Alert states unknown" in i.value]
    assert "no scheduler has evaluated the rules yet" in plain(note.value)
    assert not at.warning  # a dashboard without a scheduler is not an outage


def test_an_alert_held_open_by_keep_firing_for_says_so(tmp_path):
    ruleset = load_rules(rules_file(tmp_path, RULES))
    now = datetime(2026, 1, 1, 14, 5, tzinfo=UTC)
    held = {
        "rule": "stuck-lock",
        "instance": "",
        "state": "firing",
        "value": 0.0,
        "firing_since": now - timedelta(minutes=5),
        "cleared_since": now - timedelta(seconds=40),
    }
    badge = rule_state.badge(
        "stuck_locks", ruleset, [held], down=None, now=now, default_window=3600.0
    )
    assert badge.text == "FIRING for all types: 0"
    note = "held by keep_firing_for 2m: clear since 2026-01-01 14:04:20 UTC (40s ago)"
    assert badge.line == f"stuck-lock [all types]: 0 vs > 0 ({note})"
    [row] = firing_alerts.firing_rows(ruleset, [held], now)
    assert row["held"] == note
    assert row["ago"] == "5m 0s"


def test_the_alerts_page_says_an_alert_is_held_open(tmp_path):
    ruleset = load_rules(rules_file(tmp_path, RULES))
    now = datetime(2026, 1, 1, 14, 5, tzinfo=UTC)
    held = {"rule": "stuck-lock", "instance": "", "state": "firing", "value": 0.0}
    held |= {
        "firing_since": now - timedelta(minutes=5),
        "cleared_since": now - timedelta(minutes=1),
    }
    breached = held | {"instance": "event_type=x", "value": 2.0, "cleared_since": None}
    rows = {r["instance"]: r for r in alert_rules.state_rows(ruleset, [held, breached], now)}
    assert rows["all"]["state"] == (
        "FIRING (held by keep_firing_for 2m: clear since 2026-01-01 14:04:00 UTC (1m 0s ago))"
    )
    assert rows["event_type=x"]["state"] == "FIRING"


def test_a_pending_alert_says_how_long_of_its_for(tmp_path):
    ruleset = load_rules(rules_file(tmp_path, RULES))
    now = datetime(2026, 1, 1, 14, 5, tzinfo=UTC)
    pending = {
        "rule": "backlog",
        "instance": "",
        "state": "pending",
        "value": 1200.0,
        "pending_since": now - timedelta(minutes=2),
    }
    badge = rule_state.badge(
        "queue_depth", ruleset, [pending], down=None, now=now, default_window=3600.0
    )
    assert (badge.text, badge.color) == ("pending for all types: 1,200", "orange")
    assert badge.line == "backlog [all types]: 1,200 vs > 1,000 (pending 2m 0s of for 10m)"


FAILING = """
version: 1
defaults: {interval: 30s, for: 0s}
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL}
rules:
  - {name: payment-failed, metric: failed_in_window, window: 1h, by: [event_type],
     op: ">", threshold: 0, severity: critical, route: oncall}
"""


def test_a_firing_type_says_its_trend_eta_and_links_to_its_replay(
    open_page, environment, rows, settings, db, conn, tmp_path
):
    path = rules_file(tmp_path, FAILING)
    environment.setenv(RULES_ENV, str(path))
    for ago in (60, 120, 180):  # 3 dead letters in the hour, one error group
        rows.add_failed(
            event_type="payment.captured",
            created_ago=300,
            processed_ago=ago,
            last_error="HTTP 503 from payments",
        )
    for _ in range(4):  # 4 due now: queue depth 4, oldest pending 5 min
        rows.add(event_type="payment.captured", created_ago=300)
    # the sampler's history of the type: 1, 2, 3 dead letters at −10, −5 and 0 min → +0.2/min
    type_samples(conn, "payment.captured", [(600, 4, 1), (300, 4, 2), (0, 4, 3)])
    evaluate_as_scheduler(settings, db, load_rules(path))

    at = open_page("overview")

    assert not at.exception
    text = card_text(at, "payment-failed", "payment.captured:")
    assert (
        "**FIRING** · critical · payment-failed [all types, per event type, over 1h] "
        "payment.captured: 3" in text
    )
    assert "payment.captured: queue depth 4 · oldest pending 5m " in text
    # one window, stated once: the depth held at 4 (never drains), the dead letters rose
    assert (
        "trend over 15m: queue depth +0.00 rows/min, drains never; failed in window +0.20 "
        "rows/min · 3 dead-lettered in 1h" in text
    )
    assert "grows by" not in text
    (group,) = error_groups(db, event_type="payment.captured")
    (replay,) = [p for p in at.get("page_link") if p.proto.label == "Replay dead letters"]
    assert replay.proto.page == "dead_letters"
    assert replay.proto.query_string == (
        f"event_type=payment.captured&error_group={group['group_id']}&window=1h"
    )

    # the click: the Dead letters page opens on that group with its replay
    dead = open_page(
        "dead_letters", event_type="payment.captured", error_group=group["group_id"], window="1h"
    )
    assert not dead.exception
    assert [b.label for b in dead.button if b.label == "Preview replay"] == ["Preview replay"]


def test_a_held_type_links_to_its_controls_and_its_older_dead_letters(
    open_page, environment, rows, settings, db, conn, tmp_path
):
    path = rules_file(
        tmp_path,
        FAILING.replace("metric: failed_in_window, window: 1h", "metric: queue_depth").replace(
            'op: ">", threshold: 0', 'op: ">", threshold: 1'
        ),
    )
    environment.setenv(RULES_ENV, str(path))
    for _ in range(3):  # depth 3 > 1: fires for payment.captured
        rows.add(event_type="payment.captured", created_ago=300)
    # its one dead letter failed two days ago: none in the window, still replayable
    rows.add_failed(event_type="payment.captured", created_ago=3 * 86400, processed_ago=2 * 86400)
    control(conn, "payment.captured", paused=True)
    # its depth sampled 9, 6, 3 at −10, −5 and 0 min: draining 0.6/min, 3 left → ≈ 5 min
    type_samples(conn, "payment.captured", [(600, 9, 0), (300, 6, 0), (0, 3, 0)])
    evaluate_as_scheduler(settings, db, load_rules(path))

    at = open_page("overview")

    assert not at.exception
    text = card_text(at, "payment-failed", "payment.captured:")
    assert "trend over 15m: queue depth −0.60 rows/min, drains in ≈ 5 min" in text
    assert "0 dead-lettered in 1h · flow control: paused" in text
    labels = {p.proto.label: p.proto for p in at.get("page_link")}
    assert labels["Open controls"].query_string == "event_type=payment.captured"
    assert labels["Replay dead letters"].query_string.startswith(
        "event_type=payment.captured&error_group="
    )
    # the firing section is above the tiles: what fires is on the first screen
    order = [e.type for e in at.main if e.type in ("metric",) or "payment-failed" in str(e)]
    assert order and order[0] != "metric"


def test_firing_alerts_most_severe_first_then_newest(tmp_path):
    ruleset = load_rules(rules_file(tmp_path, RULES))
    now = datetime(2026, 1, 1, 14, 5, tzinfo=UTC)

    def firing(rule: str, minutes_ago: int, instance: str = "") -> dict:
        since = now - timedelta(minutes=minutes_ago)
        return {
            "rule": rule,
            "instance": instance,
            "state": "firing",
            "value": 1.0,
            "firing_since": since,
        }

    rows = firing_alerts.firing_rows(
        ruleset,
        [
            firing("stuck-lock", 60),  # warning, an hour old
            firing("backlog", 2),  # warning, new
            firing("payment-failed", 30, "event_type=payment.x"),  # critical
        ],
        now,
    )
    assert [row["rule"] for row in rows] == ["payment-failed", "backlog", "stuck-lock"]


def test_a_firing_pattern_links_to_the_replay_of_its_newest_error_group(
    open_page, environment, rows, settings, db, tmp_path
):
    path = rules_file(tmp_path, RULES)
    environment.setenv(RULES_ENV, str(path))
    rows.add(event_type="notification.email", created_ago=600)  # 10 min > 5 min: late
    rows.add_failed(event_type="notification.email", processed_ago=3600, last_error="SMTP 421")
    rows.add_failed(event_type="notification.sms", processed_ago=60, last_error="SMS 503")
    rows.add_failed(event_type="order.paid", processed_ago=30, last_error="HTTP 500")  # not matched
    evaluate_as_scheduler(settings, db, load_rules(path))

    at = open_page("overview")

    assert not at.exception
    groups = {g["event_type"]: g["group_id"] for g in error_groups(db)}
    (replay,) = [p for p in at.get("page_link") if p.proto.label == "Replay dead letters"]
    # the pattern's matches: notification.sms failed last (60 s ago), not order.paid (30 s)
    assert replay.proto.query_string == (
        f"event_type=notification.%25&error_group={groups['notification.sms']}&window=1h"
    )
    dead = open_page(
        "dead_letters", event_type="notification.%", error_group=groups["notification.sms"]
    )
    assert [b.label for b in dead.button if b.label == "Preview replay"] == ["Preview replay"]
