"""The database-unreachable alert (issue 3 §2): posted by the former leader, resolved later.

While the database is down nothing can be written, so the notification outbox cannot carry
this alert. Each scheduler process keeps a ``DatabaseHealth``:

- every job that touches the database reports ``failed`` (``DatabaseUnavailable``) or
  ``succeeded``; after a failure the jobs back off exponentially (``BACKOFF_BASE_SECONDS``
  doubling up to the cap) instead of hammering a server that is restarting;
- a database that hangs (answers nothing; no statement timeout fires) raises nothing: the
  scheduler's hang watch (``hang_watch``) reports ``failed`` for it, the outage dated from
  the database's last answer (``since``), and calls ``tick`` while the jobs wait;
- an *outage* starts at the first failure. It remembers whether this process was the
  leader then (``was_leader``: the evaluator lease was held at the last check before a
  failing job), or had not reached the database since it started (``reached``: it started
  during the outage, so no lease can say who leads). Only such a process alerts; followers
  stay silent, so N replicas send one alert, not N;
- once the outage has lasted ``alert_after`` seconds (default: one evaluation interval,
  so a restart of a few seconds pages nobody), the former leader posts the alert
  directly through the routes' Slack transports — once per route per outage; a failed
  post is retried with backoff (429: ``Retry-After``) for as long as the outage lasts;
- at the first success after the outage, the process writes, in one transaction, the
  history (two ``alert_transitions`` rows: ``inactive→error`` at the start and
  ``error→inactive`` at the end), the posted alert as a ``sent`` notification row (with
  its Slack channel/ts, so a bot-token resolve can update it) and a ``pending``
  ``resolved`` row, dedupe key ``database-unreachable|<host:pid>|<outage id>/<route>|resolved``.
  Whichever process is leader by then delivers it with its sender. When the write fails
  (the database went away again) it is retried at the next success.

Edge cases chosen:

- The outage ended before ``alert_after``: nothing is posted and nothing is written
  (a log line only). Followers never write anything either.
- Every post failed (Slack unreachable too) until the database came back: the post is
  abandoned, no resolve is queued; the history rows still record the outage.
- The former leader dies (or is restarted) during the outage: the outage lived in its
  memory only, so no resolve is ever sent for its alert; the alert text says which
  process sent it (host:pid), and the next leader's normal alerts carry on.
- A process starts while the database is down (a node lost, a deploy; issue 29 item 13): it
  alerts after ``alert_after`` as a leader would, and resolves once the database answers
  (the resolve is queued then, and its sender delivers it when it takes the lease). Silence
  would hide the outage from the on-call; so N replicas all started during one outage send
  N alerts, each naming its host:pid and each resolved.
- Only this process lost the database (a network partition of its host): it posts the
  alert (true from where it stands: it names its host), while another replica, once
  Postgres frees the lock (TCP keepalives), takes over evaluation.
- The database flaps: each outage longer than ``alert_after`` is a new episode with its
  own id, alert and resolve. If another process became leader during a short return and
  the database goes away again, both the old and the new leader may alert (each
  resolves its own).
- The database comes back while the alert is being posted: the resolve waits for the post
  to finish, so a posted alert always gets its resolve queued.
- Slack answers too late (timeout) although it posted: the post is retried, so that alert
  may arrive twice (at-least-once, like the sender).
"""

import logging
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb

from outbox_monitor.alerts import own_runbooks
from outbox_monitor.alerts.clock import Clock, system_clock
from outbox_monitor.alerts.inhibition import own_labels
from outbox_monitor.alerts.message import dashboard_base_url, render_notifications
from outbox_monitor.alerts.outbox_scope import scope_labels, scope_payload
from outbox_monitor.alerts.slack_outcomes import DeliveryError, RateLimited
from outbox_monitor.durations import format_duration
from outbox_monitor.errors import LoginRefused
from outbox_monitor.store.db import Database
from outbox_monitor.store.db_errors import describe_target

log = logging.getLogger(__name__)

RULE_NAME = "database-unreachable"
"""The rule name of the alert (notifications, transitions, silences would see this)."""
BACKOFF_BASE_SECONDS = 1.0
BACKOFF_CAP_SECONDS = 30.0
POST_RETRY_BASE_SECONDS = 2.0
POST_RETRY_CAP_SECONDS = 60.0


@dataclass
class DirectPost:
    """An own alert's delivery to one route, straight to Slack (``post_directly``)."""

    attempts: int = 0
    next_at: float = 0.0
    channel: str | None = None
    ts: str | None = None
    posted_at: datetime | None = None
    last_error: str | None = None


@dataclass
class Outage:
    """One period in which this process could not reach the database."""

    id: str
    started_at: datetime
    started_monotonic: float
    error: str
    was_leader: bool
    posts: dict[str, DirectPost] = field(default_factory=dict)
    login_refused: bool = False
    """The last failure was the server refusing the login (``LoginRefused``): reached, but
    not let in — the message says so rather than "cannot reach"."""

    @property
    def posted(self) -> bool:
        """Whether the alert reached at least one route."""
        return any(post.posted_at is not None for post in self.posts.values())


def direct_row(
    rule: str,
    identity: str,
    *,
    episode: str,
    route: str,
    kind: str,
    summary: str,
    error: str,
    since: datetime,
    outbox: str,
) -> dict[str, Any]:
    """The notification row of one of the scheduler's own alerts posted straight to Slack
    (``kind`` ``error``) or of its resolve: rule, instance (this process, ``host:pid``),
    dedupe key ``<rule>|<host:pid>|<episode>/<route>|<kind>`` (so its ``message_key``
    differs per episode and kind), and the payload the message is rendered from (critical,
    ``error`` the line shown, ``since`` the episode's start, the alert's ``runbook`` steps
    — ``own_runbooks.steps`` —; with a fleet file the outbox; its labels ``rule``,
    ``severity``, ``monitor`` and with a fleet file ``outbox``, as an inhibition source has
    them, ``inhibition.own_labels``)."""
    payload = {
        "rule": rule,
        "instance": identity,
        "severity": "critical",
        "summary": summary,
        "metric": "database",
        "op": None,
        "threshold": None,
        "value": None,
        "unit": "seconds",
        "since": since.isoformat(),
        "labels": {**own_labels(rule, scope_labels(None, outbox)), "monitor": identity},
        "offenders": [],
        "runbook_url": None,
        "runbook": own_runbooks.steps(rule) if kind == "error" else [],
        "dashboard_path": "/",
        "kind": kind,
        "error": error,
    }
    return {
        "dedupe_key": f"{rule}|{identity}|{episode}/{route}|{kind}",
        "rule": rule,
        "instance": identity,
        "kind": kind,
        "route": route,
        "payload": scope_payload(payload, outbox),
    }


def post_directly(
    transports: Mapping[str, Any] | None,
    ruleset: Any,
    name: str,
    post: DirectPost,
    row: Mapping[str, Any],
    *,
    clock: Clock,
) -> None:
    """Post ``row`` (``direct_row``) to route ``name`` straight to Slack, recording the
    outcome in ``post``: posted (time, channel, ts), or the next try — a 429 after its
    ``Retry-After``, another failure with a backoff doubling from ``POST_RETRY_BASE_SECONDS``
    up to ``POST_RETRY_CAP_SECONDS`` (logged as a WARNING). A route without a transport is
    never tried. Never raises (a transport bug is logged with its traceback)."""
    transport = transports.get(name) if transports else None
    if transport is None:
        post.next_at = float("inf")
        return
    what = f"{row['rule']} {'resolve' if row['kind'] == 'resolved' else 'alert'}"
    post.attempts += 1
    try:
        message = render_notifications(
            [row],
            mention=getattr(ruleset.routes[name], "mention", None),
            dashboard_url=dashboard_base_url(),
            now=clock(),
            route=name,
        )
        delivery = transport.post(message)
    except RateLimited as error:
        post.last_error = str(error)
        post.next_at = time.monotonic() + max(error.retry_after_seconds, 1.0)
    except DeliveryError as error:
        post.last_error = str(error)
        delay = POST_RETRY_BASE_SECONDS * 2 ** min(post.attempts - 1, 16)
        post.next_at = time.monotonic() + min(POST_RETRY_CAP_SECONDS, delay)
        log.warning("%s to route %s failed: %s", what, name, error)
    except Exception as error:  # a transport bug must not kill the scheduler's job
        post.last_error = f"{type(error).__name__}: {error}"
        post.next_at = time.monotonic() + POST_RETRY_CAP_SECONDS
        log.exception("%s to route %s failed", what, name)
    else:
        post.posted_at = clock()
        post.channel, post.ts = delivery.channel, delivery.ts
        log.warning("posted the %s to route %s", what, name)


class DatabaseHealth:
    """Backoff between database attempts and the database-unreachable alert of one process.

    Thread-safe: the scheduler's jobs share one object.

    Args:
        db: the connector (for describing the target and writing the resolve).
        identity: this process (``host:pid``), named in the alert.
        ruleset: the rules (its routes receive the alert); ``None``: never alert.
        transports: ``{route: transport}`` (B's ``slack`` transports); ``None``: never alert.
        clock: the injectable clock (alert times).
        alert_after: seconds of outage before the former leader posts.
        backoff_cap: the longest wait between database attempts (seconds).
    """

    def __init__(
        self,
        db: Database,
        *,
        identity: str,
        ruleset: Any = None,
        transports: Mapping[str, Any] | None = None,
        clock: Clock = system_clock,
        alert_after: float = 30.0,
        backoff_cap: float = BACKOFF_CAP_SECONDS,
    ) -> None:
        self.db = db
        self.identity = identity
        self.ruleset = ruleset
        self.transports = transports
        self.clock = clock
        self.alert_after = alert_after
        self.backoff_cap = max(BACKOFF_BASE_SECONDS, backoff_cap)
        self.outage: Outage | None = None
        self.reached = False
        """Whether a job has reached the database since this process started."""
        self._failures = 0
        self._next_try = 0.0
        self._lock = threading.RLock()
        self._posting = threading.Lock()

    # ------------------------------------------------------------ job reports

    def due(self) -> bool:
        """Whether a database job may run now (``False`` while backing off)."""
        with self._lock:
            return time.monotonic() >= self._next_try

    def failed(self, error: BaseException, *, was_leader: bool, since: float | None = None) -> None:
        """A job could not reach the database: start (or extend) the outage, back off.

        Args:
            error: the ``DatabaseUnavailable`` (its first line goes into the alert).
            was_leader: this process held the evaluator lease before the failing job; a
                process that never reached the database counts as the leader (``reached``).
            since: when a new outage began (``time.monotonic()`` seconds; default now): the
                hang watch finds a database that gives no answer only after its threshold,
                so its outage starts at the last answer (``hang_watch``).
        """
        with self._lock:
            now = time.monotonic()
            message = (str(error).strip().splitlines() or [type(error).__name__])[0]
            login_refused = isinstance(error, LoginRefused)
            was_leader = was_leader or not self.reached
            if self.outage is None:
                began = now if since is None else min(now, since)
                self.outage = Outage(
                    id=str(uuid.uuid4()),
                    started_at=self.clock() - timedelta(seconds=now - began),
                    started_monotonic=began,
                    error=message,
                    was_leader=was_leader,
                    login_refused=login_refused,
                )
                log.warning(
                    "%s (%s); %s",
                    "database refuses the login" if login_refused else "database unreachable",
                    message,
                    f"this process {'was the leader' if self.reached else 'started in it'} and "
                    f"alerts after {format_duration(self.alert_after)}"
                    if was_leader
                    else "this process was not the leader: the leader alerts",
                )
            else:
                self.outage.was_leader = self.outage.was_leader or was_leader
                self.outage.error = message
                self.outage.login_refused = login_refused
            self._failures += 1
            delay = min(self.backoff_cap, BACKOFF_BASE_SECONDS * 2 ** min(self._failures - 1, 16))
            self._next_try = now + delay

    def succeeded(self) -> None:
        """A job reached the database: end the backoff and, if there was an outage,
        record it and queue its resolve (see the module docstring)."""
        with self._lock:
            self._failures = 0
            self._next_try = 0.0
            self.reached = True
            if self.outage is None:
                return
        # a post in flight finishes first, so that its resolve is queued too; the state lock
        # is not held over the write, which may wait on the database: the hang watch's
        # failed() must never wait behind it
        with self._posting:
            with self._lock:
                outage = self.outage
            if outage is None:
                return
            try:
                self._record_end(outage)
            except Exception as error:  # retried at the next success
                log.warning("could not record the end of the database outage yet: %s", error)
                return
            with self._lock:
                if self.outage is outage:
                    self.outage = None

    def tick(self) -> None:
        """Post the alert when this process was the leader and the outage has lasted
        ``alert_after``; retry failed posts with backoff. Cheap when there is nothing to do;
        never raises. Slack is called outside the state lock, one tick at a time."""
        with self._lock:
            outage = self.outage
            if outage is None or not outage.was_leader or not self.ruleset or not self.transports:
                return
            now = time.monotonic()
            if now - outage.started_monotonic < self.alert_after:
                return
            due = []
            for name in self.ruleset.message_routes:
                post = outage.posts.setdefault(name, DirectPost())
                if post.posted_at is None and now >= post.next_at:
                    due.append((name, post))
        if not due or not self._posting.acquire(blocking=False):
            return
        try:
            for name, post in due:
                self._post(outage, name, post)
        finally:
            self._posting.release()

    def firing_sources(self) -> list[tuple[str, str]]:
        """The alert as a source that may inhibit others (``alerts.inhibition``):
        ``[("database-unreachable", host:pid)]`` while this process alerts an outage (it
        was the leader and the outage has lasted ``alert_after``), else ``[]``."""
        with self._lock:
            outage = self.outage
            alerting = (
                outage is not None
                and outage.was_leader
                and time.monotonic() - outage.started_monotonic >= self.alert_after
            )
        return [(RULE_NAME, self.identity)] if alerting else []

    # --------------------------------------------------------------- private

    def _row(self, outage: Outage, route: str, kind: str) -> dict[str, Any]:
        """The notification row of the alert (``kind`` error) or its resolve, for one route.

        The instance is this process (``host:pid``); the dedupe key's episode part is the
        outage id and the route: ``database-unreachable|host:pid|<outage id>/<route>|kind``.
        """
        target = describe_target(self.db.settings.dsn)
        since = outage.started_at.strftime("%Y-%m-%d %H:%M:%S UTC")
        if kind == "resolved":
            summary = f"outbox-monitor reaches the database {target} again"
        else:
            summary = (
                f"Since {since} alert evaluation and sending are stopped; a resolve follows "
                f"when the database is back. Last error: {outage.error}"
            )
        row = direct_row(
            RULE_NAME,
            self.identity,
            episode=outage.id,
            route=route,
            kind=kind,
            summary=summary,
            error=f"the database {target} refuses outbox-monitor's login: check its user and "
            "password"
            if outage.login_refused
            else f"outbox-monitor cannot reach the database {target}",
            since=outage.started_at,
            outbox=self.db.alert_outbox,
        )
        row["payload"]["outage_id"] = outage.id
        return row

    def _post(self, outage: Outage, name: str, post: DirectPost) -> None:
        post_directly(
            self.transports,
            self.ruleset,
            name,
            post,
            self._row(outage, name, "error"),
            clock=self.clock,
        )

    def _record_end(self, outage: Outage) -> None:
        ended = self.clock()
        lasted = time.monotonic() - outage.started_monotonic
        if not outage.was_leader or (lasted < self.alert_after and not outage.posted):
            log.info("database reachable again after %s", format_duration(lasted))
            return
        with self.db.transaction() as conn:
            instance = self.identity
            detail = (
                f"database unreachable for {format_duration(lasted)} from {self.identity}: "
                f"{outage.error}; "
                + ("alert posted" if outage.posted else "alert not delivered (Slack failed too)")
            )
            for from_state, to_state, at in (
                ("inactive", "error", outage.started_at),
                ("error", "inactive", ended),
            ):
                conn.execute(
                    self.db.compose("alert_transition_insert"),
                    {
                        "outbox": self.db.alert_outbox,
                        "rule": RULE_NAME,
                        "instance": instance,
                        "from_state": from_state,
                        "to_state": to_state,
                        "value": lasted,
                        "at": at,
                        "detail": detail,
                    },
                )
            for name, post in outage.posts.items():
                if post.posted_at is None:
                    continue
                sent = self._row(outage, name, "error")
                conn.execute(
                    self.db.compose("notification_record_sent"),
                    {
                        **sent,
                        "outbox": self.db.alert_outbox,
                        "payload": Jsonb(sent["payload"]),
                        "attempts": post.attempts,
                        "created_at": outage.started_at,
                        "sent_at": post.posted_at,
                        "slack_channel": post.channel,
                        "slack_ts": post.ts,
                    },
                )
                resolve = self._row(outage, name, "resolved")
                resolve["payload"]["resolved_at"] = ended.isoformat()
                conn.execute(
                    self.db.compose("notification_insert"),
                    {
                        **resolve,
                        "outbox": self.db.alert_outbox,
                        "payload": Jsonb(resolve["payload"]),
                        "evaluation_id": None,
                        "silenced": False,
                        "status": "pending",
                        "now": ended,
                    },
                )
        log.warning(
            "database reachable again after %s; %s",
            format_duration(lasted),
            "queued the resolve of the unreachable alert"
            if outage.posted
            else "no alert had been delivered",
        )
