"""The stable key of every alert message: delivery is AT LEAST ONCE, so a receiver drops a
repeat by its key (issue 29 item 8).

A scheduler posts a message to Slack, then commits that it did. When it dies between the
two (``kill -9`` while its POST is in flight, a lost connection, Slack answering after the
client's timeout), the next leader finds the notification still pending and posts it again:
the usual outbox trade-off, as in every transactional outbox and in Alertmanager (which
resends on restart and leaves deduplication to the receiver). Each message therefore
carries a key that is the same for both posts and different for anything a receiver must
never drop:

- ``alert_key(outbox, rule, instance, episode)``: one firing episode of one alert instance —
  the same for its firing, repeats, error and resolve (PagerDuty's ``dedup_key``, issue 31:
  a trigger and its resolve share it);
- ``message_key(…, kind)``: ``<alert key>:<kind>`` — ``firing``, ``resolved``, ``error``,
  ``repeat-<n>``: a resolve and the next episode always have keys of their own.

``episode`` is the id of the alert transition that started the episode
(``alert_transitions.id``, kept in ``alert_instances.episode_id``, migration 021), unique in
the database; a notification of an episode that started before migration 021, or one of the
scheduler's own alerts (database unreachable, stalled, replica lag, writes failing), uses
the episode part of its dedupe key instead (a firing sequence number, an outage's id).

The parts are hashed (SHA-256 of their JSON list), so the key has a fixed length whatever
the instance holds (an event type of 100 kB): ``alert_key`` is 68 characters (``om1-`` and
64 hex digits), ``message_key`` at most 68 + 1 + ``MAX_KIND_CHARS`` ≤ 255 (PagerDuty's
limit). The sender carries it in the Slack message (``alerts.message``): in the message's
``metadata`` (``event_type`` ``outbox_monitor_alert``, ``event_payload.message_key`` and
the key of each notification it packs) and in its footer, readable by any receiver.
"""

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

KEY_PREFIX = "om1-"
"""Names the scheme (outbox-monitor, version 1): a later scheme gets a prefix of its own."""
MAX_KIND_CHARS = 40
MAX_KEY_CHARS = 255
METADATA_EVENT_TYPE = "outbox_monitor_alert"
"""The ``metadata.event_type`` of every alert message (Slack message metadata)."""


def alert_key(outbox: str, rule: str, instance: str, episode: object) -> str:
    """The key of one firing episode of one alert instance.

    Args:
        outbox: the fleet file's outbox name (``""`` for a single outbox).
        rule: the rule's name.
        instance: the instance key as stored (``""``, ``event_type=…``; any length).
        episode: the episode's id (the starting transition's id) or, for the scheduler's
            own alerts and older episodes, the episode part of the dedupe key.

    Returns:
        ``om1-`` and 64 lower-case hex digits (68 characters), the same for equal parts.
    """
    parts = json.dumps([outbox, rule, instance, str(episode)], ensure_ascii=False)
    return KEY_PREFIX + hashlib.sha256(parts.encode("utf-8", "surrogatepass")).hexdigest()


def message_key(outbox: str, rule: str, instance: str, episode: object, kind: str) -> str:
    """The key of one message of an episode: ``<alert_key>:<kind>``.

    Args:
        outbox, rule, instance, episode: as for ``alert_key``.
        kind: ``firing``, ``resolved``, ``error``, ``repeat-<n>`` or ``test`` (cut to
            ``MAX_KIND_CHARS``).

    Returns:
        At most ``MAX_KEY_CHARS`` (255) characters.
    """
    return f"{alert_key(outbox, rule, instance, episode)}:{kind[:MAX_KIND_CHARS]}"


def row_message_key(row: Mapping[str, Any]) -> str:
    """The ``message_key`` of a notification row (``outbox_monitor.notifications``).

    The episode is the payload's ``episode`` (the starting transition's id) when present,
    else the dedupe key's episode part (``rule|instance|<episode>|kind``); the kind is the
    dedupe key's last part (``repeat-2`` for the second repeat).

    Args:
        row: with ``rule``, ``instance``, ``kind``, ``payload`` and, when stored,
            ``outbox`` and ``dedupe_key``.
    """
    parts, kind = _row_parts(row)
    return message_key(*parts, kind)


def row_alert_key(row: Mapping[str, Any]) -> str:
    """The ``alert_key`` of a notification row (its episode's key, shared by the episode's
    firing, repeats, error and resolve: PagerDuty's ``dedup_key``); ``row`` as for
    ``row_message_key``."""
    return alert_key(*_row_parts(row)[0])


def _row_parts(row: Mapping[str, Any]) -> tuple[tuple[str, str, str, object], str]:
    """``((outbox, rule, instance, episode), kind)`` of a notification row."""
    dedupe = str(row.get("dedupe_key") or "")
    head, _, kind = dedupe.rpartition("|")
    episode_part = head.rpartition("|")[2] if head else ""
    payload = row.get("payload") if isinstance(row.get("payload"), Mapping) else {}
    episode = payload.get("episode")
    parts = (
        str(row.get("outbox") or ""),
        str(row.get("rule") or ""),
        str(row.get("instance") or ""),
        episode if episode is not None else episode_part,
    )
    return parts, kind or str(row.get("kind") or "")


def pack_key(keys: Sequence[str]) -> str:
    """The key of a message that packs several notifications (one evaluation, one route):
    the one key when it holds one, else ``om1-`` + the SHA-256 of its keys in order and
    ``:pack``. A re-send packs the same rows, so it gets the same key."""
    if len(keys) == 1:
        return keys[0]
    digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()
    return f"{KEY_PREFIX}{digest}:pack"


def message_metadata(keys: Sequence[str]) -> dict[str, Any]:
    """Slack message metadata carrying the keys: ``{"event_type": "outbox_monitor_alert",
    "event_payload": {"message_key": pack_key(keys), "notification_keys": [...]}}``."""
    return {
        "event_type": METADATA_EVENT_TYPE,
        "event_payload": {"message_key": pack_key(keys), "notification_keys": list(keys)},
    }
