"""The package's exception tree: every message says what is wrong and how to fix it; and
``clean_error``, error text as the database can store it."""

MAX_ERROR_CHARS = 2000
"""Stored error text keeps this many characters (code points, as Postgres counts them):
an outbox row's ``last_error``, an alert instance's evaluation error."""
REPLACEMENT_CHARACTER = "\ufffd"
"""Stands in for a character Postgres text cannot hold (U+0000, a lone surrogate)."""


def clean_error(text: str, max_chars: int = MAX_ERROR_CHARS) -> str:
    """Error text as Postgres ``text`` (and ``jsonb``) can hold it, cut to ``max_chars``.

    Postgres text cannot carry U+0000 and UTF-8 cannot carry a lone surrogate, so binding
    either raises (``psycopg.DataError``, ``UnicodeEncodeError``) and the row is lost.
    Each becomes U+FFFD; a surrogate pair (as a JSON decoder may leave one) becomes the
    one character it encodes. The cut is on a character boundary. Every writer of error
    text uses it: the worker API (``outbox.fail``; the SQL ``fail`` keeps the same cut as
    a last guard), alert evaluation (``alert_instances.error``) and the Slack sender
    (``notifications.last_error``).

    Args:
        text: any ``str``.
        max_chars: the longest result, in code points (default ``MAX_ERROR_CHARS``).

    Returns:
        The cleaned text, at most ``max_chars`` code points.
    """
    whole = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return whole.replace("\x00", REPLACEMENT_CHARACTER)[:max_chars]


class OutboxMonitorError(Exception):
    """Base of every error outbox-monitor raises on purpose.

    ``str(error)`` is a complete, user-facing message; ``error.hint`` (may be empty)
    is the fix to show next to it.
    """

    hint: str = ""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        if hint:
            self.hint = hint

    def __str__(self) -> str:
        message = super().__str__()
        return f"{message}\n{self.hint}" if self.hint else message


class ConfigError(OutboxMonitorError):
    """A setting (environment variable or CLI option) is invalid; the message names it."""


class DatabaseUnavailable(OutboxMonitorError):
    """The database cannot be reached (wrong DSN, server down or restarting)."""


class LoginRefused(DatabaseUnavailable):
    """The server refused the DSN's user or password (SQLSTATE 28P01/28000)."""


class TableMissing(OutboxMonitorError):
    """The configured outbox table does not exist."""


class ColumnsMissing(OutboxMonitorError):
    """The outbox table exists but lacks SPEC §1 columns or has other types."""


class PartitioningUnsupported(ColumnsMissing):
    """The outbox table is partitioned in a way the product cannot work on: not by range of
    ``created_at``, or without a unique index on ``(event_key, created_at)`` (SPEC §1)."""


class SchemaNotInitialised(OutboxMonitorError):
    """The ``outbox_monitor`` schema (audit log, samples, functions) is absent or old."""


class QueryTimeout(OutboxMonitorError):
    """A monitor query hit the statement timeout and was cancelled by Postgres."""


class PermissionDenied(OutboxMonitorError):
    """The database role lacks a privilege the operation needs."""


class ReadOnlyDatabase(OutboxMonitorError):
    """A write reached a server that accepts none: a hot standby in recovery (a read
    replica), or a login whose transactions are read-only by default."""


class ActionRefused(OutboxMonitorError):
    """An operator action was refused before it changed anything (bad filter, no rows)."""


class AccessDenied(OutboxMonitorError):
    """The signed-in identity's role does not allow the operation (docs/security.md)."""


class ActionInterrupted(OutboxMonitorError):
    """A confirmed action stopped by an error after it began (a refused batch, a lost
    connection): the batches committed before it stay applied and audited.

    The message is the summary (action, committed batches and rows, run id, the error);
    the hint says what to do. ``run_id``, ``batches`` (committed), ``changed`` (rows in
    them) and ``cause`` (the error's own text) are kept for JSON output.
    """

    def __init__(
        self,
        message: str,
        hint: str,
        *,
        action: str,
        run_id: str,
        batches: int,
        changed: int,
        cause: str,
    ) -> None:
        super().__init__(message, hint)
        self.action = action
        self.run_id = run_id
        self.batches = batches
        self.changed = changed
        self.cause = cause
