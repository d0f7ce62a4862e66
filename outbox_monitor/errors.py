"""The package's exception tree: every message says what is wrong and how to fix it."""


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


class SchemaNotInitialised(OutboxMonitorError):
    """The ``outbox_monitor`` schema (audit log, samples, functions) is absent or old."""


class QueryTimeout(OutboxMonitorError):
    """A monitor query hit the statement timeout and was cancelled by Postgres."""


class PermissionDenied(OutboxMonitorError):
    """The database role lacks a privilege the operation needs."""


class ActionRefused(OutboxMonitorError):
    """An operator action was refused before it changed anything (bad filter, no rows)."""


class AccessDenied(OutboxMonitorError):
    """The signed-in identity's role does not allow the operation (README, Security)."""


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
