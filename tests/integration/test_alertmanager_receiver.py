"""The ``alertmanager`` receiver and the dead-man's switch (issue 31 items 1, 2, 7) against a
REAL Alertmanager (Debian's, ``make alertmanager``), observed through its own ``GET
/api/v2/alerts``: firing, re-post (``endsAt`` moves on, the fingerprint stays), resolve (gone
from the active alerts), the Watchdog, label values of 100 kB event types; a fault matrix
(down, 503, hanging) beside a working Alertmanager; the heartbeat pinged after each
successful evaluation and never after a failed one.

Every wait polls with ``LOADED_DEADLINE``; the timings printed (``-s``) are what the report
quotes.
"""

import logging
import re
import subprocess
import time
from datetime import datetime
from pathlib import Path

import psycopg
import pytest

from outbox_monitor.alerts import own_runbooks
from outbox_monitor.alerts.alertmanager import AlertmanagerReceiver, alertmanager_urls
from outbox_monitor.alerts.alertmanager_health import RULE_NAME, AlertmanagerHealth, open_episodes
from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.route_check import send_test
from outbox_monitor.alerts.rules_file import load_rules
from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.pgcluster import free_port
from outbox_monitor.export.families import dead_mans_switch_families
from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.service.heartbeat import Heartbeat
from outbox_monitor.service.scheduler import build_scheduler
from outbox_monitor.store.db import Database
from outbox_monitor.units import bounded_key
from tests.alerting import LOADED_DEADLINE, rules_file, running_scheduler, wait_for
from tests.alertmanager_support import (
    LocalServer,
    active_alerts,
    alertmanager_binary,
    running_alertmanager,
)
from tests.conftest import Rows
from tests.integration.test_fleet_alerts import _stuck_row_in_each as stuck_row_in_each
from tests.integration.test_fleet_alerts import databases, fleet  # noqa: F401 (fixtures)

LONG_A = "x" * 100_000 + "a"
LONG_B = "x" * 100_000 + "b"


def rules(urls: list[str], interval: str = "1s") -> str:
    listed = ", ".join(urls)
    return f"""
version: 1
defaults: {{interval: {interval}, for: 0s, keep_firing_for: 0s}}
routes:
  am: {{type: alertmanager, alertmanager_urls: [{listed}]}}
rules:
  - name: backlog
    metric: queue_depth
    by: [event_type]
    op: ">"
    threshold: 0
    severity: critical
    labels: {{team: payments}}
    route: am
    summary: "{{{{ event_type }}}} backlog: {{{{ value }}}} rows"
"""


def named(alerts: list[dict], event_type: str) -> list[dict]:
    wanted = bounded_key(event_type)
    return [
        a
        for a in alerts
        if a["labels"].get("alertname") == "backlog" and a["labels"].get("event_type") == wanted
    ]


def transition_at(conn: psycopg.Connection, event_type: str, to_state: str) -> datetime:
    row = conn.execute(
        "SELECT at FROM outbox_monitor.alert_transitions WHERE instance = %s AND to_state = %s "
        "ORDER BY id DESC LIMIT 1",
        (f"event_type={event_type}", to_state),
    ).fetchone()
    return row["at"]


def test_firing_repost_resolve_and_watchdog_in_a_real_alertmanager(
    tmp_path: Path, db: Database, rows: Rows, conn: psycopg.Connection, write_rules
) -> None:
    with running_alertmanager(tmp_path / "am") as am:
        ruleset = write_rules(rules([am]))
        for event_type in ("order.paid", LONG_A, LONG_B):
            rows.add(event_type=event_type)
        with running_scheduler(db, ruleset=ruleset):
            seen = wait_for(lambda: named(active_alerts(am), "order.paid"), LOADED_DEADLINE)
            visible = time.time()
            assert seen, "the firing alert never reached Alertmanager"
            fired = transition_at(conn, "order.paid", "firing")
            first = seen[0]
            assert first["labels"] == {
                "alertname": "backlog",
                "rule": "backlog",
                "severity": "critical",
                "team": "payments",
                "event_type": "order.paid",
            }
            assert first["annotations"]["summary"] == "order.paid backlog: 1 rows"
            assert first["status"]["state"] == "active"
            assert datetime.fromisoformat(first["startsAt"]) == fired.replace(
                microsecond=fired.microsecond // 1000 * 1000
            )
            assert first["generatorURL"].endswith("/overview?event_type=order.paid")

            # the 100 kB event types: one alert each, their labels bounded and apart
            long_alerts = wait_for(
                lambda: named(active_alerts(am), LONG_A) and named(active_alerts(am), LONG_B),
                LOADED_DEADLINE,
            )
            assert long_alerts
            alerts = active_alerts(am)
            a, b = named(alerts, LONG_A)[0], named(alerts, LONG_B)[0]
            assert len(a["labels"]["event_type"]) == 200 and a["labels"] != b["labels"]
            assert a["fingerprint"] != b["fingerprint"]

            # the Watchdog is posted on its own cadence: under load it came after the rest (L6)
            watchdog = wait_for(
                lambda: [
                    x for x in active_alerts(am) if x["labels"].get("alertname") == "Watchdog"
                ],
                LOADED_DEADLINE,
            )
            assert [w["labels"] for w in watchdog] == [
                {"alertname": "Watchdog", "severity": "none"}
            ]

            # re-post: endsAt moves on, the label set (fingerprint) does not change
            ends = datetime.fromisoformat(first["endsAt"])
            moved = wait_for(
                lambda: [
                    x
                    for x in named(active_alerts(am), "order.paid")
                    if datetime.fromisoformat(x["endsAt"]) > ends
                ],
                LOADED_DEADLINE,
            )
            assert moved and moved[0]["fingerprint"] == first["fingerprint"]
            assert datetime.fromisoformat(moved[0]["startsAt"]) == datetime.fromisoformat(
                first["startsAt"]
            )
            ahead = datetime.fromisoformat(moved[0]["endsAt"]) - datetime.fromisoformat(
                moved[0]["updatedAt"]
            )
            # 4 intervals of 1 s after the pass began; the post reached it some time later
            assert 0 < ahead.total_seconds() <= 4.5

            # resolve: gone from Alertmanager's active alerts; the others stay
            conn.execute(
                "UPDATE integration_outbox SET status = 'done', processed_at = now() "
                "WHERE event_type = 'order.paid'"
            )
            gone = wait_for(lambda: not named(active_alerts(am), "order.paid"), LOADED_DEADLINE)
            removed = time.time()
            assert gone, "the resolved alert is still active in Alertmanager"
            resolved = transition_at(conn, "order.paid", "inactive")
            assert named(active_alerts(am), LONG_A)
        print(
            f"\nfiring -> visible in Alertmanager: {visible - fired.timestamp():.2f} s; "
            f"resolve -> gone: {removed - resolved.timestamp():.2f} s"
        )


def test_fault_matrix_down_503_hanging_beside_a_working_alertmanager(
    tmp_path: Path, db: Database, rows: Rows, write_rules, caplog: pytest.LogCaptureFixture
) -> None:
    late_port = free_port()
    late = f"http://127.0.0.1:{late_port}"  # down until started below
    broken, hanging = LocalServer(status=503), LocalServer(hang=True)
    caplog.set_level(logging.WARNING, logger="outbox_monitor.alerts.alertmanager")
    try:
        with running_alertmanager(tmp_path / "am") as am:
            ruleset = write_rules(rules([am, late, broken.url, hanging.url]))
            rows.add(event_type="order.paid")
            Evaluator(db, ruleset).run_once()
            receiver = AlertmanagerReceiver(
                db, ruleset, alertmanager_urls(ruleset), interval=1.0, timeout=1.0
            )
            started = time.monotonic()
            receiver.evaluated().join()  # the pass after an evaluation, on its own thread
            took = time.monotonic() - started
            assert 1.0 <= took < 1.0 + LOADED_DEADLINE  # the hang cost its own timeout once
            assert len(named(active_alerts(am), "order.paid")) == 1  # the working one got it
            state = {s.url: s for s in receiver.status.urls()}
            assert {url: s.alerts_posted for url, s in state.items()} == {
                am: 2,  # the Watchdog and order.paid
                late: 0,
                broken.url: 0,
                hanging.url: 0,
            }
            assert state[am].failing_since is None and state[am].failures_total == 0
            assert state[late].last_error == "connection refused"
            assert state[broken.url].last_error == "HTTP 503: upstream broken"
            assert state[hanging.url].last_error == "timed out after 1 s"
            warned = [r.getMessage() for r in caplog.records]
            assert sum(late in line for line in warned) == 1
            assert sum(broken.url in line for line in warned) == 1

            # never silent: /healthz's notice and detail, /metrics' counters
            status = SchedulerStatus()
            status.alertmanager = receiver.status
            _, health = status.health()
            for url in (late, broken.url, hanging.url):
                assert f"alertmanager {url} failing since" in health["notice"]
            assert [u["url"] for u in health["alertmanager"]] == [am, late, broken.url, hanging.url]
            families = {f.name: f for f in dead_mans_switch_families(status)}
            failures = {
                s.labels["url"]: s.value
                for s in families["outbox_monitor_alertmanager_post_failures"].samples
                if s.name.endswith("_total")
            }
            assert failures == {am: 0, late: 1, broken.url: 1, hanging.url: 1}
            success = families["outbox_monitor_alertmanager_last_success_timestamp_seconds"]
            assert [s.labels["url"] for s in success.samples] == [am]

            # a second pass: failed URLs are tried again at once, warned about once a minute
            receiver.run_once()
            assert receiver.status.urls()[2].failures_total == 2
            assert sum(broken.url in r.getMessage() for r in caplog.records) == 1

            # the Alertmanager that was down starts: the next pass delivers, and says so
            with running_alertmanager(tmp_path / "late", port=late_port):
                receiver.run_once()
                assert len(named(active_alerts(late), "order.paid")) == 1
                assert receiver.status.urls()[1].failing_since is None
                assert any(
                    f"alertmanager {late} accepts alerts again" in r.getMessage()
                    for r in caplog.records
                )
    finally:
        broken.stop()
        hanging.stop()


def test_heartbeat_after_each_successful_evaluation_none_when_it_fails(
    dsn: str, conn: psycopg.Connection, write_rules, caplog: pytest.LogCaptureFixture
) -> None:
    check = LocalServer()
    caplog.set_level(logging.ERROR, logger="outbox_monitor.scheduler")
    try:
        settings = load_settings(dsn=dsn, heartbeat_url=check.url + "/ping/abc")
        ruleset = write_rules(
            rules(["http://127.0.0.1:9"]).replace(
                "type: alertmanager, alertmanager_urls: [http://127.0.0.1:9]",
                "webhook_url_env: SLACK_WEBHOOK_URL",
            )
        )
        with Database(settings) as db, running_scheduler(db, ruleset=ruleset):
            assert wait_for(lambda: len(check.requests) >= 2, LOADED_DEADLINE)
            assert {(method, path) for _, method, path in check.requests} == {("GET", "/ping/abc")}

            def failures() -> int:
                return sum("evaluator" in r.getMessage() for r in caplog.records)

            conn.execute("ALTER TABLE outbox_monitor.alert_instances RENAME TO broken")
            assert wait_for(lambda: failures() >= 2, LOADED_DEADLINE)
            pings = len(check.requests)  # a ping started before the first failure has landed
            assert wait_for(lambda: failures() >= 4, LOADED_DEADLINE)
            assert len(check.requests) == pings
            conn.execute("ALTER TABLE outbox_monitor.broken RENAME TO alert_instances")
            assert wait_for(lambda: len(check.requests) > pings, LOADED_DEADLINE)
    finally:
        check.stop()


def test_an_alertmanager_failing_for_3_intervals_is_an_alert_of_its_own(
    db: Database, rows: Rows, conn: psycopg.Connection, write_rules, fake_clock
) -> None:
    broken = LocalServer(status=503)
    try:
        text = rules([broken.url]).replace(
            "routes:\n", "routes:\n  oncall: {webhook_url_env: SLACK_WEBHOOK_URL}\n"
        )
        ruleset = write_rules(text)
        rows.add(event_type="order.paid")
        Evaluator(db, ruleset).run_once()

        def leader() -> AlertmanagerReceiver:
            health = AlertmanagerHealth(db, ruleset, interval=1.0, clock=fake_clock)
            return AlertmanagerReceiver(
                db,
                ruleset,
                alertmanager_urls(ruleset),
                interval=1.0,
                clock=fake_clock,
                health=health,
            )

        def episodes() -> list[tuple[str, str, str]]:
            return [
                (r["instance"], r["from_state"], r["to_state"])
                for r in conn.execute(
                    "SELECT instance, from_state, to_state FROM outbox_monitor.alert_transitions "
                    "WHERE rule = %s ORDER BY id",
                    (RULE_NAME,),
                )
            ]

        receiver = leader()
        receiver.run_once()
        fake_clock.advance(2.9)
        receiver.run_once()
        assert episodes() == []  # under 3 intervals: the WARNING line only
        fake_clock.advance(0.1)
        receiver.run_once()
        instance = f"url={broken.url}"
        assert episodes() == [(instance, "inactive", "error")]
        [opened] = open_episodes(db)
        assert opened["url"] == broken.url
        assert opened["error"].startswith("HTTP 503: upstream broken (failing since ")
        messages = conn.execute(
            "SELECT route, kind, status FROM outbox_monitor.notifications WHERE rule = %s",
            (RULE_NAME,),
        ).fetchall()
        assert [tuple(m.values()) for m in messages] == [("oncall", "error", "pending")]
        steps = conn.execute(
            "SELECT payload->'runbook' AS steps FROM outbox_monitor.notifications WHERE rule = %s",
            (RULE_NAME,),
        ).fetchone()["steps"]
        assert steps == own_runbooks.steps(RULE_NAME) and len(steps) == 5

        # a new leader reads the open episode: failing on, it opens none again
        receiver = leader()
        fake_clock.advance(10)
        receiver.run_once()
        receiver.run_once()
        assert episodes() == [(instance, "inactive", "error")]

        broken.status = 200
        receiver.run_once()
        assert episodes() == [(instance, "inactive", "error"), (instance, "error", "inactive")]
        assert open_episodes(db) == []
        kinds = conn.execute(
            "SELECT kind FROM outbox_monitor.notifications WHERE rule = %s ORDER BY id",
            (RULE_NAME,),
        ).fetchall()
        assert [k["kind"] for k in kinds] == ["error", "resolved"]
    finally:
        broken.stop()


def test_the_docs_examples_are_a_valid_alerts_yml_and_alertmanager_config(tmp_path: Path) -> None:
    page = (Path(__file__).resolve().parents[2] / "docs/alertmanager.md").read_text()
    ours, theirs = re.findall(r"```yaml\n(.*?)```", page, re.S)
    ruleset = load_rules(rules_file(tmp_path, ours))
    assert alertmanager_urls(ruleset, {}) == {
        "alertmanager": ("http://alertmanager-0:9093", "http://alertmanager-1:9093")
    }
    config = tmp_path / "alertmanager.yml"
    config.write_text(theirs)
    amtool = Path(alertmanager_binary()).with_name("amtool")
    checked = subprocess.run(
        [str(amtool), "check-config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout


def test_a_test_alert_through_an_alertmanager_route_lands_in_each_and_names_a_failing_one(
    tmp_path: Path, db: Database, conn: psycopg.Connection, write_rules
) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    with running_alertmanager(tmp_path / "am") as am:
        ruleset = write_rules(rules([am]))
        [outcome] = send_test(db, ruleset, "am", requested_by="tester").values()
        assert outcome["ok"] and outcome["destination"] == f"Alertmanager {am}"
        [test] = [a for a in active_alerts(am) if a["labels"]["alertname"] == "OutboxMonitorTest"]
        assert test["labels"] == {
            "alertname": "OutboxMonitorTest",
            "severity": "none",
            "route": "am",
        }

        ruleset = write_rules(rules([am, down]))
        [outcome] = send_test(db, ruleset, "am", requested_by="tester").values()
        assert not outcome["ok"] and outcome["error"] == f"{down}: connection refused"
    recorded = conn.execute(
        "SELECT status, last_error FROM outbox_monitor.notifications WHERE kind = 'test' "
        "ORDER BY id"
    ).fetchall()
    assert [(r["status"], r["last_error"]) for r in recorded] == [
        ("sent", None),
        ("failed", f"{down}: connection refused"),
    ]


def test_a_failing_heartbeat_is_logged_once_a_minute_counted_and_on_healthz(
    caplog: pytest.LogCaptureFixture,
) -> None:
    check = LocalServer(status=503)
    caplog.set_level(logging.WARNING, logger="outbox_monitor.scheduler")
    try:
        heartbeat = Heartbeat(check.url + "/ping/secret-uuid")
        status = SchedulerStatus()
        status.heartbeat = heartbeat
        for _ in range(2):
            thread = heartbeat.ping()
            assert thread is not None
            thread.join()
        lines = [r.getMessage() for r in caplog.records]
        assert lines == [
            f"heartbeat {check.url} failed: HTTP 503 (failing since "
            f"{heartbeat.as_json()['failing_since']}; evaluation goes on, the heartbeat's "
            "check will alert when its pings stop)"
        ]
        assert all("secret-uuid" not in line for line in lines)
        _, health = status.health()
        assert f"heartbeat {check.url} failing since" in health["notice"]
        families = {f.name: f for f in dead_mans_switch_families(status)}
        [failed] = [
            s
            for s in families["outbox_monitor_heartbeat_failures"].samples
            if s.name.endswith("_total")
        ]
        assert failed.value == 2
        assert families["outbox_monitor_heartbeat_last_success_timestamp_seconds"].samples == []

        check.status = 200
        heartbeat.ping().join()
        assert caplog.records[-1].getMessage() == f"heartbeat {check.url} answers again"
        assert heartbeat.as_json()["failing_since"] is None
        assert status.health()[1]["notice"] is None
        families = {f.name: f for f in dead_mans_switch_families(status)}
        assert len(families["outbox_monitor_heartbeat_last_success_timestamp_seconds"].samples) == 1
    finally:
        check.stop()


FLEET_RULES = """
version: 1
defaults: {{interval: 0.5s, for: 0s, keep_firing_for: 0s}}
routes:
  am: {{type: alertmanager, alertmanager_urls: [{url}]}}
rules:
  - {{name: stuck-lock, metric: stuck_locks, op: ">", threshold: 0, route: am}}
"""


def test_a_fleet_posts_one_watchdog_and_one_alert_per_outbox_labelled_by_it(
    fleet,  # noqa: F811 (test_fleet_alerts' fixture)
    databases,  # noqa: F811
    conn,
    rows,
    tmp_path: Path,
) -> None:
    with running_alertmanager(tmp_path / "am") as am:
        ruleset = load_rules(rules_file(tmp_path, FLEET_RULES.format(url=am)), fleet)
        stuck_row_in_each(conn, rows)
        schedulers = [
            build_scheduler(
                databases[name], blocking=False, ruleset=ruleset, outbox=fleet.get(name)
            )
            for name in ("orders", "billing")
        ]
        for scheduler in schedulers:
            scheduler.start()
        try:

            def held() -> list[tuple[str, str, str]]:
                return sorted(
                    (a["labels"]["alertname"], a["labels"]["outbox"], a["labels"]["team"])
                    for a in active_alerts(am)
                )

            expected = [
                ("Watchdog", "billing", "payments"),
                ("Watchdog", "orders", "checkout"),
                ("stuck-lock", "billing", "payments"),
                ("stuck-lock", "orders", "checkout"),
            ]
            assert wait_for(lambda: held() == expected, LOADED_DEADLINE), held()
            links = {
                a["labels"]["outbox"]: a["generatorURL"]
                for a in active_alerts(am)
                if a["labels"]["alertname"] == "stuck-lock"
            }
            assert links["orders"].endswith("/actions?outbox=orders")
            assert links["billing"].endswith("/actions?outbox=billing")
        finally:
            for scheduler in schedulers:
                scheduler.shutdown(wait=True)


def test_the_watchdog_ends_in_alertmanager_4_intervals_after_the_monitor_dies(
    tmp_path: Path, db: Database, write_rules
) -> None:
    with running_alertmanager(tmp_path / "am") as am:
        ruleset = write_rules(rules([am], interval="0.5s"))

        def watchdogs() -> list[dict]:
            return [a for a in active_alerts(am) if a["labels"]["alertname"] == "Watchdog"]

        with running_scheduler(db, ruleset=ruleset):
            [alive] = wait_for(watchdogs, LOADED_DEADLINE)
            moved = wait_for(
                lambda: [w for w in watchdogs() if w["endsAt"] > alive["endsAt"]], LOADED_DEADLINE
            )
            assert moved and moved[0]["startsAt"] == alive["startsAt"]  # one alert, kept alive
        died = time.monotonic()  # the scheduler is shut down: no more posts
        last_ends = datetime.fromisoformat(watchdogs()[0]["endsAt"])
        assert wait_for(lambda: not watchdogs(), LOADED_DEADLINE), "the Watchdog never ended"
        gone = time.monotonic() - died
        assert last_ends <= datetime.now(last_ends.tzinfo)
        print(f"\nmonitor dies -> Watchdog gone from Alertmanager: {gone:.2f} s (4 × 0.5 s)")


def test_continue_sends_one_alert_to_alertmanager_and_queues_the_other_receiver(
    tmp_path: Path, db: Database, rows: Rows, conn: psycopg.Connection, write_rules, monkeypatch
) -> None:
    """A branch with ``continue`` to an alertmanager route, then a Slack route: the alert is
    posted to Alertmanager (never queued for it) and queued once for the Slack route."""
    monkeypatch.delenv("OM_TEST_CHAT_URL", raising=False)  # the Slack route's rows wait
    with running_alertmanager(tmp_path / "am") as am:
        ruleset = write_rules(
            rules([am])
            .replace(
                "  am: {type: alertmanager",
                "  main:\n"
                "    webhook_url_env: OM_TEST_CHAT_URL\n"
                "    routes:\n"
                "      - {matchers: {team: payments}, route: am, continue: true}\n"
                "      - {matchers: {team: payments}, route: chat}\n"
                "  chat: {webhook_url_env: OM_TEST_CHAT_URL}\n"
                "  am: {type: alertmanager",
            )
            .replace("route: am\n    summary", "route: main\n    summary")
        )
        rows.add(event_type="order.paid")
        with running_scheduler(db, ruleset=ruleset):
            seen = wait_for(lambda: named(active_alerts(am), "order.paid"), LOADED_DEADLINE)
            assert seen, "the firing alert never reached Alertmanager"
            queued = conn.execute(
                "SELECT route, kind FROM outbox_monitor.notifications"
                " WHERE rule = 'backlog' ORDER BY id"
            ).fetchall()
    assert [(r["route"], r["kind"]) for r in queued] == [("chat", "firing")]
