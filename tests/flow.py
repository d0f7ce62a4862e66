"""Flow-control rows for the claim tests (SPEC §5): a control written as the operator's API
writes it, outcomes written through ack and fail, a worker's login, and the breaker's state
and transitions read back."""

from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from outbox_monitor import outbox
from outbox_monitor.access import Identity
from outbox_monitor.flow.controls import change
from outbox_monitor.store.db import Database

TABLE = "integration_outbox"


def control(
    conn: psycopg.Connection,
    event_type_filter: str,
    *,
    paused_until_in: float | None = None,
    **columns: Any,
) -> None:
    """Insert a 'ui' control of ``integration_outbox`` and its state row (a full bucket).

    ``paused_until_in``: seconds from now for ``paused_until`` (negative: already past).
    """
    values = {
        "outbox": TABLE,
        "event_type_filter": event_type_filter,
        "layer": "ui",
        "updated_by": "test",
        **columns,
    }
    names = ", ".join(values)
    marks = ", ".join(f"%({name})s" for name in values)
    until = (
        "" if paused_until_in is None else ", paused_until = now() + make_interval(secs => %(s)s)"
    )
    conn.execute(f"INSERT INTO outbox_monitor.controls ({names}) VALUES ({marks})", values)
    if until:
        conn.execute(
            f"UPDATE outbox_monitor.controls SET updated_at = now() {until}"
            " WHERE event_type_filter = %(f)s",
            {"s": paused_until_in, "f": event_type_filter},
        )
    conn.execute(
        "INSERT INTO outbox_monitor.control_state (outbox, event_type_filter, tokens)"
        " VALUES (%(t)s, %(f)s, %(b)s)",
        {"t": TABLE, "f": event_type_filter, "b": columns.get("burst")},
    )


def worker_login(dsn: str, name: str = "flow_worker") -> str:
    """``dsn`` as a worker's login that owns nothing: USAGE on the outbox_monitor schema and
    SELECT, UPDATE on the outbox (created once per cluster; roles are cluster-wide)."""
    with psycopg.connect(dsn, autocommit=True) as su:
        su.execute(
            f"DO $$ BEGIN CREATE ROLE {name} LOGIN;"
            " EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        )
        su.execute(
            f"GRANT USAGE ON SCHEMA outbox_monitor TO {name};"
            f" GRANT SELECT, UPDATE ON {TABLE} TO {name}"
        )
    return make_conninfo(dsn, user=name)


BREAKER = {
    "breaker": True,
    "breaker_min_attempts": 4,
    "breaker_ratio": 0.75,
    "breaker_cooldown_seconds": 1,
}
"""A breaker that opens on 3 transient failures of 4 outcomes and probes after 1 s."""


def fail_n(
    conn: psycopg.Connection,
    rows: Any,
    n: int,
    *,
    permanent: bool = False,
    event_type: str = "crm.contact",
) -> None:
    """``n`` new rows of ``event_type`` (``rows``: the ``Rows`` fixture), claimed and failed."""
    for _ in range(n):
        rows.add(event_type=event_type)
    for row in outbox.claim(conn, "w1", limit=n):
        outbox.fail(conn, row["id"], "w1", "503 upstream", permanent=permanent)


def ack_n(conn: psycopg.Connection, rows: Any, n: int, event_type: str = "crm.contact") -> None:
    """``n`` new rows of ``event_type``, claimed and acked."""
    for _ in range(n):
        rows.add(event_type=event_type)
    for row in outbox.claim(conn, "w1", limit=n):
        assert outbox.ack(conn, row["id"], "w1")


def breaker_state(conn: psycopg.Connection, event_type_filter: str) -> str:
    """The breaker state ('closed', 'open', 'half_open') of one control."""
    return conn.execute(
        "SELECT breaker_state FROM outbox_monitor.control_state WHERE event_type_filter = %s",
        (event_type_filter,),
    ).fetchone()["breaker_state"]


def transitions(conn: psycopg.Connection) -> list[dict[str, Any]]:
    """Every breaker transition, oldest first."""
    return conn.execute(
        "SELECT event_type_filter, transition, outcomes, failures"
        " FROM outbox_monitor.breaker_transitions ORDER BY id"
    ).fetchall()


GRANT_SLACK_SECONDS = 0.1
"""How long after its statement's start (``locked_at = now()``) a claim's bucket grants at
``clock_timestamp()``: the function's first steps; generous for a loaded machine."""


def _claim_instants(conn: psycopg.Connection, rows: list[dict[str, Any]]) -> list[float]:
    """The ``locked_at`` (epoch seconds) of rows just claimed, read before they are acked."""
    found = conn.execute(
        "SELECT extract(epoch FROM locked_at)::float8 AS t FROM integration_outbox"
        " WHERE id = ANY(%s)",
        ([row["id"] for row in rows],),
    ).fetchall()
    return [row["t"] for row in found]


def worst_excess(instants: list[float], *, burst: int, rate: float) -> float:
    """The most rows handed out in any interval beyond the token bucket's bound B + R·T, T
    widened by ``GRANT_SLACK_SECONDS`` (≤ 0 when the bound held)."""
    times = sorted(instants)
    return max(
        (
            (j - i + 1) - (burst + rate * (times[j] - times[i] + GRANT_SLACK_SECONDS))
            for i in range(len(times))
            for j in range(i, len(times))
        ),
        default=0.0,
    )


def race_claims(dsn: str, seconds: float, *, workers: int = 4, limit: int = 10) -> list[float]:
    """``workers`` threads claiming up to ``limit`` rows and acking each, for ``seconds``;
    returns the ``locked_at`` (epoch seconds) of every row handed out."""
    import threading
    import time

    from psycopg.rows import dict_row

    handed: list[float] = []
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def work(name: str) -> None:
        with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as worker:
            while time.monotonic() < end:
                batch = outbox.claim(worker, name, limit=limit)
                instants = _claim_instants(worker, batch)
                with lock:
                    handed.extend(instants)
                for row in batch:
                    outbox.ack(worker, row["id"], name)
                time.sleep(0.01)

    threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return handed


def open_breaker(
    db: Database, conn: psycopg.Connection, event_type_filter: str, actor: Identity
) -> None:
    """A breaker on ``event_type_filter`` set by ``actor`` (cool-down 30 s), opened 30 s ago
    with its cool-down doubled twice (120 s): its next probe is due in 90 s."""
    change(
        db,
        event_type_filter,
        actor=actor,
        action="breaker",
        changes={"breaker": True, "breaker_cooldown_seconds": 30},
    )
    conn.execute(
        "UPDATE outbox_monitor.control_state SET breaker_state = 'open', cooldown_seconds = 120,"
        " since = now() - interval '30 seconds' WHERE event_type_filter = %s",
        (event_type_filter,),
    )
