"""What is wrong (issue 30 item 2): one line per troubled event type, from evidence the
product already gathers — its waiting and retrying rows with the biggest retry error group's
text, since when, its flow control, its trend — and the **likely cause**, with the evidence one
click away. The Overview's headline (``ui/headline.py``), the Slack message of an alert about
one event type (``alerts/notification_queue.py`` stores the line, ``alerts/message.py`` opens
the message with it) and the Fleet page's row (``figures/fleet_figures.py``) all show the
``Line`` that ``diagnose`` builds here.

**Troubled** (``troubled``): an event type is listed only on evidence over a stated
threshold, so that calm traffic — a transient retry, an e-mail bounce, a crashed worker's
stuck lock that the ``stuck-lock`` alert already reports — lists nothing:

- a firing alert names it (the rule's own threshold);
- its oldest pending row is older than the oldest-pending SLO (the Overview's tile
  threshold, SPEC §3 ``notifications-late``: 5 min by default);
- it has at least ``RETRYING_MIN_ROWS`` retrying rows (SPEC §2), and they are at least
  ``MIN_TRAFFIC_SHARE`` of its rows created in the window;
- it has at least ``DEAD_LETTERS_MIN_ROWS`` dead letters in the window, and they are at least
  ``MIN_TRAFFIC_SHARE`` of its rows created in the window;
- a pause, a limit or an open (or half-open) circuit breaker holds its due rows (SPEC §5);
- the workers are down for it: it has due rows no control holds and no claim, outcome or retry
  was seen for ``WORKERS_DOWN_SECONDS``.

Stuck locks alone do not list a type (a crashed worker's batch, reported by the ``stuck-lock``
alert and the Workers page); a listed type's line says them.

**Likely cause** (``CAUSES``), the first that fits, in this order:

1. ``held by flow control`` — a pause holds its due rows (an operator's intent beats
   every other reading);
2. ``workers down`` — it has due rows no control holds and no claim, outcome or retry was
   seen for ``WORKERS_DOWN_SECONDS`` (``workers.Liveness.no_claim_while_due``);
3. ``downstream failing`` — its retrying rows are over the thresholds above (or a breaker is
   open on it) and one retry error group holds at least ``DOMINANT_SHARE`` of them
   (``error_grouping.retry_error_groups``);
4. ``poison event`` — its dead letters in the window are over the thresholds above and one
   error group holds at least ``DOMINANT_SHARE`` of them (``error_grouping.error_groups``);
5. ``held by flow control`` — an open breaker or a limit holds its due rows;
6. ``claim degraded`` — it has due rows and the newest recorded claim plan is degraded
   (``health.claim_plan.recorded_degradation``);
7. ``vacuum blocked`` — it has due rows or an old pending row and the xmin horizon has been
   held for ``HORIZON_HELD_SECONDS`` (the caller's SLO) or more (``health.horizon``);
8. ``cause unknown``.

``diagnose`` is pure (the ``Evidence`` given); ``read_evidence`` reads it for the surfaces
without the dashboard's caches (Slack, the Fleet page, the tests).
"""

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from outbox_monitor.durations import clock_label, duration_label, format_duration
from outbox_monitor.errors import SchemaNotInitialised
from outbox_monitor.figures import by_event_type, error_grouping, metrics
from outbox_monitor.figures.forecast import DEFAULT_LOOKBACK_SECONDS, SeriesTrend
from outbox_monitor.figures.workers import liveness
from outbox_monitor.flow.controls import Control, controls
from outbox_monitor.flow.event_types import EventTypeFlow
from outbox_monitor.flow.held import OPEN_STATES, held_by
from outbox_monitor.flow.model import matches
from outbox_monitor.health.claim_plan import recorded_degradation
from outbox_monitor.health.horizon import horizon
from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import ExactEventType
from outbox_monitor.units import OTHER, per_minute

WORKERS_DOWN_SECONDS = 10 * 60.0
"""No claim, outcome or retry for this long while rows are due: the workers are down (the
shipped ``no-claim-while-due`` rule's threshold)."""
RETRYING_MIN_ROWS = 10
"""Retrying rows (SPEC §2) an event type needs at least to be troubled by them (and to read
``downstream failing`` without an open breaker): fewer are a transient retry or two."""
DEAD_LETTERS_MIN_ROWS = 10
"""Dead letters in the window an event type needs at least to be troubled by them (and to read
``poison event``); a rule (``payment-failed``: any) lists a type on fewer by firing."""
MIN_TRAFFIC_SHARE = 0.05
"""The share at least of an event type's rows created in the window (``created_in_window`` of
``by_event_type.measure``) that its retrying rows, or its dead letters in the window, must be
to trouble it: calm traffic retries well under 1 % of it (the demo's 4 % of failed attempts
wait 30 s to 2 min, a fraction of an hour's rows) and dead-letters a steady 1–2 % (bounced
e-mails); an outage retries every new row, a poison event dead-letters them."""
DOMINANT_SHARE = 0.5
"""One error group holding at least this share of a type's retrying rows (or dead letters)
names the cause."""
OLDEST_PENDING_SLO_SECONDS = 5 * 60.0
"""The oldest-pending SLO when the caller has none (SPEC §3 ``notifications-late``)."""
HORIZON_HELD_SECONDS = 10 * 60.0
"""The xmin horizon held this long blocks vacuum (the shipped ``xmin-horizon-held`` rule)."""
STEADY_PER_MINUTE = 0.005
"""A trend under this many rows per minute either way is said "steady"."""
MAX_ERROR_CHARS = 120
"""A retry or dead-letter error is quoted up to this many characters."""

CAUSES = (
    "workers down",
    "downstream failing",
    "poison event",
    "held by flow control",
    "claim degraded",
    "vacuum blocked",
    "cause unknown",
)
"""Every likely cause a line may name."""
UNKNOWN = CAUSES[-1]
EVIDENCE_PAGES = {
    "workers down": "workers",
    "claim degraded": "health",
    "vacuum blocked": "health",
}
"""The page of a table-wide cause's evidence (a type's causes link pages filtered on it)."""


@dataclass(frozen=True)
class Part:
    """A piece of a line: ``text``, the dashboard ``path`` it links to (relative, e.g.
    ``controls?event_type=order.paid``; ``None``: plain) and its ``kind``: ``"event_type"``
    (shown as code), ``"error"`` (an error's text, emphasised) or ``"text"``."""

    text: str
    path: str | None = None
    kind: str = "text"


@dataclass(frozen=True)
class Line:
    """One troubled event type's line: its ``parts`` in order (``text`` joins them), its
    likely ``cause`` (one of ``CAUSES``) and ``since`` (the earliest sign of its trouble,
    ``None`` when none has a time)."""

    event_type: str
    cause: str
    parts: tuple[Part, ...]
    since: datetime | None = None

    @property
    def text(self) -> str:
        """The line as plain text: ``"order.paid — 704 waiting, 23 retrying with “HTTP 503
        from erp” since 15:55 UTC (12m 0s), breaker open, growing 72.0/min; likely cause:
        downstream failing (one error for 23 of 23 retrying rows) → Controls · Events"``."""
        return "".join(part.text for part in self.parts)

    def as_payload(self) -> list[dict[str, Any]]:
        """JSON-safe parts for a notification's payload: ``[{"text", "path", "kind"}]``."""
        return [{"text": p.text, "path": p.path, "kind": p.kind} for p in self.parts]


@dataclass(frozen=True)
class Evidence:
    """What a diagnosis is made from, read by ``read_evidence`` or from the dashboard's
    cached reads.

    Attributes:
        now: the database clock.
        window_seconds: the window of ``failed_in_window``.
        rows: ``by_event_type.measure`` rows (``other`` is ignored).
        flows: ``flow.event_types.event_type_flows`` by event type.
        controls: ``flow.controls.controls`` (breakers' and pauses' times).
        trends: event type → its queue-depth ``SeriesTrend`` (``by_event_type.depth_trends``:
            the one trend the Overview says everywhere).
        workers: ``workers.Liveness.as_json()`` (``due_rows``,
            ``no_claim_while_due_seconds``).
        horizon_age: seconds the xmin horizon has been held (0: nothing holds it).
        horizon_holder: the longest holder's summary, or ``None``.
        claim: the newest recorded claim plan's degradation in words, or ``None``.
        firing: event type → the earliest ``firing_since`` of firing alerts naming it.
        retry_groups: event type → its ``error_grouping.retry_error_groups`` rows.
        error_groups: event type → its ``error_grouping.error_groups`` rows.
        oldest_pending_slo: seconds (the oldest-pending SLO).
        horizon_held: seconds the xmin horizon may be held before vacuum counts as blocked.
    """

    now: datetime
    window_seconds: float
    rows: Sequence[Mapping[str, Any]]
    flows: Mapping[str, EventTypeFlow]
    controls: Sequence[Control]
    trends: Mapping[str, SeriesTrend]
    workers: Mapping[str, Any]
    horizon_age: float = 0.0
    horizon_holder: str | None = None
    claim: str | None = None
    firing: Mapping[str, datetime | None] | None = None
    retry_groups: Mapping[str, Sequence[Mapping[str, Any]]] | None = None
    error_groups: Mapping[str, Sequence[Mapping[str, Any]]] | None = None
    oldest_pending_slo: float = OLDEST_PENDING_SLO_SECONDS
    horizon_held: float = HORIZON_HELD_SECONDS


@dataclass(frozen=True)
class Diagnosis:
    """``lines``: one per troubled event type, in the table's order (most troubled first);
    ``nothing_wrong``: the one line said when there is none."""

    lines: tuple[Line, ...]
    nothing_wrong: str

    @property
    def summary(self) -> str:
        """The first line (``"… (+2 more event types)"`` when there are more), or
        ``nothing_wrong``."""
        if not self.lines:
            return self.nothing_wrong
        more = len(self.lines) - 1
        tail = f" (+{more} more event type{'s' if more > 1 else ''})" if more else ""
        return self.lines[0].text + tail


def firing_since_by_type(instances: Iterable[Mapping[str, Any]]) -> dict[str, datetime | None]:
    """The event types firing alert instances name (their ``labels``' ``event_type``: a
    ``by: [event_type]`` rule), each with the earliest ``firing_since``.

    Args:
        instances: ``alerts.state.list_instances`` rows (``state``, ``labels``,
            ``firing_since``).
    """
    found: dict[str, datetime | None] = {}
    for instance in instances:
        name = (instance.get("labels") or {}).get("event_type")
        if instance.get("state") != "firing" or not name:
            continue
        since = instance.get("firing_since")
        known = [t for t in (found.get(name), since) if t is not None]
        found[name] = min(known) if known else None
    return found


def _held(flow: EventTypeFlow | None) -> bool:
    return flow is not None and (flow.held > 0 or flow.state.startswith("breaker"))


def _over(count: int, row: Mapping[str, Any], minimum: int, share: float) -> bool:
    return count >= minimum and count >= share * row.get("created_in_window", 0)


def retrying_over(row: Mapping[str, Any]) -> bool:
    """Whether a type's retrying rows are over ``RETRYING_MIN_ROWS`` and
    ``MIN_TRAFFIC_SHARE`` of its rows created in the window (``row``: a
    ``by_event_type.measure`` row)."""
    return _over(int(row.get("retrying", 0)), row, RETRYING_MIN_ROWS, MIN_TRAFFIC_SHARE)


def dead_letters_over(row: Mapping[str, Any]) -> bool:
    """Whether a type's dead letters in the window are over ``DEAD_LETTERS_MIN_ROWS`` and
    ``MIN_TRAFFIC_SHARE`` of its rows created in the window."""
    count = int(row["failed_in_window"])
    return _over(count, row, DEAD_LETTERS_MIN_ROWS, MIN_TRAFFIC_SHARE)


def _workers_down(
    row: Mapping[str, Any], flow: EventTypeFlow | None, workers: Mapping[str, Any]
) -> bool:
    silent = float(workers.get("no_claim_while_due_seconds") or 0.0)
    held = flow.held if flow is not None else 0
    return row["queue_depth"] > held and silent >= WORKERS_DOWN_SECONDS


def troubled(
    rows: Sequence[Mapping[str, Any]],
    flows: Mapping[str, EventTypeFlow],
    firing: Collection[str],
    *,
    workers: Mapping[str, Any] | None = None,
    oldest_pending_slo: float = OLDEST_PENDING_SLO_SECONDS,
) -> list[Mapping[str, Any]]:
    """The rows of troubled event types (the module's definition, its thresholds), in the
    rows' order.

    Args:
        rows: ``by_event_type.measure`` rows; ``other`` is never troubled (no one type).
        flows: ``event_type_flows`` by event type.
        firing: event types a firing alert names.
        workers: ``workers.Liveness.as_json()`` (``None``: the workers' liveness unknown).
        oldest_pending_slo: seconds.
    """
    return [
        row
        for row in rows
        if row["event_type"] != OTHER
        and (
            row["event_type"] in firing
            or retrying_over(row)
            or dead_letters_over(row)
            or _held(flows.get(row["event_type"]))
            or _workers_down(row, flows.get(row["event_type"]), workers or {})
            or (row["oldest_pending_age"] or 0.0) > oldest_pending_slo
        )
    ]


def path(page: str, **params: str | None) -> str:
    """A relative dashboard path: ``path("controls", event_type="a.b")`` →
    ``controls?event_type=a.b`` (values URL-encoded)."""
    query = urlencode({k: v for k, v in params.items() if v is not None})
    return f"{page}?{query}" if query else page


def _rows(count: int, noun: str) -> str:
    """``"1 due row"``, ``"2 due rows"``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _quoted(text: object) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= MAX_ERROR_CHARS else flat[: MAX_ERROR_CHARS - 1] + "…"


def _when(since: datetime, now: datetime) -> str:
    """``"15:55 UTC (12m 0s)"``; another day than ``now``'s: ``"2026-12-01 15:55 UTC (…)"``."""
    elapsed = format_duration(max(0.0, (now - since).total_seconds()))
    return f"{clock_label(since, now)} ({elapsed})"


def _dominant(groups: Sequence[Mapping[str, Any]], count: str, total: int) -> Mapping | None:
    biggest = max(groups, key=lambda g: g[count], default=None)
    if biggest is None or total <= 0 or biggest[count] < DOMINANT_SHARE * total:
        return None
    return biggest


def _controls_of(found: Sequence[Control], event_type: str) -> list[Control]:
    return [c for c in found if matches(c.event_type_filter, event_type)]


def line(row: Mapping[str, Any], evidence: Evidence) -> Line:
    """The line of one troubled event type (``troubled``'s row) from ``evidence``."""
    name, now = row["event_type"], evidence.now
    window = duration_label(evidence.window_seconds)
    flow = evidence.flows.get(name)
    matching = _controls_of(evidence.controls, name)
    retry_groups = (evidence.retry_groups or {}).get(name, ())
    error_groups = (evidence.error_groups or {}).get(name, ())
    retrying, failed = int(row.get("retrying", 0)), int(row["failed_in_window"])
    events = path("events", event_type=name)
    pending = path("events", event_type=name, status="pending")
    controls_path = path("controls", event_type=name)
    # the groups are one snapshot, the table's count another (read apart, or cached apart):
    # their share is of the larger, so that it never reads "4 of 3"
    retry_total = max(retrying, sum(g["retrying"] for g in retry_groups))
    retry_group = _dominant(retry_groups, "retrying", retry_total)
    biggest_retry = max(retry_groups, key=lambda g: g["retrying"], default=None)
    recent = [
        g for g in error_groups if (now - g["last_seen"]).total_seconds() <= evidence.window_seconds
    ]
    poison = (
        _dominant(recent, "failed", int(error_groups[0]["failed_total"])) if error_groups else None
    )
    # each sign of trouble with a time, and the clause that says it (None: the first clause)
    sinces: list[tuple[datetime, list[Part] | None]] = []

    clauses: list[list[Part]] = []
    if row["queue_depth"]:
        clauses.append([Part(f"{row['queue_depth']:,} waiting", pending)])
    retry_clause: list[Part] = []
    if retrying:
        retry_clause.append(Part(f"{retrying:,} retrying", pending))
        if biggest_retry is not None and biggest_retry.get("sample_error"):
            error = _quoted(biggest_retry["sample_error"])
            retry_clause += [Part(" with “"), Part(error, kind="error"), Part("”")]
        if biggest_retry is not None and biggest_retry.get("oldest_created_at") is not None:
            sinces.append((biggest_retry["oldest_created_at"], retry_clause))
        clauses.append(retry_clause)
    dead_clause: list[Part] = []
    if failed:
        group = poison["group_id"] if poison else None
        dead = path("dead_letters", event_type=name, error_group=group, window=window)
        dead_clause.append(Part(f"{failed:,} dead-lettered in {window}", dead))
        if poison is not None:
            sinces.append((poison["first_seen"], dead_clause))
        clauses.append(dead_clause)
    if row["stuck_locks"]:
        clauses.append([Part(f"{row['stuck_locks']:,} stuck", path("workers"))])
    age = row["oldest_pending_age"]
    if age is not None and age > evidence.oldest_pending_slo:
        clauses.append([Part(f"oldest pending {format_duration(age)}", pending)])
        # the oldest row's own created_at (``now`` is read after the age: under load, seconds
        # later); ``now`` minus its age for rows that do not carry it
        oldest = row.get("oldest_pending_at") or now - timedelta(seconds=age)
        sinces.append((oldest, clauses[-1]))
    since_firing = (evidence.firing or {}).get(name)
    if since_firing is not None:
        sinces.append((since_firing, None))
    if flow is not None and flow.state != "running":
        clauses.append([Part(flow.state, controls_path)])
        sinces += [
            (c.breaker_since, clauses[-1])
            for c in matching
            if c.breaker_state in OPEN_STATES and c.breaker_since
        ]
    since = min((at for at, _ in sinces), default=None)
    if since is not None and clauses:
        # said after the clause whose evidence is the earliest sign of the trouble (the first
        # said, of signs a second apart: a retrying row that is also the oldest pending one)
        said_by = next(c for at, c in sinces if (at - since).total_seconds() < 1)
        (said_by or clauses[0]).append(Part(f" since {_when(since, now)}"))
    trend = evidence.trends.get(name)
    rate = None if trend is None or trend.trend is None else trend.trend.per_minute
    if rate is not None:
        if abs(rate) < STEADY_PER_MINUTE:
            word = "steady"
        else:
            word = f"{'growing' if rate > 0 else 'draining'} {per_minute(abs(rate))}"
        clauses.append([Part(word, path("overview", event_type=name, view="Charts"))])

    retry = (retry_group, retry_total)
    cause, evidence_text, evidence_path = _cause(row, evidence, flow, matching, retry, poison)
    parts = [Part(name, events, kind="event_type"), Part(" — ")]
    for index, clause in enumerate(clauses):
        if index:
            parts.append(Part(", "))
        parts.extend(clause)
    said = cause if cause == UNKNOWN else f"likely cause: {cause} ({evidence_text})"
    parts += [
        Part("; " if clauses else ""),
        Part(said, evidence_path),
        Part(" → "),
        Part("Controls", controls_path),
        Part(" · "),
        Part("Events", events),
    ]
    return Line(name, cause, tuple(p for p in parts if p.text), since)


def _cause(
    row: Mapping[str, Any],
    evidence: Evidence,
    flow: EventTypeFlow | None,
    matching: Sequence[Control],
    retry: tuple[Mapping[str, Any] | None, int],
    poison: Mapping[str, Any] | None,
) -> tuple[str, str, str | None]:
    """``(cause, its evidence in words, the path of the evidence)`` (the module's order);
    ``retry``: the dominant retry group, if any, and the retrying rows it is a share of."""
    retry_group, retry_total = retry
    name = row["event_type"]
    held = flow.held if flow is not None else 0
    controls_path = path("controls", event_type=name)
    paused = [c for c in matching if c.pause_in_force]
    if paused and held:
        return "held by flow control", f"paused: {_rows(held, 'due row')} held", controls_path
    workers = evidence.workers
    if _workers_down(row, flow, workers):
        silent = float(workers.get("no_claim_while_due_seconds") or 0.0)
        due = int(workers.get("due_rows") or 0)
        return (
            "workers down",
            f"{_rows(due, 'due row')}, no claim for {format_duration(silent)}",
            path(EVIDENCE_PAGES["workers down"]),
        )
    breaker = any(c.breaker_state in OPEN_STATES for c in matching)
    if retry_group is not None and (breaker or retrying_over(row)):
        return (
            "downstream failing",
            f"one error for {retry_group['retrying']:,} of {_rows(retry_total, 'retrying row')}",
            path("events", event_type=name, status="pending"),
        )
    if poison is not None and dead_letters_over(row):
        text = f"{_rows(poison['failed'], 'dead letter')} of one error group"
        group = path(
            "dead_letters",
            event_type=name,
            error_group=poison["group_id"],
            window=duration_label(evidence.window_seconds),
        )
        return "poison event", text, group
    if held or (flow is not None and flow.state.startswith("breaker")):
        state = flow.state if flow is not None else "held"
        return "held by flow control", f"{state}: {_rows(held, 'due row')} held", controls_path
    if row["queue_depth"] and evidence.claim:
        return "claim degraded", evidence.claim, path(EVIDENCE_PAGES["claim degraded"])
    waiting = row["queue_depth"] or (row["oldest_pending_age"] or 0.0) > evidence.oldest_pending_slo
    if waiting and evidence.horizon_age >= evidence.horizon_held:
        holder = f" by {evidence.horizon_holder}" if evidence.horizon_holder else ""
        text = f"xmin horizon held past {duration_label(evidence.horizon_held)}{holder}"
        return "vacuum blocked", text, path(EVIDENCE_PAGES["vacuum blocked"])
    return UNKNOWN, "", None


def nothing_wrong(window_seconds: float, oldest_pending_slo: float) -> str:
    """The one line said when no event type is troubled, naming the thresholds it checked."""
    window = duration_label(window_seconds)
    return (
        "Nothing wrong: no event type has a firing alert, a pending row older than "
        f"{duration_label(oldest_pending_slo)}, {RETRYING_MIN_ROWS}+ retrying rows or "
        f"{DEAD_LETTERS_MIN_ROWS}+ dead letters in the last {window} (each at least "
        f"{MIN_TRAFFIC_SHARE:.0%} of its rows created then), held rows, an open breaker, or "
        f"due rows with no claim for {duration_label(WORKERS_DOWN_SECONDS)}."
    )


def diagnose(evidence: Evidence) -> Diagnosis:
    """Every troubled event type's line (``troubled``, ``line``), or the nothing-wrong line:
    the types a firing alert names first, those of unknown cause last, the rest in the rows'
    order (most troubled first).

    Pure: reads only ``evidence``.
    """
    firing = evidence.firing or {}
    found = troubled(
        evidence.rows,
        evidence.flows,
        list(firing),
        workers=evidence.workers,
        oldest_pending_slo=evidence.oldest_pending_slo,
    )
    lines = sorted(
        (line(row, evidence) for row in found),
        key=lambda said: (said.event_type not in firing, said.cause == UNKNOWN),
    )
    return Diagnosis(
        tuple(lines), nothing_wrong(evidence.window_seconds, evidence.oldest_pending_slo)
    )


Groups = dict[str, Sequence[Mapping[str, Any]]]


def read_groups(
    found: Sequence[Mapping[str, Any]],
    retry_groups: Callable[[str], Sequence[Mapping[str, Any]]],
    error_groups: Callable[[str], Sequence[Mapping[str, Any]]],
) -> tuple[Groups, Groups]:
    """The groups the lines of ``found`` (``troubled``'s rows) read, and only those: the
    retry error groups of the types with retrying rows, the error groups of those with dead
    letters in the window.

    Args:
        retry_groups, error_groups: readers of one exact event type's
            ``error_grouping.retry_error_groups`` and ``error_grouping.error_groups`` rows
            (the dashboard's cached ones, or the database's).

    Returns:
        ``(Evidence.retry_groups, Evidence.error_groups)``.
    """
    retrying = {r["event_type"]: retry_groups(r["event_type"]) for r in found if r.get("retrying")}
    failed = {
        r["event_type"]: error_groups(r["event_type"]) for r in found if r["failed_in_window"]
    }
    return retrying, failed


def read_evidence(
    db: Database,
    *,
    top: int | None = None,
    event_type: str | None = None,
    firing: Mapping[str, datetime | None] | None = None,
    window: float | None = None,
    oldest_pending_slo: float = OLDEST_PENDING_SLO_SECONDS,
    horizon_held: float = HORIZON_HELD_SECONDS,
    max_age: float = 0.0,
) -> Evidence:
    """The evidence of a diagnosis, read now on one connection: the per-type figures
    (``by_event_type.measure`` without rates), controls, per-type samples of the last
    ``DEFAULT_LOOKBACK_SECONDS`` (its types' and ``other``'s) with the headline samples for
    the trends, the workers' liveness, the xmin horizon, the newest recorded
    claim plan, and the retry and dead-letter error groups of the troubled types only.

    Args:
        top: event types with a line of their own at most (default
            ``settings.overview_top_event_types``).
        event_type: an ``ExactEventType`` or SPEC §2 filter (one alert's type: pinned).
        firing: ``firing_since_by_type`` of the alert instances (default: none firing).
        window: seconds of the dead letters counted (default: settings).
        oldest_pending_slo, horizon_held: seconds (``Evidence``).
        max_age: seconds; the retry error groups are counted again first when their counts
            are this old (``error_grouping.retry_groups``); default 0: counted now, as an
            alert's message needs them (a page passes its own maximum age).

    Raises:
        The connector's errors (``QueryTimeout``, ``DatabaseUnavailable``, …).
    """
    seconds = db.settings.window if window is None else window
    firing = dict(firing or {})
    pinned = [event_type] if isinstance(event_type, ExactEventType) else list(firing)
    top = db.settings.overview_top_event_types if top is None else top
    with db.session():
        rows = by_event_type.measure(
            db, top=top, window=seconds, event_type=event_type, pinned=pinned, rates=False
        )
        named = [row for row in rows if row["event_type"] != OTHER]
        found = controls(db)
        by_type = by_event_type.flows(named, found)
        history = by_event_type.history(
            db, event_types=by_event_type.trend_keys(named), window=DEFAULT_LOOKBACK_SECONDS
        )
        samples = metrics.samples_series(db, window=DEFAULT_LOOKBACK_SECONDS)
        workers = liveness(db, flow=held_by(found)).as_json()
        holders = horizon(db)
        claim = recorded_degradation(db)
        retry_groups, error_groups = read_groups(
            troubled(
                named, by_type, firing, workers=workers, oldest_pending_slo=oldest_pending_slo
            ),
            lambda name: error_grouping.retry_error_groups(
                db, event_type=ExactEventType(name), max_age=max_age
            ),
            lambda name: error_grouping.error_groups(db, event_type=ExactEventType(name)),
        )
        now = db.fetch_one("db_now")["now"]
    trends = by_event_type.depth_trends(named, history, samples, now)
    oldest = holders.oldest
    return Evidence(
        now=now,
        window_seconds=seconds,
        rows=named,
        flows=by_type,
        controls=found,
        trends=trends,
        workers=workers,
        horizon_age=holders.age_seconds,
        horizon_holder=oldest.summary if oldest is not None else None,
        claim=claim,
        firing=firing,
        retry_groups=retry_groups,
        error_groups=error_groups,
        oldest_pending_slo=oldest_pending_slo,
        horizon_held=horizon_held,
    )


def firing_instances(db: Database) -> dict[str, datetime | None]:
    """``firing_since_by_type`` of the outbox's alert instances (query
    ``alert_instances_list``); ``{}`` without the alert state (``init-db`` not run)."""
    try:
        instances = db.fetch_all("alert_instances_list", {"outbox": db.alert_outbox})
    except SchemaNotInitialised:
        return {}
    return firing_since_by_type(instances)


def line_in(
    evidence: Evidence, event_type: str, *, firing_since: datetime | None = None
) -> Line | None:
    """The line of ``event_type`` from evidence already read (``read_evidence`` of every
    type), the type counted as firing since ``firing_since`` (an alert about it); ``None``
    when the evidence has no row of its own for it (folded into ``other``, or no rows). Its
    groups were read if it has retrying rows or dead letters: it was troubled then."""
    row = next((r for r in evidence.rows if r["event_type"] == event_type), None)
    if row is None:
        return None
    firing = dict(evidence.firing or {})
    known = [t for t in (firing.get(event_type), firing_since) if t is not None]
    firing[event_type] = min(known) if known else None
    return line(row, replace(evidence, firing=firing))


def line_for(db: Database, event_type: str, *, firing_since: datetime | None = None) -> Line | None:
    """The line of one event type (an alert's ``by: [event_type]`` instance or exact rule
    scope), read now (``read_evidence`` of that type alone, the alert counted as firing);
    ``None`` when it is not troubled.

    Raises:
        The connector's errors.
    """
    exact = ExactEventType(event_type)
    evidence = read_evidence(db, top=1, event_type=exact, firing={event_type: firing_since})
    lines = diagnose(evidence).lines
    return next((found for found in lines if found.event_type == event_type), None)
