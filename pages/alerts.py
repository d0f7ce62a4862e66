"""Alerts: every rule's state per instance, notification and transition history, silences,
and a test message through a route (issue 3 §4)."""

import streamlit as st

from outbox_monitor.access import Role
from outbox_monitor.errors import ActionRefused
from outbox_monitor.ui import (
    alert_acks,
    alert_history,
    alert_inhibition,
    alert_loaders,
    alert_receivers,
    alert_routes,
    alert_rules,
    alert_silences,
    alertmanager_status,
    banners,
    format,
    loaders,
    runbooks,
    state,
)

FLASH = "alerts.flash"
TEST_OUTCOME = "alerts.test_outcome"

ctx = state.context()
loaded = alert_rules.load_ruleset()
ruleset = loaded.ruleset
if loaded.error is not None:
    alert_rules.show_rules_error(loaded)
else:
    routes = ", ".join(format.md_code(route) for route in ruleset.routes) or "none"
    st.caption(
        f"{format.plural(len(ruleset.rules), 'rule')} from {format.md_code(loaded.path)} · "
        f"evaluated every {format.duration(ruleset.defaults.interval)} · routes: {routes}",
        help="The scheduler evaluates them: `outbox-monitor scheduler`, or "
        "`outbox-monitor dashboard --with-scheduler`.",
    )

state_tab, notifications_tab, transitions_tab, silences_tab, test_tab = st.tabs(
    ["State", "Notifications", "Transitions", "Silences", "Test alert"]
)


@st.fragment(run_every=ctx.filters.refresh)
def live_state() -> None:
    with banners.guarded(wait_out_outage=True):
        alert_rules.show_stall(alert_loaders.evaluator_lease(ctx.db), ruleset)
        alert_rules.show_writes_failing(alert_loaders.writes_failing(ctx.db))
        alert_receivers.show_failing(ctx.db, ruleset)
        alertmanager_status.show_unreachable(alert_loaders.alertmanager_down(ctx.db))
        instances = alert_loaders.alert_instances(ctx.db)
        now = loaders.database_now(ctx.db)
        counts = alert_rules.state_counts(instances)
        silenced = alert_silences.totals(alert_loaders.silences(ctx.db))[0]
        columns = st.columns(5)
        columns[0].metric("Firing", counts["firing"], border=True)
        columns[1].metric("Pending", counts["pending"], border=True)
        columns[2].metric("Evaluation errors", counts["error"], border=True)
        columns[3].metric("OK", counts["inactive"], border=True)
        columns[4].metric("Active silences", silenced, border=True)
        alert_acks.show(ctx.db)
        last = alert_rules.latest_evaluation(instances)
        if last is None:
            st.info(
                "No rule instance has state yet. The scheduler (`outbox-monitor scheduler`, or "
                "`outbox-monitor dashboard --with-scheduler`) evaluates the rules every "
                "interval; a rule with `by: [event_type]` has an instance only for event types "
                "with rows its figure counts.",
                icon=":material/schedule:",
            )
        else:
            refresh = format.duration_label(ctx.filters.refresh)
            st.caption(
                f"Last evaluation {format.instant(last)} · database time "
                f"{format.instant(now)} · refreshes every {refresh}"
            )
        rows = alert_rules.state_rows(ruleset, instances, now, ctx.db.alert_outbox)
        rows = alert_inhibition.marked(rows, ctx.db)
        rule, instance = st.query_params.get("rule"), st.query_params.get("instance")
        if rule:
            rows = alert_rules.focus_rows(rows, rule, instance)
            shown = f"{rule} {instance}" if instance else rule
            st.caption(f"Showing {format.md_code(shown)} only, as linked from the Overview.")
            if st.button("Show every rule", key="alerts.unfocus"):
                for name in ("rule", "instance"):
                    st.query_params.pop(name, None)
                st.rerun()
        format.grid(
            rows,
            alert_rules.state_columns(fleet=bool(ctx.db.alert_outbox)),
            key="alerts.state",
        )
        runbooks.section(ruleset.rules if ruleset else [], focus=rule, instance=instance)


@st.fragment(run_every=ctx.filters.refresh)
def live_notifications() -> None:
    with banners.guarded(wait_out_outage=True):
        rows = alert_loaders.notifications(ctx.db)
        if not rows:
            st.caption("No notification yet.")
            return
        st.caption(
            "The notification outbox, newest first",
            help="Every firing, resolved, repeat, error and test message with its delivery "
            "outcome (pending, sent, suppressed, failed).",
        )
        format.grid(
            alert_history.notification_rows(rows),
            alert_history.NOTIFICATION_COLUMNS,
            key="alerts.notifications",
        )
        by_id = {row["id"]: row for row in rows}
        chosen = st.selectbox(
            "Message of notification",
            list(by_id),
            format_func=lambda i: alert_history.notification_label(by_id[i]),
            key="alerts.notification",
        )
        row = by_id[chosen]
        st.markdown(alert_history.delivery(row))
        text = alert_history.as_shown_in_slack(row["text"])
        st.code(text or "(this notification cannot be rendered)", language=None, wrap_lines=True)


@st.fragment(run_every=ctx.filters.refresh)
def live_transitions() -> None:
    with banners.guarded(wait_out_outage=True):
        rows = alert_loaders.alert_transitions(ctx.db)
        if not rows:
            st.caption("No state transition yet.")
            return
        units = {rule.name: rule.unit for rule in ruleset.rules} if ruleset else None
        format.grid(
            alert_history.transition_rows(rows, units),
            alert_history.TRANSITION_COLUMNS,
            key="alerts.transitions",
        )


with state_tab:
    live_state()
with notifications_tab:
    live_notifications()
with transitions_tab:
    live_transitions()

with silences_tab:
    can_act = ctx.identity.can(Role.operator)
    flash = st.session_state.pop(FLASH, None)
    if flash:
        st.success(flash, icon=":material/check_circle:")
    instances = alert_loaders.alert_instances(ctx.db)
    now = loaders.database_now(ctx.db)
    st.caption(
        "A silenced alert still changes state; its notifications are not posted.",
        help="A silenced alert still changes state (see State), but its notifications are "
        "recorded as suppressed and never posted. Every matcher must match; an event type "
        "with % is a LIKE pattern.",
    )
    if not can_act:
        st.info(
            f"{format.md_code(ctx.identity.name)} is a viewer: creating and expiring "
            "silences needs the operator role.",
            icon=":material/lock:",
        )
    else:
        with st.form("alerts.silence_form"):
            left, middle, right = st.columns(3)
            rule = left.selectbox(
                "Rule", alert_silences.rule_choices(ruleset, instances), key="alerts.silence_rule"
            )
            severity = middle.selectbox(
                "Severity", alert_silences.SEVERITY_CHOICES, key="alerts.silence_severity"
            )
            event_type = right.text_input(
                "Event type",
                key="alerts.silence_event_type",
                placeholder="payment.captured or payment.%",
            )
            until_text = st.text_input(
                "Until",
                value="2h",
                key="alerts.silence_until",
                help="A duration from now (30m, 2h, 1d) or a date and time "
                "(2026-12-01T09:00:00Z; without a zone: UTC).",
            )
            comment = st.text_area("Comment", key="alerts.silence_comment", placeholder="why")
            submitted = st.form_submit_button(
                "Create silence", key="alerts.silence_create", type="primary"
            )
        if submitted:
            matchers = alert_silences.silence_matchers(rule, severity, event_type)
            try:
                until = alert_silences.parse_until(until_text, now)
            except ValueError as error:
                st.error(
                    f"**Silence refused** — until: {format.md_text(error)}", icon=":material/error:"
                )
            else:
                try:
                    silence_id = alert_loaders.create_silence(
                        ctx.actions_db, matchers, until, comment, ctx.identity
                    )
                except ActionRefused as error:
                    banners.show(error, stop=False)
                else:
                    st.session_state[FLASH] = (
                        f"Silence #{silence_id} created: "
                        f"{format.md_text(alert_silences.labels_text(matchers))} until "
                        f"{format.instant(until)}."
                    )
                    st.rerun()

    everything = alert_loaders.silences(ctx.db)
    active = [row for row in everything if row["active"]]
    active_total, ended_total = alert_silences.totals(everything)
    st.subheader(alert_silences.heading("Active silences", active_total, len(active)))
    if not active:
        st.caption("None.")
    for row in active:
        with st.container(border=True):
            text, button = st.columns([5, 1], vertical_alignment="center")
            text.markdown(alert_silences.silence_text(row, now))
            text.caption(format.md_text(row["comment"]))
            if can_act and button.button("Expire", key=f"alerts.expire.{row['id']}"):
                expired = alert_loaders.expire_silence(ctx.actions_db, row["id"], by=ctx.identity)
                st.session_state[FLASH] = (
                    f"Silence #{row['id']} expired."
                    if expired
                    else f"Silence #{row['id']} had already ended."
                )
                st.rerun()
    ended = alert_silences.ended_silence_rows(everything)
    if ended:
        st.subheader(alert_silences.heading("Expired or ended", ended_total, len(ended)))
        format.grid(ended, alert_silences.ENDED_COLUMNS, key="alerts.ended_silences")

with test_tab:
    if ruleset is None:
        st.info("Fix the rules file first: the test message goes through its routes.")
    elif not ruleset.routes:
        st.info(f"{format.md_code(loaded.path)} defines no routes.")
    else:
        route = st.selectbox("Route", list(ruleset.routes), key="alerts.test_route")
        destination = alert_routes.route_destination(ruleset, route)
        if destination.missing is None:
            st.caption(f"Posts to {format.md_text(destination.text)}.")
        else:
            st.warning(
                format.md_text(banners.message_of(destination.missing)), icon=":material/key:"
            )
            if destination.missing.hint:
                # names a variable and a value to export, e.g. …=<incoming-webhook URL>
                st.caption(format.md_text(destination.missing.hint))
        if not ctx.identity.can(Role.operator):
            st.info("Posting a test alert needs the operator role.", icon=":material/lock:")
        elif st.button("Send test alert", key="alerts.send_test"):
            st.session_state[TEST_OUTCOME] = alert_routes.send_test_alert(
                ctx.actions_db, ruleset, route, ctx.identity
            )
            alert_loaders.clear_notifications()
            st.rerun()  # the Notifications tab above lists the recorded message
        outcome = st.session_state.pop(TEST_OUTCOME, None)
        if outcome is not None:
            show = {"success": st.success, "error": st.error, "warning": st.warning}
            show[outcome.level](format.md_text(outcome.message))
            if outcome.hint:
                st.info(format.md_text(outcome.hint), icon=":material/build:")
