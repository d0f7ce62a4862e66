"""The sampler: record the headline figures into ``outbox_monitor.samples`` (issue 2 §1).

Samples give every headline figure a chart over time (queue depth over time can only come
from samples: the table keeps no history of its own state). The scheduler calls
``record_sample`` every ``settings.sample_interval`` seconds.
"""

import logging
from typing import Any

from outbox_monitor import metrics
from outbox_monitor.db import Database

log = logging.getLogger(__name__)

# The columns of ``outbox_monitor.samples`` (besides table_name and sampled_at), with the
# label a chart shows for each. Durations are seconds; counts are rows.
HEADLINE: dict[str, str] = {
    "queue_depth": "Queue depth (due now)",
    "pending_total": "Pending (total)",
    "scheduled_retries": "Scheduled retries",
    "processing": "Processing",
    "stuck_locks": "Stuck locks",
    "failed_in_window": "Dead-lettered in window",
    "oldest_pending_age_seconds": "Oldest pending age (s)",
    "latency_p50_seconds": "Latency P50 (s)",
    "latency_p95_seconds": "Latency P95 (s)",
}


def measure_headline(db: Database) -> dict[str, Any]:
    """Compute the headline figures now, through ``metrics`` (SPEC §2 definitions).

    Args:
        db: the connector; its settings give ``window`` (failed in window, latency) and
            ``lock_timeout`` (stuck locks).

    Returns:
        ``{column: value}`` for every key of ``HEADLINE``: counts as ``int``, durations
        as seconds (``float``) or ``None`` (no pending row, no done row in the window).

    Raises:
        DatabaseUnavailable, QueryTimeout and the other errors of the connector.
    """
    settings = db.settings
    latency = metrics.latency_percentiles(db, window=settings.window)
    failed = metrics.failed_by_event_type(db, window=settings.window)
    return {
        "queue_depth": metrics.queue_depth(db),
        "pending_total": metrics.pending_total(db),
        "scheduled_retries": metrics.scheduled_retries(db),
        "processing": metrics.processing(db),
        "stuck_locks": metrics.stuck_locks(db, lock_timeout=settings.lock_timeout),
        "failed_in_window": sum(failed.values()),
        "oldest_pending_age_seconds": metrics.oldest_pending_age(db),
        "latency_p50_seconds": latency["p50"],
        "latency_p95_seconds": latency["p95"],
    }


def record_sample(db: Database) -> dict[str, Any]:
    """Record one sample of the headline figures, then drop samples past the retention.

    Inserts one row with the named query ``sample_insert`` (``sampled_at`` is the
    database's ``now()``) and deletes this table's samples older than
    ``settings.sample_retention`` seconds (``samples_prune``).

    Args:
        db: the connector of the monitored database.

    Returns:
        ``{"table_name", "sampled_at" (datetime), <every HEADLINE column>,
        "pruned" (samples deleted by the retention)}``.

    Raises:
        DatabaseUnavailable, QueryTimeout, SchemaNotInitialised (no samples table: run
        ``init-db``) and the other errors of the connector. Nothing is recorded then.
    """
    figures = measure_headline(db)
    params = {"table_name": db.table_name, **figures}
    inserted = db.fetch_one("sample_insert", params)
    with db.connection() as conn:
        pruned = conn.execute(
            db.compose("samples_prune"),
            {"table_name": db.table_name, "retention": db.settings.sample_retention},
        ).rowcount
    log.debug("sample of %s: %s (pruned %d)", db.table_name, figures, pruned)
    return {
        "table_name": db.table_name,
        "sampled_at": inserted["sampled_at"],
        **figures,
        "pruned": pruned,
    }
