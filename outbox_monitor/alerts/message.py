"""Render Slack messages (Block Kit + plain-text fallback) from notification rows, safely.

Everything that comes from the outbox or the rules (event types, errors, keys, summaries,
labels, runbook steps) is escaped for Slack mrkdwn (``&`` ``<`` ``>``), so no row can ping
``<!channel>`` or disguise a link; the route's ``mention`` (from alerts.yml only) and the
date tokens of its instants (``mrkdwn.slack_date``) are the only special texts.
Every block stays within Slack's limits (header ≤ 150 chars, section text ≤ 3000, ≤ 50
blocks, button url ≤ 3000, fallback text ≤ 40,000); what does not fit is cut with "…" and
the number of instances left out is said. Each notification's section and
fallback line are ``notification_text``'s; escaping and clipping are ``mrkdwn``'s.
"""

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from outbox_monitor.alerts.message_key import message_metadata, pack_key, row_message_key
from outbox_monitor.alerts.mrkdwn import (
    MAX_BUTTON_URL_CHARS,
    clip,
    clip_mrkdwn,
    escape_mrkdwn,
    link,
    plain,
    slack_date,
)
from outbox_monitor.alerts.notification_text import (
    KIND_LABELS,
    MAX_SECTION_CHARS,
    fallback_line,
    row_kind,
    row_payload,
    row_rule,
    runbook_section,
    section_text,
)
from outbox_monitor.config.settings import DEFAULT_DASHBOARD_URL

DASHBOARD_URL_ENV = "OUTBOX_MONITOR_DASHBOARD_URL"

MAX_BLOCKS = 50
MAX_HEADER_CHARS = 150
MAX_CONTEXT_CHARS = 3000
MAX_TEXT_CHARS = 40_000
MAX_INSTANCES = 45
"""Instance and runbook sections per message: header + 45 + "left out" note + footer ≤ 50
blocks."""
MAX_RUNBOOKS = 3
"""Runbook sections per message: one per paging rule with ``runbook`` steps, the first 3 (the
others are named, and on the Alerts page)."""
PAGING_KINDS = ("firing", "repeat", "error")
ACTION_PREFIX = "outbox-monitor:"
ACKNOWLEDGE = "acknowledge"
SILENCE = "silence-1h"
PAUSE = "pause-1h"
MAX_ACTION_ROWS = 8
"""Paging lines of a message that get Acknowledge, Silence 1 h and Pause buttons (an actions
block holds at most 25 elements); the others are acted on from the dashboard."""
SEVERITY_ORDER = ("critical", "error", "warning", "info")


@dataclass(frozen=True)
class SlackMessage:
    """A message ready for ``chat.postMessage`` / ``chat.update`` / an incoming webhook.

    ``text`` is the plain-text fallback (mrkdwn-escaped, used for notifications and
    clients without Block Kit); ``blocks`` the Block Kit layout.
    """

    text: str
    blocks: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] | None = None
    """Slack message metadata carrying the message's keys (``message_key.message_metadata``);
    ``None`` for a message of no notification (a route's test message)."""

    def as_payload(self) -> dict[str, Any]:
        """The JSON body fields: ``{"text", "blocks", "unfurl_links", "unfurl_media"}`` and
        ``metadata`` when the message has keys."""
        payload: dict[str, Any] = {
            "text": self.text,
            "blocks": self.blocks,
            "unfurl_links": False,
            "unfurl_media": False,
        }
        if self.metadata is not None:
            payload["metadata"] = self.metadata
        return payload


def _severity_rank(severity: object) -> int:
    text = str(severity or "").lower()
    return SEVERITY_ORDER.index(text) if text in SEVERITY_ORDER else len(SEVERITY_ORDER)


def dashboard_base_url(env: Mapping[str, str] | None = None) -> str:
    """The dashboard's base URL: ``OUTBOX_MONITOR_DASHBOARD_URL`` or http://127.0.0.1:8501."""
    value = (os.environ if env is None else env).get(DASHBOARD_URL_ENV, "").strip()
    return value or DEFAULT_DASHBOARD_URL


def dashboard_link(base_url: str, path: object) -> str:
    """The URL of a dashboard view: ``base_url`` + a payload's ``dashboard_path``.

    Only the path and query of ``path`` are used (a payload cannot point elsewhere); the
    query is re-encoded (``event_type=a b&c`` → ``event_type=a+b%26c`` stays one value per
    key as given). A URL over 3000 characters falls back to the view without its filter.
    The Overview is at ``/overview``; ``/`` sends there with its query.

    Args:
        base_url: e.g. ``http://127.0.0.1:8501`` (may carry a path prefix).
        path: e.g. ``/dead_letters?event_type=payment.captured``; ``None`` → the overview.

    Returns:
        An absolute URL.
    """
    parts = urlsplit(str(path or "/"))
    view = quote(unquote(parts.path or "/"), safe="/-_.~")
    query = urlencode(parse_qsl(parts.query, keep_blank_values=True))
    base = base_url.rstrip("/")
    url = f"{base}/{view.lstrip('/')}" + (f"?{query}" if query else "")
    if len(url) > MAX_BUTTON_URL_CHARS:
        url = clip(f"{base}/{view.lstrip('/')}", MAX_BUTTON_URL_CHARS)
    return url


def _button(url: str, index: int) -> ButtonElement:
    return ButtonElement(
        text=PlainTextObject(text="Open dashboard", emoji=True),
        url=url,
        action_id=f"open-dashboard-{index}",
    )


def action_id(action: str, notification_id: int) -> str:
    """The ``action_id`` of a Slack button: ``outbox-monitor:<action>:<notification id>``
    (read back by ``alerts.slack_actions.parse_press``)."""
    return f"{ACTION_PREFIX}{action}:{notification_id}"


def _action_buttons(rows: Sequence[tuple[Mapping[str, Any], str]]) -> ActionsBlock | None:
    """Acknowledge, Silence 1 h and — for an alert of one event type (its ``event_type``
    label) — Pause this type 1 h, for each paging line with a notification id (the first
    ``MAX_ACTION_ROWS``); named by rule and instance when the message has several."""
    paging = [row for row, kind in rows if kind in PAGING_KINDS and row.get("id") is not None]
    elements = []
    for row in paging[:MAX_ACTION_ROWS]:
        what = "" if len(paging) == 1 else f" {row_rule(row)} {row.get('instance') or ''}"
        actions = [(ACKNOWLEDGE, "Acknowledge"), (SILENCE, "Silence 1 h")]
        if (row_payload(row).get("labels") or {}).get("event_type"):
            actions.append((PAUSE, "Pause this type 1 h"))
        for action, label in actions:
            elements.append(
                ButtonElement(
                    text=PlainTextObject(text=clip(label + what, 75).strip()),
                    action_id=action_id(action, int(row["id"])),
                    value=str(row["id"]),
                    style="primary" if action == ACKNOWLEDGE else None,
                )
            )
    return ActionsBlock(elements=elements) if elements else None


def _pause_line(row: Mapping[str, Any], kind: str, dashboard_url: str) -> str:
    """A firing failure or breaker alert's link to pause its event type (SPEC §5)."""
    path = row_payload(row).get("pause_path")
    if not path or kind not in ("firing", "repeat"):
        return ""
    return "\n" + link(dashboard_link(dashboard_url, path), "Pause these events")


def _timeline_line(row: Mapping[str, Any], dashboard_url: str) -> str:
    """An alert's link to the incident timeline around its time (``links.timeline_path``)."""
    path = row_payload(row).get("timeline_path")
    if not path:
        return ""
    return "\n" + link(dashboard_link(dashboard_url, path), "Timeline")


def _diagnosis_parts(row: Mapping[str, Any], kind: str) -> list[Mapping[str, Any]]:
    """The payload's ``diagnosis`` parts (``figures.diagnosis.Line.as_payload``) of a firing
    or repeat message; none else."""
    parts = row_payload(row).get("diagnosis")
    if kind not in ("firing", "repeat") or not isinstance(parts, list):
        return []
    return [part for part in parts if isinstance(part, Mapping)]


def diagnosis_mrkdwn(row: Mapping[str, Any], kind: str, dashboard_url: str) -> str:
    """What is wrong with the alert's event type, opening its section (the Overview's
    headline line, ``figures.diagnosis``): each part escaped (``mrkdwn``), a linked part a
    link into the dashboard, the event type in code and the error in italics, followed by a
    line break; ``""`` without one."""
    shown = []
    for part in _diagnosis_parts(row, kind):
        text = str(part.get("text") or "")
        if part.get("path"):
            shown.append(link(dashboard_link(dashboard_url, part["path"]), text))
        elif part.get("kind") == "error":
            shown.append(f"_{escape_mrkdwn(text)}_")
        else:
            shown.append(escape_mrkdwn(text))
    return "".join(shown) + "\n" if shown else ""


def diagnosis_plain(row: Mapping[str, Any], kind: str) -> str:
    """``diagnosis_mrkdwn`` as the fallback text's first line (escaped, no links)."""
    text = "".join(str(part.get("text") or "") for part in _diagnosis_parts(row, kind))
    return escape_mrkdwn(text) + "\n" if text else ""


def _runbooks(lines: Sequence[tuple[Mapping[str, Any], str]]) -> list[tuple[str, str]]:
    """The runbook sections of a message (``notification_text.runbook_section``, no button):
    one per rule whose line pages (firing, repeat, error) and whose payload has steps, in
    order, at most ``MAX_RUNBOOKS``; the last one names the rules left out."""
    found: dict[str, str] = {}
    for row, kind in lines:
        rule = row_rule(row)
        if kind in PAGING_KINDS and rule not in found:
            text = runbook_section(rule, row_payload(row).get("runbook"))
            if text:
                found[rule] = text
    shown = list(found.values())[:MAX_RUNBOOKS]
    left = list(found)[MAX_RUNBOOKS:]
    if left:
        named = ", ".join(plain(rule, 60) for rule in left)
        note = f"\n_Runbooks of {named}: on the Alerts page._"
        shown[-1] = clip_mrkdwn(shown[-1], MAX_SECTION_CHARS - len(note)) + note
    return [(text, "") for text in shown]


def _outbox_part(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """``["outbox orders"]`` when the rows are of a fleet file's outboxes (their payload's
    ``outbox``, ``outbox_scope.scope_payload``), else nothing (a fleet of one)."""
    names = list(dict.fromkeys(str(n) for r in rows if (n := row_payload(r).get("outbox"))))
    return [f"outbox {', '.join(names)}"] if names else []


def _header_text(kinds: list[str], rows: Sequence[Mapping[str, Any]]) -> str:
    distinct = sorted(set(kinds), key=list(KIND_LABELS).index)
    rules = list(dict.fromkeys(row_rule(r) for r in rows))
    severities = [row_payload(r).get("severity") for r in rows if row_payload(r).get("severity")]
    severity = min(severities, key=_severity_rank) if severities else None
    if len(distinct) == 1:
        emoji, label = KIND_LABELS[distinct[0]]
        if distinct[0] == "test":
            return f"{emoji} Test alert from outbox-monitor"
        parts = [f"{emoji} {label}", *_outbox_part(rows)]
        if len(rows) > 1:
            parts.append(f"{len(rows)} alerts")
        if severity and distinct[0] != "resolved":
            parts.append(str(severity))
        parts.append(", ".join(rules))
    else:
        counts = ", ".join(f"{kinds.count(k)} {KIND_LABELS[k][1].lower()}" for k in distinct)
        parts = [f"🔔 {len(rows)} alert changes", *_outbox_part(rows), counts, ", ".join(rules)]
    return clip(" · ".join(parts), MAX_HEADER_CHARS)


def _assemble(
    header: str,
    sections: list[tuple[str, str]],
    fallback_lines: list[str],
    *,
    left_out: int,
    mention: str | None,
    footer: str,
    keys: Sequence[str] = (),
    buttons: ActionsBlock | None = None,
) -> SlackMessage:
    """Blocks and fallback text from prepared, escaped parts, within Slack's limits; the
    notifications' ``keys`` (``message_key``) in the metadata and, packed, in the footer."""
    blocks: list[Block] = [HeaderBlock(text=PlainTextObject(text=header, emoji=True))]
    prefix = f"{mention} " if mention else ""
    for index, (text, url) in enumerate(sections):
        body = clip_mrkdwn(prefix + text if index == 0 else text, MAX_SECTION_CHARS)
        blocks.append(
            SectionBlock(
                text=MarkdownTextObject(text=body), accessory=_button(url, index) if url else None
            )
        )
    note = ""
    if left_out:
        note = f"…and {left_out} more instance(s) not shown here: open the dashboard."
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=note)]))
    if buttons is not None:
        blocks.append(buttons)
    if keys:
        footer += f" · key {pack_key(keys)}"
    footer_text = clip_mrkdwn(footer, MAX_CONTEXT_CHARS)
    blocks.append(ContextBlock(elements=[MarkdownTextObject(text=footer_text)]))
    text = prefix + escape_mrkdwn(header) + "\n" + "\n".join(fallback_lines)
    if note:
        text += "\n" + note
    if sections and sections[0][1]:
        text += "\nDashboard: " + escape_mrkdwn(sections[0][1])
    return SlackMessage(
        text=clip_mrkdwn(text, MAX_TEXT_CHARS),
        blocks=[block.to_dict() for block in blocks[:MAX_BLOCKS]],
        metadata=message_metadata(keys) if keys else None,
    )


def _footer(now: datetime | None, route: str | None) -> str:
    parts = ["outbox-monitor"]
    if route:
        parts.append(f"route {plain(route, 60)}")
    if now is not None:
        parts.append(f"sent {slack_date(now)}")
    return " · ".join(parts)


def render_notifications(
    rows: Sequence[Mapping[str, Any]],
    *,
    mention: str | None = None,
    dashboard_url: str = DEFAULT_DASHBOARD_URL,
    now: datetime | None = None,
    route: str | None = None,
    actions: bool = False,
) -> SlackMessage:
    """Render one message for one or more notification rows (one evaluation, one route).

    Args:
        rows: notification rows (dicts) with ``kind``, ``rule``, ``instance`` and the
            ``payload`` of the design contract (``severity``, ``summary``, ``op``,
            ``threshold``, ``value``, ``unit``, ``since``, ``labels``, ``offenders``,
            ``runbook_url``, ``dashboard_path``; ``error`` for kind ``error``).
        mention: the route's mention text from alerts.yml (left unescaped); it is only
            added when a row is firing, repeating or an evaluation error.
        dashboard_url: base of the dashboard links (``dashboard_base_url()``).
        now: the sender's clock, for "since … (12m ago)" and the footer.
        route: the route name, for the footer.
        actions: add Acknowledge, Silence 1 h and Pause this type 1 h buttons to the
            paging lines (``OUTBOX_MONITOR_SLACK_ACTIONS_PORT`` set: ``alerts.slack_actions``).

    Returns:
        A ``SlackMessage``: header, one section per instance with a dashboard button
        (its "since" in Slack's date formatting: each reader's own time zone), then the
        runbook steps of each paging rule (``_runbooks``), a "left out" note beyond 45
        sections, a footer with the sending time and the message's key; the
        fallback ``text``; and the ``metadata`` carrying each notification's
        ``message_key.row_message_key`` (rows with a ``dedupe_key``).

    Raises:
        ValueError: ``rows`` is empty.
    """
    if not rows:
        raise ValueError("render_notifications needs at least one notification row")
    kinds = [row_kind(r) for r in rows]
    runbooks = _runbooks(list(zip(rows, kinds, strict=True)))
    shown = list(zip(rows, kinds, strict=True))[: MAX_INSTANCES - len(runbooks)]
    sections = [
        (
            diagnosis_mrkdwn(row, kind, dashboard_url)
            + section_text(row, kind=kind, now=now)
            + _pause_line(row, kind, dashboard_url)
            + _timeline_line(row, dashboard_url),
            dashboard_link(dashboard_url, row_payload(row).get("dashboard_path")),
        )
        for row, kind in shown
    ] + runbooks
    fallback = [diagnosis_plain(row, kind) + fallback_line(row, kind) for row, kind in shown]
    pages = any(k in ("firing", "repeat", "error") for k in kinds)
    return _assemble(
        _header_text(kinds, rows),
        sections,
        fallback,
        left_out=len(rows) - len(shown),
        mention=mention if pages and mention else None,
        footer=_footer(now, route),
        keys=[row_message_key(row) for row in rows if row.get("dedupe_key")],
        buttons=_action_buttons(shown) if actions else None,
    )


def episode_key(dedupe_key: str) -> str:
    """The firing episode of a notification: its dedupe key without the kind.

    ``"payment-failed|event_type=x|3|resolved"`` → ``"payment-failed|event_type=x|3|"``,
    shared by the firing row and its resolve (design contract's dedupe key).
    """
    head, sep, _ = dedupe_key.rpartition("|")
    return f"{head}{sep}" if sep else dedupe_key


def render_thread_update(
    thread_rows: Sequence[Mapping[str, Any]],
    *,
    dashboard_url: str = DEFAULT_DASHBOARD_URL,
    now: datetime | None = None,
    route: str | None = None,
    group: Mapping[str, str] | None = None,
    mention: str | None = None,
    keys: Sequence[str] = (),
    updated: bool = True,
    actions: bool = False,
) -> SlackMessage:
    """Re-render a posted message with the current state of each of its lines.

    Args:
        thread_rows: every row of the message's thread in id order (with ``dedupe_key``):
            the first row of each firing episode is a line of the original message; later
            rows of the episode (``error``, ``resolved``; sent earlier or being sent now)
            change that line: the last one decides whether it shows as resolved (with the
            resolve's "value now") or as an evaluation error.
            A row's ``acked_by`` names who acknowledged its episode (a Slack button,
            ``alerts.slack_actions``; ``sender_thread_notifications`` reads it).
        dashboard_url, now, route: as for ``render_notifications``.
        group: a group's labels (``alerts.grouping``: the card of a route with
            ``group_by``), named in the header with its firing and resolved counts.
        mention: the route's mention, put first while a line pages (a group's first post
            or a re-post; an edit pings nobody: ``None``).
        keys: the message's keys (``message_key``) for its metadata and footer.
        updated: the footer says "updated" (an edit).
        actions: Acknowledge, Silence 1 h and Pause buttons on the lines still paging (as
            ``render_notifications``'s).

    Returns:
        The message for ``chat.update``: header "RESOLVED" when every line resolved, else
        "ACKED by <who> · k of n resolved" when a line's episode was acknowledged (those
        who did, in order), else "FIRING · k of n resolved"; no mention by default.

    Raises:
        ValueError: ``thread_rows`` is empty.
    """
    if not thread_rows:
        raise ValueError("render_thread_update needs the rows of the original message")
    originals: dict[str, Mapping[str, Any]] = {}
    latest: dict[str, Mapping[str, Any]] = {}
    for row in thread_rows:
        episode = episode_key(str(row.get("dedupe_key") or ""))
        if episode not in originals:
            originals[episode] = row
        elif row_kind(row) in ("resolved", "error"):
            latest[episode] = row
    lines = list(originals.items())
    now_kinds = [
        (row, row_kind(latest.get(episode, row))) for episode, row in lines
    ]  # each line's kind now: its latest resolve or error, else its own
    runbooks = _runbooks(now_kinds)
    shown = lines[: MAX_INSTANCES - len(runbooks)]
    sections, fallback = [], []
    for episode, row in shown:
        event = latest.get(episode)
        resolved = None
        if event is not None and row_kind(event) == "resolved":
            resolved = row_payload(event)
            text = section_text(row, kind="resolved", now=now, resolved_payload=resolved)
            kind = "resolved"
        else:
            source = event if event is not None else row
            kind = row_kind(source)
            text = diagnosis_mrkdwn(source, kind, dashboard_url) + section_text(
                source, kind=kind, now=now
            )
        url = dashboard_link(dashboard_url, row_payload(row).get("dashboard_path"))
        sections.append((text + _timeline_line(event or row, dashboard_url), url))
        fallback.append(fallback_line(row, kind, resolved))
    sections += runbooks
    done = sum(1 for _, kind in now_kinds if kind == "resolved")
    rules = " · ".join(
        [*_outbox_part(thread_rows), ", ".join(dict.fromkeys(row_rule(row) for _, row in lines))]
    )
    acked = ", ".join(dict.fromkeys(r["acked_by"] for r in thread_rows if r.get("acked_by")))
    counts = f"{done} of {len(lines)} resolved"
    if group is not None:
        named = ", ".join(f"{k}={v}" for k, v in group.items()) or "all"
        counts = f"group {named} · {len(lines) - done} firing, {done} resolved"
    if done == len(lines):
        header = f"✅ RESOLVED · {counts if group is not None else rules}"
    elif acked:
        header = f"👀 ACKED by {clip(acked, 60)} · {counts} · {rules}"
    else:
        header = f"🔥 FIRING · {counts} · {rules}"
    pages = done < len(lines)
    return _assemble(
        clip(header, MAX_HEADER_CHARS),
        sections,
        fallback,
        left_out=len(lines) - len(shown),
        mention=mention if pages and mention else None,
        footer=_footer(now, route) + (" · updated" if updated else ""),
        keys=keys,
        buttons=_action_buttons(
            [(row, kind) for (_, row), (_, kind) in zip(shown, now_kinds, strict=False)]
        )
        if actions
        else None,
    )


def test_row(route: str) -> dict[str, Any]:
    """The notification of a test message through ``route``: ``kind`` and ``rule``
    ``"test"``, no instance, and the payload the message is rendered from (``summary``,
    ``dashboard_path``); ``render_notifications([row])`` renders it as Slack got it."""
    return {
        "kind": "test",
        "rule": "test",
        "instance": "",
        "payload": {
            "summary": f"If you can read this, route {route} reaches this channel.",
            "dashboard_path": "/",
        },
    }


def render_test(
    route: str,
    *,
    mention: str | None = None,
    dashboard_url: str = DEFAULT_DASHBOARD_URL,
    now: datetime | None = None,
) -> SlackMessage:
    """The message of ``outbox-monitor alerts test`` for one route (mention included)."""
    row = test_row(route)
    section = (section_text(row, kind="test", now=now), dashboard_link(dashboard_url, "/"))
    return _assemble(
        _header_text(["test"], [row]),
        [section],
        [fallback_line(row, "test")],
        left_out=0,
        mention=mention,
        footer=_footer(now, route),
    )
