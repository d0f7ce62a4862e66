"""The operator's controls (SPEC §5, issue 13 item 2): pause, resume, limits and breakers set
through ``flow.controls``, role-checked and audited; what each control holds, read back by
hand from the rows inserted; file-owned controls overridden only for a while."""

import time

import pytest

from outbox_monitor import outbox
from outbox_monitor.access import Identity, Role
from outbox_monitor.actions.reap import preview_reap
from outbox_monitor.actions.replay import ReplaySelection, preview_replay
from outbox_monitor.actions.run import apply
from outbox_monitor.errors import AccessDenied, ActionRefused
from outbox_monitor.flow import controls as flow
from outbox_monitor.flow.controls_file import apply_controls
from outbox_monitor.flow.model import ControlSettings
from tests.flow import race_claims, worst_excess

OPERATOR = Identity("oncall@example.com", Role.operator, "cli")
VIEWER = Identity("viewer@example.com", Role.viewer, "cli")


def audit(conn) -> list[dict]:
    return conn.execute(
        "SELECT actor, action, filter FROM outbox_monitor.audit_log ORDER BY id"
    ).fetchall()


def test_a_pause_holds_the_matching_due_rows_shows_them_and_resume_releases_them(db, conn, rows):
    for _ in range(3):
        rows.add(event_type="crm.contact")
    rows.add(event_type="crm.deal")
    rows.add(event_type="crm.deal", available_ago=-600)  # in backoff: not due, not held
    rows.add(event_type="order.paid")
    assert flow.preview_hold(db, "crm.%") == {"crm.contact": 3, "crm.deal": 1}

    change = flow.pause(db, "crm.%", actor=OPERATOR, reason="CRM API down")

    assert change.before is None and change.after.paused
    (control,) = flow.controls(db)
    assert (control.state, control.grant, control.rows_held) == ("paused", 0, 4)
    assert control.held == {"crm.contact": 3, "crm.deal": 1}
    assert [row["event_type"] for row in outbox.claim(conn, "w1")] == ["order.paid"]

    flow.resume(db, "crm.%", actor=OPERATOR)
    assert flow.controls(db) == []  # nothing left to obey: the row is gone
    assert sorted(row["event_type"] for row in outbox.claim(conn, "w1")) == [
        "crm.contact",
        "crm.contact",
        "crm.contact",
        "crm.deal",
    ]
    trail = audit(conn)
    assert [(a["actor"], a["action"]) for a in trail] == [
        ("oncall@example.com", "pause"),
        ("oncall@example.com", "resume"),
    ]
    assert trail[0]["filter"]["event_type"] == "crm.%"
    assert trail[0]["filter"]["after"]["pause_reason"] == "CRM API down"
    assert trail[1]["filter"]["after"] is None


def test_a_viewer_may_not_pause_and_nothing_is_written(db, conn, rows):
    with pytest.raises(AccessDenied, match="needs the operator role"):
        flow.pause(db, "crm.%", actor=VIEWER)
    assert flow.controls(db) == []
    assert audit(conn) == [
        {"actor": "viewer@example.com", "action": "refused", "filter": {"action": "pause"}}
    ]


def test_a_concurrency_limit_shows_its_grant_and_the_throttled_rows(db, conn, rows):
    rows.add(event_type="crm.contact", status="processing", locked_ago=5)
    for _ in range(5):
        rows.add(event_type="crm.contact")
    flow.change(db, "crm.contact", actor=OPERATOR, action="limit", changes={"concurrency_limit": 3})
    (control,) = flow.controls(db)
    # 3 allowed - 1 processing = 2 now; 5 due - 2 = 3 wait
    assert (control.processing, control.grant, control.throttled, control.state) == (
        1,
        2,
        3,
        "limited",
    )
    assert len(outbox.claim(conn, "w1")) == 2


def test_settings_the_model_refuses_name_the_field(db, conn):
    with pytest.raises(ActionRefused, match="rate_per_second and burst go together"):
        flow.change(db, "crm.%", actor=OPERATOR, action="limit", changes={"rate_per_second": 5})
    with pytest.raises(ActionRefused, match="breaker_cooldown_seconds"):
        flow.change(
            db,
            "crm.%",
            actor=OPERATOR,
            action="breaker",
            changes={"breaker": True, "breaker_cooldown_seconds": 3600},
        )
    assert audit(conn) == []


def test_the_breakers_state_reads_back(db, conn, rows):
    flow.change(
        db,
        "crm.%",
        actor=OPERATOR,
        action="breaker",
        changes={"breaker": True, "breaker_min_attempts": 2, "breaker_ratio": 1},
    )
    for _ in range(3):
        rows.add(event_type="crm.contact")
    for row in outbox.claim(conn, "w1", limit=2):
        outbox.fail(conn, row["id"], "w1", "503")
    (control,) = flow.controls(db)
    assert (control.breaker_state, control.state, control.held) == (
        "open",
        "breaker open",
        {"crm.contact": 1},
    )
    (opened,) = flow.recent_transitions(db)
    assert (opened["transition"], opened["outcomes"], opened["failures"]) == ("opened", 2, 2)


def test_an_operators_change_to_a_file_control_is_an_override_that_expires(db, conn, rows):
    apply_controls(db, {"crm.%": ControlSettings(concurrency_limit=10)}, actor=OPERATOR)
    change = flow.pause(db, "crm.%", actor=OPERATOR, reason="incident")
    assert change.expires_at is not None  # the file owns it: the pause must end
    (control,) = flow.controls(db)
    assert control.layer == "ui" and control.state == "paused"
    assert control.file_settings == ControlSettings(concurrency_limit=10)  # the drift
    assert control.settings.concurrency_limit == 10  # the pause kept the file's limit

    apply_controls(db, {"crm.%": ControlSettings(concurrency_limit=8)}, actor=OPERATOR)
    (control,) = flow.controls(db)
    assert control.state == "paused"  # apply never clears an override
    assert control.file_settings == ControlSettings(concurrency_limit=8)

    conn.execute("UPDATE outbox_monitor.controls SET expires_at = now() WHERE layer = 'ui'")
    time.sleep(0.01)
    (control,) = flow.controls(db)
    assert (control.layer, control.state, control.settings) == (
        "file",
        "running",
        ControlSettings(concurrency_limit=8),
    )


def test_resuming_a_file_control_to_the_files_settings_removes_the_override(db, conn):
    apply_controls(db, {"crm.%": ControlSettings(concurrency_limit=10)}, actor=OPERATOR)
    flow.pause(db, "crm.%", actor=OPERATOR)
    change = flow.resume(db, "crm.%", actor=OPERATOR)
    assert change.expires_at is None
    rows = conn.execute("SELECT layer FROM outbox_monitor.controls").fetchall()
    assert rows == [{"layer": "file"}]


def test_apply_removes_file_controls_no_longer_in_the_file_and_is_idempotent(db, conn):
    apply_controls(
        db,
        {"crm.%": ControlSettings(concurrency_limit=10), "sms.%": ControlSettings(paused=True)},
        actor=OPERATOR,
    )
    flow.pause(db, "sms.%", actor=OPERATOR, reason="kept")  # an override of a file control
    first = apply_controls(db, {"crm.%": ControlSettings(concurrency_limit=10)}, actor=OPERATOR)
    again = apply_controls(db, {"crm.%": ControlSettings(concurrency_limit=10)}, actor=OPERATOR)
    assert (first.removed, first.written, again.removed, again.written) == (["sms.%"], [], [], [])
    layers = conn.execute(
        "SELECT event_type_filter, layer FROM outbox_monitor.controls ORDER BY 1, 2"
    ).fetchall()
    # the operator's override of sms.% stays (apply never clears it) and now stands alone
    assert [(r["event_type_filter"], r["layer"]) for r in layers] == [
        ("crm.%", "file"),
        ("sms.%", "ui"),
    ]


def test_reaped_rows_are_transient_failures_for_the_breaker_and_a_reaped_probe_reopens_it(
    db, conn, rows
):

    flow.change(
        db,
        "crm.%",
        actor=OPERATOR,
        action="breaker",
        changes={
            "breaker": True,
            "breaker_min_attempts": 3,
            "breaker_ratio": 1,
            "breaker_cooldown_seconds": 1,
        },
    )
    for _ in range(3):
        rows.add(event_type="crm.contact", status="processing", locked_ago=3600)
    assert apply(db, preview_reap(db), actor=OPERATOR).changed == 3
    (control,) = flow.controls(db)
    assert control.breaker_state == "open"  # 3 reaps: 3 transient failures of 3 outcomes

    conn.execute("UPDATE integration_outbox SET available_at = now() - interval '1 s'")
    time.sleep(1.1)
    (probe,) = outbox.claim(conn, "w1")
    conn.execute(
        "UPDATE integration_outbox SET locked_at = now() - interval '1 hour' WHERE id = %s",
        (probe["id"],),
    )
    assert apply(db, preview_reap(db), actor=OPERATOR).changed == 1
    state = conn.execute(
        "SELECT breaker_state, cooldown_seconds FROM outbox_monitor.control_state"
    ).fetchone()
    assert state == {"breaker_state": "open", "cooldown_seconds": 2}  # doubled


def test_a_drip_replay_of_an_old_backlog_with_its_rate_limit_never_exceeds_its_rate(
    db, dsn, conn, rows
):
    """Issue 13's "Done means": 60 dead letters of a day ago replayed at 5 rows/s with a
    rate-limit control of 5 rows/s (burst 1) on their type; 4 workers race for 8 s. Every
    interval T of hand-outs holds at most 1 + 5·T rows, and the drip spread them (≈ 41)."""

    for i in range(60):
        rows.add_failed(event_type="crm.contact", created_ago=86400 - i, processed_ago=80000)
    flow.change(
        db,
        "crm.contact",
        actor=OPERATOR,
        action="limit",
        changes={"rate_per_second": 5, "burst": 1},
    )
    selection = ReplaySelection(event_type="crm.contact")
    assert apply(db, preview_replay(db, selection, rate=5), actor=OPERATOR).changed == 60
    handed = race_claims(dsn, 8)
    worst = worst_excess(handed, burst=1, rate=5)
    assert worst <= 0, f"{worst:.2f} rows over 1 + 5·T"
    assert 30 <= len(handed) <= 1 + 5 * 8.5  # throttled, not stalled
