"""The ``alertmanager`` receiver (issue 31 items 1, 2 and 7): a leader job posts the alerts of
the routes with ``type: alertmanager`` to each of their Alertmanagers (``POST
/api/v2/alerts``), as Prometheus does, and the always-firing ``Watchdog``.

Unlike Slack, nothing goes through the notification outbox: Alertmanager keeps its own
state and expects a firing alert to be sent again before its ``endsAt`` passes. Right after
each evaluation pass (``evaluated``, on a thread of its own) and at the job's ticks, each
Alertmanager whose alerts changed, or whose last post is one evaluation interval old, gets:

- every instance routed to it that is firing or in error, ``startsAt`` the transition that
  started its episode, ``endsAt`` now + ``ENDS_AFTER_INTERVALS`` (4) intervals — a monitor
  that dies lets its alerts end by themselves;
- every instance whose episode ended in the last 4 intervals, ``endsAt`` the time of that
  resolve (sent again each time: a leader that died before its first post of the resolve
  is followed by one that sends it);
- ``Watchdog`` (labels ``alertname=Watchdog``, ``severity=none`` and the outbox's scope
  labels), while the last evaluation of this process is at most ``STALL_INTERVALS`` (3)
  intervals old: the kube-prometheus convention for an external dead-man's switch.

The label set of an instance is the same at every post (Alertmanager fingerprints it):
``alertname`` and ``rule`` (the rule's name), ``severity``, ``event_type``, the rule's
``labels`` and, with a fleet file, ``outbox`` and the outbox's labels — never a value, a
state or an episode. A value longer than ``units.MAX_KEY_CHARS`` (200) characters (an event
type can be 100 kB) is cut to its head, ``…`` and 8 hex digits of its md5
(``units.bounded_key``): the same type always gives the same label, two long types sharing
a head stay apart. The episode's stable key (``message_key.alert_key``) is the annotation
``alert_key``. Annotations (``summary``, ``description``, ``runbook``, ``runbook_url``) are cut
to ``MAX_ANNOTATION_CHARS``.

Silenced instances (the dashboard's silences) are not posted. Never silent: a failed post
is a WARNING (at most once per ``WARN_EVERY_SECONDS`` per URL, and a line when it works
again), counted per URL for ``/metrics`` and ``/healthz`` (``ReceiverStatus``), and after 3
intervals the scheduler's own alert ``alertmanager-unreachable`` (``alertmanager_health``:
the Alerts page, a message through the Slack routes).
"""

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import urllib3

from outbox_monitor.alerts import silences
from outbox_monitor.alerts.links import dashboard_path, instance_event_type
from outbox_monitor.alerts.message import dashboard_base_url, dashboard_link
from outbox_monitor.alerts.message_key import alert_key
from outbox_monitor.alerts.outbox_scope import link_outbox, routes_for, unscoped_instance
from outbox_monitor.alerts.route_model import ALERTMANAGER, Route
from outbox_monitor.alerts.rules import RuleSet
from outbox_monitor.alerts.slack import TransportNotConfigured
from outbox_monitor.alerts.slack_outcomes import Delivery, DeliveryError
from outbox_monitor.alerts.stall import STALL_INTERVALS
from outbox_monitor.store.db import Database
from outbox_monitor.units import bounded_key

log = logging.getLogger(__name__)

ALERTS_PATH = "/api/v2/alerts"
ENDS_AFTER_INTERVALS = 4
"""A firing alert's ``endsAt`` is now + this many evaluation intervals (Prometheus: 4 × the
resend delay); a resolve is sent again for as long."""
TIMEOUT_SECONDS = 5.0
"""Each POST's total timeout: a hanging Alertmanager holds up its own post only this long
(the URLs are posted to in parallel, and evaluation never waits for them)."""
WARN_EVERY_SECONDS = 60.0
"""A failing URL's WARNING is repeated at most this often."""
MAX_ANNOTATION_CHARS = 4000
WATCHDOG = "Watchdog"
WATCHDOG_SEVERITY = "none"


def alertmanager_urls(
    ruleset: RuleSet | None, env: Mapping[str, str] | None = None
) -> dict[str, tuple[str, ...]]:
    """The Alertmanager URLs of each ``type: alertmanager`` route.

    Args:
        ruleset: the loaded alerts.yml (``None``: no routes).
        env: where ``alertmanager_urls_env`` is read; default ``os.environ``.

    Returns:
        ``{route name: (base URL, …)}``, the URLs without a trailing ``/``; ``{}`` without
        such a route.

    Raises:
        TransportNotConfigured: a route's ``alertmanager_urls_env`` is unset, empty, or
            holds a value that is not an http(s) URL (naming the variable, never echoing its
            value; a ``ConfigError``: the scheduler does not start).
    """
    environment = os.environ if env is None else env
    return {
        name: route_urls(name, route, environment)
        for name, route in (ruleset.routes if ruleset is not None else {}).items()
        if route.type == ALERTMANAGER
    }


def route_urls(name: str, route: Route, env: Mapping[str, str]) -> tuple[str, ...]:
    """One ``type: alertmanager`` route's base URLs (``alertmanager_urls``), without a
    trailing ``/``; raises ``TransportNotConfigured`` as ``alertmanager_urls`` does."""
    urls = route.alertmanager_urls
    if urls is None:
        variable = route.alertmanager_urls_env or ""
        urls = tuple(u.strip() for u in env.get(variable, "").split(",") if u.strip())
        bad = [u for u in urls if urllib3.util.parse_url(u).scheme not in ("http", "https")]
        if not urls or bad:
            raise TransportNotConfigured(
                f"route {name}: {variable} "
                + ("is not set" if not urls else "holds a value that is not an http(s) URL"),
                hint=f"Set {variable} to the Alertmanager URLs, separated by commas "
                "(e.g. http://alertmanager:9093).",
            )
    return tuple(url.rstrip("/") for url in urls)


def post_alerts(
    pool: urllib3.PoolManager, url: str, alerts: list[dict[str, Any]], timeout: float
) -> str | None:
    """POST ``alerts`` to ``url``'s ``/api/v2/alerts`` (the URL's credentials as basic
    auth). Returns ``None`` when Alertmanager answered 200, else what went wrong in a few
    words (``connection refused``, ``timed out after 5 s``, ``HTTP 503: <body>``); never
    raises."""
    parsed = urllib3.util.parse_url(url + ALERTS_PATH)
    headers = {"Content-Type": "application/json"}
    if parsed.auth:
        headers.update(urllib3.make_headers(basic_auth=parsed.auth))
    try:
        response = pool.request(
            "POST",
            parsed._replace(auth=None).url,
            body=json.dumps(alerts).encode(),
            headers=headers,
        )
    except urllib3.exceptions.HTTPError as failure:
        return _failure_text(failure, timeout)
    except Exception as failure:  # never lose a job to one URL
        log.exception("alertmanager %s: posting failed unexpectedly", shown_url(url))
        return f"{type(failure).__name__}: {failure}"
    if response.status == 200:
        return None
    text = response.data[:300].decode("utf-8", "replace").strip()
    return f"HTTP {response.status}" + (f": {text}" if text else "")


def shown_url(url: str) -> str:
    """A URL without its credentials, for logs, ``/metrics`` and pages:
    ``http://u:p@am:9093`` → ``http://am:9093``."""
    return urllib3.util.parse_url(url)._replace(auth=None, query=None, fragment=None).url


def bounded_labels(labels: Mapping[str, Any]) -> dict[str, str]:
    """An alert's labels as posted: every value as text, at most ``units.MAX_KEY_CHARS``
    characters (``units.bounded_key``: head, ``…``, 8 hex digits of its md5), empty ones
    left out (Prometheus: an empty label is no label), sorted by name."""
    return {
        name: bounded_key(str(value)) for name, value in sorted(labels.items()) if str(value) != ""
    }


def _cut(text: str) -> str:
    return text if len(text) <= MAX_ANNOTATION_CHARS else text[: MAX_ANNOTATION_CHARS - 1] + "…"


def _instant(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def instance_alert(
    ruleset: RuleSet,
    row: Mapping[str, Any],
    *,
    outbox: str,
    ends_at: datetime,
    dashboard_url: str,
) -> dict[str, Any] | None:
    """One ``alertmanager_instances`` row as an Alertmanager v2 alert.

    Args:
        ruleset: the rules (the row's rule gives the annotations; a rule no longer in the
            file gives ``None``).
        row: ``rule``, ``instance`` (as stored), ``labels``, ``state``, ``value``, ``error``,
            ``episode_id``, ``firing_seq``, ``started_at``, ``resolved_at``.
        outbox: ``Database.alert_outbox`` (``""`` without a fleet file).
        ends_at: the ``endsAt`` of a firing one; a resolved one ends at ``resolved_at``
            (never after ``ends_at``).
        dashboard_url: the dashboard's base URL (``generatorURL``).

    Returns:
        ``{"labels", "annotations", "startsAt", "endsAt", "generatorURL"}``, or ``None``.
    """
    try:
        rule = ruleset.rule(row["rule"])
    except KeyError:
        return None
    instance = unscoped_instance(outbox, row["instance"])
    labels = {str(k): str(v) for k, v in (row["labels"] or {}).items()}
    event_type = instance_event_type(rule, instance, labels)
    summary = rule.render_summary(row["value"], event_type)
    description = f"{rule.metric} is {rule.format(row['value'])} ({rule.condition})"
    if row["state"] == "error":
        description = f"{rule.name} cannot be measured: {row['error']}"
    annotations = {
        "summary": summary,
        "description": description,
        "alert_key": alert_key(outbox, rule.name, row["instance"], row["episode_id"] or 0),
    }
    if rule.runbook_steps:
        annotations["runbook"] = "\n".join(
            f"{n}. {step}" for n, step in enumerate(rule.runbook_steps, 1)
        )
    runbook_url = rule.render_runbook_url(event_type)
    if runbook_url:
        annotations["runbook_url"] = runbook_url
    resolved_at = row["resolved_at"]
    path = link_outbox(dashboard_path(rule, event_type), outbox)
    return {
        "labels": bounded_labels({**labels, "alertname": rule.name, "rule": rule.name}),
        "annotations": {name: _cut(text) for name, text in annotations.items()},
        "startsAt": _instant(row["started_at"]),
        "endsAt": _instant(ends_at if resolved_at is None else min(resolved_at, ends_at)),
        "generatorURL": dashboard_link(dashboard_url, path),
    }


def watchdog_alert(
    scope: Mapping[str, str], *, since: datetime, ends_at: datetime, dashboard_url: str
) -> dict[str, Any]:
    """The always-firing ``Watchdog`` of one outbox: labels ``alertname=Watchdog``,
    ``severity=none`` and the outbox's ``scope`` labels (``outbox_scope.scope_labels``:
    none without a fleet file), ``startsAt`` ``since``, ``endsAt`` ``ends_at``."""
    return {
        "labels": bounded_labels({**scope, "alertname": WATCHDOG, "severity": WATCHDOG_SEVERITY}),
        "annotations": {
            "summary": "outbox-monitor is evaluating its alert rules",
            "description": (
                "Always firing while the scheduler evaluates (a dead-man's switch): route it "
                "to a receiver that alerts when it STOPS arriving."
            ),
        },
        "startsAt": _instant(since),
        "endsAt": _instant(ends_at),
        "generatorURL": dashboard_link(dashboard_url, "/alerts"),
    }


@dataclass
class UrlStatus:
    """One URL's deliveries (an Alertmanager's posts, the heartbeat's pings), as
    ``/metrics``, ``/healthz`` and the page show them. Times are UTC; ``failures_total``
    counts failed requests since start."""

    url: str
    last_attempt_at: datetime | None = None
    last_success_at: datetime | None = None
    failing_since: datetime | None = None
    last_error: str | None = None
    failures_total: int = 0
    posts_total: int = 0
    alerts_posted: int = 0
    warned_at: float | None = field(default=None, repr=False)

    def record(self, now: datetime, error: str | None, alerts: int = 0) -> str | None:
        """One request ended at ``now``: ``error`` ``None`` when it worked (``alerts``
        posted), else its text.

        Returns:
            What to log: ``"recovered"`` (the first success after failures), ``"failed"``
            (a failure, at most once per ``WARN_EVERY_SECONDS``), else ``None``. The caller
            holds its lock.
        """
        self.last_attempt_at = now
        if error is None:
            said = "recovered" if self.failing_since is not None else None
            self.last_success_at, self.failing_since = now, None
            self.posts_total += 1
            self.alerts_posted = alerts
            self.last_error, self.warned_at = None, None
            return said
        self.failures_total += 1
        self.last_error = error
        self.failing_since = self.failing_since or now
        tick = time.monotonic()
        if self.warned_at is not None and tick - self.warned_at < WARN_EVERY_SECONDS:
            return None
        self.warned_at = tick
        return "failed"

    def as_json(self) -> dict[str, Any]:
        """The ``/healthz`` form: times ISO 8601, no private field."""

        def iso(at: datetime | None) -> str | None:
            return None if at is None else at.isoformat(timespec="seconds")

        return {
            "url": self.url,
            "last_success_at": iso(self.last_success_at),
            "failing_since": iso(self.failing_since),
            "last_error": self.last_error,
            "failures_total": self.failures_total,
            "alerts_posted": self.alerts_posted,
        }


class ReceiverStatus:
    """The delivery of every Alertmanager URL of one process (thread-safe), read by
    ``/metrics`` and ``/healthz`` (``SchedulerStatus.alertmanager``)."""

    def __init__(self, urls: list[str]) -> None:
        self._lock = threading.Lock()
        self._urls = {url: UrlStatus(shown_url(url)) for url in urls}

    def urls(self) -> list[UrlStatus]:
        """A copy of each URL's status, in configuration order."""
        with self._lock:
            return [UrlStatus(**vars(status)) for status in self._urls.values()]

    def record(self, url: str, now: datetime, alerts: int, error: str | None) -> None:
        """One POST to ``url`` ended at ``now``: ``error`` ``None`` when accepted (``alerts``
        posted), else its text. Logs a failure as a WARNING (once per
        ``WARN_EVERY_SECONDS`` per URL) and the first success after failures."""
        with self._lock:
            status = self._urls[url]
            since = status.failing_since
            said = status.record(now, error, alerts)
            if said == "recovered" and since is not None:
                log.warning(
                    "alertmanager %s accepts alerts again (failing since %s, %d failed "
                    "post(s) in all)",
                    status.url,
                    since.isoformat(timespec="seconds"),
                    status.failures_total,
                )
            elif said == "failed" and status.failing_since is not None:
                log.warning(
                    "alertmanager %s: posting %d alert(s) failed: %s (failing since %s, "
                    "%d failed post(s); retried every tick; its alerts end in Alertmanager "
                    "%d intervals after the last post that worked)",
                    status.url,
                    alerts,
                    error,
                    status.failing_since.isoformat(timespec="seconds"),
                    status.failures_total,
                    ENDS_AFTER_INTERVALS,
                )

    def notice(self) -> str | None:
        """``/healthz``'s notice while a URL fails: ``alertmanager <url> failing since
        <time>: <error>``, each one; ``None`` when none does."""
        failing = [
            f"alertmanager {s.url} failing since "
            f"{s.failing_since.isoformat(timespec='seconds')}: {s.last_error}"
            for s in self.urls()
            if s.failing_since is not None
        ]
        return "; ".join(failing) or None


class AlertmanagerReceiver:
    """Posts one outbox's alerts of its ``type: alertmanager`` routes, and its Watchdog.

    Args:
        db: the Database of the alert state (``Database.alert_outbox`` keys the rows).
        ruleset: the rules and routes.
        urls: ``alertmanager_urls(ruleset)``.
        interval: the evaluation interval (seconds): re-post period and ``endsAt`` unit.
        scope: the outbox's labels (``outbox_scope.scope_labels``), the Watchdog's.
        clock: the wall clock (aware UTC); Alertmanager compares ``endsAt`` with its own.
        timeout: each POST's total timeout in seconds.
        health: an ``alertmanager_health.AlertmanagerHealth``, told each URL's status after
            every pass that posted (the ``alertmanager-unreachable`` alert); ``None``: none.
    """

    def __init__(
        self,
        db: Database,
        ruleset: RuleSet,
        urls: Mapping[str, tuple[str, ...]],
        *,
        interval: float,
        scope: Mapping[str, str] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        timeout: float = TIMEOUT_SECONDS,
        health: Any = None,
    ) -> None:
        self.db = db
        self.ruleset = ruleset
        self.routes = dict(urls)
        self.interval = interval
        self.scope = dict(scope or {})
        self.clock = clock
        self.timeout = timeout
        self.health = health
        every = list(dict.fromkeys(url for group in self.routes.values() for url in group))
        self.status = ReceiverStatus(every)
        self._pool = urllib3.PoolManager(
            retries=False, timeout=urllib3.Timeout(total=timeout), num_pools=max(1, len(every))
        )
        self._posted: dict[str, tuple[Any, float]] = {}
        self._evaluated_at: float | None = None
        self._watchdog_since: datetime | None = None
        self._passing = threading.Lock()

    def evaluated(self) -> threading.Thread:
        """An evaluation pass of this process completed: the Watchdog fires while the last
        one is at most ``STALL_INTERVALS`` intervals old, and what the pass changed is
        posted at once, on a thread of its own (the job's next tick would be up to its
        interval later; the evaluation never waits for Alertmanager).

        Returns:
            The posting thread (tests join it); a failure there is logged, and the job
            tries again at its next tick.
        """
        self._evaluated_at = time.monotonic()
        thread = threading.Thread(target=self._post_now, name="alertmanager-post", daemon=True)
        thread.start()
        return thread

    def _post_now(self) -> None:
        try:
            self.run_once()
        except Exception as error:  # the job's next tick tries again, and logs its own
            log.warning("alertmanager: posting after the evaluation failed: %s", error)

    def run_once(self) -> dict[str, int]:
        """One pass: read the instances, post to each URL whose alerts changed since its
        last accepted post, that failed last, or whose last post is one interval old (never
        an empty list: before the first evaluation there is nothing to say). A pass that
        finds another one running (the job's tick beside ``evaluated``'s) does nothing.

        Returns:
            ``{url: alerts posted}`` of the URLs posted to this pass (failed ones too).

        Raises:
            DatabaseUnavailable and the connector's errors (nothing is posted then: the
            alerts already in Alertmanager end after their ``endsAt``); ``health``'s.
        """
        if not self._passing.acquire(blocking=False):
            return {}
        try:
            return self._pass()
        finally:
            self._passing.release()

    def _pass(self) -> dict[str, int]:
        now = self.clock()
        alerts = self._alerts(now)
        tick = time.monotonic()
        due = {
            url: batch
            for url, batch in alerts.items()
            if batch and self._due(url, _signature(batch), tick)
        }
        if not due:
            return {}
        with ThreadPoolExecutor(max_workers=len(due)) as pool:
            for url, batch in due.items():
                pool.submit(self._post, url, batch, tick)
        if self.health is not None:
            self.health.check(self.status.urls())
        return {url: len(batch) for url, batch in due.items()}

    def _due(self, url: str, signature: Any, tick: float) -> bool:
        posted = self._posted.get(url)
        return posted is None or posted[0] != signature or tick - posted[1] >= self.interval

    def _alerts(self, now: datetime) -> dict[str, list[tuple[dict[str, Any], bool]]]:
        """Each URL's alerts this pass, each with whether it is resolved (the Watchdog
        first)."""
        window = timedelta(seconds=ENDS_AFTER_INTERVALS * self.interval)
        ends_at, dashboard_url = now + window, dashboard_base_url()
        outbox = self.db.alert_outbox
        rows = self.db.fetch_all(
            "alertmanager_instances", {"outbox": outbox, "since": now - window}
        )
        active = silences.active_silences(self.db, now) if rows else []
        batches: dict[str, list[tuple[dict[str, Any], bool]]] = {
            url: [] for group in self.routes.values() for url in group
        }
        fresh = self._evaluated_at is not None and (
            time.monotonic() - self._evaluated_at <= STALL_INTERVALS * self.interval
        )
        if fresh:
            self._watchdog_since = self._watchdog_since or now
            watchdog = watchdog_alert(
                self.scope, since=self._watchdog_since, ends_at=ends_at, dashboard_url=dashboard_url
            )
            for batch in batches.values():
                batch.append((watchdog, False))
        for row in rows:
            labels = row["labels"] or {}
            if row["resolved_at"] is None and silences.silenced_by(active, labels):
                continue
            urls = self._urls_of(row["rule"], labels)
            if not urls:
                continue
            alert = instance_alert(
                self.ruleset, row, outbox=outbox, ends_at=ends_at, dashboard_url=dashboard_url
            )
            for url in urls if alert is not None else ():
                batches[url].append((alert, row["resolved_at"] is not None))
        return batches

    def _urls_of(self, rule_name: str, labels: Mapping[str, str]) -> list[str]:
        """The Alertmanagers an instance goes to: those of each alertmanager route among
        the routes it takes (``routes_for``), each once."""
        try:
            rule = self.ruleset.rule(rule_name)
        except KeyError:
            return []
        names = routes_for(self.ruleset, rule.route, labels)
        return list(dict.fromkeys(url for name in names for url in self.routes.get(name, ())))

    def _post(self, url: str, batch: list[tuple[dict[str, Any], bool]], tick: float) -> None:
        error = post_alerts(self._pool, url, [alert for alert, _ in batch], self.timeout)
        self.status.record(url, self.clock(), len(batch), error)
        if error is None:
            self._posted[url] = (_signature(batch), tick)
        else:
            self._posted.pop(url, None)


def _signature(batch: list[tuple[dict[str, Any], bool]]) -> Any:
    """What makes a batch different for Alertmanager: each alert's labels, start and
    whether it is resolved (not its moving ``endsAt``)."""
    return frozenset(
        (tuple(alert["labels"].items()), alert["startsAt"], resolved) for alert, resolved in batch
    )


def _failure_text(error: BaseException, timeout: float) -> str:
    """A urllib3 failure in a few words: ``timed out``, ``connection refused``, or its
    reason's first line."""
    refused = isinstance(error, urllib3.exceptions.NewConnectionError)  # a ConnectTimeoutError
    if not refused and isinstance(error, urllib3.exceptions.TimeoutError):
        return f"timed out after {timeout:g} s"
    reason = getattr(error, "reason", None) or error
    text = str(reason).strip().splitlines()[0] if str(reason).strip() else type(error).__name__
    if "refused" in text.lower():
        return "connection refused"
    return text


TEST_ALERT = "OutboxMonitorTest"
TEST_ALERT_SECONDS = 300.0
"""How long the test alert stays in Alertmanager (it ends by itself)."""


class AlertmanagerTestTransport:
    """A ``type: alertmanager`` route as the test message's transport (``outbox-monitor
    alerts test``, the Alerts page's button; ``route_check.send_test``): ``post`` sends one
    alert ``alertname=OutboxMonitorTest``, ``severity=none``, ``route=<name>`` (its summary
    the test message's text) to every URL of the route, ending after ``TEST_ALERT_SECONDS``.

    Args:
        name: the route's name.
        urls: its URLs (``route_urls``).
        timeout: each POST's total timeout, seconds.
    """

    kind = ALERTMANAGER
    supports_threads = False
    packs = True  # posts the test message whole (``post``)

    def __init__(self, name: str, urls: tuple[str, ...], *, timeout: float = TIMEOUT_SECONDS):
        self.name = name
        self.urls = urls
        self.timeout = timeout
        self._pool = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(total=timeout))

    @property
    def secrets(self) -> tuple[str, ...]:
        """The URLs' passwords: no error text may carry them."""
        found = (urllib3.util.parse_url(url).auth or "" for url in self.urls)
        return tuple(auth.partition(":")[2] for auth in found if ":" in auth)

    def describe(self) -> str:
        """``Alertmanager http://am-1:9093, http://am-2:9093`` (no credentials)."""
        return "Alertmanager " + ", ".join(shown_url(url) for url in self.urls)

    def post(self, message: Any) -> Delivery:
        """Post the test alert to every URL.

        Raises:
            DeliveryError: one URL or more refused it, each named with what went wrong
                (the others got it).
        """
        now = datetime.now(UTC)
        alert = {
            "labels": {"alertname": TEST_ALERT, "severity": "none", "route": self.name},
            "annotations": {"summary": _cut(getattr(message, "text", "") or "test")},
            "startsAt": _instant(now),
            "endsAt": _instant(now + timedelta(seconds=TEST_ALERT_SECONDS)),
            "generatorURL": dashboard_link(dashboard_base_url(), "/alerts"),
        }
        failed = [
            f"{shown_url(url)}: {error}"
            for url in self.urls
            if (error := post_alerts(self._pool, url, [alert], self.timeout)) is not None
        ]
        if failed:
            raise DeliveryError("; ".join(failed))
        return Delivery(None, None)
