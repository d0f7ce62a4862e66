"""The reap action's preview: ``processing`` rows whose lock expired, or orphans (SPEC §4)."""

from outbox_monitor.actions.preview import Preview, id_text, preview_part, preview_sample
from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import Where


def preview_reap(
    db: Database, *, lock_timeout: float | None = None, event_type: str | None = None
) -> Preview:
    """Preview a reap: ``processing`` rows locked longer than ``lock_timeout`` seconds, or
    with ``locked_at`` null (orphans, stuck by definition; SPEC §4 reap). Each reaped row is
    a transient failure for the circuit breakers of its event type (SPEC §5).

    Returns:
        A ``Preview`` whose sample has id, event_type, event_key, locked_by, locked_at,
        attempts and ``lock_age_seconds`` (``None`` for an orphan), orphans first, then the
        oldest lock.
    """
    timeout = db.settings.lock_timeout if lock_timeout is None else lock_timeout
    where = Where().event_type(event_type)
    params = {"lock_timeout": timeout, "max_attempts": db.settings.max_attempts}
    part = preview_part(db, "reap_preview", "reap_batch", where, params)
    return Preview(
        action="reap",
        matched=part.matched,
        sample=preview_sample(db, "reap_sample", where, params) if part.matched else [],
        filter={
            "event_type": event_type,
            "lock_timeout_seconds": timeout,
            "max_id": id_text(part.max_id),
        },
        parts=(part,),
    )
