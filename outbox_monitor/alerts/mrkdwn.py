"""Slack mrkdwn text from the outbox or the rules, made safe: escaped (``&`` ``<`` ``>``, so
no text can ping ``<!channel>`` or disguise a link), clipped to a limit without leaving half
an entity or a link, and links only to http(s) URLs.
"""

import re
from datetime import UTC, datetime

MAX_BUTTON_URL_CHARS = 3000
ELLIPSIS = "…"
SLACK_DATE_FORMAT = "{date_short_pretty} {time}"
"""How Slack writes an instant of a message, in each reader's own time zone ("Today 10:18",
"Mar 2nd 10:18")."""

_ENTITY_TAIL = re.compile(r"&[a-z]{0,4}$")


def escape_mrkdwn(text: object) -> str:
    """Escape text for Slack mrkdwn: ``&`` → ``&amp;``, ``<`` → ``&lt;``, ``>`` → ``&gt;``.

    Args:
        text: anything; ``None`` becomes ``""``, other values ``str(value)``.

    Returns:
        Text in which Slack sees no mention, channel ping or link markup.
    """
    if text is None:
        return ""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def clip(text: str, limit: int) -> str:
    """Cut raw (not yet escaped) text to ``limit`` characters, ending with "…" when cut."""
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)] + ELLIPSIS


def clip_mrkdwn(text: str, limit: int) -> str:
    """Cut escaped mrkdwn to ``limit`` characters without leaving half an entity or link.

    A cut inside ``&amp;`` or inside ``<url|label>`` drops that partial token, so the
    result never holds an unclosed ``<`` or a broken entity; ends with "…" when cut.
    """
    if len(text) <= limit:
        return text
    cut = text[: max(limit - 1, 0)]
    cut = _ENTITY_TAIL.sub("", cut)
    if cut.rfind("<") > cut.rfind(">"):
        cut = cut[: cut.rfind("<")]
    return cut + ELLIPSIS


def plain(text: object, limit: int) -> str:
    """Escape one-line text from the outbox or rules after clipping it to ``limit``."""
    flat = " ".join(str(text or "").split())
    return escape_mrkdwn(clip(flat, limit))


def link(url: object, label: str) -> str:
    """A mrkdwn link for an http(s) URL from config, else the escaped text itself."""
    target = str(url or "").strip()
    if not re.match(r"^https?://", target, re.IGNORECASE):
        return escape_mrkdwn(f"{label}: {target}") if target else ""
    target = escape_mrkdwn(clip(target, MAX_BUTTON_URL_CHARS)).replace("|", "%7C")
    return f"<{target}|{escape_mrkdwn(label)}>"


def slack_date(instant: datetime) -> str:
    """An instant as Slack's date formatting, which each reader sees in their own time zone:
    ``<!date^1772446680^{date_short_pretty} {time}|2026-03-02 10:18:00 UTC>``.

    Args:
        instant: an aware datetime (a naive one is taken as UTC).

    Returns:
        The mrkdwn token; its fallback (clients that cannot format dates, notifications) is
        the instant in UTC to the second.
    """
    aware = instant if instant.tzinfo else instant.replace(tzinfo=UTC)
    fallback = aware.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"<!date^{int(aware.timestamp())}^{SLACK_DATE_FORMAT}|{fallback}>"
