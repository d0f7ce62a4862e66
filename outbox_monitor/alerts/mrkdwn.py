"""Slack mrkdwn text from the outbox or the rules, made safe: escaped (``&`` ``<`` ``>``, so
no text can ping ``<!channel>`` or disguise a link), clipped to a limit without leaving half
an entity or a link, and links only to http(s) URLs.
"""

import re

MAX_BUTTON_URL_CHARS = 3000
ELLIPSIS = "…"

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
