"""The replay (redrive) action: which dead letters to replay, and its preview (SPEC §4)."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from outbox_monitor.actions.preview import Preview, id_text, preview_part, preview_sample
from outbox_monitor.db import Database
from outbox_monitor.errors import ActionRefused
from outbox_monitor.filters import Where
from outbox_monitor.redaction import redactor_for


@dataclass(frozen=True)
class ReplaySelection:
    """Which failed rows to replay; every given criterion must hold (AND).

    ``ids``: explicit row ids; ``event_type``: exact or LIKE pattern; ``error_group``:
    12-hex group id of SPEC §2; ``since``/``until``: bounds on ``processed_at`` (time of
    failure), ``since`` inclusive, ``until`` exclusive.
    """

    ids: tuple[int, ...] = ()
    event_type: str | None = None
    error_group: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def where(self) -> Where:
        """The selection as SQL conditions with bound parameters."""
        where = Where().event_type(self.event_type)
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
        }


def preview_replay(
    db: Database, selection: ReplaySelection, *, count_cap: int | None = None
) -> Preview:
    """Preview a replay (redrive) of dead-lettered rows matching ``selection``.

    Args:
        count_cap: the dashboard's cap (``estimates.DASHBOARD_COUNT_CAP``): count the
            matched rows only up to it, and estimate above it (``Preview.exact`` false;
            SPEC §2). ``None`` (the CLI, the scheduler): count them all.

    Returns:
        A ``Preview`` whose sample has id, event_type, event_key, attempts, processed_at
        and last_error (200 chars, redacted by ``OUTBOX_MONITOR_REDACT_*`` as on every
        surface: the dashboard, the CLI and ``--json`` show this sample), newest first.

    Raises:
        ActionRefused: the selection is empty (replaying every failed row needs at
            least ``event_type='%'``, said on purpose).
    """
    if selection == ReplaySelection():
        raise ActionRefused(
            "a replay needs a selection: ids, an event type, an error group or a time range",
            hint="To replay every dead letter on purpose, use the event type pattern '%'.",
        )
    where = selection.where()
    part = preview_part(
        db,
        "replay_preview",
        "replay_batch",
        where,
        {},
        rows_query="dead_letter_rows",
        count_cap=count_cap,
        reads_rows=selection.error_group is not None,
    )
    return Preview(
        action="replay",
        matched=part.matched,
        sample=redactor_for(db.settings).redact_rows(preview_sample(db, "replay_sample", where, {}))
        if part.matched
        else [],
        filter={**selection.describe(), "max_id": id_text(part.max_id)},
        parts=(part,),
    )
