"""Silences: stop notifications of matching alert instances for a while (issue 3 §2).

A silence is a set of label matchers, an end time, a comment and who made it. An instance
whose labels satisfy every matcher of an active silence still changes state (the Alerts
page shows it), but its notification rows are written ``silenced``/``suppressed`` and never
sent. Labels of an instance: ``rule`` (the rule name), ``severity``, the rule's ``labels``
and ``event_type`` (the instance's event type with ``by: [event_type]``, else the rule's
``event_type`` filter when it has one).

A matcher value is compared for equality; a value containing ``%`` is a LIKE pattern (as
the event-type filter of SPEC §2: ``%`` is the only wildcard, ``_`` and ``\\`` are
literal). Creating and expiring a silence are operator actions: each writes an audit row.

A fleet (issue 16): the outboxes of one database share its silences table. A silence made
on a fleet file's outbox (``Database.alert_outbox``) gets the matcher ``outbox=<name>``, so
it covers that outbox only (another outbox's is refused); each outbox lists and ends its
own (``in_outbox``). A silence without an ``outbox`` matcher covers every outbox of the
database whose instances match (those of a fleet of one, and older ones).
"""

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from outbox_monitor.access import Identity, Role
from outbox_monitor.errors import ActionRefused
from outbox_monitor.store.audit import audit_fields, require_audited
from outbox_monitor.store.audited_writers import writer
from outbox_monitor.store.db import Database

DEFAULT_LIST_LIMIT = 200
MAX_COMMENT_CHARS = 2000
OUTBOX_MATCHER = "outbox"
"""The label naming a fleet file's outbox (``alerts.outbox_scope.OUTBOX_LABEL``)."""


def _refuse(message: str) -> ActionRefused:
    return ActionRefused(f"silence refused: {message}")


def _validated_matchers(matchers: Mapping[str, str]) -> dict[str, str]:
    if not matchers:
        raise _refuse("give at least one matcher (e.g. rule=payment-failed)")
    cleaned: dict[str, str] = {}
    for key, value in matchers.items():
        name = str(key).strip()
        text = "" if value is None else str(value).strip()
        if not name:
            raise _refuse("a matcher has an empty label name")
        if not text:
            raise _refuse(f"matcher {name!r} has an empty value")
        cleaned[name] = text
    return cleaned


def _scoped(db: Database, matchers: dict[str, str]) -> dict[str, str]:
    """``matchers`` with ``outbox=<db.alert_outbox>`` for a fleet file's outbox; another
    outbox's matcher is refused."""
    key = db.alert_outbox
    if not key:
        return matchers
    given = matchers.get(OUTBOX_MATCHER, key)
    if given != key:
        raise _refuse(
            f"outbox={given}: a silence made on outbox {key} covers only it; make it on "
            f"outbox {given!r} (the dashboard's outbox, or --outbox)"
        )
    return {**matchers, OUTBOX_MATCHER: key}


def in_outbox(db: Database, silence: Mapping[str, Any]) -> bool:
    """Whether a silence (a row of ``active_silences``/``list_silences``) was made on
    ``db``'s outbox: its ``outbox`` matcher is ``db.alert_outbox`` (none without a fleet
    file)."""
    return (silence.get("matchers") or {}).get(OUTBOX_MATCHER, "") == db.alert_outbox


def _db_now(db: Database) -> datetime:
    return db.fetch_one("db_now")["now"]


def create_silence(
    db: Database,
    matchers: Mapping[str, str],
    until: datetime,
    comment: str,
    created_by: Identity,
    *,
    now: datetime | None = None,
    audit_details: Mapping[str, Any] | None = None,
) -> int:
    """Create a silence that starts now and ends at ``until``.

    Args:
        db: the connector.
        matchers: label name → value (``{"rule": "payment-failed", "event_type":
            "payment.captured"}``); all must match. A value with ``%`` is a LIKE pattern.
            On a fleet file's outbox ``outbox=<name>`` is added (``_scoped``).
        until: aware end time; must be after ``now``.
        comment: why (shown on the Alerts page); required.
        created_by: who (the signed-in identity); must be an operator; its name is
            recorded as the silence's creator and in the audit row.
        now: the start instant; default the database's ``now()`` (tests pass their clock).
        audit_details: more fields of the audit row's filter (a Slack press's ids).

    Returns:
        The new silence's id.

    Raises:
        AccessDenied: ``created_by`` is not an operator.
        ActionRefused: no matchers, an empty name or value, another outbox's matcher,
            ``until`` not in the future
            or naive, an empty comment. Nothing is written then.
        DatabaseUnavailable and the connector's errors.
    """
    require_audited(db, created_by, Role.operator, "create silences", "silence")
    cleaned = _scoped(db, _validated_matchers(matchers))
    comment = (comment or "").strip()
    if not comment:
        raise _refuse("say why in the comment")
    if len(comment) > MAX_COMMENT_CHARS:
        raise _refuse(f"the comment is longer than {MAX_COMMENT_CHARS} characters")
    if until.tzinfo is None:
        raise _refuse("the end time needs a time zone")
    start = now or _db_now(db)
    if until <= start:
        raise _refuse(f"the end time {until.isoformat()} is not in the future")
    with db.transaction() as conn:
        row = conn.execute(
            db.compose("silence_insert", writer=writer(db.settings, "silence")),
            {
                "matchers": Jsonb(cleaned),
                "starts_at": start,
                "ends_at": until,
                "comment": comment,
                "created_by": created_by.name,
                "filter": audit_fields(
                    created_by, {"matchers": cleaned, "until": until, **(audit_details or {})}
                )["filter"],
            },
        ).fetchone()
    return row["id"]


def expire_silence(
    db: Database, silence_id: int, by: Identity, *, now: datetime | None = None
) -> bool:
    """End a silence now; it stays listed (with ``expired_at``) for history.

    Args:
        db: the connector.
        silence_id: the silence's id.
        by: who expires it (an operator), for the audit log.
        now: the instant; default the database's ``now()``.

    Returns:
        ``True`` when it was in force or scheduled and is now expired; ``False`` when it
        did not exist, was already expired or had ended.

    Raises:
        AccessDenied: ``by`` is not an operator.
        ActionRefused: the silence is another outbox's of the database (its ``outbox``
            matcher); nothing changes.
        DatabaseUnavailable and the connector's errors.
    """
    require_audited(db, by, Role.operator, "expire silences", "expire silence")
    instant = now or _db_now(db)
    with db.transaction() as conn:
        row = conn.execute(
            db.compose("silence_expire", writer=writer(db.settings, "expire_silence")),
            {"id": silence_id, "now": instant, "actor": by.name},
        ).fetchone()
        if row is None:
            return False
        owner = (row["matchers"] or {}).get(OUTBOX_MATCHER)
        if owner is not None and owner != db.alert_outbox:  # rolled back: still in force
            raise _refuse(
                f"silence {silence_id} is outbox {owner}'s; end it on that outbox (the "
                f"dashboard's outbox, or --outbox {owner})"
            )
    return True


def active_silences(db: Database, now: datetime) -> list[dict[str, Any]]:
    """Silences in force at ``now`` (started, not ended, not expired).

    Returns:
        Rows with id, matchers (dict), starts_at, ends_at, comment, created_by,
        created_at, expired_at; oldest first.
    """
    return db.fetch_all("silences_active", {"now": now})


def list_silences(db: Database, *, limit: int = DEFAULT_LIST_LIMIT) -> list[dict[str, Any]]:
    """At most ``limit`` silences of ``db``'s outbox (``in_outbox``, chosen in SQL before
    the limit, so other outboxes' silences never crowd them out): those in force first, then
    the ended ones, each part newest first, with ``active`` (in force at the database's now).

    Returns:
        Rows with id, matchers, starts_at, ends_at, comment, created_by, created_at,
        expired_at, active, and the outbox's totals ``silences_total`` and ``active_total``
        (every silence, listed or not: the same in every row).
    """
    params = {"label": OUTBOX_MATCHER, "outbox": db.alert_outbox, "limit": limit}
    return db.fetch_all("silences_all", params)


def _value_matches(pattern: str, value: str) -> bool:
    if "%" not in pattern:
        return pattern == value
    regex = ".*".join(re.escape(part) for part in pattern.split("%"))
    return re.fullmatch(regex, value, flags=re.DOTALL) is not None


def matches(silence: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a silence covers an instance.

    Args:
        silence: a row of ``active_silences`` (its ``matchers``), or the matchers dict.
        labels: the instance's labels (``rule``, ``severity``, ``event_type``, rule labels).

    Returns:
        ``True`` when every matcher names a label the instance has and its value matches
        (equality, or LIKE when the matcher value has ``%``). A silence without matchers
        matches nothing.
    """
    matchers = silence.get("matchers", silence)
    if not matchers:
        return False
    for name, pattern in matchers.items():
        value = labels.get(name)
        if value is None or not _value_matches(str(pattern), str(value)):
            return False
    return True


def silenced_by(silences: list[Mapping[str, Any]], labels: Mapping[str, str]) -> list[int]:
    """The ids of the silences among ``silences`` that cover ``labels`` (see ``matches``)."""
    return [silence["id"] for silence in silences if matches(silence, labels)]
