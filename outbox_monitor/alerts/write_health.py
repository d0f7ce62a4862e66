"""The writes-failing alert (issue 29 item 7): the leader's writes fail while reads work.

A database that answers reads but refuses writes — a full disk (SQLSTATE 53100), another
resource exhausted (class 53), an I/O error (class 58), a server turned read-only
(25006) — stops everything the leader writes: samples, alert state and transitions,
notifications, the lease's stamp. It is not unreachable, so ``alerts.outage`` stays quiet,
and the notification outbox cannot carry an alert it cannot write. Each scheduler process
keeps a ``WriteHealth``:

- every job reports its outcome (``jobs.JobRuntime``): a job whose last run failed on a
  write (``is_write_failure``) is *failing*; its next successful run clears it. An
  *episode* starts when the first job fails so and ends when none is failing any more;
- like the database-unreachable alert, only the process that was the leader when the
  episode started alerts (N replicas send one message), straight through the routes' Slack
  transports (``outage.post_directly``), once per route, after ``alert_after`` seconds
  (``FAILED_INTERVALS`` evaluation intervals), retried with backoff while the episode lasts;
- its resolve is posted the same way, once per route that got the alert, when the writes
  succeed again; an episode that ended before ``alert_after`` posts nothing;
- while the database is unreachable (``DatabaseHealth.outage``) it posts nothing: that
  alert says more;
- while the episode is alerted, the leader's lease connection is marked
  (``Leadership.mark_writes_failing``: its ``application_name`` becomes
  ``WRITES_FAILING_APPLICATION``, a session setting that needs no write), so the dashboard
  shows a banner (``ui/alert_rules.show_writes_failing``) from ``pg_stat_activity``;
  ``/metrics`` shows ``outbox_monitor_writes_failing`` and ``/healthz`` its ``writes``.

Each message's key (``message_key``) names the episode, so its repeat (a process killed while
posting) can be dropped and its resolve never is.
"""

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from outbox_monitor.alerts.clock import Clock, system_clock
from outbox_monitor.alerts.leader import WRITES_FAILING_APPLICATION
from outbox_monitor.alerts.outage import DatabaseHealth, DirectPost, direct_row, post_directly
from outbox_monitor.durations import format_duration
from outbox_monitor.errors import ReadOnlyDatabase
from outbox_monitor.store.db import Database
from outbox_monitor.store.db_errors import describe_target

log = logging.getLogger(__name__)

RULE_NAME = "writes-failing"
"""The rule name of the alert (its messages and their keys)."""
FAILED_INTERVALS = 3
"""The alert is posted once writes have failed for this many evaluation intervals."""
WRITE_FAILURE_CLASSES = ("53", "58")
"""SQLSTATE classes of a refused write: insufficient resources (``53100`` disk full,
``53200`` out of memory, ``53400`` configuration limit), system errors (``58030`` I/O)."""
NOT_WRITE_FAILURES = frozenset({"53300"})
"""``too_many_connections`` refuses the connection itself, reads too: not a write failure."""


def is_write_failure(error: BaseException) -> bool:
    """Whether ``error`` (or what it was raised from) is a write the database refused while
    it still answers: SQLSTATE class 53 or 58 (not ``53300``), or a read-only server
    (``ReadOnlyDatabase``, 25006)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ReadOnlyDatabase):
            return True
        if isinstance(seen, psycopg.Error) and seen.sqlstate:
            state = seen.sqlstate
            return state.startswith(WRITE_FAILURE_CLASSES) and state not in NOT_WRITE_FAILURES
        seen = seen.__cause__
    return False


@dataclass
class WriteEpisode:
    """One period in which some job of this process could not write."""

    id: str
    started_at: datetime
    started_monotonic: float
    error: str
    was_leader: bool
    ended_at: datetime | None = None
    marked: bool = False
    alerts: dict[str, DirectPost] = field(default_factory=dict)
    resolves: dict[str, DirectPost] = field(default_factory=dict)

    @property
    def alerted(self) -> bool:
        """Whether the alert reached at least one route."""
        return any(post.posted_at is not None for post in self.alerts.values())


class WriteHealth:
    """The writes-failing alert of one process (see the module docstring). Thread-safe.

    Args:
        db: the Database of the writes (for the target named in the alert, the outbox).
        identity: this process (``host:pid``), named in the alert.
        ruleset: the rules (its routes receive the alert); ``None``: never alert.
        transports: ``{route: transport}``; ``None``: never alert.
        database: this process's ``DatabaseHealth`` (quiet during its outage).
        alert_after: seconds of failing writes before the former leader posts
            (``FAILED_INTERVALS`` evaluation intervals).
        mark: called with ``True`` when the alert is posted and ``False`` when it
            resolves (``Leadership.mark_writes_failing``); ``None``: nothing marked.
        clock: the injectable clock (alert times).
    """

    def __init__(
        self,
        db: Database,
        *,
        identity: str,
        ruleset: Any,
        transports: Mapping[str, Any] | None,
        database: DatabaseHealth,
        alert_after: float,
        mark: Callable[[bool], None] | None = None,
        clock: Clock = system_clock,
    ) -> None:
        self.db = db
        self.identity = identity
        self.ruleset = ruleset
        self.transports = transports
        self.database = database
        self.alert_after = alert_after
        self.mark = mark
        self.clock = clock
        self.episode: WriteEpisode | None = None
        self._failing: dict[str, str] = {}
        self._lock = threading.Lock()
        self._posting = threading.Lock()

    # ------------------------------------------------------------ job reports

    def failed(self, job: str, error: BaseException, *, was_leader: bool) -> None:
        """``job``'s run failed on a write (``is_write_failure``): start or extend the
        episode. ``was_leader``: this process held the lease before the run."""
        message = (str(error).strip().splitlines() or [type(error).__name__])[0]
        with self._lock:
            self._failing[job] = message
            episode = self.episode
            if episode is not None and episode.ended_at is not None:
                # failing again before the resolve was posted: the alert stays open
                log.warning("writes fail again before the resolve of %s was posted", RULE_NAME)
                episode.ended_at = None
            if episode is None:
                self.episode = WriteEpisode(
                    id=str(uuid.uuid4()),
                    started_at=self.clock(),
                    started_monotonic=time.monotonic(),
                    error=message,
                    was_leader=was_leader,
                )
                log.error(
                    "writes to %s fail (%s: %s); %s",
                    describe_target(self.db.settings.dsn),
                    job,
                    message,
                    "this process was the leader and alerts after "
                    f"{format_duration(self.alert_after)}"
                    if was_leader
                    else "this process was not the leader: the leader alerts",
                )
            else:
                episode.error = message
                episode.was_leader = episode.was_leader or was_leader

    def succeeded(self, job: str, *, proves_writes: bool = False) -> None:
        """``job``'s run succeeded: it is no longer failing; with ``proves_writes`` (a job
        that writes on every run: the evaluator) no job is. The episode ends when no job is
        failing."""
        with self._lock:
            if proves_writes:
                self._failing.clear()
            elif self._failing.pop(job, None) is None or self._failing:
                return
            episode = self.episode
            if episode is None or episode.ended_at is not None:
                return
            episode.ended_at = self.clock()
            lasted = time.monotonic() - episode.started_monotonic
            log.warning(
                "writes to %s succeed again after %s%s",
                describe_target(self.db.settings.dsn),
                format_duration(lasted),
                "; posting the resolve" if episode.alerted else "",
            )
            if not episode.alerted:
                self.episode = None

    @property
    def in_episode(self) -> bool:
        """Whether writes fail, or their resolve is still to be posted: the stall watch
        restarts its count meanwhile (this alert says why nothing is evaluated)."""
        with self._lock:
            return self.episode is not None

    @property
    def failing_since(self) -> datetime | None:
        """When the current episode began (``None``: writes succeed)."""
        with self._lock:
            episode = self.episode
            return None if episode is None or episode.ended_at is not None else episode.started_at

    @property
    def last_error(self) -> str | None:
        """The first line of the current episode's last write failure (``None``: none)."""
        with self._lock:
            episode = self.episode
            return None if episode is None or episode.ended_at is not None else episode.error

    def tick(self) -> None:
        """Post the alert when due (this process was the leader, ``alert_after`` passed,
        the database is not unreachable), or the resolve once the writes succeed again;
        retry failed posts with backoff. Cheap when there is nothing to do; never raises.
        Slack is called outside the state lock, one tick at a time."""
        with self._lock:
            episode = self.episode
            if episode is None or not episode.was_leader or not self.ruleset or not self.transports:
                return
            now = time.monotonic()
            ended = episode.ended_at is not None
            if not ended and (
                now - episode.started_monotonic < self.alert_after
                or self.database.outage is not None
            ):
                return
        if not self._posting.acquire(blocking=False):
            return
        try:
            if ended:
                self._post_resolves(episode)
            else:
                self._post_alerts(episode)
        finally:
            self._posting.release()

    # --------------------------------------------------------------- private

    def _row(self, episode: WriteEpisode, route: str, kind: str) -> dict[str, Any]:
        target = describe_target(self.db.settings.dsn)
        since = episode.started_at.strftime("%Y-%m-%d %H:%M:%S UTC")
        if kind == "resolved":
            lasted = (episode.ended_at or self.clock()) - episode.started_at
            summary = (
                f"outbox-monitor writes to {target} again (they failed for "
                f"{format_duration(lasted.total_seconds())})"
            )
        else:
            summary = (
                f"Since {since} the leader cannot write to {target}: samples, alert state "
                "and notifications are not stored and alerts are not sent. Reads still work. "
                f"Last error: {episode.error}"
            )
        return direct_row(
            RULE_NAME,
            self.identity,
            episode=episode.id,
            route=route,
            kind=kind,
            summary=summary,
            error=f"outbox-monitor cannot write to the database {target}: {episode.error}",
            since=episode.started_at,
            outbox=self.db.alert_outbox,
        )

    def _post_due(
        self, episode: WriteEpisode, posts: dict[str, DirectPost], routes: list[str], kind: str
    ) -> None:
        """Post ``kind`` (``error``: the alert, ``resolved``) to each of ``routes`` not yet
        posted whose next try is due, recording each outcome in ``posts``."""
        now = time.monotonic()
        for name in routes:
            post = posts.setdefault(name, DirectPost())
            if post.posted_at is None and now >= post.next_at:
                post_directly(
                    self.transports,
                    self.ruleset,
                    name,
                    post,
                    self._row(episode, name, kind),
                    clock=self.clock,
                )

    def _post_alerts(self, episode: WriteEpisode) -> None:
        self._post_due(episode, episode.alerts, self.ruleset.message_routes, "error")
        if episode.alerted and not episode.marked and self.mark is not None:
            self.mark(True)
            episode.marked = True

    def _post_resolves(self, episode: WriteEpisode) -> None:
        alerted = [name for name, post in episode.alerts.items() if post.posted_at is not None]
        self._post_due(episode, episode.resolves, alerted, "resolved")
        if all(episode.resolves[name].posted_at is not None for name in alerted):
            if episode.marked and self.mark is not None:
                self.mark(False)
            with self._lock:
                if self.episode is episode:
                    self.episode = None


@dataclass(frozen=True)
class WritesFailing:
    """What the dashboard sees of schedulers whose writes fail: how many lease connections
    of this database are marked (``Leadership.mark_writes_failing``) and the oldest one's
    session start (aware, database clock)."""

    processes: int
    since: datetime | None


def read_writes_failing(db: Database) -> WritesFailing:
    """The schedulers of ``db``'s database marked as failing to write, from
    ``pg_stat_activity`` (any login sees another's ``application_name``); a read only.

    Raises:
        DatabaseUnavailable and the connector's errors.
    """
    row = db.fetch_one("scheduler_writes_failing", {"name": WRITES_FAILING_APPLICATION})
    return WritesFailing(int(row["processes"]), row["since"]) if row else WritesFailing(0, None)


def describe_writes_failing(reading: WritesFailing) -> str | None:
    """The dashboard's banner text while a scheduler's writes fail, else ``None``."""
    if reading.processes == 0:
        return None
    return (
        f"{reading.processes} scheduler process(es) cannot write to this database (a full "
        "disk, a read-only server, an I/O error): samples, alert state and notifications are "
        "not stored, and alerts are not sent but one message straight to Slack. Reads — "
        "this page — still work. See the scheduler's log and /healthz."
    )
