"""The prune action's preview: ``done`` and ``failed`` rows past their retention (SPEC §4)."""

from outbox_monitor.actions.preview import (
    SAMPLE_SIZE,
    Preview,
    id_text,
    preview_part,
    preview_sample,
)
from outbox_monitor.db import Database
from outbox_monitor.errors import ActionRefused
from outbox_monitor.filters import Where


def preview_prune(
    db: Database,
    *,
    done_older_than: float | None,
    failed_older_than: float | None,
    event_type: str | None = None,
    count_cap: int | None = None,
) -> Preview:
    """Preview a prune: ``done`` rows processed more than ``done_older_than`` seconds ago
    and ``failed`` rows more than ``failed_older_than`` seconds ago (``None`` skips that
    status). ``pending`` and ``processing`` rows are never matched.

    Args:
        count_cap: as for ``preview_replay``, per status. The largest id stays exact: it
            costs a backward walk of the primary key over the rows newer than the newest
            matching one (0.4–0.9 s for "done older than 7 days" at 10 M rows over 30
            days: 2.3 M newer rows; benchmarks/RESULTS.md).

    Returns:
        A ``Preview`` with one part per status; the sample shows the oldest rows.

    Raises:
        ActionRefused: both ages are ``None``, or an age under one day (a typo such as
            ``30m`` for ``30d`` would delete recent history).
    """
    ages = {"done": done_older_than, "failed": failed_older_than}
    if all(age is None for age in ages.values()):
        raise ActionRefused("a prune needs --done-older-than and/or --failed-older-than")
    for status, age in ages.items():
        if age is not None and age < 86400:
            raise ActionRefused(
                f"refusing to prune {status} rows younger than one day ({age:g} s)",
                hint="Retention is written in days, e.g. 30d for done and 90d for failed.",
            )
    parts, sample = [], []
    for status, age in ages.items():
        if age is None:
            continue
        where = Where().event_type(event_type)
        params = {"status": status, "older_than": age}
        part = preview_part(
            db,
            "prune_preview",
            "prune_batch",
            where,
            params,
            rows_query="prune_rows",
            count_cap=count_cap,
        )
        parts.append(part)
        if part.matched:
            sample += preview_sample(db, "prune_sample", where, params)
    return Preview(
        action="prune",
        matched=sum(part.matched for part in parts),
        sample=sample[:SAMPLE_SIZE],
        filter={
            "event_type": event_type,
            "done_older_than_seconds": done_older_than,
            "failed_older_than_seconds": failed_older_than,
            "max_ids": {p.params["status"]: id_text(p.max_id) for p in parts},
        },
        parts=tuple(parts),
    )
