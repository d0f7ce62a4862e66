"""Actions stay per outbox (issue 16 item 6): the role is the one the outbox's own mapping
gives (a fleet entry's ``access``), checked by the action itself — an operator of one outbox
replays there, audited in that outbox's database through its actions DSN; as a viewer of
another they are refused, and nothing changes or is audited there."""

import psycopg
import pytest

from outbox_monitor.access import Identity, Role, role_for
from outbox_monitor.actions.replay import ReplaySelection, preview_replay
from outbox_monitor.actions.run import apply
from outbox_monitor.config.fleet import load_fleet
from outbox_monitor.config.settings import load_settings
from outbox_monitor.errors import AccessDenied
from outbox_monitor.store.audit import recent_audit
from outbox_monitor.store.db import Database
from outbox_monitor.store.schema import init_db

OPS = "ops@example.com"
FILE = """
version: 1
outboxes:
  - name: payments
    dsn_env: PAYMENTS_DSN
    actions_dsn_env: PAYMENTS_ACTIONS
    access: {operators: [ops@example.com]}
  - name: billing
    dsn_env: BILLING_DSN
    access: {viewers: [ops@example.com]}
"""


def audit(dsn: str) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        query = "SELECT action, actor, affected_count FROM outbox_monitor.audit_log"
        return conn.execute(query).fetchall()


def one_dead_letter(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key,"
            " payload, status, attempts, processed_at) VALUES ('invoice.sent', 'invoice', '1',"
            " 'k1', '{}', 'failed', 10, now()) RETURNING id"
        ).fetchone()[0]


def status(dsn: str, row_id: int) -> str:
    with psycopg.connect(dsn) as conn:
        query = "SELECT status FROM integration_outbox WHERE id = %s"
        return conn.execute(query, (row_id,)).fetchone()[0]


def test_operator_of_one_outbox_replays_there_and_is_refused_where_a_viewer(
    dsn, make_dsn, monkeypatch, tmp_path
):
    billing = make_dsn()
    monkeypatch.setenv("PAYMENTS_DSN", dsn)
    monkeypatch.setenv("PAYMENTS_ACTIONS", dsn + "?application_name=payments-actions")
    monkeypatch.setenv("BILLING_DSN", billing)
    path = tmp_path / "outboxes.yml"
    path.write_text(FILE)
    fleet = load_fleet(load_settings(operators="someone@example.com"), path)
    paid, billed = one_dead_letter(dsn), one_dead_letter(billing)

    results = {}
    for outbox in fleet.outboxes:
        who = Identity(OPS, role_for(outbox.settings, OPS), "proxy")
        with (
            Database(outbox.settings) as db,
            Database(outbox.settings, purpose="actions") as actions,
        ):
            preview = preview_replay(db, ReplaySelection(event_type="invoice.sent"))
            try:
                results[outbox.name] = (who.role.name, apply(actions, preview, actor=who).changed)
            except AccessDenied as refused:
                results[outbox.name] = (who.role.name, str(refused).splitlines()[0])
            if outbox.name == "payments":
                assert actions.settings.dsn.endswith("application_name=payments-actions")

    assert results == {
        "payments": ("operator", 1),
        "billing": (
            "viewer",
            f"{OPS} (viewer) may not replay rows: it needs the operator role",
        ),
    }
    assert (status(dsn, paid), status(billing, billed)) == ("pending", "failed")
    assert audit(dsn) == [("replay", OPS, 1)]
    assert audit(billing) == [("refused", OPS, 0)]  # who was refused what there (issue 29)


@pytest.mark.parametrize("outbox", ["payments", "billing"])
def test_the_process_mapping_is_not_inherited_by_an_outbox_with_its_own(
    outbox, dsn, monkeypatch, tmp_path
):
    for name in ("PAYMENTS_DSN", "PAYMENTS_ACTIONS"):
        monkeypatch.setenv(name, dsn)
    monkeypatch.setenv("BILLING_DSN", dsn.rsplit("/", 1)[0] + "/billing")  # never reached
    path = tmp_path / "outboxes.yml"
    path.write_text(FILE)
    fleet = load_fleet(load_settings(admins="boss@example.com"), path)
    assert role_for(fleet.get(outbox).settings, "boss@example.com") is None


def test_an_outboxs_audit_log_lists_only_its_own_rows_in_a_shared_database(
    dsn, monkeypatch, tmp_path
):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE billing_outbox (LIKE integration_outbox INCLUDING ALL)")
        for table in ("integration_outbox", "billing_outbox"):
            conn.execute(
                f"INSERT INTO {table} (event_type, aggregate_type, aggregate_id, event_key,"
                " payload, status, attempts, processed_at) VALUES ('invoice.sent', 'invoice',"
                " '1', 'k1', '{}', 'failed', 10, now())"
            )
    monkeypatch.setenv("SHARED_DSN", dsn)
    path = tmp_path / "outboxes.yml"
    path.write_text(
        "version: 1\noutboxes:\n  - {name: orders, dsn_env: SHARED_DSN}\n"
        "  - {name: billing, dsn_env: SHARED_DSN, table: public.billing_outbox}\n"
    )
    fleet = load_fleet(load_settings(), path)
    with Database(fleet.get("billing").settings) as db:
        init_db(db, create_indexes=False)  # the second outbox's audited writers
    audited = {}
    for outbox, actor in (("orders", "o@example.com"), ("billing", "b@example.com")):
        with Database(fleet.get(outbox).settings) as db:
            preview = preview_replay(db, ReplaySelection(event_type="invoice.sent"))
            apply(db, preview, actor=Identity(actor, Role.operator, "proxy"))
    for outbox in ("orders", "billing"):
        with Database(fleet.get(outbox).settings) as db:
            audited[outbox] = [(r["actor"], r["table_name"]) for r in recent_audit(db)]

    assert audited == {
        "orders": [("o@example.com", "public.integration_outbox")],
        "billing": [("b@example.com", "public.billing_outbox")],
    }
