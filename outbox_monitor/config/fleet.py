"""A fleet of outboxes (issue 16 item 1): the outboxes one control room watches, each in its
own database, read from a file (``OUTBOX_MONITOR_OUTBOXES``, e.g. ``outboxes.yml``) validated
like alerts.yml — the outbox and the field named in every error — or, without a file, the
single outbox of the ``OUTBOX_MONITOR_*`` settings as a fleet of one.

The file names the environment variables that hold each outbox's DSNs, never a DSN: secrets
stay in the environment. A ``*_dsn_env`` key is optional, but a variable it names must be set.
Each outbox's ``Settings`` are the process's settings with that outbox's database, table, lock
timeout, retention and labels (``Outbox.settings``).

```yaml
version: 1
outboxes:
  - name: orders
    dsn_env: ORDERS_DSN               # read: figures, the dashboard (may be a hot standby)
    primary_dsn_env: ORDERS_PRIMARY   # optional: writes (alert state, samples); else dsn_env
    actions_dsn_env: ORDERS_ACTIONS   # optional: operator actions; else dsn_env
    table: public.integration_outbox  # default
    lock_timeout: 15m                 # default: OUTBOX_MONITOR_LOCK_TIMEOUT
    retention: {done: 30d, failed: 90d}   # default: OUTBOX_MONITOR_AUTO_PRUNE_*
    labels: {team: payments, service: orders}
    access:                           # optional: this outbox's own role mapping (sign-in modes)
      operators: [alice@example.com, groups=payments-oncall]
      viewers: ["@example.com"]
```
"""

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from psycopg.conninfo import conninfo_to_dict
from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema, field_validator

from outbox_monitor.config.settings import MIN_AUTO_PRUNE_SECONDS, MIN_TIMEOUT_SECONDS, Settings
from outbox_monitor.config.values import (
    TABLE_NAME_PATTERN,
    Seconds,
    check_dsn,
    check_role_entries,
    split_table_name,
)
from outbox_monitor.durations import duration_json_schema
from outbox_monitor.errors import ConfigError

FLEET_ENV = "OUTBOX_MONITOR_OUTBOXES"
"""The environment variable naming the fleet file; unset: a fleet of one."""
SINGLE = "default"
"""The name of the one outbox of the ``OUTBOX_MONITOR_*`` settings (a fleet of one)."""
MAX_BYTES = 1_000_000
"""The largest fleet file read (a thousand outboxes take ≈ 300 kB)."""
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
"""An outbox name: it is in URLs, metric labels and alert instances."""
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]{0,62}")


class FleetError(ConfigError):
    """The fleet file cannot be used; one line per problem, each naming the outbox and
    field (``outboxes.yml: outbox "orders" (outboxes[0]), dsn_env: …``)."""


class _Retention(BaseModel):
    """How long the leading scheduler keeps this outbox's finished rows (auto-prune, daily);
    left out: ``OUTBOX_MONITOR_AUTO_PRUNE_DONE`` and ``_FAILED``."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
    done: Seconds | None = None
    """Done rows older than this are pruned (at least ``1d``); left out: never."""
    failed: Seconds | None = None
    """Dead letters older than this are pruned (at least ``1d``); left out: never."""

    @field_validator("done", "failed")
    @classmethod
    def _at_least_a_day(cls, value: float | None) -> float | None:
        if value is not None and value < MIN_AUTO_PRUNE_SECONDS:
            raise ValueError(
                f"retention is written in days (e.g. 30d); at least 1d, got {value:g} s"
            )
        return value


class _Access(BaseModel):
    """This outbox's own role mapping (sign-in modes ``oidc`` and ``proxy``), instead of
    ``OUTBOX_MONITOR_ADMINS``, ``_OPERATORS`` and ``_VIEWERS``: a list left out is empty,
    nothing is inherited."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
    admins: tuple[str, ...] = ()
    """Admins of this outbox: e-mails, ``@domains`` or claim matches (``groups=oncall``)."""
    operators: tuple[str, ...] = ()
    """Operators of this outbox (they act on it); entries as ``admins``."""
    viewers: tuple[str, ...] = ()
    """Viewers of this outbox; entries as ``admins``."""

    @field_validator("admins", "operators", "viewers")
    @classmethod
    def _check_entries(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return check_role_entries(value)  # ValueError naming the entry


_ENV_NAME_SCHEMA = {"pattern": f"^{ENV_NAME.pattern}$"}


class _OutboxEntry(BaseModel):
    """One outbox: its name, the environment variables of its DSNs, and what it sets
    differently from the process's ``OUTBOX_MONITOR_*`` settings."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
    name: str = Field(json_schema_extra={"pattern": f"^{NAME.pattern}$"})
    """The outbox's name, unique in the file: lower-case letters, digits, ``-`` and ``_``
    (it goes into URLs, metric labels and alert instances)."""
    dsn_env: str = Field(json_schema_extra=_ENV_NAME_SCHEMA)
    """The environment variable holding the DSN the figures and the dashboard read (it may
    be a hot standby); never the DSN itself. It must be set."""
    primary_dsn_env: str | None = Field(default=None, json_schema_extra=_ENV_NAME_SCHEMA)
    """The variable of the DSN the scheduler writes through (lease, samples, alert state);
    left out: ``dsn_env``'s. When named, it must be set."""
    actions_dsn_env: str | None = Field(default=None, json_schema_extra=_ENV_NAME_SCHEMA)
    """The variable of the DSN operator actions use; left out: ``dsn_env``'s. When named, it
    must be set."""
    table: str | None = Field(default=None, json_schema_extra={"pattern": TABLE_NAME_PATTERN})
    """The outbox table, ``schema.table``; left out: ``OUTBOX_MONITOR_TABLE``. Two outboxes
    of one database have different tables."""
    lock_timeout: Annotated[
        Seconds | None,
        # pydantic would write the bound of a union as a key JSON Schema does not know (ge)
        WithJsonSchema(
            {"anyOf": [duration_json_schema(minimum=MIN_TIMEOUT_SECONDS), {"type": "null"}]}
        ),
    ] = Field(default=None, ge=MIN_TIMEOUT_SECONDS)
    """A ``processing`` row locked longer is stuck (at least ``1s``); left out:
    ``OUTBOX_MONITOR_LOCK_TIMEOUT``."""
    retention: _Retention | None = None
    """Auto-prune of this outbox's done rows and dead letters."""
    labels: dict[str, str] = Field(
        default_factory=dict,
        json_schema_extra={
            "propertyNames": {"pattern": f"^{LABEL.pattern}$", "not": {"const": "outbox"}}
        },
    )
    """Labels (``team: payments``) of the outbox's alerts, which rules' ``outboxes``,
    routes' ``matchers`` and silences select by; not ``outbox``, which every outbox has."""
    access: _Access | None = None
    """This outbox's own role mapping; left out: the process's."""

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not NAME.fullmatch(value):
            raise ValueError(
                f"{value!r} is not an outbox name: lower-case letters, digits, - and _, at most "
                "63, starting with a letter or digit (it goes into URLs and metric labels)"
            )
        return value

    @field_validator("dsn_env", "primary_dsn_env", "actions_dsn_env")
    @classmethod
    def _check_env_name(cls, value: str | None) -> str | None:
        if value is not None and not ENV_NAME.fullmatch(value):
            raise ValueError(
                f"{value!r} is not an environment variable name (the file names the variable "
                "that holds the DSN, never the DSN itself)"
            )
        return value

    @field_validator("table")
    @classmethod
    def _check_table(cls, value: str | None) -> str | None:
        if value is not None:
            split_table_name(value)  # ValueError naming what is wrong
        return value

    @field_validator("labels")
    @classmethod
    def _check_labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not LABEL.fullmatch(key) or key == "outbox":
                raise ValueError(
                    f"label {key!r}: letters, digits and _, starting with a letter or _ "
                    "(a Prometheus label name), and not 'outbox' (every outbox has it)"
                )
        return value


class FleetFile(BaseModel):
    """The fleet file (``OUTBOX_MONITOR_OUTBOXES``): the outboxes one control room watches,
    each in its own database or table. Every setting an outbox does not give is the
    process's ``OUTBOX_MONITOR_*`` value."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
    version: Literal[1]
    """The file's format: 1."""
    outboxes: list[_OutboxEntry] = Field(min_length=1)
    """The outboxes, in the order the dashboard and ``outbox-monitor outboxes`` list them."""


@dataclass(frozen=True)
class Outbox:
    """One outbox of the fleet: its ``name`` (URLs, the ``outbox`` label of metrics and alert
    instances), its ``labels`` (team, service: rules and routes select by them) and its
    ``settings`` (the process's, with this outbox's DSNs, table, lock timeout, retention and, when
    the file gives it, role mapping: ``access.role_for`` on them is the role on this outbox; for
    an outbox of the file ``settings.fleet_outbox`` is its name, which keys its alert state)."""

    name: str
    settings: Settings
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Fleet:
    """The outboxes in file order (unique names); ``path`` is the file, ``None`` for a fleet
    of one from the ``OUTBOX_MONITOR_*`` settings; ``listed``: every outbox of the file when
    these are a selection of it (``--outbox``, ``selection``), else empty."""

    outboxes: tuple[Outbox, ...]
    path: str | None = None
    listed: tuple[Outbox, ...] = ()

    def selection(self, outboxes: Sequence[Outbox]) -> "Fleet":
        """The fleet of ``outboxes`` (of this one), remembering the whole file's: a rule
        naming an outbox of the file that is not selected is valid, not evaluated here."""
        return Fleet(tuple(outboxes), self.path, self.listed or self.outboxes)

    @property
    def in_file(self) -> tuple[Outbox, ...]:
        """Every outbox of the file (``listed``, else ``outboxes``): what rules may name."""
        return self.listed or self.outboxes

    def get(self, name: str) -> Outbox:
        """The outbox named ``name``.

        Raises:
            KeyError: with the names there are.
        """
        for outbox in self.outboxes:
            if outbox.name == name:
                return outbox
        raise KeyError(
            f"no outbox named {name!r}; the fleet has {', '.join(o.name for o in self.outboxes)}"
        )

    @property
    def names(self) -> list[str]:
        """The outboxes' names, in file order."""
        return [outbox.name for outbox in self.outboxes]


def _where(entries: Any, loc: tuple) -> str:
    """``outbox "orders" (outboxes[0]), dsn_env`` for a location inside an outbox entry."""
    from outbox_monitor.config.yaml_files import dotted

    if len(loc) >= 2 and loc[0] == "outboxes" and isinstance(loc[1], int):
        index = loc[1]
        name = None
        if isinstance(entries, list) and index < len(entries) and isinstance(entries[index], dict):
            name = entries[index].get("name")
        who = f'outbox "{name}" (outboxes[{index}])' if name else f"outboxes[{index}]"
        rest = dotted(loc[2:])
        return f"{who}, {rest}" if rest else who
    return dotted(loc) or "the file"


def _allowed(loc: tuple) -> list[str]:
    if len(loc) >= 3 and loc[0] == "outboxes" and loc[2] == "retention":
        return list(_Retention.model_fields)
    if len(loc) >= 3 and loc[0] == "outboxes" and loc[2] == "access":
        return list(_Access.model_fields)
    if len(loc) >= 2 and loc[0] == "outboxes":
        return list(_OutboxEntry.model_fields)
    return list(FleetFile.model_fields)


def _entry_dsns(entry: _OutboxEntry, env: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """The DSNs of one outbox read from the variables the entry names (``None`` for a key it
    leaves out), and its problems: every named variable unset, empty or holding an unusable
    DSN, one line each naming the field (``primary_dsn_env: the environment variable
    ORDERS_PRIMARY is not set``)."""
    dsns: dict[str, Any] = {}
    problems: list[str] = []
    for key, variable in (
        ("dsn", entry.dsn_env),
        ("primary_dsn", entry.primary_dsn_env),
        ("actions_dsn", entry.actions_dsn_env),
    ):
        dsns[key] = None
        if variable is None:
            continue
        value = env.get(variable, "")
        if not value.strip():
            problems.append(f"{key}_env: the environment variable {variable} is not set")
            continue
        try:
            dsns[key] = check_dsn(value)
        except ValueError as error:
            problems.append(f"{key}_env: {variable} holds no usable DSN: {error}")
    return dsns, problems


def _entry_settings(entry: _OutboxEntry, base: Settings, dsns: Mapping[str, Any]) -> Settings:
    """The settings of one outbox: ``base`` with its ``dsns`` (``_entry_dsns``) and its own
    table, lock timeout, retention and access."""
    changes: dict[str, Any] = dict(dsns)
    if entry.table is not None:
        changes["table"] = entry.table
    if entry.lock_timeout is not None:
        changes["lock_timeout"] = entry.lock_timeout
    if entry.retention is not None:
        changes["auto_prune_done"] = entry.retention.done
        changes["auto_prune_failed"] = entry.retention.failed
    if entry.access is not None:
        changes.update(entry.access.model_dump())
    return base.model_copy(update=changes).of_fleet_outbox(entry.name)


def _database_of(dsn: str | None) -> tuple[str, str, str] | None:
    """``(host, port, dbname)`` of a checked DSN, however it is spelled (a URI or key=value,
    the default port written or not, other parameters ignored); ``None``: the PG* variables."""
    if not dsn:
        return None
    parts = conninfo_to_dict(dsn)
    return (
        str(parts.get("host") or ""),
        str(parts.get("port") or "5432"),
        str(parts.get("dbname") or parts.get("user") or ""),
    )


def load_fleet(
    settings: Settings, path: str | Path | None = None, env: Mapping[str, str] | None = None
) -> Fleet:
    """The fleet: the outboxes of ``path`` (default: ``$OUTBOX_MONITOR_OUTBOXES``), or without
    one the single outbox of ``settings``, named ``SINGLE``.

    Args:
        settings: the process's settings (``config.settings.load_settings``); each outbox's settings
            are these with its own database, table, lock timeout and retention.
        path: the fleet file; ``None`` reads ``FLEET_ENV``.
        env: where the DSN variables are read (default ``os.environ``).

    Returns:
        A ``Fleet`` of at least one outbox, names unique.

    Raises:
        FleetError: the file is unreadable, not strict YAML, or invalid — every problem on
            its own line, naming the outbox and field (a duplicate name, every unset
            variable of every outbox, the same database — host, port, dbname, however the DSN
            spells them — and table as an earlier outbox, naming both).
    """
    env = os.environ if env is None else env
    path = path if path is not None else env.get(FLEET_ENV) or None
    if path is None:
        return Fleet((Outbox(SINGLE, settings),))
    # YAML only when there is a file: a command's start-up imports no YAML without one
    from outbox_monitor.config.yaml_files import YamlProblem, describe, read_yaml

    prefix = f"{path}: "
    try:
        document = read_yaml(
            path,
            what="fleet file",
            max_bytes=MAX_BYTES,
            size_note="(outboxes.yml lists outboxes and the variables of their DSNs)",
        )
    except YamlProblem as problem:
        raise FleetError("\n".join(prefix + line for line in problem.problems)) from None
    if not isinstance(document, dict):
        raise FleetError(prefix + "expected a mapping with version: 1 and outboxes: [...]")
    try:
        parsed = FleetFile.model_validate(document)
    except ValidationError as error:
        entries = document.get("outboxes")
        lines = [
            f"{prefix}{_where(entries, tuple(e['loc']))}: {describe(e, _allowed(tuple(e['loc'])))}"
            for e in error.errors()
        ]
        raise FleetError("\n".join(lines)) from None
    problems: list[str] = []
    outboxes: list[Outbox] = []
    seen: dict[str, int] = {}
    tables: dict[tuple[tuple[str, str, str] | None, tuple[str, str]], str] = {}
    for index, entry in enumerate(parsed.outboxes):
        who = f'outbox "{entry.name}" (outboxes[{index}])'
        if entry.name in seen:
            problems.append(
                f"{prefix}{who}, name: also the name of outboxes[{seen[entry.name]}]; "
                "names must be unique"
            )
            continue
        seen[entry.name] = index
        dsns, unusable = _entry_dsns(entry, env)
        problems.extend(f"{prefix}{who}, {problem}" for problem in unusable)
        if unusable:
            continue
        outbox = Outbox(entry.name, _entry_settings(entry, settings, dsns), dict(entry.labels))
        where = (_database_of(outbox.settings.dsn), split_table_name(outbox.settings.table))
        if where in tables:
            problems.append(
                f"{prefix}{who}, table: the same database and table as {tables[where]}; "
                "each outbox is one table"
            )
            continue
        tables[where] = who
        outboxes.append(outbox)
    if problems:
        raise FleetError("\n".join(problems))
    return Fleet(tuple(outboxes), str(path))
