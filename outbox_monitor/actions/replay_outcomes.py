"""Where replayed rows went (issue 13 item 5): a replay run's rows followed by its run id —
done, failed again (by error group, SPEC §2), still pending or processing.

The rows of a run are the ids its audit rows record. An audit row keeps up to
``audit.MAX_AUDIT_IDS`` (1,000) ids and ``run.apply`` never makes a replay batch larger than
that (whatever ``batch_size`` says), so every replayed id is recorded and the outcome is
exact. A run audited before that cap could have recorded fewer ids than it changed:
``ReplayOutcome.untracked`` says how many are not followed.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from outbox_monitor.privacy.redaction import ERROR_HEAD_CHARS, redactor_for
from outbox_monitor.store.db import Database


@dataclass(frozen=True)
class ReplayOutcome:
    """The rows of one replay run now.

    ``replayed`` rows were changed by the run (its audit rows' affected counts); ``done``,
    ``failed``, ``pending`` and ``processing`` count the followed ones by current status,
    ``gone`` those deleted since (pruned); ``untracked`` = replayed but not recorded by id
    (0 for every run made by this version). ``failed_groups``: the re-failed rows per error
    group, dicts ``group_id``, ``event_type``, ``rows``, ``sample_error`` (200 chars,
    redacted by ``OUTBOX_MONITOR_REDACT_*``), biggest first. ``at``: the run's first batch.
    """

    run_id: str
    replayed: int
    done: int
    failed: int
    pending: int
    processing: int
    gone: int
    untracked: int
    at: datetime | None
    failed_groups: list[dict[str, Any]] = field(default_factory=list)

    @property
    def settled(self) -> bool:
        """No followed row is pending or processing any more."""
        return self.pending + self.processing == 0

    @property
    def all_refailed(self) -> bool:
        """Every replayed row is failed again (and at least one was replayed)."""
        return self.replayed > 0 and self.failed == self.replayed

    def counts(self) -> dict[str, int]:
        """The status counts as a dict (what ``--watch`` prints as they change)."""
        return {
            "done": self.done,
            "failed": self.failed,
            "pending": self.pending,
            "processing": self.processing,
            "gone": self.gone,
        }

    def as_json(self) -> dict[str, Any]:
        """JSON-able: run_id, replayed, the counts, untracked, at (ISO 8601), failed_groups."""
        return {
            "run_id": self.run_id,
            "replayed": self.replayed,
            **self.counts(),
            "untracked": self.untracked,
            "at": self.at.isoformat() if self.at else None,
            "failed_groups": self.failed_groups,
        }

    def summary(self) -> str:
        """One line, e.g. ``"196 replayed: 0 done, 196 failed again, 0 pending, 0 processing"``
        followed by the biggest re-failed group."""
        text = (
            f"{self.replayed:,} replayed: {self.done:,} done, {self.failed:,} failed again, "
            f"{self.pending:,} pending, {self.processing:,} processing"
        )
        if self.gone:
            text += f", {self.gone:,} deleted since"
        if self.untracked:
            text += f", {self.untracked:,} not followed (ids not recorded)"
        if self.failed_groups:
            text += " · failed again with " + group_text(self.failed_groups[0])
            if len(self.failed_groups) > 1:
                text += f" and {len(self.failed_groups) - 1} other group(s)"
        return text


def group_text(group: dict[str, Any]) -> str:
    """An error group as ``"<group_id> (<event_type>, N rows): <sample error>"``."""
    sample = (group.get("sample_error") or "").splitlines()
    return f"{group['group_id']} ({group['event_type']}, {group['rows']:,} rows)" + (
        f": {sample[0][:120]}" if sample else ""
    )


def replay_outcome(db: Database, run_id: str) -> ReplayOutcome:
    """The outcome of replay run ``run_id`` now (two reads of the audit log and the table).

    Args:
        run_id: the run id of a replay (``ActionResult.run_id``, the audit log's ``run_id``).

    Returns:
        A ``ReplayOutcome``; all zero for an unknown run id or another action's run.

    Raises:
        DatabaseUnavailable, QueryTimeout, PermissionDenied: from the connector (the login
            needs SELECT on ``outbox_monitor.audit_log``).
    """
    params = {"run_id": run_id, "table_name": db.table_name}
    row = db.fetch_one("replay_outcome", params)
    groups = db.fetch_all("replay_outcome_groups", params) if row["failed"] else []
    groups = redactor_for(db.settings).redact_rows(groups, ("sample_error",), head=ERROR_HEAD_CHARS)
    counts = ("replayed", "done", "failed", "pending", "processing", "gone")
    return ReplayOutcome(
        run_id=str(run_id),
        **{name: row[name] for name in counts},
        untracked=row["replayed"] - row["recorded"],
        at=row["at"],
        failed_groups=groups,
    )


def recent_replay_runs(
    db: Database, *, limit: int = 5, error_group: str | None = None
) -> list[dict[str, Any]]:
    """The newest replay runs that changed rows, newest first: dicts ``run_id`` (text),
    ``at`` (first batch), ``actor``, ``filter`` (the first batch's) and ``replayed``.

    Args:
        limit: at most this many runs.
        error_group: only runs whose filter named this error group (12 hex digits).
    """
    return db.fetch_all(
        "replay_runs_recent",
        {"table_name": db.table_name, "error_group": error_group, "limit": limit},
    )


def last_replay_refailed(db: Database, error_group: str) -> str | None:
    """The warning for the preview of an error group whose last replay re-failed entirely:
    ``"the last replay of this group, <time>, re-failed all N rows: <error group>"``, or
    ``None`` (no earlier replay of the group, or not every row of it failed again)."""
    runs = recent_replay_runs(db, limit=1, error_group=error_group)
    if not runs:
        return None
    outcome = replay_outcome(db, runs[0]["run_id"])
    if not outcome.all_refailed:
        return None
    groups = "; ".join(group_text(group) for group in outcome.failed_groups)
    at = outcome.at.strftime("%Y-%m-%d %H:%M:%S %Z").strip() if outcome.at else "?"
    return f"the last replay of this group, {at}, re-failed all {outcome.replayed:,} rows: {groups}"


def watch_outcome(
    db: Database,
    run_id: str,
    *,
    timeout: float,
    interval: float = 2.0,
    on_change: Callable[[ReplayOutcome], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[ReplayOutcome, bool]:
    """Poll a replay run's outcome until no followed row is pending or processing, or
    ``timeout`` seconds have passed.

    Args:
        timeout, interval: seconds (wall clock of this process).
        on_change: called with the first outcome and with every one whose counts changed.

    Returns:
        ``(last outcome, settled)``; ``settled`` false when the timeout ended the watch.
    """
    deadline = clock() + timeout
    last: dict[str, int] | None = None
    while True:
        outcome = replay_outcome(db, run_id)
        if on_change is not None and outcome.counts() != last:
            on_change(outcome)
        last = outcome.counts()
        if outcome.settled:
            return outcome, True
        if clock() >= deadline:
            return outcome, False
        sleep(min(interval, max(deadline - clock(), 0)))
