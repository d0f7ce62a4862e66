"""The sampler: record the headline figures into ``outbox_monitor.samples`` (issue 2 §1).

Samples give every headline figure a chart over time (queue depth over time can only come
from samples: the table keeps no history of its own state), and so the table's health: its
dead and live tuples, its size and its indexes' (their growth), the xmin horizon's age (issue
14); and what each worker holds (``worker_sightings``, issue 15 item 7). The scheduler calls
``record_sample`` every ``settings.sample_interval`` seconds.
"""

import logging
from typing import Any

from outbox_monitor import metrics
from outbox_monitor.db import Database
from outbox_monitor.figures import FIGURES, SAMPLED
from outbox_monitor.worker_sightings import record_workers

log = logging.getLogger(__name__)

HEADLINE = SAMPLED
"""The ``outbox_monitor.samples`` columns with their chart labels (``figures.SAMPLED``)."""


def measure_headline(db: Database) -> dict[str, Any]:
    """Compute the headline figures now, each through its registry entry's ``measure``
    (``figures.FIGURES``, SPEC §2 definitions); the latency quantiles from one query.

    Args:
        db: the connector; its settings give ``window`` (failed in window, latency) and
            ``lock_timeout`` (stuck locks).

    Returns:
        ``{column: value}`` for every key of ``HEADLINE``: counts (rows, tuples) and sizes
        (bytes) as ``int``, durations as seconds (``float``) or ``None`` (no pending row, no
        done row in the window).

    Raises:
        DatabaseUnavailable, QueryTimeout and the other errors of the connector.
    """
    window = db.settings.window
    values = {}
    with db.session():  # one connection checkout for the dozen statements
        # the latency quantiles come from one percentile query, not one query per quantile
        latency = metrics.latency_percentiles(db, window=window)
        for figure in FIGURES.values():
            if figure.sample_column:
                key, _, quantile = figure.status_key.partition(".")
                if key == "latency_seconds":
                    values[figure.sample_column] = latency[quantile]
                else:
                    values[figure.sample_column] = figure.measure(db, window, None, 1)
    return values


def record_sample(db: Database, *, primary: Database | None = None) -> dict[str, Any]:
    """Record one sample of the headline figures, then drop samples past the retention; then
    one pass over the workers (``worker_sightings.record_workers``).

    Measures through ``db``, inserts one row with the named query ``sample_insert``
    (``sampled_at`` is the writing database's ``now()``) and deletes this table's samples
    older than ``settings.sample_retention`` seconds (``samples_prune``) through
    ``primary``.

    Args:
        db: the connector of the monitored database (a hot standby may serve it).
        primary: the connector the scheduler writes through (``OUTBOX_MONITOR_PRIMARY_DSN``);
            default ``db``.

    Returns:
        ``{"table_name", "sampled_at" (datetime), <every HEADLINE column>,
        "pruned" (samples deleted by the retention), "workers" (workers recorded)}``.

    Raises:
        DatabaseUnavailable, QueryTimeout, SchemaNotInitialised (no samples table: run
        ``init-db``) and the other errors of the connector. Nothing is recorded then.
    """
    figures = measure_headline(db)
    writes = primary or db
    params = {"table_name": db.table_name, **figures}
    inserted = writes.fetch_one("sample_insert", params)
    with writes.connection() as conn:
        pruned = conn.execute(
            writes.compose("samples_prune"),
            {"table_name": db.table_name, "retention": db.settings.sample_retention},
        ).rowcount
    workers = record_workers(db, primary=writes)
    log.debug("sample of %s: %s (pruned %d, %d workers)", db.table_name, figures, pruned, workers)
    return {
        "table_name": db.table_name,
        "sampled_at": inserted["sampled_at"],
        **figures,
        "pruned": pruned,
        "workers": workers,
    }
