"""The least-privilege database roles of outbox-monitor's processes (docs/security.md).

Three group roles, each granted only what its processes do today:

- ``viewer`` (``outbox_viewer``): SELECT on the outbox table and the ``outbox_monitor``
  tables, EXECUTE on no function that writes (the reading ones keep PUBLIC's) — every
  dashboard page, ``status``, ``check`` and the previews of actions. The login of
  ``OUTBOX_MONITOR_DSN``.
- ``scheduler`` (``outbox_scheduler``): the viewer's, plus writing samples, alert state
  and notifications; never the outbox.
- ``operator`` (``outbox_operator``): the viewer's, plus EXECUTE on the outbox's audited
  writers (``store.audited_writers``: reap, replay, prune, the notes of reveals and
  searches, refusals; no UPDATE, DELETE or INSERT on the outbox, and no role may call the
  audit log's internal writer ``outbox_monitor.record_audit`` but its owner), EXECUTE on
  ``outbox_monitor.record_test_notification`` (the
  "send test alert" message's writer: no INSERT on notifications, whose rows the sender
  posts and whose dedupe keys suppress alerts) and INSERT/UPDATE on silences. The login
  of ``OUTBOX_MONITOR_ACTIONS_DSN``.

The statements are the ``grants`` block of ``sql/queries.sql``; ``grant_statements``
renders it for the configured outbox table (``outbox-monitor init-db --print-grants``
prints it; docs/security.md shows it for the default table and a test keeps the two equal), and
``role_granting`` reads it back to say which role holds a privilege that is missing.
"""

import re
from dataclasses import dataclass

from psycopg import sql

from outbox_monitor.config.settings import Settings
from outbox_monitor.store.audited_writers import writer_privileges
from outbox_monitor.store.queries import compose

DEFAULT_VIEWER_ROLE = "outbox_viewer"
DEFAULT_SCHEDULER_ROLE = "outbox_scheduler"
DEFAULT_OPERATOR_ROLE = "outbox_operator"
MAX_ROLE_NAME_LENGTH = 63
_ROLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# One GRANT or REVOKE of privileges (not of a role) in the rendered script; it may span
# lines.
_GRANT = re.compile(
    r"^(?P<verb>GRANT|REVOKE) (?P<privileges>[A-Z, ]+?) ON (?P<target>.+?) "
    r"(?:TO|FROM) (?P<role>\S+);$",
    re.M | re.S,
)
_REVOKE = "REVOKE EXECUTE ON FUNCTION {} FROM {};"
_GRANT_TO = "GRANT EXECUTE ON FUNCTION {} TO {};"
_IN_SCHEMA = re.compile(r"^ALL (?P<kind>TABLES|FUNCTIONS|SEQUENCES) IN SCHEMA (?P<schema>\S+)$")
_KINDS = {"TABLES": "table", "FUNCTIONS": "function", "SEQUENCES": "sequence"}


@dataclass(frozen=True)
class Roles:
    """The names of the three group roles (``--viewer-role`` etc. of ``init-db``)."""

    viewer: str = DEFAULT_VIEWER_ROLE
    scheduler: str = DEFAULT_SCHEDULER_ROLE
    operator: str = DEFAULT_OPERATOR_ROLE

    def __post_init__(self) -> None:
        names = (self.viewer, self.scheduler, self.operator)
        for name in names:
            check_role_name(name)
        if len(set(names)) != len(names):
            raise ValueError(f"the viewer, scheduler and operator roles must differ, got {names}")


def check_role_name(name: str) -> str:
    """Check a role name given on the command line.

    Args:
        name: a Postgres role name.

    Returns:
        ``name`` unchanged (it is always written as a quoted identifier, so case counts).

    Raises:
        ValueError: not letters, digits and ``_`` (not starting with a digit), or longer
            than 63 characters.
    """
    if not _ROLE_NAME.match(name) or len(name) > MAX_ROLE_NAME_LENGTH:
        raise ValueError(
            f"expected a role name of letters, digits and _ (at most "
            f"{MAX_ROLE_NAME_LENGTH}), got {name!r}"
        )
    return name


def grant_statements(settings: Settings, roles: Roles = Roles()) -> str:
    """The SQL script that creates the three roles and grants them what they need.

    Names enter only as ``psycopg.sql.Identifier`` (rendered without a connection). The
    script is idempotent (existing roles are kept) and commented; it connects to nothing.

    Args:
        settings: for the outbox table (``settings.table``) and the ledger named in a
            comment (it is the workers', never granted).
        roles: the role names (default ``outbox_viewer``, ``outbox_scheduler``,
            ``outbox_operator``).

    Returns:
        The script, ``;``-terminated statements and ``--`` comments, without a final
        newline. Run it as the owner of the outbox table and of the ``outbox_monitor``
        schema (the role that ran ``init-db``), with CREATEROLE.
    """
    schema, _ = settings.table_parts
    return compose(
        "grants",
        table=sql.Identifier(*settings.table_parts),
        outbox_schema=sql.Identifier(schema),
        ledger=sql.Identifier(*settings.ledger_parts),
        viewer=sql.Identifier(roles.viewer),
        scheduler=sql.Identifier(roles.scheduler),
        operator=sql.Identifier(roles.operator),
        writers_from_public=writer_privileges(settings, _REVOKE, sql.SQL("PUBLIC")),
        writers_from_viewer=writer_privileges(settings, _REVOKE, sql.Identifier(roles.viewer)),
        writers_to_operator=writer_privileges(settings, _GRANT_TO, sql.Identifier(roles.operator)),
    ).as_string()


def role_granting(settings: Settings, privilege: str, kind: str, qualified_name: str) -> str | None:
    """Which of the default roles is granted a privilege, by ``grant_statements`` itself.

    Args:
        settings: for the outbox table the grants name.
        privilege: ``SELECT``, ``UPDATE``, ``USAGE``, ``EXECUTE``, …
        kind: ``table``, ``sequence``, ``schema`` or ``function``.
        qualified_name: ``schema.name`` (``schema`` alone for a schema), unquoted.

    Returns:
        The first of ``outbox_viewer``, ``outbox_scheduler``, ``outbox_operator`` whose own
        grants include it and no later ``REVOKE`` takes it back (the scheduler and the
        operator also hold the viewer's), or ``None`` when outbox-monitor's roles never
        get it.
    """
    holds: dict[str, bool] = {}
    for match in _GRANT.finditer(grant_statements(settings)):
        privileges = [p.strip() for p in match["privileges"].split(",")]
        if privilege.upper() not in privileges:
            continue
        if _covers(" ".join(match["target"].split()), kind, qualified_name):
            holds[_unquote(match["role"])] = match["verb"] == "GRANT"
    return next((role for role, held in holds.items() if held), None)


def _covers(target: str, kind: str, qualified_name: str) -> bool:
    in_schema = _IN_SCHEMA.match(target)
    if in_schema:
        schema = qualified_name.rpartition(".")[0]
        return _KINDS[in_schema["kind"]] == kind and _unquote(in_schema["schema"]) == schema
    if target.startswith("SCHEMA "):
        return kind == "schema" and _unquote(target.removeprefix("SCHEMA ")) == qualified_name
    if target.startswith("FUNCTION "):
        name = target.removeprefix("FUNCTION ").partition("(")[0]
        return kind == "function" and _unquote(name) == qualified_name
    if target.startswith("SEQUENCE "):
        objects, wanted = target.removeprefix("SEQUENCE "), "sequence"
    else:
        objects, wanted = target.removeprefix("TABLE "), "table"
    names = {_unquote(name.strip()) for name in objects.split(",")}
    return kind == wanted and qualified_name in names


def _unquote(name: str) -> str:
    return ".".join(part.strip('"') for part in name.split("."))
