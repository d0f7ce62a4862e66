"""The reap action's preview: ``processing`` rows whose lock expired, or orphans (SPEC §4);
and the automatic reaper's, bounded by its budget per run, with what is known of the rows'
holders as evidence."""

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

from outbox_monitor.actions.preview import (
    SAMPLE_SIZE,
    Part,
    Preview,
    id_text,
    preview_part,
    preview_sample,
)
from outbox_monitor.figures.workers import Sighting, sightings
from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import Where

HOLDERS_SHOWN = 10
"""Holders of a budgeted reap's rows named in its preview, log line and audit row, those
holding most of its rows first; how many others is said."""


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
    timeout, where, params = _stuck(db, lock_timeout, event_type)
    part = _reap_part(db, where, params)
    return Preview(
        action="reap",
        matched=part.matched,
        sample=preview_sample(db, "reap_sample", where, params) if part.matched else [],
        filter=_filter(event_type, timeout, part.max_id),
        parts=(part,),
    )


@dataclass(frozen=True)
class Budget:
    """The automatic reaper's budget of one run (SPEC §4): at most ``max_rows`` rows and at
    most ``max_share`` (a fraction, 0 < share ≤ 1) of the ``stuck`` rows, rounded up."""

    max_rows: int
    max_share: float
    stuck: int

    @property
    def take(self) -> int:
        """Rows the run takes: ``min(max_rows, ⌈max_share × stuck⌉)`` (the product rounded to
        1e-6 first, so that 0.3 × 10 is 3, not 4), and at least 1 when a row is stuck: a
        share rounded up is never 0 (a share of 1e-7 and 1 stuck row take that row, not 0 on
        every run for ever)."""
        if not self.stuck:
            return 0
        return min(self.max_rows, max(1, math.ceil(round(self.max_share * self.stuck, 6))))

    def describe(self, taken: int) -> dict[str, Any]:
        """The budget and what it let the run take: ``stuck``, ``taken`` and ``left`` (for
        the next run) rows, ``max_rows``, ``max_share``, and ``bound`` — which budget bound
        the run (``rows``, ``share``), or ``None`` when every stuck row was taken."""
        bound = None
        if taken < self.stuck:
            bound = "rows" if self.take == self.max_rows else "share"
        return {
            "stuck": self.stuck,
            "taken": taken,
            "left": self.stuck - taken,
            "max_rows": self.max_rows,
            "max_share": self.max_share,
            "bound": bound,
        }


@dataclass(frozen=True)
class Holder:
    """One ``locked_by`` of the rows a budgeted reap takes, with what the sampler saw of it:
    ``rows`` of them are in the run; ``sighting`` is ``None`` when the sampler never saw it
    holding rows (or forgot it). Evidence only: its rows are reaped whatever it shows."""

    locked_by: str | None
    rows: int
    sighting: Sighting | None

    def as_json(self) -> dict[str, Any]:
        """The holder for a preview's details and an audit row (times in ISO 8601)."""
        return {
            "locked_by": self.locked_by,
            "rows": self.rows,
            "seen_by_sampler": self.sighting is not None,
            **(self.sighting.as_json() if self.sighting else {}),
        }

    def describe(self) -> str:
        """One line, e.g. ``"n8n-1: 3 rows; the sampler last saw it holding rows at …, last
        claim: …, last ack: …, last dead-letter: none seen"`` or ``"n8n-9: 2 rows; never seen by the
        sampler"``."""
        name = "an orphan (no locked_by)" if self.locked_by is None else self.locked_by
        rows = f"{self.rows:,} row{'s' if self.rows != 1 else ''}"
        if self.sighting is None:
            seen = "no worker to see" if self.locked_by is None else "never seen by the sampler"
            return f"{name}: {rows}; {seen}"
        sight = self.sighting
        return (
            f"{name}: {rows}; the sampler last saw it holding rows at "
            f"{_when(sight.last_seen_holding)}, last claim: {_when(sight.last_claim)}, "
            f"last ack: {_when(sight.last_ack)}, last dead-letter: {_when(sight.last_fail)}"
        )


def preview_auto_reap(db: Database) -> Preview:
    """Preview one run of the automatic reaper (SPEC §4): of the stuck rows (the settings'
    lock timeout, every event type), the ``Budget.take`` with the oldest locks (orphans
    first, then ``locked_at``, then id) — at most ``auto_reap_max_rows`` and at most
    ``auto_reap_max_share`` of them; the rest wait for the next run. Confirmed, it reaps
    those ids only (each still guarded by the reap's own condition).

    Returns:
        A ``Preview`` like ``preview_reap``'s, ``matched`` being the rows taken; its ``filter``
        (the audit row's) holds ``budget`` (``Budget.describe``) and ``holders``; its
        ``details`` the same two: ``holders`` is a list of ``Holder.as_json`` (at most
        ``HOLDERS_SHOWN``, most rows first) and ``holders_not_shown`` how many others.

    Raises:
        The connector's errors (``SchemaNotInitialised`` without migration 023: ``init-db``).
    """
    settings = db.settings
    timeout, where, params = _stuck(db, None, None)
    stuck = _reap_part(db, where, params).matched
    budget = Budget(settings.auto_reap_max_rows, settings.auto_reap_max_share, stuck)
    taken = (
        db.fetch_all("reap_sample", {**params, "limit": budget.take}, and_filters=where.fragment)
        if stuck
        else []
    )
    ids = [row["id"] for row in taken]
    bounded = Where().add("id = ANY(%(reap_ids)s::bigint[])", reap_ids=ids)
    part = Part("reap_batch", bounded, params, len(ids), max(ids, default=None))
    holders, others = _holders(db, taken)
    details = {
        "budget": budget.describe(len(ids)),
        "holders": [holder.as_json() for holder in holders],
        "holders_not_shown": others,
    }
    return Preview(
        action="reap",
        matched=len(ids),
        sample=taken[:SAMPLE_SIZE],
        filter={**_filter(None, timeout, part.max_id), **details},
        parts=(part,),
        details={**details, "holder_lines": [holder.describe() for holder in holders]},
    )


def budget_lines(preview: Preview) -> list[str]:
    """What a budgeted reap's preview says of its budget and the rows' holders, one line
    each (none for a reap by hand): ``"takes 100 of 1,000 stuck rows, 900 left for the next
    run (budget: 100 rows, 50 % of the stuck)"``, then ``"holder n8n-1: 3 rows; …"``."""
    budget = preview.details.get("budget")
    if budget is None:
        return []
    lines = [
        f"takes {budget['taken']:,} of {budget['stuck']:,} stuck rows, {budget['left']:,} left "
        f"for the next run ({budget_text(budget)})"
    ]
    lines += [f"holder {line}" for line in preview.details["holder_lines"]]
    if preview.details["holders_not_shown"]:
        lines.append(f"… and {preview.details['holders_not_shown']:,} other holder(s)")
    lines.append("holders are evidence, never a veto: a lock past the timeout is reaped")
    return lines


def budget_text(budget: dict[str, Any]) -> str:
    """``"budget: 100 rows, 50 % of the stuck; the rows bound this run"``."""
    bound = {"rows": "; the rows bound this run", "share": "; the share bound this run"}
    return (
        f"budget: {budget['max_rows']:,} rows, {budget['max_share'] * 100:g} % of the stuck"
        + bound.get(budget["bound"], "")
    )


def _stuck(
    db: Database, lock_timeout: float | None, event_type: str | None
) -> tuple[float, Where, dict[str, Any]]:
    timeout = db.settings.lock_timeout if lock_timeout is None else lock_timeout
    params = {"lock_timeout": timeout, "max_attempts": db.settings.max_attempts}
    return timeout, Where().event_type(event_type), params


def _reap_part(db: Database, where: Where, params: dict[str, Any]) -> Part:
    # the outbox's audited reap writer reports the reaped rows to the breakers (migration 020)
    return preview_part(db, "reap_preview", "reap_batch", where, params)


def _filter(event_type: str | None, timeout: float, max_id: int | None) -> dict[str, Any]:
    return {"event_type": event_type, "lock_timeout_seconds": timeout, "max_id": id_text(max_id)}


def _holders(db: Database, rows: list[dict[str, Any]]) -> tuple[list[Holder], int]:
    counts = Counter(row["locked_by"] for row in rows)
    shown = sorted(counts, key=lambda name: (-counts[name], name is None, name or ""))
    seen = sightings(db, [name for name in shown[:HOLDERS_SHOWN] if name is not None])
    holders = [Holder(name, counts[name], seen.get(name)) for name in shown[:HOLDERS_SHOWN]]
    return holders, len(shown) - len(holders)


def _when(value: Any) -> str:
    return "none seen" if value is None else value.isoformat(timespec="seconds")
