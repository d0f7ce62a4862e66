"""The replay (redrive) action: which dead letters to replay, and its preview (SPEC §4),
with the drip and the order-safe choice of SPEC §5."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import sql

from outbox_monitor.actions.preview import Preview, id_text, preview_part, preview_sample
from outbox_monitor.actions.replay_outcomes import last_replay_refailed
from outbox_monitor.errors import ActionRefused
from outbox_monitor.privacy.redaction import ERROR_HEAD_CHARS, redactor_for
from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import Where


@dataclass(frozen=True)
class ReplaySelection:
    """Which failed rows to replay; every given criterion must hold (AND).

    ``ids``: explicit row ids; ``event_type``: exact or LIKE pattern; ``error_group``:
    12-hex group id of SPEC §2; ``since``/``until``: bounds on ``processed_at`` (time of
    failure), ``since`` inclusive, ``until`` exclusive; ``exclude_superseded``: leave out
    rows whose aggregate already has a later ``done`` event (SPEC §5 order-safe replay; the
    condition is added by ``preview_replay``, which knows the table).
    """

    ids: tuple[int, ...] = ()
    event_type: str | None = None
    error_group: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    exclude_superseded: bool = False

    def where(self) -> Where:
        """The selection as SQL conditions with bound parameters."""
        where = Where(keyed=True).event_type(self.event_type)  # dead letters: failed_by_type
        if self.ids:
            where.add("id = ANY(%(ids)s)", ids=list(self.ids))
        if self.error_group:
            where.add(
                "outbox_monitor.error_group(event_type, last_error) = %(error_group)s",
                error_group=self.error_group,
            )
        return where.between("processed_at", self.since, self.until)

    def describe(self) -> dict[str, Any]:
        """The selection as JSON-able values (ids as strings: they may exceed 2^53)."""
        return {
            "ids": [str(i) for i in self.ids],
            "event_type": self.event_type,
            "error_group": self.error_group,
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat() if self.until else None,
            "exclude_superseded": self.exclude_superseded,
        }


def preview_replay(
    db: Database,
    selection: ReplaySelection,
    *,
    rate: float | None = None,
    count_cap: int | None = None,
) -> Preview:
    """Preview a replay (redrive) of dead-lettered rows matching ``selection``.

    Args:
        rate: drip replay (SPEC §5), rows per second > 0: the confirmed run walks the rows in
            ``(created_at, id)`` order across its batches and makes the k-th row due at
            ``t0 + (k − 1) / rate`` s, t0 the start of its first batch. ``None``: every row
            due at once, batches in id order.
        count_cap: the dashboard's cap (``estimates.DASHBOARD_COUNT_CAP``): count the
            matched rows only up to it, and estimate above it (``Preview.exact`` false;
            SPEC §2). ``None`` (the CLI, the scheduler): count them all.

    Returns:
        A ``Preview`` whose sample has id, event_type, event_key, attempts, processed_at
        and last_error (200 chars, redacted by ``OUTBOX_MONITOR_REDACT_*`` as on every
        surface: the dashboard, the CLI and ``--json`` show this sample), newest first.
        Its ``details``: ``superseded`` — ``{event_type: rows}``, the selected rows (before
        any exclusion) whose aggregate has a later ``done`` event (all of them are left out
        when ``selection.exclude_superseded``); ``drip_seconds`` — matched / rate, when
        dripping; ``last_replay_refailed`` — for an error group whose last replay failed
        again entirely, the sentence that says so, else ``None``.

    Raises:
        ActionRefused: the selection is empty (replaying every failed row needs at
            least ``event_type='%'``, said on purpose), or a rate that is not > 0.
    """
    if selection in (ReplaySelection(), ReplaySelection(exclude_superseded=True)):
        raise ActionRefused(
            "a replay needs a selection: ids, an event type, an error group or a time range",
            hint="To replay every dead letter on purpose, use the event type pattern '%'.",
        )
    if rate is not None and not rate > 0:
        raise ActionRefused(f"a drip replay needs a rate above 0 rows/s, not {rate:g}")
    where = selection.where()
    superseded = db.compose("replay_superseded")
    by_type = db.fetch_all(
        "replay_superseded_by_event_type",
        where.params,
        and_filters=where.fragment,
        superseded=superseded,
    )
    if selection.exclude_superseded:
        where.add(sql.SQL("NOT ") + superseded)
    part = preview_part(
        db,
        "replay_preview",
        "replay_batch" if rate is None else "replay_drip_batch",
        where,
        {} if rate is None else {"rate": float(rate)},
        rows_query="dead_letter_rows",
        count_cap=count_cap,
        reads_rows=selection.error_group is not None,
    )
    return Preview(
        action="replay",
        matched=part.matched,
        sample=redactor_for(db.settings).redact_rows(
            preview_sample(db, "replay_sample", where, {}), head=ERROR_HEAD_CHARS
        )
        if part.matched
        else [],
        filter={
            **selection.describe(),
            "rate_per_second": rate,
            "max_id": id_text(part.max_id),
        },
        parts=(part,),
        details={
            "superseded": {row["event_type"]: row["rows"] for row in by_type},
            "drip_seconds": part.matched / rate if rate else None,
            "last_replay_refailed": last_replay_refailed(db, selection.error_group)
            if selection.error_group
            else None,
        },
    )
