"""The sampler's rows, written by hand: one pass's headline row and its per-type rows at one
instant, as ``service/sampler.py`` writes them (a trend of one event type matches the two by
that instant, ``forecast.type_sample_points``)."""

import psycopg

TABLE = "public.integration_outbox"


def sampler_pass(
    conn: psycopg.Connection,
    ago: float,
    depth: int,
    *,
    types: dict[str, tuple[int, int]] | None = None,
) -> None:
    """One pass ``ago`` seconds before the database's now: the headline row (queue depth and
    pending total ``depth``, nothing else) and, at the same instant, a row per event type of
    ``types`` (``{event type: (queue depth, failed in window)}``; none: no type had a row)."""
    at = conn.execute("SELECT now() - make_interval(secs => %s) AS at", (ago,)).fetchone()["at"]
    conn.execute(
        "INSERT INTO outbox_monitor.samples (table_name, sampled_at, queue_depth, pending_total,"
        " scheduled_retries, processing, stuck_locks, failed_in_window)"
        " VALUES (%s, %s, %s, %s, 0, 0, 0, 0)",
        (TABLE, at, depth, depth),
    )
    for event_type, (type_depth, failed) in (types or {}).items():
        conn.execute(
            "INSERT INTO outbox_monitor.event_type_samples (table_name, sampled_at, event_type,"
            " queue_depth, failed_in_window, retrying) VALUES (%s, %s, %s, %s, %s, 0)",
            (TABLE, at, event_type, type_depth, failed),
        )
