"""Overview: SLO-coloured tiles and charts of the outbox, refreshed live."""

from datetime import datetime

import streamlit as st

from outbox_monitor.ui import (
    alert_loaders,
    alert_rules,
    backlog_sample,
    banners,
    charts,
    controls,
    event_types,
    firing_alerts,
    format,
    headline,
    health,
    loaders,
    retrying,
    rule_state,
    slo,
    state,
    tile_forecasts,
)

ctx = state.context()

missing = loaders.missing_indexes(ctx.db)
if missing:
    st.warning(
        f"Recommended index missing on {format.md_code(ctx.db.table_name)}: "
        + "; ".join(format.md_text(index) for index in missing)
        + ". Those figures scan the table until it exists. Fix: run `outbox-monitor init-db` "
        "(it only creates what is absent, with CREATE INDEX CONCURRENTLY).",
        icon=":material/warning:",
    )
for name, harm in loaders.retired_indexes(ctx.db).items():
    st.warning(
        f"Index {format.md_code(name)} on {format.md_code(ctx.db.table_name)}, created by an "
        f"earlier outbox-monitor, {harm}. Fix: run `outbox-monitor init-db` (it drops it "
        "with DROP INDEX CONCURRENTLY, which never blocks the workers).",
        icon=":material/warning:",
    )
slo.show_rules_problem()


def tile(column, label: str, value: str, badge: rule_state.Badge | None, help: str) -> None:
    """One figure; its badge is the state of the rules on it (``rule_state.badge``), plain
    when it has none."""
    if badge is None:
        column.metric(label, value, help=help, border=True)
    else:
        column.metric(
            label,
            value,
            delta=badge.text,
            delta_color=badge.color,
            delta_arrow="off",
            help=f"{help}\n\nRules: {badge.detail}" if badge.detail else help,
            border=True,
        )
        column.caption(format.md_text(badge.line))


def alerting() -> tuple:
    """The rules of this outbox, their persisted states and why they cannot be trusted
    (``None`` when a scheduler evaluates); renders the stall and writes-failing banners."""
    loaded = alert_rules.load_ruleset()
    lease = alert_loaders.evaluator_lease(ctx.db)
    alert_rules.show_stall(lease, loaded.ruleset)
    alert_rules.show_writes_failing(alert_loaders.writes_failing(ctx.db))
    instances = alert_loaders.alert_instances(ctx.db)
    ruleset = rule_state.for_outbox(loaded.ruleset, ctx.db)
    return ruleset, instances, rule_state.alerting_down(lease, loaded.ruleset)


def forecasts(column, ruleset, metric: str, now, event_type, backlog: int | None = None) -> None:
    """Under a tile: its trend stated once (with the drain ETA of ``backlog``), then when its
    rules break."""
    for text in tile_forecasts.captions(
        ctx.db, ruleset, metric, now, event_type=event_type, backlog=backlog
    ):
        column.caption(format.md_text(text))


@st.fragment(run_every=ctx.filters.refresh)
def live_figures() -> None:
    with banners.guarded(wait_out_outage=True):
        what_is_wrong = st.container()  # first; filled once the by-event-type table is read
        f = state.filters()
        figures = loaders.status(ctx.db, window=f.window, event_type=f.event_type)
        failed_24h = loaders.failed_last_24h(ctx.db, event_type=f.event_type)
        latency = figures["latency_seconds"]
        scope = f"event type {format.md_code(f.event_type)}" if f.event_type else "all event types"
        st.caption(
            f"Updated at {format.instant(figures['now'])} (database time) · {scope} · "
            f"window {f.window_label} · refreshes every {format.duration_label(f.refresh)}"
        )

        note = controls.flow_note(figures)
        if note:
            st.info(note, icon=":material/tune:")
            st.page_link("pages/controls.py", label="Open controls", icon=":material/tune:")

        now = datetime.fromisoformat(figures["now"])
        ruleset, instances, down = alerting()
        # what is firing first: on a laptop's first screen (1440×900), above the tiles; each
        # firing type's figures are written into its card once the table is read, after them
        cards = firing_alerts.section(ruleset, instances, down=down, now=now)

        def badge(metric: str, window: float | None = None) -> rule_state.Badge:
            return rule_state.badge(
                metric,
                ruleset,
                instances,
                down=down,
                now=now,
                event_type=f.event_type,
                window=window,
                default_window=ctx.settings.window,
            )

        first = st.columns(4)
        tile(
            first[0],
            "Queue depth",
            format.count(figures["queue_depth"]),
            badge("queue_depth"),
            f"Pending rows due now. {figures['pending_total']:,} pending in total, "
            f"{figures['scheduled_retries']:,} waiting in backoff.",
        )
        tile(
            first[1],
            "Oldest pending age",
            format.duration(figures["oldest_pending_age_seconds"]),
            badge("oldest_pending_age"),
            "Since the oldest pending row was created, including rows waiting in backoff.",
        )
        forecasts(first[0], ruleset, "queue_depth", now, f.event_type, figures["queue_depth"])
        forecasts(first[1], ruleset, "oldest_pending_age", now, f.event_type)
        tile(
            first[2],
            "P95 latency",
            format.duration(latency["p95"]),
            badge("latency_p95", f.window),
            f"processed_at − created_at of rows done in the last {f.window_label}. "
            f"P50 {format.duration(latency['p50'])}, P99 {format.duration(latency['p99'])}.",
        )
        tile(
            first[3],
            "Failed (24 h)",
            format.count(failed_24h),
            badge("failed_in_window", slo.FAILED_TILE_WINDOW_SECONDS),
            "Rows dead-lettered in the last 24 hours (by time of failure).",
        )
        second = st.columns(4)
        tile(
            second[0],
            "Stuck locks",
            format.count(figures["stuck_locks"]),
            badge("stuck_locks"),
            f"Processing rows locked longer than the lock timeout "
            f"({format.duration_label(figures['lock_timeout_seconds'])}) or with no lock time; "
            f"{figures['processing']:,} processing in total. Reap them on the Actions page.",
        )
        tile(
            second[1],
            "Processed / min",
            format.per_minute(figures["processed_per_minute"]),
            None,
            f"Rows done in the last {f.window_label}, per minute.",
        )
        tile(
            second[2],
            "Created / min",
            format.per_minute(figures["created_per_minute"]),
            None,
            f"Rows created in the last {f.window_label}, per minute.",
        )
        tile(
            second[3],
            f"Failed ({f.window_label})",
            format.count(figures["failed_in_window"]),
            None,
            f"Rows dead-lettered in the last {f.window_label}.",
        )
        sampled = backlog_sample.note(figures)
        if sampled:
            st.caption(sampled)
        retrying.section(ctx.db, f, figures, tile=tile, badge=badge("retrying"))

        top = ctx.settings.overview_top_event_types
        table = event_types.load(
            ctx.db,
            f,
            top=top,
            instances=instances,
            ruleset=ruleset,
            backlog=figures["backlog_pass"],
            finished=figures["finished_sample"],
        )
        firing_alerts.fill(ctx.db, cards, table, now=now, f=f)
        headline.show(
            what_is_wrong, ctx.db, f, figures, table, None if down else instances, now=now
        )
        samples = loaders.samples(ctx.db, window=f.window)
        health.overview_tiles(figures["health"], samples, badge("xmin_horizon_age"))

        # Only the chosen tab runs (the Charts cost the page's first paint; issue 15, RESULTS.md
        # "Pages with issue 15"); it is in the URL: /overview?view=Charts
        by_type, history = st.tabs(
            ["By event type", "Charts"], key="view", on_change="rerun", bind="query-params"
        )
        if by_type.open:
            with by_type:
                event_types.section(table, f, top=top, instances=instances, ruleset=ruleset)
        if history.open:
            with history:
                charts_tab(f, figures, samples, [row["event_type"] for row in table["rows"]])


def charts_tab(f: state.Filters, figures: dict, samples: list, troubled: list[str]) -> None:
    """The history: queue depth, throughput, retry pressure, latency, failures by event type,
    and any figure split by event type."""
    left, right = st.columns(2)
    with left:
        st.subheader("Queue depth over time")
        if samples:
            st.altair_chart(charts.queue_depth(samples), width="stretch")
        else:
            st.info(
                "No samples yet — start `outbox-monitor scheduler` to record queue depth "
                "every few seconds.",
                icon=":material/schedule:",
            )
        st.subheader("Throughput over time")
        series = loaders.throughput_series(ctx.db, window=f.window, event_type=f.event_type)
        if series:
            bucket = loaders.bucket_for(f.window)
            st.altair_chart(charts.throughput(series, bucket), width="stretch")
        else:
            st.caption(f"No rows created or processed in the last {f.window_label}.")
        st.subheader("Retry pressure")
        if figures["attempts_histogram"]:
            st.altair_chart(
                charts.attempts_histogram(figures["attempts_histogram"]), width="stretch"
            )
            if "attempts_histogram" in figures["estimated"]:
                st.caption(
                    f"Estimate: more than {format.count(loaders.count_cap())} dead letters, "
                    "so their counts by attempts are estimated from a sample of the "
                    "table's pages (≈); pending and processing rows are counted exactly. "
                    "`outbox-monitor status --json` counts every row."
                )
        else:
            st.caption("No pending, processing or failed rows.")
    with right:
        st.subheader("Latency P50 / P95 over time")
        latencies = loaders.latency_series(ctx.db, window=f.window, event_type=f.event_type)
        if latencies:
            st.altair_chart(charts.latency(latencies), width="stretch")
        else:
            st.caption(f"No rows done in the last {f.window_label}.")
        st.subheader("Failures by event type")
        if figures["failed_by_event_type"]:
            st.altair_chart(
                charts.failures_by_event_type(figures["failed_by_event_type"]),
                width="stretch",
            )
            st.page_link(
                "pages/dead_letters.py", label="Open dead letters", icon=":material/report:"
            )
        else:
            st.caption(f"No dead letters in the last {f.window_label}.")

    retrying.chart(samples)
    event_types.split_chart(ctx.db, f, troubled)


live_figures()
