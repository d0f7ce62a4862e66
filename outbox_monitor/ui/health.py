"""The Health page's reads and sections (issue 14): who holds the xmin horizon and the command
that ends each holder, the outbox table's dead tuples and vacuums, its sizes and their growth
over the sampled history, and what the monitor's login cannot see. The Overview's health
tiles come from here too.

Every section takes the one cached reading (``load``: ``health.status.health_status``, the
object ``status --json`` shows under ``health``) and the samples; nothing here writes, and no
command shown is ever run by the product.
"""

from collections.abc import Mapping, Sequence
from typing import Any

import streamlit as st

from outbox_monitor.health.status import health_status
from outbox_monitor.store.db import Database
from outbox_monitor.ui import charts, format, rule_state, slo
from outbox_monitor.ui.cache import cached, db_key
from outbox_monitor.ui.format import Column
from outbox_monitor.units import format_value

HOLDER_COLUMNS = [
    Column("kind", "kind", 130),
    Column("name", "name", 80),
    Column("application", "application", 120),
    Column("state", "state", 150),
    Column("held_seconds", "held for", 80, unit="seconds"),
    Column("xid_age", "xid age", 70, help="Transactions since its snapshot's xmin."),
    Column("command", "command that ends it", 300, help="Shown, never run: copy it into psql."),
    Column("role", "role"),
    Column("client", "client"),
    Column("held_from", "held counted from"),
    Column("query", "last statement"),
]
"""The holders table's columns (``format.grid``): role, client, how the hold is counted and
the last statement show with a chosen row's detail."""
INDEX_COLUMNS = [
    Column("index", "index", 320),
    Column("size", "size", 100),
    Column("scans", "scans", 90),
    Column("unique", "unique", 80),
    Column("valid", "valid", 80),
]
"""The indexes table's columns (``format.grid``)."""
MIB = 1024 * 1024
NOTABLE_HOLD = 1.0
"""Seconds: a shorter hold is a statement running now (every query holds the horizon while
it runs), shown as normal; a longer one is named, in red past the ``xmin-horizon-held``
rule's threshold (and for a holder of unknown age: a slot)."""
NOT_RUN = (
    "Run it yourself (psql, as a superuser or the holder's role): outbox-monitor shows "
    "commands, it never runs them."
)


@cached
def _health(key: str, _db: Database) -> dict[str, Any]:
    return health_status(_db)


def load(db: Database) -> dict[str, Any]:
    """``health_status`` of the outbox table, cached (``cache.cached``): the ``health`` object
    of ``status --json``."""
    return _health(db_key(db), db)


def hidden_warnings(health: Mapping[str, Any]) -> None:
    """One warning per thing the monitor's login cannot see, with how to see it: never a
    blank where a holder may hide."""
    for note in health["hidden"]:
        st.warning(format.md_text(note), icon=":material/visibility_off:")


def horizon_section(health: Mapping[str, Any]) -> None:
    """The xmin horizon: the holder holding it longest, the command that ends it, and every
    session, prepared transaction and replication slot that holds (or may hold) it."""
    st.subheader("xmin horizon")
    holding = [h for h in health["xmin_horizon_holders"] if h["holds_horizon"]]
    oldest = holding[0] if holding else None
    if oldest and oldest["held_seconds"] is not None and oldest["held_seconds"] < NOTABLE_HOLD:
        st.success(
            "Only statements running now hold it (the oldest for "
            f"{format.duration(oldest['held_seconds'])}): vacuum can remove every tuple that "
            "died before them.",
            icon=":material/check_circle:",
        )
    elif oldest:
        held = (
            f"has been held for **{format.duration(oldest['held_seconds'])}**"
            if oldest["held_seconds"] is not None
            else "is held (for how long PostgreSQL does not record)"
        )
        alert_level = slo.judge(slo.XMIN_HORIZON_AGE, oldest["held_seconds"])
        banner = st.warning if oldest["held_seconds"] and not alert_level.breached else st.error
        banner(
            f"The xmin horizon {held} by {format.md_text(oldest['summary'])}: vacuum cannot "
            "remove a tuple that died after it began, so every row the workers ack stays in "
            "the table and its indexes.",
            icon=":material/hourglass_top:",
        )
        if oldest["command"]:
            st.code(oldest["command"], language="sql")
        st.caption(format.md_text(f"{oldest['advice'].capitalize()}. {NOT_RUN}"))
    else:
        st.success(
            "Nothing holds the xmin horizon now: vacuum can remove every dead tuple.",
            icon=":material/check_circle:",
        )
    if health["xmin_horizon_holders"]:
        format.grid(holder_rows(health), HOLDER_COLUMNS, key="health.holders")
    st.caption(
        "Who may hold the horizon: sessions, prepared transactions, replication slots",
        help="Sessions of this database holding a snapshot or a transaction id (or idle in a "
        "transaction), prepared transactions, and replication slots: a slot's `xmin` holds "
        "back vacuum in every database, its `catalog_xmin` the system catalogs' only. "
        "PostgreSQL keeps no time for a slot's xmin: its xid age tells how old it is.",
    )


def holder_rows(health: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The holders as table rows (``HOLDER_COLUMNS``), those holding the horizon first; a
    hidden value shows as ``hidden``."""
    rows = []
    for holder in health["xmin_horizon_holders"]:
        row = {column.name: holder.get(column.name) for column in HOLDER_COLUMNS}
        if holder["hidden"]:
            row.update(state="hidden", query="hidden: grant pg_monitor")
        if not holder["holds_horizon"]:
            row["kind"] += " (holds no horizon)"
        rows.append(row)
    return rows


def table_section(health: Mapping[str, Any], samples: Sequence[Mapping[str, Any]]) -> None:
    """Live and dead tuples (now and over the sampled window), autovacuum, the vacuums
    running on the outbox."""
    st.subheader("Dead tuples and vacuum")
    columns = st.columns(4)
    columns[0].metric(
        "Dead tuples",
        format.count(health["dead_tuples"]),
        help="Row versions vacuum has not removed (n_dead_tup): every ack and retry leaves one.",
        border=True,
    )
    columns[1].metric(
        "Dead / all tuples",
        format_value(health["dead_tuple_fraction"], "fraction"),
        help=f"{format.count(health['live_tuples'])} live tuples. Above 50 % dead ones "
        "outnumber live ones.",
        border=True,
    )
    columns[2].metric(
        "Last autovacuum",
        ago(health["time_since_autovacuum_seconds"]),
        help=f"Last vacuum by hand: {format.instant(health['last_vacuum'])}. Statistics since "
        f"{format.instant(health['statistics_since'])}.",
        border=True,
    )
    columns[3].metric(
        "Autovacuum at",
        f"{format.count(health['autovacuum_threshold'])} dead",
        help="Autovacuum vacuums the table once its dead tuples pass "
        "autovacuum_vacuum_threshold + autovacuum_vacuum_scale_factor × its tuples"
        + (
            "."
            if health["autovacuum_threshold_counts_tuples"]
            else " — counted as 0 until its first vacuum or analyze (as autovacuum counts "
            "them), so this grows then."
        ),
        border=True,
    )
    if not health["autovacuum_enabled"]:
        st.warning(
            "Autovacuum is off for this table (its `autovacuum_enabled` storage parameter, or "
            "the server's `autovacuum`): nothing removes its dead tuples but a VACUUM by hand.",
            icon=":material/block:",
        )
    if health["vacuum_overdue_seconds"]:
        st.warning(
            "Dead tuples outnumber live ones and the table has not been vacuumed for "
            f"{format.duration(health['vacuum_overdue_seconds'])}.",
            icon=":material/delete_sweep:",
        )
    for line in vacuum_lines(health):
        st.info(format.md_text(line), icon=":material/cleaning_services:")
    if not health["vacuums"]:
        analyzed = health["last_autoanalyze"] or health["last_analyze"]
        st.caption(
            "No vacuum of the outbox is running. Last analyze: "
            f"{format.instant(analyzed) if analyzed else 'never'}."
        )
    if any(s.get("dead_tuples") is not None for s in samples):
        st.altair_chart(
            charts.sampled_lines(samples, {"dead_tuples": "dead", "live_tuples": "live"}, "tuples"),
            width="stretch",
        )
    else:
        no_samples_note()


def vacuum_lines(health: Mapping[str, Any]) -> list[str]:
    """One sentence per vacuum running on the outbox: who runs it, its phase, its progress."""
    lines = []
    for run in health["vacuums"]:
        who = "autovacuum" if run["automatic"] else "a VACUUM by hand"
        text = f"Vacuum running on {run['relation']} ({who}, pid {run['pid']}): {run['phase']}"
        if run["scanned_fraction"] is not None:
            text += (
                f", {run['scanned_fraction']:.0%} of {format.count(run['heap_blks_total'])} "
                "pages scanned"
            )
        if run["index_vacuum_count"]:
            text += f", {format.plural(run['index_vacuum_count'], 'index pass', 'index passes')}"
        if run["running_seconds"] is not None:
            text += f", for {format.duration(run['running_seconds'])}"
        lines.append(text + ".")
    return lines


def size_section(health: Mapping[str, Any], samples: Sequence[Mapping[str, Any]]) -> None:
    """The table's and its indexes' sizes now, their growth over the span the samples of the
    window cover (``"+5.0 MiB in 4m 0s"``: the samples may cover less than the window), and
    each index's size."""
    st.subheader("Size")
    growth = size_growth(samples)
    columns = st.columns(2)
    for column, key, label in (
        (columns[0], "table_bytes", "Table"),
        (columns[1], "indexes_bytes", "Indexes"),
    ):
        change = growth.get(key)
        column.metric(
            label,
            format.size(health[key]),
            delta=None
            if change is None
            else f"{signed_size(change)} in {format.duration(growth['seconds'])}",
            delta_color="inverse",
            help="Heap, TOAST and maps" if key == "table_bytes" else "Every index together",
            border=True,
        )
    if growth:
        sizes = [
            {
                "sampled_at": s["sampled_at"],
                "table": s["table_bytes"] / MIB,
                "indexes": s["indexes_bytes"] / MIB,
            }
            for s in samples
            if s.get("table_bytes") is not None
        ]
        st.altair_chart(
            charts.sampled_lines(sizes, {"table": "table", "indexes": "indexes"}, "MiB"),
            width="stretch",
        )
    else:
        no_samples_note()
    format.grid(index_rows(health), INDEX_COLUMNS, key="health.indexes")


def index_rows(health: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The indexes as table rows, largest first, their sizes for people."""
    return [
        {
            "index": index["index"],
            "size": format.size(index["bytes"]),
            "scans": index["scans"],
            "unique": index["is_unique"],
            "valid": index["is_valid"],
        }
        for index in health["indexes"]
    ]


def size_growth(samples: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Bytes the table and its indexes grew over the samples (the last value minus the first
    one recorded) and the seconds between those two samples, ``{"table_bytes": n,
    "indexes_bytes": n, "seconds": s}``; empty without two samples holding sizes."""
    sized = [s for s in samples if s.get("table_bytes") is not None]
    if len(sized) < 2:
        return {}
    first, last = sized[0], sized[-1]
    growth: dict[str, float] = {
        key: last[key] - first[key] for key in ("table_bytes", "indexes_bytes")
    }
    growth["seconds"] = (last["sampled_at"] - first["sampled_at"]).total_seconds()
    return growth


def signed_size(num_bytes: int) -> str:
    """A change of size with its sign: ``"+1.5 MiB"``, ``"-512 B"``, ``"+0 B"``."""
    return ("-" if num_bytes < 0 else "+") + format.size(abs(num_bytes))


def ago(seconds: float | None) -> str:
    """``"5m 3s ago"``, or ``"never"`` for ``None``."""
    return "never" if seconds is None else f"{format.duration(seconds)} ago"


def no_samples_note() -> None:
    """Say why a chart over time is missing."""
    st.caption(
        "No samples of the table's health yet — `outbox-monitor scheduler` records them with "
        "the headline figures."
    )


def overview_tiles(
    health: Mapping[str, Any], samples: Sequence[Mapping[str, Any]], horizon_badge: rule_state.Badge
) -> None:
    """The Overview's row of health tiles (dead tuples and their change over the sampled
    window, the xmin horizon with ``horizon_badge``: the state of its rules,
    ``rule_state.badge``; the size, the last autovacuum), and a link to the Health page."""
    columns = st.columns(4)
    dead = [s["dead_tuples"] for s in samples if s.get("dead_tuples") is not None]
    columns[0].metric(
        "Dead tuples",
        format.count(health["dead_tuples"]),
        delta=f"{health['dead_tuples'] - dead[0]:+,} in window" if dead else None,
        delta_color="inverse",
        help=f"{format_value(health['dead_tuple_fraction'], 'fraction')} of the table's tuples "
        "are dead (acked or retried row versions vacuum has not removed).",
        border=True,
    )
    holding = [h for h in health["xmin_horizon_holders"] if h["holds_horizon"]]
    columns[1].metric(
        "xmin horizon held",
        format.duration(health["xmin_horizon_age_seconds"]),
        delta=horizon_badge.text,
        delta_color=horizon_badge.color,
        delta_arrow="off",
        help=(f"By {holding[0]['summary']}." if holding else "Nothing holds it.")
        + f"\n\nRules: {horizon_badge.detail}",
        border=True,
    )
    columns[1].caption(format.md_text(horizon_badge.line))
    columns[2].metric(
        "Table + indexes",
        format.size(health["table_bytes"] + health["indexes_bytes"]),
        help=f"Table {format.size(health['table_bytes'])}, indexes "
        f"{format.size(health['indexes_bytes'])}.",
        border=True,
    )
    columns[3].metric(
        "Last autovacuum",
        ago(health["time_since_autovacuum_seconds"]),
        help="Autovacuum is on for this table."
        if health["autovacuum_enabled"]
        else "Autovacuum is OFF for this table.",
        border=True,
    )
    for holder in holding:
        if holder["held_seconds"] is None:  # a slot, a hidden session read once: not in the tile
            st.caption(
                format.md_text(
                    f"The xmin horizon is also held by {holder['summary']}, for how long "
                    "PostgreSQL does not record."
                )
            )
    for note in health["hidden"]:
        st.caption(format.md_text(note))
    st.page_link("pages/health.py", label="Open health", icon=":material/monitor_heart:")
