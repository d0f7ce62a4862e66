"""Which shipped alerts the demo fires by itself, held against its docs (issue 30 item 11).

docs/index.md's list "What fires in the demo" names, for every rule of the shipped
alerts.yml, when the demo fires it: by itself, after a reap, on one of its drills, or never.
This test runs what ``outbox-monitor demo`` runs — its throwaway outbox with its flow-control
index and breakers (``demo/controls.yml``), an hour of history and live traffic from the
simulator with crashing workers (``run_simulation``, the demo's rate, workers, lock timeout
and sample interval), the scheduler with the demo's rules (the shipped alerts.yml, only
``xmin-horizon-held`` lowered to 1 minute, plus the paging drill's: ``breaker-open``
critical, the per-type ``backlog-by-type`` and ``latency-by-type``, ``demo/rules.py``,
``demo/drill.py``) posting to the demo's local Slack sink with the bot token and to its
local PagerDuty — and asserts that the rules which went pending or firing by themselves are
exactly the list's "by itself" ones, and that an operator's reap of the stuck locks (the
demo's tour, Actions → Reap stuck locks) fires exactly its "after a reap" ones at an
evaluation that comes before the workers claim the reaped rows. Evaluations are brought
forward instead of waited for (the demo evaluates every 30 s). The drills' alerts are held
by tests/integration/test_demo_outage.py and test_demo_forgotten_transaction.py.
"""

import re
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from outbox_monitor.actions.reap import preview_reap
from outbox_monitor.actions.run import apply
from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.rules_file import RULES_ENV, SHIPPED_RULES_PATH, load_rules
from outbox_monitor.alerts.slack import API_URL_ENV, BOT_TOKEN_ENV
from outbox_monitor.config.settings import load_settings
from outbox_monitor.demo.drill import (
    DEMO_CHANNEL,
    DEMO_ROUTING_KEY,
    PAGED_RULE,
    PAGERDUTY_KEY_ENV,
    PAGERDUTY_URL_ENV,
    PER_TYPE_RULES,
)
from outbox_monitor.demo.fake_receivers import FakePagerDuty
from outbox_monitor.demo.lifecycle import (
    DEMO_ACTOR,
    DEMO_BACKFILL,
    DEMO_CONTROLS,
    DEMO_LOCK_TIMEOUT,
    DEMO_SAMPLE_INTERVAL,
)
from outbox_monitor.demo.rules import HORIZON_RULE, use_demo_rules
from outbox_monitor.demo.simulate import DEFAULT_CRASH_EVERY, run_simulation
from outbox_monitor.demo.slack_sink import SlackSink
from outbox_monitor.flow.controls_file import apply_controls, load_controls
from outbox_monitor.service.jobs import EVALUATOR_JOB_ID
from outbox_monitor.service.scheduler import build_scheduler
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import init_db
from tests.alerting import LOADED_DEADLINE, SENDER_INTERVAL, stop_scheduler, wait_for

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "index.md"
TABLE_HEADING = "### What fires in the demo\n"
BY_ITSELF, AFTER_A_REAP = "by itself", "after a reap"
SEED = 30_11
"""The simulator's seed: the same history (and crashes) on every run."""
DEMO_RATE, DEMO_WORKERS = 20.0, 4
"""``outbox-monitor demo``'s defaults (``run_demo``)."""
LIVE_SECONDS = 15.0
"""Live traffic between the first evaluation and the second."""


def documented() -> dict[str, set[str]]:
    """docs/index.md's list: each "fires" (**by itself**, **after a reap**, …) → its rules."""
    section = DOCS.read_text().split(TABLE_HEADING, 1)[1].split("\n#", 1)[0]
    found: dict[str, set[str]] = {}
    for rule, fires in re.findall(r"^- `([a-z0-9-]+)` — \*\*([^*]+)\*\*\.", section, re.M):
        found.setdefault(fires, set()).add(rule)
    return found


def last_evaluation(conn) -> datetime | None:
    return conn.execute(
        "SELECT max(evaluated_at) AS at FROM outbox_monitor.leader_leases"
    ).fetchone()["at"]


def evaluate_now(scheduler, conn) -> None:
    """Bring the scheduler's next evaluation forward (the demo's runs every 30 s, the first
    at start: it may find the lease not yet taken) and wait until one has completed."""
    before = last_evaluation(conn)

    def evaluated() -> bool:
        if last_evaluation(conn) != before:
            return True
        scheduler.modify_job(EVALUATOR_JOB_ID, next_run_time=datetime.now(UTC))
        return False

    assert wait_for(evaluated, LOADED_DEADLINE, step=1.0), "no evaluation completed"


def raised(conn, after_id: int = 0) -> set[str]:
    """The rules with a transition to pending or firing after transition ``after_id``."""
    return {
        row["rule"]
        for row in conn.execute(
            "SELECT rule FROM outbox_monitor.alert_transitions"
            " WHERE id > %s AND to_state IN ('pending', 'firing')",
            (after_id,),
        )
    }


def last_transition(conn) -> int:
    return conn.execute(
        "SELECT coalesce(max(id), 0) AS id FROM outbox_monitor.alert_transitions"
    ).fetchone()["id"]


@pytest.fixture
def demo_rules(tmp_path, monkeypatch):
    """The demo's rules (``use_demo_rules``: the shipped file, its horizon rule at 1 minute,
    the drill's), as ``outbox-monitor demo`` writes them with its Slack sink (and no
    Alertmanager); ``OUTBOX_MONITOR_RULES`` restored afterwards."""
    monkeypatch.setenv(RULES_ENV, str(SHIPPED_RULES_PATH))  # restored after the test …
    monkeypatch.delenv(RULES_ENV)  # … unset now: the shipped rules are in force
    monkeypatch.chdir(tmp_path)  # no ./alerts.yml of its own
    assert use_demo_rules(tmp_path, drill=True, channel=DEMO_CHANNEL) == "1m"
    return load_rules(tmp_path / "demo-alerts.yml")


def test_the_demo_fires_by_itself_and_after_a_reap_what_its_docs_say(dsn, conn, demo_rules):
    table = documented()
    shipped_rules = load_rules(SHIPPED_RULES_PATH).rules
    shipped = [rule.name for rule in shipped_rules]
    listed = [rule for rules in table.values() for rule in rules]
    drill = [rule["name"] for rule in PER_TYPE_RULES]
    assert sorted(listed) == sorted(shipped + drill)  # every rule of the demo, once
    # the demo's rules are the shipped ones — only xmin-horizon-held alerts sooner (not
    # weaker) and breaker-open pages (critical) — and the drill's per-type ones after them
    assert [rule.name for rule in demo_rules.rules] == shipped + drill
    for demo, rule in zip(demo_rules.rules, shipped_rules, strict=False):
        if rule.name == HORIZON_RULE:
            assert demo.threshold == 60 < rule.threshold
            demo = demo.model_copy(update={"threshold": rule.threshold})
        if rule.name == PAGED_RULE:
            assert (demo.severity, rule.severity) == ("critical", "warning")
            demo = demo.model_copy(update={"severity": rule.severity})
        assert demo == rule, rule.name
    settings = load_settings(
        dsn=dsn, sample_interval=DEMO_SAMPLE_INTERVAL, lock_timeout=DEMO_LOCK_TIMEOUT
    )
    stop, ready = threading.Event(), threading.Event()
    outcome: dict = {}

    def simulate() -> None:
        try:
            outcome.update(
                run_simulation(
                    settings,
                    rate=DEMO_RATE,
                    workers=DEMO_WORKERS,
                    backfill=DEMO_BACKFILL,
                    stop_event=stop,
                    seed=SEED,
                    crash_every=DEFAULT_CRASH_EVERY,
                    on_ready=lambda backfilled: ready.set(),
                )
            )
        except Exception as error:  # shown by the assertion below
            outcome["error"] = error
            ready.set()

    with Database(settings) as db, SlackSink() as sink:
        pagerduty = FakePagerDuty(DEMO_ROUTING_KEY)
        transports = transports_for(
            demo_rules,
            {
                BOT_TOKEN_ENV: sink.token,
                API_URL_ENV: sink.api_url,
                PAGERDUTY_KEY_ENV: DEMO_ROUTING_KEY,
                PAGERDUTY_URL_ENV: pagerduty.url,
            },
        )
        init_db(db, create_table=True, flow_control=True)  # as the demo's outbox
        apply_controls(db, load_controls(DEMO_CONTROLS), actor=DEMO_ACTOR)
        simulator = threading.Thread(target=simulate, name="simulator", daemon=True)
        simulator.start()
        scheduler = None
        try:
            assert ready.wait(LOADED_DEADLINE) and "error" not in outcome, outcome
            scheduler = build_scheduler(
                db,
                blocking=False,
                ruleset=demo_rules,
                transports=transports,
                sender_interval=SENDER_INTERVAL,
            )
            scheduler.start()
            started = datetime.now(UTC)
            evaluate_now(scheduler, conn)  # the evaluation at start
            stop.wait(LIVE_SECONDS)
            evaluate_now(scheduler, conn)  # and one after live traffic with crashing workers
            by_itself = raised(conn)
            assert by_itself == table[BY_ITSELF], by_itself

            # the tour: Actions → Reap stuck locks → Confirm reap of N rows. The live workers
            # claim the reaped rows (due at once, oldest first) within about a second: the
            # demo's evaluation every 30 s catches them waiting only now and then. Here the
            # workers finish their batch and stop first, so that the evaluation after the reap
            # is one that comes before their claim.
            stop.set()
            simulator.join(LOADED_DEADLINE)
            assert not simulator.is_alive() and "error" not in outcome, outcome
            stuck = conn.execute(
                "SELECT count(*) FILTER (WHERE event_type LIKE 'notification.%%') AS notes,"
                " count(*) AS rows FROM integration_outbox WHERE status = 'processing'"
                " AND locked_at < now() - make_interval(secs => %s)",
                (DEMO_LOCK_TIMEOUT,),
            ).fetchone()
            assert stuck["notes"] > 0  # the history's crashed batches hold notifications
            before = last_transition(conn)
            reaped = apply(db, preview_reap(db), actor=DEMO_ACTOR)
            assert reaped.changed > 0
            evaluate_now(scheduler, conn)
            after_reap = raised(conn, before)
            assert after_reap == table[AFTER_A_REAP], after_reap
            [late] = conn.execute(
                "SELECT value FROM outbox_monitor.alert_instances WHERE rule = 'notifications-late'"
            ).fetchall()
            assert late["value"] > 5 * 60  # the reaped rows keep their created_at (SPEC §3)
            # one firing message each in the demo's Slack sink
            expected = {f"[FIRING] {rule}" for rule in table[BY_ITSELF] | table[AFTER_A_REAP]}

            def posted() -> set[str]:
                return {
                    match
                    for message in sink.messages()
                    for match in re.findall(r"\[FIRING\] [a-z-]+", message.get("text", ""))
                }

            assert wait_for(lambda: posted() == expected, LOADED_DEADLINE), posted()
            print(
                f"\ndemo alerts: by itself {sorted(by_itself)}, after reaping "
                f"{reaped.changed} rows ({stuck['notes']} notifications) {sorted(after_reap)}; "
                f"{(datetime.now(UTC) - started).total_seconds():.0f} s from the scheduler's start"
            )
        finally:
            stop.set()
            if scheduler is not None:
                stop_scheduler(scheduler)
            simulator.join(LOADED_DEADLINE)
            pagerduty.close()
