"""The preview → confirm → apply flow every dashboard action follows (SPEC §4).

The preview is kept in ``st.session_state`` between reruns, with the selection it was made
for; changing the selection drops it. Confirming applies exactly that preview (its filter,
``id <=`` its largest id, and the guard), shows progress, clears the stale caches, and
keeps the result on screen until the next preview. A failed apply (a refused grant, a
timeout, a run stopped part-way) is shown inside the flow, with its hint, and drops the
preview.

The confirm button records its preview in a callback, which runs before the next run
whatever that run renders: a click is never lost because the page changed under it (new
rows, an expired cache). That run applies the preview if the selection is still the one
it was made for, else says so ("the selection changed … preview again") and logs it.

``preview_replay``, ``preview_reap``, ``preview_auto_reap``, ``preview_prune`` and ``apply``
are the one way the dashboard calls ``actions``: previews count up to ``loaders.count_cap()``
and are never cached; ``apply`` then clears the caches the action made stale.
"""

import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import streamlit as st

from outbox_monitor.access import Identity, Role
from outbox_monitor.actions import prune, reap, replay, run
from outbox_monitor.actions.partition_lines import outcome_lines, preview_lines
from outbox_monitor.actions.preview import Preview
from outbox_monitor.actions.replay import ReplaySelection
from outbox_monitor.actions.run import APPLIED_NOTHING, ActionResult, Progress
from outbox_monitor.alerts.timeline import filter_text
from outbox_monitor.errors import ActionRefused, OutboxMonitorError
from outbox_monitor.store.db import Database
from outbox_monitor.ui import banners, format, loaders


@dataclass(frozen=True)
class StoredPreview:
    """A preview and the selection (``signature``) it was made for."""

    signature: Hashable
    preview: Preview


log = logging.getLogger(__name__)
VERBS = {"replay": "replayed", "reap": "reaped", "prune": "deleted"}
NO_LONGER = {
    "replay": "{was} no longer failed",
    "reap": "{was} acked or re-claimed meanwhile",
    "prune": "no longer matched",
}
"""What happened to the skipped rows; ``{was}`` agrees with their number."""
REAP_SAMPLE_COLUMNS = [
    format.Column("id", "id", 80),
    format.Column("event_type", "event type", 160),
    format.Column("event_key", "event key", 150),
    format.Column("locked_by", "locked by", 150),
    format.Column("lock_age_seconds", "lock age", 100, unit="seconds"),
    format.Column("locked_at", "locked at", 170, unit="instant"),
    format.Column("attempts", "attempts", 75),
]
"""A reap preview's sample rows (``format.grid``)."""
PRUNE_SAMPLE_COLUMNS = [
    format.Column("id", "id", 80),
    format.Column("event_type", "event type", 170),
    format.Column("event_key", "event key", 200),
    format.Column("status", "status", 90),
    format.Column("processed_at", "processed at", 170, unit="instant"),
]
"""A prune preview's sample rows (``format.grid``)."""
AUDIT_COLUMNS = [
    format.Column("at", "at", 170, unit="instant"),
    format.Column("actor", "actor", 160),
    format.Column("action", "action", 90),
    format.Column("affected_count", "rows", 70),
    format.Column("filter", "filter", 330),
    format.Column("first_ids", "first ids", 120),
    format.Column("ids_recorded", "ids recorded"),
    format.Column("run_id", "run id"),
]
"""The audit log's columns (``format.grid``); ``audit_rows`` writes its filter in words."""


def audit_rows(entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``loaders.audit``'s rows for the audit log's table: the filter in words
    (``timeline.filter_text``: ``"event_type order.paid · status failed"``), never JSON."""
    return [{**row, "filter": filter_text(row["filter"])} for row in entries]


def describe_result(result: ActionResult) -> str:
    """One sentence: how many rows changed and how many were skipped (no longer eligible),
    e.g. ``"Replayed 1 row; 1 was no longer failed."``; after a preview whose count was an
    estimate, ``"Deleted 6,902,479 rows (previewed: ≈ 6.9 M rows, an estimate)."``."""
    text = f"{VERBS.get(result.action, 'changed').capitalize()} {format.rows(result.changed)}"
    if result.action == "reap" and result.dead_lettered:
        was = format.inflect(result.dead_lettered, "was", "were")
        text += f" ({result.dead_lettered:,} reached the maximum attempts and {was} dead-lettered)"
    if result.skipped is None:
        return f"{text} (previewed: ≈ {format.approximate(result.matched)} rows, an estimate)."
    skipped = NO_LONGER.get(result.action, "{was} skipped").format(
        was=format.inflect(result.skipped, "was", "were")
    )
    text = f"{text}; {result.skipped:,} {skipped}."
    if result.detached or result.kept:
        lines = outcome_lines(result.detached, result.kept)
        text += " " + format.md_text("; ".join(lines) + ".")
    for row_id, cause in result.refused.items():
        refused = f"Row {row_id} was left as it was, the table refused it: {cause}."
        text += " " + format.md_text(refused)
    return text


def stored_preview(key: str) -> StoredPreview | None:
    """The preview kept for the flow ``key``, if any."""
    return st.session_state.get(f"{key}.preview")


def last_result(key: str) -> ActionResult | None:
    """The result of the flow's last confirmed action, if any."""
    return st.session_state.get(f"{key}.result")


def action_flow(
    key: str,
    *,
    db: Database,
    actor: Identity,
    signature: Hashable,
    make_preview: Callable[[], Preview],
    preview_label: str,
    noun: str,
    sample_columns: Sequence[format.Column] = (),
    auto_preview: bool = False,
    details: Callable[[Preview], None] | None = None,
    after_result: Callable[[ActionResult], None] | None = None,
    refused: str | None = None,
) -> None:
    """Render one action's preview and confirm buttons and run it when confirmed.

    Args:
        key: unique name of the flow on its page (widget keys and session keys derive from it).
        db, actor: where and as whom the action runs.
        signature: the current selection; a kept preview of another selection, or of another
            outbox (``db``'s fleet outbox and table), is dropped.
        make_preview: builds the preview (the ``preview_*`` of ``actions.reap``, ``.replay``
            or ``.prune``); ``ActionRefused`` becomes an inline banner.
        preview_label: label of the preview button, e.g. ``"Preview replay"``.
        noun: what the confirm button names, e.g. ``"replay"`` → ``"Confirm replay of 3 rows"``.
        sample_columns: the columns of the preview's sample rows (``format.grid``).
        auto_preview: make the preview on first render (e.g. the list of stuck locks).
        details: optional extra rendering of a preview (e.g. prune counts per status).
        after_result: optional extra rendering under the last result (a replay's outcome).
        refused: why this identity may not act (e.g. a viewer): the preview button is shown
            disabled with that reason and nothing else renders; ``run.apply`` checks the
            role again whatever the page shows. Default: when ``actor`` — its role on the
            outbox acted on, ``db``'s, not the one a link or the page list was made for —
            is not an operator, a sentence naming that role and outbox.

    A confirmed preview is applied in the run after the click if ``signature`` is still
    the one it was made for, else a warning says that nothing was changed (and a log line).
    An ``OutboxMonitorError`` of the confirmed apply (e.g. ``PermissionDenied`` on a
    read-only actions login, ``ActionInterrupted``) is shown in place of the preview, with
    its hint; the progress bar is removed and the preview dropped, and the rest of the page
    keeps rendering.
    """
    if refused is None and not actor.can(Role.operator):
        outbox = db.settings.fleet_outbox or db.table_name
        refused = (
            f"{format.md_code(actor.name)} is a {actor.role.name} on the outbox "
            f"{format.md_code(outbox)}: {noun} needs the operator role."
        )
    if refused is not None:
        st.button(preview_label, key=f"{key}.preview_button", disabled=True, help=refused)
        st.caption(refused)
        return
    preview_key, result_key, confirm_key = f"{key}.preview", f"{key}.result", f"{key}.confirmed"
    # the outbox is part of every selection: a preview of one outbox of a fleet (its ids,
    # its partitions) is never confirmed on another chosen in the sidebar since
    signature = (db.settings.fleet_outbox, db.table_name, signature)
    stored = stored_preview(key)
    if stored is not None and stored.signature != signature:
        del st.session_state[preview_key]
        stored = None
    confirmed: StoredPreview | None = st.session_state.pop(confirm_key, None)
    if confirmed is not None:
        if confirmed.signature == signature:
            _apply(key, db, confirmed.preview, actor=actor, noun=noun)  # reruns unless failed
            stored = None
        else:
            _refuse_changed(confirmed, actor=actor, noun=noun)
    clicked = st.button(preview_label, key=f"{key}.preview_button")
    if clicked or (auto_preview and stored is None):
        try:
            stored = StoredPreview(signature, make_preview())
        except ActionRefused as error:
            banners.show(error, stop=False)
            return
        st.session_state[preview_key] = stored
        if clicked:
            st.session_state.pop(result_key, None)
    result = last_result(key)
    if result is not None:
        if result.applied_nothing:
            st.warning(
                f"{describe_result(result)} {APPLIED_NOTHING.capitalize()}.",
                icon=":material/warning:",
            )
        elif result.refused:  # applied but for the rows the table refused: named
            st.warning(describe_result(result), icon=":material/warning:")
        else:
            st.success(describe_result(result), icon=":material/check_circle:")
        st.caption(
            f"run id {result.run_id} · {format.plural(result.batches, 'batch', 'batches')} · "
            f"audited as {format.md_code(actor.name)}"
        )
        if after_result is not None:
            after_result(result)
    if stored is None:
        return
    preview = stored.preview
    if preview.matched == 0:
        st.info(f"Nothing to {noun}: no row matches.", icon=":material/info:")
        return
    st.markdown(
        f"{format.bold_rows(preview.count)} would be {VERBS.get(preview.action, 'changed')}."
    )
    if not preview.exact:
        st.caption(
            f"More than {format.count(loaders.count_cap())} rows match: the dashboard counts "
            "rows only up to that many and shows the planner's estimate of the total, from "
            "the table's statistics, above it. The confirmed "
            f"{noun} applies to every row that still matches, up to the largest id seen now; its "
            "audit records the exact number changed."
        )
    if details is not None:
        details(preview)
    shown = len(preview.sample)
    st.caption(f"Sample of {shown} of {format.estimated_rows(preview.count)}:")
    format.grid(preview.sample, sample_columns, key=f"{key}.sample")
    st.button(
        f"Confirm {noun} of {format.estimated_rows(preview.count)}",
        key=f"{key}.confirm",
        type="primary",
        on_click=_confirm,
        args=(confirm_key, stored),
    )


def _confirm(confirm_key: str, stored: StoredPreview) -> None:
    """The confirm button's callback: remember the preview it named for the next run."""
    st.session_state[confirm_key] = stored


def _refuse_changed(confirmed: StoredPreview, *, actor: Identity, noun: str) -> None:
    """Say (page and log) that a confirmed preview was not applied: its selection changed."""
    verb = VERBS.get(confirmed.preview.action, "changed")
    st.warning(
        f"Not {verb}: the selection changed after the preview (of "
        f"{format.estimated_rows(confirmed.preview.count)}). Nothing was changed: "
        "preview again.",
        icon=":material/published_with_changes:",
    )
    log.warning(
        "%s of %s by %s not applied: the selection changed after its preview",
        noun,
        format.estimated_rows(confirmed.preview.count),
        actor.name,
    )


def _apply(key: str, db: Database, preview: Preview, *, actor: Identity, noun: str) -> None:
    """Apply a confirmed preview with a progress bar; keep its result and rerun, or show
    its error in the flow and return. The preview is dropped either way (the next one is
    afresh: earlier batches may have committed)."""
    st.session_state.pop(f"{key}.preview", None)
    progress = st.progress(0.0, text=f"{noun}…")

    def on_progress(done: int, total: int) -> None:
        progress.progress(min(done / max(total, 1), 1.0), text=f"{noun}: {done:,} / {total:,}")

    try:
        outcome = apply(db, preview, actor=actor, on_progress=on_progress)
    except OutboxMonitorError as error:
        # Shown here, in this flow, so the page's other tabs still render.
        progress.empty()
        st.session_state.pop(f"{key}.result", None)  # an older result would read as this one
        banners.show(error, stop=False)
        return
    st.session_state[f"{key}.result"] = outcome
    st.rerun()


def apply(
    db: Database, preview: Preview, *, actor: Identity, on_progress: Progress | None = None
) -> ActionResult:
    """``run.apply`` of a confirmed preview, then ``loaders.clear_stale()`` (even on
    failure: earlier batches may have committed).

    Raises:
        The errors of ``run.apply``.
    """
    try:
        return run.apply(db, preview, actor=actor, on_progress=on_progress)
    finally:
        loaders.clear_stale()


def preview_replay(
    db: Database, selection: ReplaySelection, *, rate: float | None = None
) -> Preview:
    """``replay.preview_replay`` counting up to ``loaders.count_cap()`` rows, an estimate
    above (never cached: a confirm applies what was just previewed; its sample's
    ``last_error`` comes redacted); ``rate`` in rows/s makes it a drip replay.

    Raises:
        ActionRefused: an empty selection, or a rate not above 0.
    """
    return replay.preview_replay(db, selection, rate=rate, count_cap=loaders.count_cap())


def preview_reap(db: Database, *, event_type: str | None) -> Preview:
    """``reap.preview_reap`` with the configured lock timeout (never cached)."""
    return reap.preview_reap(db, event_type=event_type)


def preview_auto_reap(db: Database) -> Preview:
    """``reap.preview_auto_reap``: what one run of the automatic reaper would take now (its
    budget, the oldest locks, the holders' evidence; never cached)."""
    return reap.preview_auto_reap(db)


def budget_lines(preview: Preview) -> None:
    """Render what a budgeted reap's preview says of its budget and holders
    (``reap.budget_lines``): the first line in bold, the holders as a list."""
    lines = reap.budget_lines(preview)
    if lines:
        st.markdown(
            f"**{format.md_text(lines[0])}**\n\n"
            + "\n".join(f"- {format.md_text(line)}" for line in lines[1:])
        )


def preview_prune(
    db: Database,
    *,
    done_older_than: float | None,
    failed_older_than: float | None,
    event_type: str | None,
    detach_partitions: bool = True,
) -> Preview:
    """``prune.preview_prune`` counting up to ``loaders.count_cap()`` rows per status, an
    estimate above (never cached); ages in seconds, ``None`` skips a status; on a partitioned
    outbox the partitions detached whole unless ``detach_partitions`` is false.

    Raises:
        ActionRefused: no status chosen, or an age under one day.
    """
    return prune.preview_prune(
        db,
        done_older_than=done_older_than,
        failed_older_than=failed_older_than,
        event_type=event_type,
        count_cap=loaders.count_cap(),
        detach_partitions=detach_partitions,
    )


def partition_lines(preview: Preview) -> list[str]:
    """The lines a prune's preview shows about the partitions it detaches whole (none for an
    ordinary outbox): ``preview_lines``, as markdown that shows them literally."""
    return [format.md_text(line.strip()) for line in preview_lines(preview.details)]
