"""Text of the code (docstrings, click help) as Markdown for the generated references
(``cli.reference``): names of options and variables set as code, the rest escaped, tables."""

import html
import re
from collections.abc import Sequence

_CODE_SPAN = re.compile(r"(``?)(.+?)\1", re.S)
"""A code span as the code writes it: ``rst`` or `markdown`."""
_NAMES = re.compile(
    r"(?<![\w`-])(--[a-z0-9][a-z0-9-]*|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+(?:_?\*)?|PG\*)(?![\w`])"
)
"""Options (``--dry-run``) and environment variables (``OUTBOX_MONITOR_DSN``,
``OUTBOX_MONITOR_REDACT_*``, ``PG*``) in plain text: shown as code."""
_SPECIAL = re.compile(r"([\\*_<>|\[\]])")


def paragraph(text: str) -> str:
    """One paragraph of the code's prose as one line of Markdown.

    Args:
        text: a docstring or help text (lines wrapped, ``double`` or `single` backticks
            around code).

    Returns:
        The text on one line: code spans kept (in single backticks), option and variable
        names set as code, Markdown's special characters of the rest escaped.
    """
    parts, end = [], 0
    flat = " ".join(text.split())
    for match in _CODE_SPAN.finditer(flat):
        parts.append(_plain(flat[end : match.start()]))
        parts.append(_code(match.group(2)))
        end = match.end()
    parts.append(_plain(flat[end:]))
    return "".join(parts)


def paragraphs(text: str) -> list[str]:
    """``paragraph`` of each paragraph of ``text`` (separated by a blank line)."""
    return [paragraph(part) for part in re.split(r"\n\s*\n", text.strip()) if part.strip()]


def code(text: str) -> str:
    """``text`` as an inline code span that is safe in a table cell."""
    return _code(str(text))


def _code(text: str) -> str:
    if "|" in text or "`" in text:  # a pipe would split a table's cell; HTML keeps it
        return "<code>" + html.escape(text).replace("|", "&#124;") + "</code>"
    return f"`{text}`"


def _plain(text: str) -> str:
    pieces, end = [], 0
    for match in _NAMES.finditer(text):
        pieces.append(_SPECIAL.sub(r"\\\1", text[end : match.start()]))
        pieces.append(_code(match.group(1)))
        end = match.end()
    pieces.append(_SPECIAL.sub(r"\\\1", text[end:]))
    return "".join(pieces)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table (cells already Markdown, on one line each)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return lines
