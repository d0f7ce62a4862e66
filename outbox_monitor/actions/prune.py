"""The prune action's preview: ``done`` and ``failed`` rows past their retention (SPEC §4), and
on a partitioned outbox the partitions detached whole (``actions.partitions``)."""

from outbox_monitor.actions.partitions import Candidates, detachable_partitions
from outbox_monitor.actions.preview import (
    SAMPLE_SIZE,
    Preview,
    id_text,
    preview_part,
    preview_sample,
)
from outbox_monitor.errors import ActionRefused
from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import Where
from outbox_monitor.store.partitioning import table_shape


def preview_prune(
    db: Database,
    *,
    done_older_than: float | None,
    failed_older_than: float | None,
    event_type: str | None = None,
    count_cap: int | None = None,
    detach_partitions: bool = True,
) -> Preview:
    """Preview a prune: ``done`` rows processed more than ``done_older_than`` seconds ago
    and ``failed`` rows more than ``failed_older_than`` seconds ago (``None`` skips that
    status). ``pending`` and ``processing`` rows are never matched.

    On an outbox partitioned by range of ``created_at``, the partitions whose every row the
    prune deletes are detached and dropped whole when it is applied (``actions.partitions``);
    the other rows are deleted in batches.

    Args:
        count_cap: as for ``preview_replay``, per status. The largest id stays exact: it
            costs a backward walk of the primary key over the rows newer than the newest
            matching one (0.4–0.9 s for "done older than 7 days" at 10 M rows over 30
            days: 2.3 M newer rows; benchmarks/RESULTS.md). The partitions' rows are
            counted exactly.
        detach_partitions: ``False`` (``prune --no-detach``) deletes every row in batches,
            partitioned outbox or not.

    Returns:
        A ``Preview`` with one part per status; the sample shows the oldest rows. With
        partitions to detach, ``details["partitions"]`` lists them (``Partition.as_detail``:
        schema, name, rows, done, failed, max_id, detach_pending, oldest first) and
        ``details["detach"]`` says how: ``"concurrently"``, or ``"exclusive lock"`` when the
        outbox has a default partition; ``filter["detach_partitions"]`` names them for the
        audit rows; ``details["uncounted_partitions"]`` names the candidates that could not
        be counted within the statement timeout, with why. ``matched`` counts their rows
        (it counts them anyway, but for those of a partition whose detach an earlier prune
        left pending, which the outbox's queries no longer read).

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
    candidates = Candidates()
    if detach_partitions:
        candidates = detachable_partitions(
            db,
            done_older_than=done_older_than,
            failed_older_than=failed_older_than,
            where=Where().event_type(event_type),
        )
    partitions = candidates.partitions
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
    unread = sum(p.rows for p in partitions if p.detach_pending and p.prunable)
    details: dict = {}
    filters = {
        "event_type": event_type,
        "done_older_than_seconds": done_older_than,
        "failed_older_than_seconds": failed_older_than,
        "max_ids": {p.params["status"]: id_text(p.max_id) for p in parts},
    }
    if candidates.uncounted:
        details["uncounted_partitions"] = candidates.uncounted
    if partitions:
        shape = table_shape(db)
        details["partitions"] = [p.as_detail() for p in partitions]
        details["detach"] = "exclusive lock" if shape and shape.has_default else "concurrently"
        filters["detach_partitions"] = [p.qualified for p in partitions]
    return Preview(
        action="prune",
        matched=sum(part.matched for part in parts) + unread,
        sample=sample[:SAMPLE_SIZE],
        filter=filters,
        parts=tuple(parts),
        details=details,
    )
