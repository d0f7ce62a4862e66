"""The Workers page's sections (issue 15 item 7): the fleet's liveness ("no claim for N min
while rows are due") and each worker (``locked_by``) with its rows in hand, stuck rows, last
claim and last ack.

``view(db)`` is the one cached load (``cache.cached``) of ``workers.liveness`` and
``workers.workers``; ``liveness_section`` and ``workers_section`` render it.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import streamlit as st

from outbox_monitor.figures.registry import FIGURES
from outbox_monitor.figures.workers import (
    IDS_PER_WORKER,
    WORKERS_SHOWN,
    Liveness,
    Workers,
    liveness,
)
from outbox_monitor.figures.workers import workers as list_workers
from outbox_monitor.store.db import Database
from outbox_monitor.ui import alert_rules, format
from outbox_monitor.ui.cache import cached, db_key
from outbox_monitor.ui.format import Column

METRIC = "no_claim_while_due"
"""The registry's figure of the fleet's liveness (``figures.registry.WORKER_FIGURES``)."""
NO_LOCKED_BY = "(no locked_by: orphans)"
"""How the view names processing rows with no ``locked_by`` (SPEC §2: stuck by definition)."""
COLUMNS = [
    Column("worker", "worker", 200),
    Column("rows in hand", "rows in hand", 95),
    Column("stuck", "stuck", 60, help="Its rows locked past the lock timeout."),
    Column("oldest lock", "oldest lock", 110),
    Column("last claim", "last claim", 110),
    Column("last ack (seen)", "last ack (seen)", 120, help="As the sampler saw it."),
    Column("acks seen", "acks seen", 80),
    Column("dead-lettered seen", "dead-lettered seen", 135),
    Column("last seen holding", "last seen holding"),
    Column("returned seen", "returned seen"),
]
"""The workers table's columns (``format.grid``)."""
UNKNOWABLE = (
    "A row loses `locked_by` at its ack (SPEC §1), so the table alone cannot say when a worker "
    "last acked. Every sampler pass (`outbox-monitor scheduler`) remembers the rows in each "
    "worker's hand; a row a later pass finds done was acked at its `processed_at`, unless it "
    "went back to the queue meanwhile (a retry, a reap, a replay: it counts as returned). A row "
    "claimed and acked between two passes counts in no worker's acks (its `processed_at` "
    "still counts for the fleet's liveness); a retry or a reap leaves no time. "
    f"At most {WORKERS_SHOWN} workers, and {IDS_PER_WORKER:,} rows of each, are followed."
)


@dataclass(frozen=True)
class WorkersView:
    """What the page shows, read in one load: the fleet's ``liveness`` and its ``workers``
    (those listed, and how many are not)."""

    liveness: Liveness
    workers: Workers


@cached
def _view(key: str, _db: Database) -> WorkersView:
    with _db.session():
        return WorkersView(liveness=liveness(_db), workers=list_workers(_db))


def view(db: Database) -> WorkersView:
    """The page's data (cached, ``cache.cached``).

    Raises:
        The connector's errors (``SchemaNotInitialised`` before ``init-db``'s migration 013).
    """
    return _view(db_key(db), db)


def ago(now: datetime, instant: datetime | None) -> str:
    """``"3m 2s ago"`` from ``instant`` to the database's ``now``; ``"–"`` for ``None``."""
    if instant is None:
        return format.duration(None)
    return f"{format.duration(max(0.0, (now - instant).total_seconds()))} ago"


def worker_rows(found: WorkersView) -> list[dict[str, Any]]:
    """The workers table: one row per worker, instants as ages from the database's now."""
    now = found.liveness.now
    return [
        {
            "worker": NO_LOCKED_BY if w.locked_by is None else w.locked_by,
            "rows in hand": w.rows_in_hand,
            "stuck": w.stuck,
            "oldest lock": ago(now, w.oldest_claim),
            "last claim": ago(now, w.last_claim),
            "last ack (seen)": ago(now, w.last_ack),
            "last seen holding": ago(now, w.last_seen_holding),
            "acks seen": w.acks_seen,
            "dead-lettered seen": w.dead_lettered_seen,
            "returned seen": w.returned_seen,
        }
        for w in found.workers.listed
    ]


def _rule_note() -> str:
    """Which rules of alerts.yml watch the figure, with their thresholds, or that none does."""
    ruleset = alert_rules.load_ruleset().ruleset
    rules = [r for r in getattr(ruleset, "rules", ()) if r.metric == METRIC]
    if not rules:
        return f"No rule of alerts.yml watches `{METRIC}`."
    return "Alerted by " + ", ".join(
        f"rule `{r.name}` ({r.op} {r.format(r.threshold)})" for r in rules
    )


def liveness_section(found: WorkersView) -> None:
    """The fleet's liveness: due rows, newest claim, newest outcome and how long the due rows
    have waited with neither; a sentence saying whether the fleet looks down."""
    live = found.liveness
    st.subheader("Liveness")
    due, claim, outcome, waited = st.columns(4)
    due.metric("Due rows (not held)", format.count(live.due_rows))
    claims = [t for t in (live.newest_claim, live.newest_retry) if t]
    claim.metric(
        "Newest claim",
        ago(live.now, max(claims) if claims else None),
        help="A row in a worker's hand, or a claim that failed fast into a retry (at the "
        "latest its backoff's available_at minus the longest backoff).",
    )
    outcome.metric("Newest outcome", ago(live.now, live.newest_outcome))
    waited.metric("No claim while due", format.duration(live.no_claim_while_due))
    if live.due_rows == 0:
        st.success("No row is due: the workers have nothing to claim.", icon=":material/check:")
    elif not claims and live.newest_outcome is None:
        st.warning(
            f"{format.rows(live.due_rows)} due and no claim or outcome in the table at all: "
            f"they have waited {format.duration(live.no_claim_while_due)}.",
            icon=":material/hourglass_empty:",
        )
    else:
        st.info(
            f"{format.rows(live.due_rows)} due; the latest claim, outcome or row becoming due "
            f"was {format.duration(live.no_claim_while_due)} ago.",
            icon=":material/schedule:",
        )
    held = (
        f" {format.rows(live.held_rows)} held by flow control not counted."
        if live.held_rows
        else ""
    )
    st.caption(f"`{METRIC}`: {FIGURES[METRIC].help}{held} {_rule_note()}")


def workers_section(found: WorkersView) -> None:
    """Each worker (``locked_by``): rows in hand and stuck now, last claim and last ack, what
    the sampler saw become of its rows; and what cannot be known."""
    st.subheader("Workers")
    rows = worker_rows(found)
    if rows:
        format.grid(rows, COLUMNS, key="workers.workers")
    else:
        st.info(
            "No worker holds a row and the sampler has seen none: start `outbox-monitor "
            "scheduler` to follow them.",
            icon=":material/info:",
        )
    if found.workers.not_listed:
        st.caption(
            f"{format.count(found.workers.not_listed)} more worker(s) not listed: the table or "
            f"the sampler knows more than {WORKERS_SHOWN} `locked_by` values; listed are those "
            "holding rows now, then those seen holding rows last."
        )
    with st.expander("What the table cannot know", icon=":material/help:"):
        st.markdown(UNKNOWABLE)
