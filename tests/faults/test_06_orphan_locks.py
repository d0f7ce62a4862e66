"""Issue 10 item 6: a ``processing`` row with ``locked_at`` null (an orphan) is stuck.

SPEC §2 stuck locks: ``locked_at < now() - lock_timeout OR locked_at IS NULL``; SPEC §4
reap: the same inside the UPDATE. Three processing rows, lock timeout 15 min (the
default): an orphan, one locked 20 min ago, one locked 1 min ago → 2 stuck, 2 reaped,
the stuck-lock rule fires with value 2, on every surface.
"""

import json
import os
import urllib.request
from pathlib import Path

import streamlit as st
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families
from streamlit.testing.v1 import AppTest

from outbox_monitor.access import Identity, Role
from outbox_monitor.actions.reap import preview_reap
from outbox_monitor.actions.run import apply
from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.rules_file import SHIPPED_RULES_PATH, load_rules
from outbox_monitor.cli import main
from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.export.server import MetricsServer
from outbox_monitor.figures import metrics
from outbox_monitor.service.maintenance import reap_stuck_locks
from outbox_monitor.ui import format

ACTOR = Identity("ops", Role.operator, "cli")
DASHBOARD = Path(__file__).resolve().parents[2] / "dashboard.py"
LOCK_TIMEOUT = 900.0  # the default, 15 min


def three_processing_rows(rows) -> tuple[int, int, int]:
    orphan = rows.add(event_type="crm.upsert", status="processing", attempts=1)
    old = rows.add(
        event_type="order.paid",
        status="processing",
        locked_ago=20 * 60,
        locked_by="w-crashed",
        attempts=2,
    )
    fresh = rows.add(event_type="order.paid", status="processing", locked_ago=60)
    assert rows.get(orphan)["locked_at"] is None and rows.get(orphan)["locked_by"] is None
    return orphan, old, fresh


def test_orphans_are_counted_as_stuck_locks_everywhere(db, rows, dsn, monkeypatch):
    three_processing_rows(rows)
    assert db.settings.lock_timeout == LOCK_TIMEOUT
    assert metrics.stuck_locks(db) == 2
    assert metrics.status(db)["stuck_locks"] == 2

    monkeypatch.setenv("OUTBOX_MONITOR_DSN", dsn)
    result = CliRunner().invoke(main, ["status", "--json"], catch_exceptions=False)
    assert json.loads(result.stdout)["stuck_locks"] == 2

    with (
        MetricsServer(db, SchedulerStatus(), cache_seconds=0) as server,
        urllib.request.urlopen(server.url + "/metrics", timeout=30) as response,
    ):
        text = response.read().decode()
    stuck = {
        sample.labels["event_type"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "outbox_stuck_locks"
        for sample in family.samples
    }
    assert {k: v for k, v in stuck.items() if v} == {"crm.upsert": 1, "order.paid": 1}


def test_reap_previews_and_applies_to_orphans(db, rows):
    orphan, old, fresh = three_processing_rows(rows)
    preview = preview_reap(db)
    assert preview.matched == 2
    # orphans first: no lock time, no lock age
    first = preview.sample[0]
    assert (first["id"], first["lock_age_seconds"]) == (orphan, None)
    assert preview.sample[1]["id"] == old and preview.sample[1]["lock_age_seconds"] >= 1200

    result = apply(db, preview, actor=ACTOR)
    assert (result.changed, result.skipped, sorted(result.ids)) == (2, 0, sorted([orphan, old]))
    reaped_orphan, reaped_old = rows.get(orphan), rows.get(old)
    assert (reaped_orphan["status"], reaped_orphan["attempts"], reaped_orphan["locked_by"]) == (
        "pending",
        2,
        None,
    )
    assert reaped_orphan["last_error"] == (
        "lock expired: claimed by unknown with no lock time (locked_at null: an orphan)"
    )
    assert (reaped_old["status"], reaped_old["attempts"], reaped_old["locked_at"]) == (
        "pending",
        3,
        None,
    )
    assert reaped_old["last_error"].startswith("lock expired: claimed by w-crashed at ")
    assert reaped_old["last_error"].endswith(", not acked within 900 s")
    assert rows.get(fresh)["status"] == "processing"
    assert metrics.stuck_locks(db) == 0


def test_the_dashboard_preview_table_shows_an_orphans_lock_age_as_a_dash(db, rows):
    orphan, old, _ = three_processing_rows(rows)
    sample = preview_reap(db).sample
    shown = format.table(sample, ["id", "lock_age_seconds"], units={"lock_age_seconds": "seconds"})
    assert list(shown["id"]) == [str(orphan), str(old)]
    orphan_age, old_age = list(shown["lock_age_seconds"])
    assert orphan_age == "–" and old_age.startswith("20m")


def test_the_actions_page_lists_and_reaps_an_orphan(rows, dsn, monkeypatch):
    orphan, old, fresh = three_processing_rows(rows)
    for name in list(os.environ):
        if name.startswith("OUTBOX_MONITOR_") or name == "DATABASE_URL":
            monkeypatch.delenv(name)
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", dsn)
    monkeypatch.setenv("OUTBOX_MONITOR_ACTOR", "ui-test")
    st.cache_data.clear()
    st.cache_resource.clear()
    try:
        at = AppTest.from_file(DASHBOARD, default_timeout=60)
        at.switch_page("pages/actions.py").run()
        assert not at.exception
        sample = at.dataframe[0].value
        assert [int(i) for i in sample["id"]] == [orphan, old]
        assert sample["lock_age_seconds"][0] == "–" and sample["lock_age_seconds"][1].startswith(
            "20m"
        )
        assert any("**2** rows would be reaped" in m.value for m in at.markdown)
        at.button(key="actions.reap.confirm").click().run()
        assert not at.exception
        assert any("Reaped 2 rows" in s.value for s in at.success)
    finally:
        st.cache_data.clear()
        st.cache_resource.clear()
    assert [rows.get(i)["status"] for i in (orphan, old, fresh)] == [
        "pending",
        "pending",
        "processing",
    ]


def test_the_scheduler_auto_reap_takes_orphans(db, rows):
    orphan, old, fresh = three_processing_rows(rows)
    # two stuck, half of them per run (the default share, rounded up): the orphan first
    first = reap_stuck_locks(db)
    assert first is not None and first.ids == [orphan]
    second = reap_stuck_locks(db)
    assert second is not None and second.ids == [old]
    assert [rows.get(i)["status"] for i in (orphan, old, fresh)] == [
        "pending",
        "pending",
        "processing",
    ]


def test_the_shipped_stuck_lock_rule_fires_with_value_2(db, rows):
    three_processing_rows(rows)
    ruleset = load_rules(SHIPPED_RULES_PATH)
    [rule] = [r for r in ruleset.rules if r.metric == "stuck_locks"]
    report = Evaluator(db, ruleset).run_once()
    fired = report.instance(rule.name)
    assert (fired.state, fired.value, fired.transitions) == ("firing", 2, ("inactive→firing",))
