"""The log format of every outbox-monitor process: one record, one line.

Event types, error text and actor names come from outside (the outbox's rows, a proxy
header, ``--actor``) and end up in log messages. ``OneLineFormatter`` escapes every control
character of a record's line (a newline becomes the two characters ``\\n``), and indents
each line of a traceback: a line that starts at column 0 is always the start of a record
this process wrote, whatever text the outbox holds. ``configure_logging`` puts it on the
root logger once per process (the CLI's ``main``, ``dashboard.py``), so every logger of the
package goes through it.

A scheduler watching a fleet runs the jobs of many outboxes in one process: each job runs
``for_outbox(name)``, and every line it logs starts with ``outbox "<name>": ``.
"""

import contextlib
import contextvars
import logging
import os
import sys
from collections.abc import Iterator

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(outbox_named)s%(message)s"
_OUTBOX: contextvars.ContextVar[str | None] = contextvars.ContextVar("outbox", default=None)
LEVEL_ENV = "OUTBOX_MONITOR_LOG_LEVEL"
DEFAULT_LEVEL = "INFO"
CONTINUATION = "  "
"""Put before each line of a traceback, so that none of them reads as a record."""
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_CONTROLS = [
    *range(0x00, 0x20),
    *range(0x7F, 0xA0),
    0x2028,  # line separator
    0x2029,  # paragraph separator
    0x200E,  # left-to-right and right-to-left marks, embeddings, overrides and isolates:
    0x200F,  # they reorder what a terminal shows
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
]
_ESCAPE = {
    code: _NAMED.get(chr(code)) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
    for code in _CONTROLS
}


def escape_controls(text: str) -> str:
    """``text`` on one line: control characters (C0, DEL, C1), Unicode line and paragraph
    separators and bidirectional controls written as escapes (``\\n``, ``\\r``, ``\\t``,
    ``\\x1b``, ``\\u2028``); everything else unchanged."""
    return text.translate(_ESCAPE)


def _indented(block: str) -> str:
    """Each line of a traceback escaped and indented by ``CONTINUATION``."""
    return "\n".join(CONTINUATION + escape_controls(line) for line in block.split("\n"))


@contextlib.contextmanager
def for_outbox(name: str) -> Iterator[None]:
    """While inside, this thread's log lines name the outbox ``name`` (``outbox "orders": …``).
    A fleet scheduler runs each outbox's jobs inside it (``fleet_scheduler.OutboxJobs``)."""
    token = _OUTBOX.set(name)
    try:
        yield
    finally:
        _OUTBOX.reset(token)


def _name_the_outbox(record: logging.LogRecord) -> bool:
    """The handler's filter: ``record.outbox_named`` is ``outbox "<name>": `` inside
    ``for_outbox``, else empty (``LOG_FORMAT`` puts it before the message)."""
    name = _OUTBOX.get()
    record.outbox_named = f'outbox "{name}": ' if name else ""
    return True


class OneLineFormatter(logging.Formatter):
    """A ``logging.Formatter`` whose record line never spans lines (``escape_controls``)
    and whose traceback and stack lines are indented by ``CONTINUATION``.

    The line is formatted with ``fmt`` as usual, then escaped as a whole: a message's
    arguments (an event type, an error's text) cannot start a line of their own.
    """

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        text = escape_controls(self.formatMessage(record))
        if record.exc_info:
            text += "\n" + _indented(self.formatException(record.exc_info))
        elif record.exc_text:
            text += "\n" + _indented(record.exc_text)
        if record.stack_info:
            text += "\n" + _indented(self.formatStack(record.stack_info))
        return text


def configure_logging(level: str | int | None = None) -> bool:
    """Log every record of this process on stderr through ``OneLineFormatter``
    (``LOG_FORMAT``), unless the root logger has a handler already (like
    ``logging.basicConfig``: a host such as pytest keeps its own).

    Args:
        level: ``DEBUG``, ``INFO`` … (default ``OUTBOX_MONITOR_LOG_LEVEL``, else ``INFO``).

    Returns:
        Whether the handler was installed (``False`` when the root logger had one).

    Raises:
        ValueError: ``level`` (or the variable) is not a level name.
    """
    root = logging.getLogger()
    if root.handlers:
        return False
    chosen = level or os.environ.get(LEVEL_ENV) or DEFAULT_LEVEL
    root.setLevel(chosen.upper() if isinstance(chosen, str) else chosen)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineFormatter(LOG_FORMAT))
    handler.addFilter(_name_the_outbox)
    root.addHandler(handler)
    return True
