"""The shipped poller with ``OUTBOX_ACK_MANY=true`` on a real n8n 1.123.81 (issue 32 item 2):
the rows each route acks go to one ``outbox_monitor.ack_many``.

20 events, 10 for each route, are published in one transaction before n8n starts; the poller
(batch 20) claims them in one poll. A row trigger writes the transaction of every ack: a row
acked alone is a transaction of its own, the rows of one ``ack_many`` share one. Expected by
hand: two transactions of 10 rows, one per route; every effect applied once.
"""

import psycopg
import pytest
from psycopg.rows import dict_row

from outbox_monitor.demo.downstream import IDEMPOTENT_PATH, LEDGER_PATH, Downstream, poller_settings
from outbox_monitor.demo.n8n import POLLER_ID, N8n
from outbox_monitor.demo.n8n_credentials import pg_environment
from tests.alerting import wait_for
from tests.n8n.conftest import TOKEN
from tests.n8n.test_n8n_poller import NOTIFICATION, PAYMENT, publish, rows_in

pytestmark = pytest.mark.n8n

ROWS = 20


def test_the_poller_acks_each_routes_rows_with_one_ack_many(
    dsn: str, n8n_binary, downstream: Downstream
):
    events = [((PAYMENT, NOTIFICATION)[i % 2], f"ack-many:{i}") for i in range(ROWS)]
    settings = poller_settings(
        downstream,
        OUTBOX_POLL_SECONDS="1",
        OUTBOX_BATCH_SIZE=str(ROWS),
        OUTBOX_WORKER_NAME="n8n-ack-many",
        OUTBOX_ACK_MANY="true",
        OUTBOX_DOWNSTREAM_AUTHORIZATION=TOKEN,
        **pg_environment(dsn),
    )
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("CREATE TABLE acks (id bigint, xact xid8)")
        conn.execute(
            "CREATE FUNCTION note_ack() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN INSERT INTO acks VALUES (NEW.id, pg_current_xact_id()); RETURN NULL; END $$"
        )
        conn.execute(
            "CREATE TRIGGER note_ack AFTER UPDATE ON integration_outbox FOR EACH ROW"
            " WHEN (NEW.status = 'done' AND OLD.status = 'processing')"
            " EXECUTE FUNCTION note_ack()"
        )
        conn.execute("GRANT INSERT ON acks TO PUBLIC")
        publish(conn, events)
        with N8n(
            dsn, settings=settings, binary=n8n_binary, downstream_header=("Authorization", TOKEN)
        ) as n8n:
            n8n.setup(activate=(POLLER_ID,))
            n8n.start()
            assert wait_for(lambda: rows_in(conn, "done") == ROWS, timeout=120)
        per_transaction = conn.execute(
            "SELECT count(*) AS n FROM acks GROUP BY xact ORDER BY 1"
        ).fetchall()
    assert [row["n"] for row in per_transaction] == [10, 10]
    applied = downstream.applied()
    assert sorted(applied.values()) == [1] * ROWS
    assert {path for path, _ in applied} == {IDEMPOTENT_PATH, LEDGER_PATH}
