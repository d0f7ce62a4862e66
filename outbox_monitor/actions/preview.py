"""What an action's preview holds — its parts, count, sample and filter — and how one part
is counted: exactly, or up to the dashboard's cap and estimated above it (SPEC §2)."""

from dataclasses import dataclass, field
from typing import Any

from outbox_monitor.figures import estimates
from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import Where

SAMPLE_SIZE = 20


@dataclass(frozen=True)
class Part:
    """One guarded statement of an action: its batch query, filter and id ceiling (exact);
    ``matched`` is an estimate when ``exact`` is false (a dashboard preview above its cap).
    The batch query picks rows by the filter and hands them to the outbox's audited writer
    of the action (``store.audited_writers``), which changes them under the guard."""

    batch_query: str
    where: Where
    params: dict[str, Any]
    matched: int
    max_id: int | None
    exact: bool = True

    @property
    def count(self) -> estimates.Count:
        """``matched`` with whether it is exact."""
        return estimates.Count(self.matched, self.exact)


@dataclass(frozen=True)
class Preview:
    """What a confirmed action would change.

    ``matched`` rows matched the filter at preview time (an estimate when ``exact`` is
    false); ``sample`` shows the first ``SAMPLE_SIZE`` of them; ``filter`` (JSON-able) is
    what the audit row records; ``details`` holds what one action adds to its preview
    (a replay: ``superseded`` per event type, ``drip_seconds``, ``last_replay_refailed``; the
    automatic reaper's: ``budget`` and its rows' ``holders``).
    """

    action: str
    matched: int
    sample: list[dict[str, Any]]
    filter: dict[str, Any]
    parts: tuple[Part, ...] = field(repr=False)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def exact(self) -> bool:
        """Whether ``matched`` is exact: always, but for a dashboard preview (``count_cap``)
        of more rows than its cap, where it is the planner's estimate (SPEC §2)."""
        return all(part.exact for part in self.parts)

    @property
    def count(self) -> estimates.Count:
        """``matched`` with whether it is exact."""
        return estimates.Count(self.matched, self.exact)


def preview_part(
    db: Database,
    query: str,
    batch_query: str,
    where: Where,
    params: dict,
    *,
    rows_query: str | None = None,
    count_cap: int | None = None,
    reads_rows: bool = False,
) -> Part:
    """One part of a preview: ``query`` counts its rows and finds their largest id, exactly.

    With ``count_cap``, the rows of ``rows_query`` are first counted up to ``count_cap + 1``
    (``estimates.count_up_to``, from a recommended index): at most the cap, ``query`` runs as
    without it (reading at most that many rows); above it the count is the planner's
    estimate (``estimates.planner_rows``, never below the cap + 1) and the largest id is
    found alone (``max_id``), so that no statement reads every matching row. When the filter
    reads every row anyway (``reads_rows``: an error group normalises each ``last_error``),
    one pass (``preview_capped``) counts and finds the largest id up to the cap."""
    values = {**params, **where.params}
    if count_cap is None or rows_query is None:
        row = db.fetch_one(query, values, and_filters=where.fragment)
        return Part(batch_query, where, params, row["matched"], row["max_id"])
    rows = db.compose(rows_query, and_filters=where.fragment)
    if reads_rows:
        row = db.fetch_one("preview_capped", {**values, "cap": count_cap}, rows=rows)
        if row["matched"] <= count_cap:  # nothing was cut: the count and the id are exact
            return Part(batch_query, where, params, row["matched"], row["max_id"])
    elif estimates.count_up_to(db, rows_query, cap=count_cap, where=where, params=params) <= (
        count_cap
    ):
        return preview_part(db, query, batch_query, where, params)
    estimated = db.compose(rows_query, and_filters=where.estimated_fragment)
    estimate = max(estimates.planner_rows(db, estimated, values), count_cap + 1)
    max_id = db.fetch_one("max_id", values, rows=rows)["max_id"]
    return Part(batch_query, where, params, estimate, max_id, exact=False)


def preview_sample(db: Database, query: str, where: Where, params: dict) -> list[dict[str, Any]]:
    """The first ``SAMPLE_SIZE`` rows of ``query`` under the filter (the preview's sample)."""
    return db.fetch_all(
        query, {**params, **where.params, "limit": SAMPLE_SIZE}, and_filters=where.fragment
    )


def previewed(preview: Preview) -> str:
    """The preview's count for a message: ``"1,234"``, or ``"≈ 1,234 (estimate)"``."""
    return f"{preview.matched:,}" if preview.exact else f"≈ {preview.matched:,} (estimate)"


def id_text(value: int | None) -> str | None:
    """An id for a preview's filter, as a string (ids may exceed 2^53); ``None`` stays."""
    return None if value is None else str(value)
