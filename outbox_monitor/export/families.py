"""``/metrics`` families without event types: the table's health, the claim's plan, the
workers' liveness, the read replica, the alert states, the receivers and the scheduler process's own
state."""

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from outbox_monitor.alerts.receiver_health import read_health
from outbox_monitor.alerts.state import list_instances
from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.figures.registry import FIGURES, HEALTH_FIGURES
from outbox_monitor.figures.workers import no_claim_while_due
from outbox_monitor.health.claim_plan import claim_health
from outbox_monitor.health.status import health_status
from outbox_monitor.store.db import Database
from outbox_monitor.store.standby import ReplicaStatus

ALERT_STATES = ("inactive", "pending", "firing", "error")


def figure_family(metric: str, *, labels: list[str]) -> GaugeMetricFamily:
    """The empty family of a figure, named and described by the figure registry."""
    figure = FIGURES[metric]
    return GaugeMetricFamily(figure.prometheus, figure.help, labels=labels)


def health_families(db: Database) -> list[Metric]:
    """The table's health (issue 14), one unlabelled gauge per figure of
    ``HEALTH_FIGURES`` (none for a figure without a value, as a table never
    autovacuumed), read from one ``health_status`` as ``status --json`` shows it; and
    ``outbox_index_bytes{index}``, each index's size."""
    health = health_status(db)
    families: list[Metric] = []
    for name in HEALTH_FIGURES:
        family = figure_family(name, labels=[])
        value = health[FIGURES[name].status_key.partition(".")[2]]
        if value is not None:
            family.add_metric([], float(value))
        families.append(family)
    indexes = GaugeMetricFamily(
        "outbox_index_bytes", "Size of each index of the outbox table, bytes.", labels=["index"]
    )
    for index in health["indexes"]:
        indexes.add_metric([index["index"]], float(index["bytes"]))
    families.append(indexes)
    return families


def claim_plan_families(db: Database) -> list[Metric]:
    """``outbox_claim_plan_degraded`` and ``outbox_claim_plan_cost`` (issue 14 item 2): the
    workers' claim planned now (``health.claim_plan.claim_health``, EXPLAIN only)."""
    health = claim_health(db)
    degraded = figure_family("claim_plan_degraded", labels=[])
    degraded.add_metric([], float(health.degraded))
    cost = figure_family("claim_plan_cost", labels=[])
    cost.add_metric([], health.cost)
    return [degraded, cost]


def worker_families(db: Database) -> list[Metric]:
    """``outbox_no_claim_while_due_seconds`` (issue 15 item 7): how long rows no flow control
    holds have been due with no claim and no outcome (``workers.no_claim_while_due``)."""
    family = figure_family("no_claim_while_due", labels=[])
    family.add_metric([], no_claim_while_due(db))
    return [family]


def replica_families(reading: ReplicaStatus) -> list[Metric]:
    """``outbox_monitor_replica_in_recovery`` and ``outbox_monitor_replica_lag_seconds``
    (no sample while the lag is unknown) of the read DSN."""
    recovery = GaugeMetricFamily(
        "outbox_monitor_replica_in_recovery",
        "1 when OUTBOX_MONITOR_DSN is a hot standby (figures come from a read replica).",
        value=1.0 if reading.in_recovery else 0.0,
    )
    lag = GaugeMetricFamily(
        "outbox_monitor_replica_lag_seconds",
        "Replay lag of the read DSN: 0 on a primary or when everything received is "
        "replayed, else now - the newest replayed commit (absent when unknown).",
    )
    if reading.lag_seconds is not None:
        lag.add_metric([], reading.lag_seconds)
    return [recovery, lag]


def alert_state_family(primary: Database) -> Metric:
    """``outbox_monitor_alert_state{rule, alert_instance, state}``, read from ``primary`` (where
    the scheduler writes the alert states)."""
    family = GaugeMetricFamily(
        "outbox_monitor_alert_state",
        "1 for the state each alert instance is in, 0 for the other states.",
        labels=["rule", "alert_instance", "state"],
    )
    for row in list_instances(primary):
        for state in ALERT_STATES:
            family.add_metric(
                [row["rule"], row["instance"], state], 1.0 if row["state"] == state else 0.0
            )
    return family


def receiver_families(primary: Database, ruleset: Any) -> list[Metric]:
    """``outbox_monitor_receiver_failing{route,type}`` (1 while the route keeps failing,
    ``alerts.receiver_health``) and ``outbox_monitor_receiver_undelivered{route,type}``
    (its messages waiting), read from ``primary``; none without rules."""
    if ruleset is None:
        return []
    failing = GaugeMetricFamily(
        "outbox_monitor_receiver_failing",
        "1 while a receiver (route) keeps failing: its oldest undelivered message tried 3 "
        "times, or its newest refused for good; told through the other receivers.",
        labels=["route", "type"],
    )
    undelivered = GaugeMetricFamily(
        "outbox_monitor_receiver_undelivered",
        "Messages of a receiver (route) not delivered yet (pending, not silenced).",
        labels=["route", "type"],
    )
    for receiver in read_health(primary, ruleset, datetime.now(UTC)):
        failing.add_metric([receiver.route, receiver.type], 1.0 if receiver.failing else 0.0)
        undelivered.add_metric([receiver.route, receiver.type], receiver.undelivered)
    return [failing, undelivered]


def process_families(status: SchedulerStatus) -> Iterator[Metric]:
    """The scheduler process's own families, from its ``status``: leader, evaluation duration
    and age, stalled, evaluation skipped, notifications by outcome."""
    yield GaugeMetricFamily(
        "outbox_monitor_leader",
        "1 while this process holds the evaluator lease (samples, evaluates, sends).",
        value=1.0 if status.is_leader else 0.0,
    )
    duration = GaugeMetricFamily(
        "outbox_monitor_evaluation_duration_seconds",
        "Wall time of this process's last alert evaluation pass (leader only).",
    )
    if status.evaluation_seconds is not None:
        duration.add_metric([], status.evaluation_seconds)
    yield duration
    age = GaugeMetricFamily(
        "outbox_monitor_last_evaluation_age_seconds",
        "Seconds since the last completed alert evaluation of the table by any scheduler "
        "(database clock; absent before the first).",
    )
    if status.evaluation_age is not None:
        age.add_metric([], status.evaluation_age)
    yield age
    yield GaugeMetricFamily(
        "outbox_monitor_alerting_stalled",
        "1 when no alert evaluation completed for more than 3 intervals (Slack is told).",
        value=1.0 if status.stalled else 0.0,
    )
    yield GaugeMetricFamily(
        "outbox_monitor_writes_failing",
        "1 while this process's writes to the database fail (disk full, read-only, I/O "
        "error; Slack is told after 3 intervals).",
        value=0.0 if status.writes_failing_since is None else 1.0,
    )
    replica = status.replica_reading
    yield GaugeMetricFamily(
        "outbox_monitor_evaluation_skipped",
        "1 while this process (the leader) evaluates no rule because the read replica "
        "lags more than OUTBOX_MONITOR_MAX_REPLICA_LAG (Slack is told).",
        value=1.0 if replica is not None and replica[1] else 0.0,
    )
    counter = CounterMetricFamily(
        "outbox_monitor_notifications",
        "Notifications handled by this process's sender, by outcome.",
        labels=["outcome"],
    )
    for outcome, count in status.notification_counts().items():
        counter.add_metric([outcome], count)
    yield counter
    refused = CounterMetricFamily(
        "outbox_monitor_slack_refused",
        "Messages Slack refused for good (failed at once, the route went on), by route and "
        "Slack's answer (no_service, channel_is_archived, invalid_token, ...).",
        labels=["route", "answer"],
    )
    for (route, answer), count in sorted(status.refusal_counts().items()):
        refused.add_metric([route, answer], count)
    yield refused
    yield from dead_mans_switch_families(status)


def dead_mans_switch_families(status: SchedulerStatus) -> Iterator[Metric]:
    """The receivers outside the notification outbox (issue 31 items 1, 7): each Alertmanager
    URL's failed posts and last accepted post, the heartbeat's failed pings and last success
    (absent without them; a URL without its credentials)."""
    failures = CounterMetricFamily(
        "outbox_monitor_alertmanager_post_failures",
        "POSTs of alerts to an Alertmanager that failed (refused, 4xx/5xx, timed out), by URL.",
        labels=["url"],
    )
    success = GaugeMetricFamily(
        "outbox_monitor_alertmanager_last_success_timestamp_seconds",
        "When an Alertmanager last accepted this process's alerts (Unix time), by URL.",
        labels=["url"],
    )
    for url in status.alertmanager.urls() if status.alertmanager is not None else ():
        failures.add_metric([url.url], url.failures_total)
        if url.last_success_at is not None:
            success.add_metric([url.url], url.last_success_at.timestamp())
    yield failures
    yield success
    heartbeat = None if status.heartbeat is None else status.heartbeat.as_json()
    pings = CounterMetricFamily(
        "outbox_monitor_heartbeat_failures",
        "Heartbeat pings (OUTBOX_MONITOR_HEARTBEAT_URL) that failed.",
    )
    last = GaugeMetricFamily(
        "outbox_monitor_heartbeat_last_success_timestamp_seconds",
        "When the heartbeat URL last answered a ping (Unix time).",
    )
    if heartbeat is not None:
        pings.add_metric([], heartbeat["failures_total"])
        if status.heartbeat.last_success_at is not None:
            last.add_metric([], status.heartbeat.last_success_at.timestamp())
    yield pings
    yield last
