"""Payload privacy on a real Postgres: the redacted CSV export, the audited reveal (and its
refusals), redacted detail and download, and redacted error samples in Slack messages."""

import csv
import io
import json
import uuid

import psycopg
import pytest

from outbox_monitor.access import Identity, Role
from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.measure import offenders
from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.sender import deliver_due
from outbox_monitor.browse import events
from outbox_monitor.browse.events import EventFilter
from outbox_monitor.config.settings import load_settings
from outbox_monitor.errors import AccessDenied, PermissionDenied
from outbox_monitor.privacy.redaction import redactor_for
from outbox_monitor.privacy.value_detectors import REDACTED
from outbox_monitor.store.db import Database
from tests.alerting import notifications
from tests.privacy_samples import ERROR, ERROR_SHOWN, EXPECTED, PAYLOAD, RAW

R = REDACTED
OPERATOR = Identity("olga@example.com", Role.operator, "oidc")
VIEWER = Identity("vic@example.com", Role.viewer, "oidc")


def audit_rows(conn: psycopg.Connection) -> list[dict]:
    return conn.execute("SELECT * FROM outbox_monitor.audit_log ORDER BY id").fetchall()


def test_csv_has_the_redacted_payload_and_error(db, rows):
    shown = rows.add(
        status="failed", processed_ago=30, payload=PAYLOAD, last_error=ERROR, event_key="=cmd|x"
    )
    rows.add(event_type="invoice.sent", payload=["a@b.co", 4111111111111111])
    older = rows.add(payload="4111111111111111", created_ago=600)

    text = events.events_csv(db, redactor_for(db.settings), EventFilter(event_type="order.paid"))
    table = list(csv.DictReader(io.StringIO(text)))

    assert list(table[0]) == list(events.EXPORT_COLUMNS)
    assert [int(r["id"]) for r in table] == [older, shown]  # newest id first
    assert json.loads(table[0]["payload"]) == R  # a top-level string payload
    assert json.loads(table[1]["payload"]) == EXPECTED
    assert table[1]["last_error"] == ERROR_SHOWN
    assert table[1]["event_key"] == "'=cmd|x"  # not run as a formula by a spreadsheet
    assert table[1]["status"] == "failed"
    assert table[1]["processed_at"] == rows.at(30).isoformat()
    assert table[1]["locked_at"] == ""
    assert not any(raw in text for raw in RAW)
    assert rows.get(shown)["payload"] == PAYLOAD  # display-only: the row is unchanged


def test_csv_follows_the_page_filters(db, rows):
    ids = [rows.add(created_ago=100 - n) for n in range(5)]
    redactor = redactor_for(db.settings)

    text = events.events_csv(db, redactor, EventFilter(before_id=ids[3]), limit=2)

    assert [int(r["id"]) for r in csv.DictReader(io.StringIO(text))] == [ids[2], ids[1]]
    with pytest.raises(ValueError, match="status must be one of"):
        events.events_csv(db, redactor, EventFilter(status="nope"))


def test_an_operator_reveals_the_raw_payload_and_one_audit_row_records_it(db, conn, rows):
    row_id = rows.add(payload=PAYLOAD, last_error=ERROR)

    revealed = events.reveal_payload(db, row_id, OPERATOR)

    assert json.loads(revealed.payload) == PAYLOAD
    assert json.loads(revealed.payload_pretty) == PAYLOAD
    assert revealed.last_error == ERROR
    assert revealed.payload_bytes == len(revealed.payload.encode())
    [audit] = audit_rows(conn)
    assert (audit["id"], audit["actor"], audit["action"]) == (
        revealed.audit_id,
        "olga@example.com",
        "reveal",
    )
    assert (audit["affected_ids"], audit["affected_count"]) == ([row_id], 1)
    assert audit["table_name"] == "public.integration_outbox"
    assert audit["filter"] == {"id": str(row_id)}
    assert not any(raw in json.dumps(audit, default=str) for raw in RAW)


def test_a_viewer_is_refused_and_nothing_is_audited(db, conn, rows):
    row_id = rows.add(payload=PAYLOAD)

    with pytest.raises(AccessDenied, match=r"vic@example.com \(viewer\) may not reveal"):
        events.reveal_payload(db, row_id, VIEWER)

    assert [(a["action"], a["filter"]) for a in audit_rows(conn)] == [
        ("refused", {"action": "reveal"})
    ]


def test_revealing_a_missing_event_audits_nothing(db, conn):
    assert events.reveal_payload(db, 2**62, OPERATOR) is None
    assert audit_rows(conn) == []


def test_no_reveal_when_the_audit_row_cannot_be_written(dsn, conn, rows):
    row_id = rows.add(payload=PAYLOAD)
    role = f"reader_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE ROLE {role} LOGIN")
    conn.execute(f"GRANT SELECT ON integration_outbox TO {role}")
    conn.execute(f"GRANT USAGE ON SCHEMA outbox_monitor TO {role}")
    conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA outbox_monitor TO {role}")
    reader_dsn = psycopg.conninfo.make_conninfo(dsn, user=role)
    try:
        with Database(load_settings(dsn=reader_dsn)) as reader, pytest.raises(PermissionDenied):
            events.reveal_payload(reader, row_id, OPERATOR)
    finally:
        conn.execute(f"DROP OWNED BY {role}")
        conn.execute(f"DROP ROLE {role}")
    assert audit_rows(conn) == []


def test_detail_and_download_are_redacted(db, rows):
    small = rows.add(payload=PAYLOAD, last_error=ERROR)
    # past the 256 KiB shown: the head is cut inside the token's value
    # (jsonb orders keys by length: blob, note, token)
    big_payload = {"note": "mail a@b.co", "blob": "z" * 262_000, "token": "t" * 1000}
    big = rows.add(payload=big_payload)
    redactor = redactor_for(db.settings)

    detail = events.redact_event(events.get_event(db, small), redactor)
    assert json.loads(detail["payload_pretty"]) == EXPECTED
    assert detail["last_error"] == ERROR_SHOWN

    cut = events.redact_event(events.get_event(db, big), redactor)
    assert cut["payload_truncated"] and cut["payload_pretty"] is None
    assert cut["payload_head"].endswith(f'"token": "{R}"')
    assert "ttt" not in cut["payload_head"]
    shown = {**big_payload, "note": f"mail {R}", "token": R}  # the e-mail detector is on by default
    assert json.loads(events.redacted_payload(db, big, redactor)) == shown
    assert json.loads(events.event_payload(db, big)) == big_payload  # the database keeps it


RULES = """
version: 1
defaults: {interval: 30s, for: 0s, keep_firing_for: 0s}
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL}
rules:
  - name: payment-failed
    metric: failed_in_window
    event_type: "payment.%"
    window: 15m
    op: ">"
    threshold: 0
    severity: critical
    route: oncall
"""


def test_slack_messages_carry_redacted_error_samples(
    db, conn, rows, fake_clock, write_rules, slack_sink
):
    ruleset = write_rules(RULES)
    rows.add(
        event_type="payment.captured",
        status="failed",
        attempts=10,
        processed_ago=60,
        last_error=ERROR,
    )

    found = offenders(db, ruleset.rules[0])
    assert [o["sample_error"] for o in found if o["kind"] == "error_group"] == [ERROR_SHOWN]

    Evaluator(db, ruleset, clock=fake_clock).run_once()
    transports = transports_for(ruleset, {"SLACK_WEBHOOK_URL": slack_sink.webhook_url})
    assert deliver_due(db, ruleset, clock=fake_clock, transports=transports)["sent"] == 1

    [message] = slack_sink.messages()
    sections = [b["text"]["text"] for b in message["blocks"] if b["type"] == "section"]
    lines = [line for s in sections for line in s.splitlines()]
    assert f'*Error groups:* payment.captured — 1 failed: "{ERROR_SHOWN}"' in lines
    [stored] = notifications(conn, "payment-failed")
    for sent in (json.dumps(message), json.dumps(stored["payload"])):
        assert not any(raw in sent for raw in RAW)
