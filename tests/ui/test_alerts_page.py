"""Alerts page (AppTest) on a real Postgres: rule states from a real evaluation, the
notification history with what was (or would have been) posted, silences created and
expired through the form, the test button against the local Slack sink, a broken rules
file, and the dashboard links that Slack messages carry."""

from datetime import UTC, timedelta
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
from grids import assert_fits, grids
from rendered import plain, unprotected

from outbox_monitor.access import Identity, Role
from outbox_monitor.alerts.acknowledge import Press, acknowledge
from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.rules import RuleSet
from outbox_monitor.alerts.rules_file import RULES_ENV, SHIPPED_RULES_PATH, load_rules
from outbox_monitor.alerts.sender import deliver_due
from outbox_monitor.alerts.silences import create_silence
from outbox_monitor.demo.slack_sink import SlackSink
from outbox_monitor.figures import error_grouping
from outbox_monitor.ui import alert_rules, state

PAGE = "alerts"
ACTOR = "ui-test"  # tests/ui/conftest.py's OUTBOX_MONITOR_ACTOR
SLACK_VARIABLES = ("SLACK_WEBHOOK_URL", "SLACK_BOT_TOKEN", "SLACK_API_URL")

RULES = """
version: 1
defaults: {interval: 30s, for: 0s, keep_firing_for: 0s}
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL, repeat_interval: 1h}
rules:
  - name: payment-failed
    metric: failed_in_window
    event_type: "payment.%"
    window: 15m
    by: [event_type]
    op: ">"
    threshold: 0
    severity: critical
    route: oncall
  - name: backlog
    metric: queue_depth
    op: ">"
    threshold: 2
    for: 10m
    severity: warning
    route: oncall
  - name: stuck-lock
    metric: stuck_locks
    op: ">"
    threshold: 0
    severity: warning
    route: oncall
"""

BROKEN = """
version: 1
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL}
rules:
  - {name: backlog, metric: queue_depth, op: ">", threshold: abc, route: oncall}
  - {name: late, metric: oldest_pending_age, op: ">", threshold: 5m, route: pager}
"""


@pytest.fixture
def rules_path(environment: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """This test's alerts.yml, named by OUTBOX_MONITOR_RULES; no Slack variable set."""
    path = tmp_path / "alerts.yml"
    path.write_text(RULES)
    environment.setenv(RULES_ENV, str(path))
    for name in SLACK_VARIABLES:
        environment.delenv(name, raising=False)
    return path


@pytest.fixture
def ruleset(rules_path: Path) -> RuleSet:
    return load_rules(rules_path)


@pytest.fixture
def sink():
    with SlackSink(port=0) as server:
        yield server


def dead_letter(rows, event_type: str, ago: float, error: str = "HTTP 402 card declined") -> int:
    return rows.add(
        event_type=event_type, status="failed", attempts=10, processed_ago=ago, last_error=error
    )


def table(at, index: int) -> list[dict]:
    return at.dataframe[index].value.to_dict("records")


def shown(at) -> str:
    """Every text the page rendered (markdown, captions, alerts, code), one per line."""
    parts = [
        plain(e.value)
        for kind in ("markdown", "caption", "success", "info", "warning", "error")
        for e in getattr(at, kind)
    ]
    parts += [block.value for block in at.get("code")]
    return "\n".join(parts)


def silence_rows(conn) -> list[dict]:
    return conn.execute("SELECT * FROM outbox_monitor.silences ORDER BY id").fetchall()


def test_rule_states_and_history_from_a_real_evaluation(open_page, ruleset, db, rows, sink):
    for ago in (120, 60):
        dead_letter(rows, "payment.captured", ago)
    dead_letter(rows, "payment.refunded", 30, "HTTP 500 upstream")
    dead_letter(rows, "payment.old", 3600)  # failed before the 15 min window: no instance
    for _ in range(3):
        rows.add(created_ago=30)  # queue depth 3 > 2, but `for: 10m` → pending
    rows.add(status="processing", created_ago=60, locked_ago=60)  # 1 min < lock timeout
    report = Evaluator(db, ruleset).run_once()
    counts = deliver_due(
        db, ruleset, transports=transports_for(ruleset, {"SLACK_WEBHOOK_URL": sink.webhook_url})
    )
    assert (counts["sent"], counts["messages"]) == (2, 1)  # one evaluation: one message

    at = open_page(PAGE)

    assert not at.exception
    states = {
        (r["rule"], r["instance"]): (r["state"], r["value"], r["condition"]) for r in table(at, 0)
    }
    assert states == {
        ("payment-failed", "event_type=payment.captured"): ("FIRING", "2", "> 0"),
        ("payment-failed", "event_type=payment.refunded"): ("FIRING", "1", "> 0"),
        ("backlog", "all"): ("pending", "3", "> 2"),
        ("stuck-lock", "all"): ("ok", "0", "> 0"),
    }
    first = table(at, 0)[0]
    assert (first["metric"], first["for"], first["severity"], first["route"]) == (
        "failed_in_window 15m · payment.% · by event_type",
        "0s",
        "critical",
        "oncall",
    )
    assert "outboxes" not in first  # a fleet of one: today's columns
    evaluated = report.evaluated_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    assert first["since"].startswith(evaluated)  # firing_since = the pass's instant
    tiles = {m.label: m.value for m in at.metric}
    assert (tiles["Firing"], tiles["Pending"], tiles["OK"], tiles["Active silences"]) == (
        "2",
        "1",
        "1",
        "0",
    )

    notifications = table(at, 1)
    assert [
        (n["kind"], n["rule"], n["instance"], n["status"], n["attempts"]) for n in notifications
    ] == [
        ("firing", "payment-failed", "event_type=payment.refunded", "sent", 1),
        ("firing", "payment-failed", "event_type=payment.captured", "sent", 1),
    ]
    at.selectbox(key="alerts.notification").set_value(int(notifications[1]["id"])).run()
    text = shown(at)
    assert "Posted at" in text and "after 1 attempt." in text
    assert (
        "[FIRING] payment-failed event_type=payment.captured (critical): 2 vs threshold 0 (>)"
        in text
    )
    assert sink.messages()[0]["text"].count("[FIRING]") == 2  # what was posted: both lines

    transitions = {(t["rule"], t["instance"], t["change"]) for t in table(at, 2)}
    assert transitions == {
        ("payment-failed", "event_type=payment.captured", "inactive → firing"),
        ("payment-failed", "event_type=payment.refunded", "inactive → firing"),
        ("backlog", "all", "inactive → pending"),
    }


FLEET_RULES = """
version: 1
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL}
rules:
  - {name: stuck-lock, metric: stuck_locks, op: ">", threshold: 0, route: oncall}
  - {name: depth, metric: queue_depth, op: ">", threshold: 9, route: oncall,
     outboxes: [orders, billing]}
  - {name: payments-depth, metric: queue_depth, op: ">", threshold: 9, route: oncall,
     outboxes: {team: payments, tier: gold}}
"""
FLEET = """
version: 1
outboxes:
  - {name: orders, dsn_env: ORDERS_DSN, labels: {team: payments, tier: gold}}
  - {name: billing, dsn_env: BILLING_DSN}
"""


def test_with_a_fleet_each_rule_says_which_outboxes_it_applies_to(
    open_page, environment, rules_path, dsn, make_dsn, conn, tmp_path
):
    rules_path.write_text(FLEET_RULES)
    fleet = tmp_path / "outboxes.yml"
    fleet.write_text(FLEET)
    environment.setenv("ORDERS_DSN", dsn)
    environment.setenv("BILLING_DSN", make_dsn())
    environment.setenv("OUTBOX_MONITOR_OUTBOXES", str(fleet))
    conn.execute(  # orders' instance of a rule since removed from the file
        "INSERT INTO outbox_monitor.alert_instances (outbox, rule, instance, state)"
        " VALUES ('orders', 'old-rule', 'outbox=orders', 'firing')"
    )

    at = open_page(PAGE, outbox="orders")

    assert not at.exception
    assert [(r["rule"], r["outboxes"], r["instance"]) for r in table(at, 0)] == [
        ("stuck-lock", "all", "all"),
        ("depth", "orders, billing", "all"),
        ("payments-depth", "team=payments, tier=gold", "all"),
        ("old-rule", "–", "all"),
    ]
    assert list(at.dataframe[0].value.columns[:3]) == ["rule", "outboxes", "instance"]
    # the outboxes shown too, the table still fits at 1440 px (issue 30 item 5)
    assert_fits(grids(at)["alerts.state"], ["rule", "outboxes", "instance", "state", "since"])


def test_a_silenced_alert_shows_what_would_have_been_posted(open_page, ruleset, db, rows, sink):
    create_silence(
        db,
        {"rule": "payment-failed", "event_type": "payment.captured"},
        rows.t0 + timedelta(hours=1),
        "card processor maintenance",
        Identity("alice", Role.operator, "oidc"),
    )
    dead_letter(rows, "payment.captured", 60)
    Evaluator(db, ruleset).run_once()
    deliver_due(
        db, ruleset, transports=transports_for(ruleset, {"SLACK_WEBHOOK_URL": sink.webhook_url})
    )

    at = open_page(PAGE)

    assert not at.exception
    assert sink.messages() == []
    assert [(r["state"], r["instance"]) for r in table(at, 0) if r["rule"] == "payment-failed"] == [
        ("FIRING", "event_type=payment.captured")  # silenced: still changes state
    ]
    [notification] = table(at, 1)
    assert (notification["status"], notification["silenced"]) == ("suppressed", True)
    text = shown(at)
    assert "Not posted: a silence matched this alert. Below is what would have been posted." in text
    assert (
        "[FIRING] payment-failed event_type=payment.captured (critical): 1 vs threshold 0" in text
    )
    assert {m.label: m.value for m in at.metric}["Active silences"] == "1"


@pytest.mark.parametrize(
    ("status", "answer", "outcome", "said"),
    [
        (500, None, "pending", "Not posted yet: 1 attempt failed (HTTP 500): "),
        (404, None, "failed", "Failed for good after 1 attempt: "),
        (
            200,
            "no_service",
            "failed",
            "Failed for good after 1 attempt: incoming webhook: Slack refused the message: "
            "HTTP 200 no_service.",
        ),
        (
            200,
            "<html>proxy sign-in</html>",
            "pending",
            "Not posted yet: 1 attempt failed (HTTP 200): incoming webhook: HTTP 200 without "
            "the body 'ok'",
        ),
    ],
)
def test_a_failed_delivery_shows_the_slack_error(
    open_page, ruleset, db, rows, sink, status, answer, outcome, said
):
    dead_letter(rows, "payment.captured", 60)
    Evaluator(db, ruleset).run_once()
    sink.fail_next(1, status=status, error=answer)
    deliver_due(
        db, ruleset, transports=transports_for(ruleset, {"SLACK_WEBHOOK_URL": sink.webhook_url})
    )

    at = open_page(PAGE)

    assert not at.exception
    [notification] = table(at, 1)
    assert (notification["status"], notification["attempts"], notification["last_status"]) == (
        outcome,
        1,
        status,
    )
    assert said in shown(at)
    assert sink.messages() == []


def test_create_a_silence_through_the_form_then_expire_it(open_page, ruleset, conn):
    at = open_page(PAGE)
    # nothing evaluated yet: every rule of the file is listed all the same
    assert [(r["rule"], r["state"]) for r in table(at, 0)] == [
        ("payment-failed", "no instance (no event type with matching rows)"),
        ("backlog", "not evaluated yet"),
        ("stuck-lock", "not evaluated yet"),
    ]
    at.selectbox(key="alerts.silence_rule").set_value("payment-failed")
    at.text_input(key="alerts.silence_event_type").input("payment.captured")
    at.text_input(key="alerts.silence_until").input("2h")
    at.text_area(key="alerts.silence_comment").input("card processor maintenance")

    at.button(key="alerts.silence_create").click().run()

    assert not at.exception
    [row] = silence_rows(conn)
    assert row["matchers"] == {"rule": "payment-failed", "event_type": "payment.captured"}
    assert (row["created_by"], row["comment"], row["expired_at"]) == (
        ACTOR,
        "card processor maintenance",
        None,
    )
    assert abs(row["ends_at"] - row["starts_at"] - timedelta(hours=2)) < timedelta(seconds=5)
    text = shown(at)
    assert f"Silence #{row['id']} created: rule=payment-failed, event_type=payment.captured" in text
    assert f"**#{row['id']}** rule=payment-failed event_type=payment.captured — until" in text
    assert f"by {ACTOR}" in text and "card processor maintenance" in text
    audit = conn.execute("SELECT actor, action FROM outbox_monitor.audit_log").fetchall()
    assert audit == [{"actor": ACTOR, "action": "silence"}]

    at.button(key=f"alerts.expire.{row['id']}").click().run()

    assert not at.exception
    [row] = silence_rows(conn)
    assert row["expired_at"] is not None
    assert f"Silence #{row['id']} expired." in shown(at)
    ended = table(at, len(at.dataframe) - 1)
    assert [(r["id"], r["matchers"], r["created_by"]) for r in ended] == [
        (str(row["id"]), "rule=payment-failed, event_type=payment.captured", ACTOR)
    ]
    with pytest.raises(KeyError):  # no longer listed as active
        at.button(key=f"alerts.expire.{row['id']}")
    assert "Active silences (0)" in [h.value for h in at.subheader]


def test_the_silence_headers_count_every_silence_not_the_listed_ones(open_page, ruleset, conn):
    """Issue 30 item 8: 3 silences in force and 205 ended; 200 are listed, those in force
    first."""
    conn.execute(
        "INSERT INTO outbox_monitor.silences (matchers, starts_at, ends_at, comment, created_by)"
        " SELECT '{}', now() - interval '2 hours', now() + interval '1 day', 'on', 'alice'"
        " FROM generate_series(1, 3)"
    )
    conn.execute(
        "INSERT INTO outbox_monitor.silences (matchers, starts_at, ends_at, comment, created_by)"
        " SELECT '{}', now() - interval '2 hours', now() - interval '1 hour', 'off', 'alice'"
        " FROM generate_series(1, 205)"
    )

    at = open_page(PAGE)

    assert not at.exception
    headers = [h.value for h in at.subheader]
    assert "Active silences (3)" in headers
    assert "Expired or ended (205; the newest 197 listed)" in headers
    assert {m.label: m.value for m in at.metric}["Active silences"] == "3"


@pytest.mark.parametrize(
    ("rule", "event_type", "until", "comment", "error"),
    [
        (None, "", "2h", "why", "give at least one matcher"),
        ("payment-failed", "", "soon", "why", "expected a duration from now (2h, 30m, 1d)"),
        ("payment-failed", "", "0s", "why", "must last longer than 0s"),
        ("payment-failed", "", "2020-01-01T00:00:00Z", "why", "is not in the future"),
        ("payment-failed", "", "2h", "  ", "say why in the comment"),
        ("payment-failed", "", "9999999d", "why", "'9999999d' is longer than 100 years"),
        ("payment-failed", "", "9999-12-31T23:59:59-01:00", "why", "outside the years 1 to 9999"),
    ],
)
def test_invalid_silence_input_is_refused_with_the_reason(
    open_page, ruleset, conn, rule, event_type, until, comment, error
):
    at = open_page(PAGE)
    if rule:
        at.selectbox(key="alerts.silence_rule").set_value(rule)
    at.text_input(key="alerts.silence_event_type").input(event_type)
    at.text_input(key="alerts.silence_until").input(until)
    at.text_area(key="alerts.silence_comment").input(comment)

    at.button(key="alerts.silence_create").click().run()

    assert not at.exception
    assert any(error in plain(e.value) for e in at.error), [e.value for e in at.error]
    assert silence_rows(conn) == []


def test_send_test_alert_through_the_local_slack_sink(open_page, rules_path, environment, sink):
    at = open_page(PAGE)  # no Slack variable yet: the page says which one to set
    assert "webhook_url_env names SLACK_WEBHOOK_URL, which is not set" in shown(at)
    at.button(key="alerts.send_test").click().run()
    assert not at.exception
    assert any("SLACK_WEBHOOK_URL" in plain(w.value) for w in at.warning)
    assert any("Export SLACK_WEBHOOK_URL=<incoming-webhook URL>" in plain(i.value) for i in at.info)
    assert any("<incoming-webhook URL>" in plain(c.value) for c in at.caption)
    assert "<" not in "".join(unprotected(e.value) for e in [*at.caption, *at.info])

    environment.setenv("SLACK_WEBHOOK_URL", sink.webhook_url)
    at = open_page(PAGE)
    assert f"Posts to incoming webhook {sink.url}/<redacted>." in shown(at)
    at.button(key="alerts.send_test").click().run()

    assert not at.exception
    [message] = sink.messages()
    assert "If you can read this, route oncall reaches this channel." in message["text"]
    assert [plain(s.value) for s in at.success if "Test message" in plain(s.value)] == [
        f"Test message of route oncall posted to incoming webhook {sink.url}/<redacted>. "
        "Listed under Notifications as #1."
    ]


def test_a_broken_rules_file_shows_every_problem_and_the_fix(open_page, rules_path):
    rules_path.write_text(BROKEN)

    at = open_page(PAGE)

    assert not at.exception
    assert "Alert rules file invalid" in at.error[0].value
    [code] = at.get("code")
    assert code.value.splitlines() == [
        f'{rules_path}: rules[0] "backlog": threshold: expected a number, got "abc"',
        f'{rules_path}: rules[1] "late": route: unknown route "pager" (routes: oncall)',
    ]
    assert any(
        f"outbox-monitor alerts validate --rules {rules_path}" in plain(i.value) for i in at.info
    )
    # the database half of the page still works
    assert "No rule instance has state yet." in shown(at)


def test_dashboard_links_of_alerts_open_the_prefiltered_view(open_page, ruleset, db, rows, conn):
    captured = [dead_letter(rows, "payment.captured", ago) for ago in (90, 60, 30)]
    dead_letter(rows, "payment.refunded", 30, "HTTP 500 upstream")
    Evaluator(db, ruleset).run_once()
    payload = conn.execute(
        "SELECT payload FROM outbox_monitor.notifications WHERE instance = %s",
        ("event_type=payment.captured",),
    ).fetchone()["payload"]
    [group] = error_grouping.error_groups(db, event_type="payment.captured")
    link = urlsplit(payload["dashboard_path"])
    query = dict(parse_qsl(link.query))
    assert (link.path, query) == (
        "/dead_letters",
        {"event_type": "payment.captured", "window": "15m", "error_group": group["group_id"]},
    )

    at = open_page(link.path.strip("/"), **query)

    assert not at.exception
    assert at.title[0].value == "Dead letters"
    assert at.selectbox(key="dead_letters.group").value == group["group_id"]
    assert at.selectbox(key=state.WINDOW_PARAM).value == "15m"
    assert at.text_input(key=state.EVENT_TYPE_PARAM).value == "payment.captured"
    assert [int(i) for i in at.dataframe[1].value["id"]] == captured[::-1]


def test_every_window_of_the_shipped_rules_is_a_dashboard_window_choice(open_page, rules_path):
    windows = alert_rules.rule_windows(load_rules(SHIPPED_RULES_PATH))
    assert windows == ["15m", "1h"]
    assert set(windows) <= set(state.WINDOW_CHOICES)
    # a window the sidebar does not offer (a rule with window: 30m) falls back to the default
    at = open_page("overview", window="30m")
    assert not at.exception
    assert at.selectbox(key=state.WINDOW_PARAM).value == "1h"


def test_silence_matchers_comment_and_author_are_shown_literally(
    open_page, ruleset, conn, environment
):
    evil = "pay`ment`.[x](https://example.com)"
    comment = "**not bold** :red[plain] <b>no html</b> $x$ -> as typed"
    environment.setenv("OUTBOX_MONITOR_ACTOR", "_alice_")
    at = open_page(PAGE)
    at.selectbox(key="alerts.silence_rule").set_value("payment-failed")
    at.text_input(key="alerts.silence_event_type").input(evil)
    at.text_area(key="alerts.silence_comment").input(comment)

    at.button(key="alerts.silence_create").click().run()

    assert not at.exception
    [row] = silence_rows(conn)
    assert row["matchers"]["event_type"] == evil
    [flash] = [s.value for s in at.success if "created" in s.value]
    assert f"created: rule=payment-failed, event_type={evil} until" in plain(flash)
    [line] = [m.value for m in at.markdown if m.value.startswith(f"**#{row['id']}**")]
    assert f"rule=payment-failed event_type={evil} — until" in plain(line)
    assert plain(line).endswith("· by _alice_")
    [said] = [c.value for c in at.caption if "as typed" in c.value]
    assert plain(said) == comment
    for shown in (flash, line, said):
        for construct in ("](", "**not", ":red[", "<b>", "$x", "_alice_"):
            assert construct not in unprotected(shown)


def test_an_acknowledged_episode_says_by_whom_and_when(open_page, ruleset, db, rows, conn):
    rows.add(status="processing", created_ago=3600, locked_ago=3600)  # stuck-lock fires
    Evaluator(db, ruleset).run_once()
    (firing,) = conn.execute(
        "SELECT id FROM outbox_monitor.notifications WHERE rule = 'stuck-lock'"
    ).fetchall()
    person = Identity("alice@example.com", Role.operator, "slack")
    acked = acknowledge(db, Press(person, "T0ALLOWED", "U0ALICE", firing["id"]))
    at = open_page(PAGE)
    assert (
        "Acknowledged** — no more repeats of these episodes:\n\n"
        "- stuck-lock acknowledged by alice@example.com at "
        f"{acked.acked_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
    ) in shown(at), shown(at)
    assert "Slack user U0ALICE" in shown(at)
