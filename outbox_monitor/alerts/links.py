"""What a notification says besides its value: an instance's labels, the event type it is
about, and the dashboard view where the fix is (issue 3 §3). Used by the evaluator, the
Alerts page and the exporter alike."""

from datetime import UTC, datetime
from urllib.parse import urlencode

from outbox_monitor.alerts.rules import Rule
from outbox_monitor.durations import duration_label
from outbox_monitor.figures.registry import WORKER_FIGURES

HEALTH_PATH = "/health"
"""The Health page (``dashboard.py``'s ``url_path``): where a table-wide figure's fix is
(the table's health, the claim's plan)."""
WORKERS_PATH = "/workers"
"""The Workers page (``dashboard.py``'s ``url_path``): where the workers' liveness is seen."""
OVERVIEW_PATH = "/overview"
"""The Overview (``dashboard.py``'s ``url_path``; ``/`` sends there)."""
CONTROLS_PATH = "/controls"
"""The Controls page (``dashboard.py``'s ``url_path``)."""
TIMELINE_PATH = "/timeline"
"""The incident timeline page (``dashboard.py``'s ``url_path``)."""
TIMELINE_AT_PARAM = "at"
"""``at=<ISO 8601 instant>``: the timeline opens on the sidebar's window centred on it."""
PAUSE_ACTION = "pause"
"""``action=pause``: the Controls page opens with its pause form pre-filled."""


def dashboard_path(rule: Rule, event_type: str | None, error_group: str | None = None) -> str:
    """The dashboard view where the fix is, pre-filtered (issue 3 §3).

    ``failed_in_window`` → ``/dead_letters?event_type=…&window=…`` (with ``error_group``
    when one group is the cause), ``stuck_locks`` → ``/actions`` (reap), a figure of the
    whole table (``scope="table"``: its health — the xmin horizon, dead tuples — and the
    claim's plan, ``figures.registry.CLAIM_FIGURES``) → ``/health``, except the workers' liveness
    (``figures.registry.WORKER_FIGURES``) → ``/workers``; others → the Overview
    ``/overview?event_type=…&window=…``. Values are URL-encoded (``payment.%`` →
    ``payment.%25``).
    """
    if rule.metric in WORKER_FIGURES:
        return WORKERS_PATH
    if rule.spec.scope == "table":
        return HEALTH_PATH
    params: dict[str, str] = {}
    if event_type:
        params["event_type"] = event_type
    if rule.window:
        params["window"] = duration_label(rule.window)
    if rule.metric == "failed_in_window":
        if error_group:
            params["error_group"] = error_group
        page = "/dead_letters"
    elif rule.metric == "stuck_locks":
        page, params = "/actions", ({"event_type": event_type} if event_type else {})
    else:
        page = OVERVIEW_PATH
    return f"{page}?{urlencode(params)}" if params else page


def timeline_path(at: datetime) -> str:
    """The incident timeline around an instant, in UTC to the second:
    ``timeline_path(14:02:07 UTC)`` → ``/timeline?at=2026-12-02T14%3A02%3A07Z``."""
    instant = at.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{TIMELINE_PATH}?{urlencode({TIMELINE_AT_PARAM: instant})}"


def pause_path(event_type_filter: str, *, reason: str | None = None) -> str:
    """The Controls page with its pause form pre-filled for a filter:
    ``pause_path("crm.%")`` → ``/controls?event_type=crm.%25&action=pause`` (values
    URL-encoded; ``reason`` pre-fills the reason)."""
    params = {"event_type": event_type_filter, "action": PAUSE_ACTION}
    if reason:
        params["reason"] = reason
    return f"{CONTROLS_PATH}?{urlencode(params)}"


def pause_link(base_url: str, event_type_filter: str, *, reason: str | None = None) -> str:
    """The absolute URL of ``pause_path`` under the dashboard's base URL (which may carry a
    path prefix): ``pause_link("https://ops.example.com/outbox/", "crm.%")`` →
    ``https://ops.example.com/outbox/controls?event_type=crm.%25&action=pause``."""
    return base_url.rstrip("/") + pause_path(event_type_filter, reason=reason)


def instance_labels(rule: Rule, measured: dict[str, str] | None) -> dict[str, str]:
    """An instance's labels (silence matching, payload): the rule's ``labels``, ``rule``,
    ``severity`` and ``event_type`` (the instance's, else the rule's filter, if any)."""
    labels = {**rule.labels, **(measured or {})}
    labels["rule"] = rule.name
    labels["severity"] = rule.severity
    if not labels.get("event_type") and rule.event_type:
        labels["event_type"] = rule.event_type
    return {key: str(value) for key, value in labels.items()}


def instance_event_type(rule: Rule, instance: str, labels: dict[str, str]) -> str | None:
    """The event type an instance is about: its own (``by`` instances: the one in its labels,
    whole, else its key's), else the one in its labels, else the rule's filter; ``None`` for
    none."""
    if instance.startswith("event_type="):
        return labels.get("event_type") or instance.removeprefix("event_type=")
    return labels.get("event_type") or rule.event_type
