"""Controls as code: a YAML file of controls (SPEC §5) applied idempotently.

The file, like alerts.yml::

    version: 1
    controls:
      - event_type: "crm.%"          # SPEC §2 filter: exact, or LIKE with %
        concurrency: 5               # at most 5 rows in processing
        rate: {per_second: 10, burst: 20}
        breaker: {window: 60s, min_attempts: 20, ratio: 0.9, cooldown: 30s}
      - event_type: legacy.sync
        pause: {reason: "decommissioned"}

``load_controls`` validates it and names every problem by entry and field
(``controls.yml: controls[1] "crm.%": breaker.cooldown: …``); ``apply_controls`` writes the
file layer of ``outbox_monitor.controls`` to match — rows that changed, rows gone from the file
deleted — in one audited transaction, and never touches an operator's override.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from psycopg import sql
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    field_validator,
)

from outbox_monitor.access import Identity, Role
from outbox_monitor.config.yaml_files import (
    PositiveDuration,
    YamlProblem,
    describe,
    dotted,
    quoted,
    read_yaml,
)
from outbox_monitor.errors import ConfigError
from outbox_monitor.flow.model import (
    MAX_COOLDOWN_SECONDS,
    MAX_FILTER_CHARS,
    MAX_LIMIT,
    ControlSettings,
    check_filter,
    default_burst,
)
from outbox_monitor.flow.rows import (
    barrier,
    check_table,
    deleted,
    key,
    lock,
    save,
    settings_of,
    written,
)
from outbox_monitor.store.audit import require_audited
from outbox_monitor.store.db import Database

MAX_CONTROLS_FILE_BYTES = 256 * 1024
"""The largest controls file read; a few KB is normal."""


class ControlsError(ConfigError):
    """The controls file cannot be used. ``problems`` holds one line each:
    ``<file>: controls[<i>] "<filter>": <field>: <message>``."""

    hint = "Fix the controls file, then check it with `outbox-monitor controls apply --dry-run`."

    def __init__(self, path: str | Path, problems: list[str]) -> None:
        self.path = str(path)
        self.problems = [f"{self.path}: {problem}" for problem in problems]
        super().__init__("\n".join(self.problems))


def _whole(value: Any) -> Any:
    """A whole number as YAML may write it: ``5`` or ``5.0`` (JSON Schema's ``integer``);
    never a boolean, text or a fraction."""
    if isinstance(value, float) and not isinstance(value, bool) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected a whole number, got {quoted(value)}")
    return value


WholeNumber = Annotated[int, BeforeValidator(_whole)]
"""A count in the controls file: ``5`` or ``5.0``; ``true``, ``"5"`` and ``2.5`` refused."""
Count = Annotated[int, Field(ge=1, le=MAX_LIMIT), BeforeValidator(_whole)]
"""A ``WholeNumber`` from 1 to ``MAX_LIMIT`` (bounds first: the JSON Schema says them)."""


def _number(value: Any) -> Any:
    """A number as YAML writes it (``0.5``, ``1``, ``1e3``); never a boolean or text."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number, got {quoted(value)}")
    return value


Number = Annotated[float, BeforeValidator(_number)]
"""A number in the controls file: ``true`` and ``"0.5"`` refused (no coercion)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class _Pause(_Strict):
    """A pause with its reason."""

    reason: str | None = Field(default=None, max_length=500)
    """Why, shown with the pause on the Controls page and in ``outbox-monitor controls``."""


class _Rate(_Strict):
    """A rate limit: the claim hands out at most ``per_second`` rows a second, ``burst`` at
    once after a quiet spell."""

    per_second: Number = Field(gt=0, le=MAX_LIMIT, allow_inf_nan=False)
    """Rows a second."""
    burst: Count | None = None
    """Rows handed out at once after a quiet spell; left out: one second's worth (at least
    1)."""


class _Breaker(_Strict):
    """A circuit breaker (SPEC §5): it opens when at least ``min_attempts`` outcomes (acks
    and transient failures) in the last ``window`` hold ``ratio`` transient failures, holds
    the rows for ``cooldown``, then hands out one row as a probe: its ack closes the
    breaker, its transient failure re-opens it with the cool-down doubled (up to 15m)."""

    window: PositiveDuration = 60.0
    """The span of outcomes counted."""
    min_attempts: WholeNumber = Field(default=20, ge=1)
    """The fewest outcomes in the window that may open it."""
    ratio: Number = Field(default=0.9, gt=0, le=1, allow_inf_nan=False)
    """The share of transient failures among them that opens it (0–1)."""
    cooldown: PositiveDuration = 30.0
    """How long it stays open before a probe (at most ``15m``)."""
    probe_timeout: PositiveDuration = 900.0
    """A probe neither acked nor failed within this re-opens the breaker, its cool-down
    doubled."""

    @field_validator("cooldown")
    @classmethod
    def _at_most_15_minutes(cls, value: float) -> float:
        if value > MAX_COOLDOWN_SECONDS:
            raise ValueError(f"at most 15m (a failed probe doubles it up to 15m), got {value:g}s")
        return value


class FileControl(_Strict):
    """The controls of one event type, or of a pattern of them."""

    event_type: str = Field(
        json_schema_extra={
            "minLength": 1,
            "maxLength": MAX_FILTER_CHARS,
            "pattern": "^[^\\x00-\\x1f]*$",
        }
    )
    """The event types controlled: exact, or a LIKE pattern with ``%`` (``crm.%``); one
    entry per filter."""
    pause: StrictBool | _Pause = False
    """``true`` or ``{reason: ...}``: the claim hands out none of these rows."""
    concurrency: Count | None = None
    """At most this many of these rows in ``processing`` at once."""
    rate: _Rate | None = None
    """A rate limit."""
    breaker: StrictBool | _Breaker = False
    """``true`` (the defaults below) or its settings: a circuit breaker on these rows'
    outcomes."""

    _filter = field_validator("event_type")(lambda value: check_filter(value))

    def settings(self) -> ControlSettings:
        """The entry as the settings of a control row."""
        pause = self.pause if isinstance(self.pause, _Pause) else None
        breaker = self.breaker if isinstance(self.breaker, _Breaker) else _Breaker()
        return ControlSettings(
            paused=bool(self.pause),
            pause_reason=pause.reason if pause else None,
            concurrency_limit=self.concurrency,
            rate_per_second=self.rate.per_second if self.rate else None,
            burst=(self.rate.burst or default_burst(self.rate.per_second)) if self.rate else None,
            breaker=bool(self.breaker),
            breaker_window_seconds=breaker.window,
            breaker_min_attempts=breaker.min_attempts,
            breaker_ratio=breaker.ratio,
            breaker_cooldown_seconds=breaker.cooldown,
            probe_timeout_seconds=breaker.probe_timeout,
        )


class ControlsFile(_Strict):
    """A controls file (``outbox-monitor controls apply``): flow controls as code, applied
    idempotently; an operator's change on the Controls page overrides an entry for a while.
    An empty file is no controls."""

    model_config = ConfigDict(json_schema_extra={"type": ["object", "null"]})
    version: Literal[1] = 1
    """The file's format: 1."""
    controls: list[FileControl] = Field(default_factory=list)
    """The controls, one entry per event-type filter; a filter removed from the file loses
    its control at the next apply."""


_MODELS: dict[str, type[BaseModel]] = {
    "pause": _Pause,
    "rate": _Rate,
    "breaker": _Breaker,
}


def _allowed(loc: tuple) -> list[str]:
    if len(loc) <= 1:
        model: type[BaseModel] = ControlsFile
    elif len(loc) == 3:
        model = FileControl
    else:
        model = _MODELS.get(str(loc[3]), FileControl)
    return list(model.model_fields)


def _branch(part: object) -> bool:
    """A union branch's name in a pydantic location (``bool``, ``_Pause``, ``function-…``):
    pydantic's, not a key of the file."""
    text = str(part)
    return text in ("bool", "int", "float", "str", "_Pause", "_Rate", "_Breaker") or (
        text.startswith(("function-", "constrained-"))
    )


def _meant(item: dict[str, Any]) -> bool:
    """Of the two errors of ``pause`` or ``breaker`` (``true``/``false`` or a mapping), the
    one of the branch the value meant: a mapping's own errors, else "expected true or
    false"."""
    branch = item["loc"][-1] if item["loc"] else None
    if branch == "bool" and item["type"] == "bool_type":
        return not isinstance(item.get("input"), dict)
    return not (branch in ("_Pause", "_Breaker") and item["type"] == "model_type")


def _where(loc: tuple, data: Any) -> str:
    if len(loc) >= 2 and loc[0] == "controls" and isinstance(loc[1], int):
        entries = data.get("controls") if isinstance(data, dict) else None
        entry = entries[loc[1]] if isinstance(entries, list) and loc[1] < len(entries) else None
        name = entry.get("event_type") if isinstance(entry, dict) else None
        head = f"controls[{loc[1]}]" + (f" {quoted(name)}" if isinstance(name, str) else "")
        # a union's branch name (bool, _Pause) is pydantic's, not the user's
        rest = tuple(part for part in loc[2:] if not _branch(part))
        return head + (f": {dotted(rest)}" if rest else "")
    return dotted(loc)


def load_controls(path: str | Path) -> dict[str, ControlSettings]:
    """Load and validate a controls file.

    Args:
        path: the file.

    Returns:
        The controls by event-type filter, in file order.

    Raises:
        ControlsError: unreadable, over ``MAX_CONTROLS_FILE_BYTES``, not YAML, or invalid;
            every problem at once, each naming the entry and field.
    """
    try:
        data = read_yaml(
            path,
            what="controls file",
            max_bytes=MAX_CONTROLS_FILE_BYTES,
            size_note="(MAX_CONTROLS_FILE_BYTES; a controls file needs a few KB)",
        )
    except YamlProblem as problem:
        raise ControlsError(path, problem.problems) from None
    if data is None:
        return {}
    try:
        parsed = ControlsFile.model_validate(data)
    except ValidationError as error:
        lines = dict.fromkeys(
            f"{_where(tuple(item['loc']), data)}: {describe(item, _allowed(tuple(item['loc'])))}"
            for item in error.errors()
            if _meant(item)
        )
        raise ControlsError(path, list(lines)) from None
    result: dict[str, ControlSettings] = {}
    problems = []
    for index, entry in enumerate(parsed.controls):
        if entry.event_type in result:
            problems.append(
                f"controls[{index}] {quoted(entry.event_type)}: event_type: listed twice; "
                "one entry per filter"
            )
            continue
        try:
            result[entry.event_type] = entry.settings()
        except ValidationError as error:
            for item in error.errors():
                problems.append(f"controls[{index}] {quoted(entry.event_type)}: {item['msg']}")
    if problems:
        raise ControlsError(path, problems)
    return result


@dataclass(frozen=True)
class ApplyReport:
    """What ``apply_controls`` changed: filters written (new or changed), removed, and left
    as they were; ``audit_id`` is None when nothing changed (nothing is audited then).
    ``barrier_note`` is set when the apply stopped waiting for the claims already running
    (``rows.barrier``): they may still hand out rows it forbids; every caller shows it."""

    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    audit_id: int | None = None
    barrier_note: str | None = None


def apply_controls(
    db: Database,
    wanted: dict[str, ControlSettings],
    *,
    actor: Identity,
    dry_run: bool = False,
) -> ApplyReport:
    """Make the file layer of the table's controls equal ``wanted``; idempotent.

    Operators' overrides (``ui`` rows) are never read or changed: on a filter the file owns
    they stay in force until they expire; on a filter removed from the file they stand alone.

    Args:
        db: the Database of actions (operator grants).
        wanted: the file's controls by filter (``load_controls``).
        actor: who applies; must hold the operator role.
        dry_run: compute the report, change nothing.

    Returns:
        An ``ApplyReport``. Unless ``dry_run``, the apply is a barrier as every control
        change (SPEC §5, ``rows.barrier``): ``barrier_note`` says when its wait for the
        claims in flight ran out.

    Raises:
        AccessDenied: ``actor`` is not an operator.
        ActionRefused: a table the claim could not apply controls to (``rows.check_table``).
        The connector's errors.
    """
    require_audited(db, actor, Role.operator, "apply a controls file", "apply controls")
    report = ApplyReport()
    with db.transaction() as conn:
        # first, before any row lock (as every change: two changes never wait for each other
        # in opposite orders); a dry run changes nothing and waits for no claim
        note = None if dry_run else barrier(conn, db)
        if wanted:
            check_table(conn, db)
        lock(conn, db)
        rows = conn.execute(db.compose("control_rows", lock=sql.SQL("")), key(db, None)).fetchall()
        present = {r["event_type_filter"]: settings_of(r) for r in rows if r["layer"] == "file"}
        for event_type_filter, settings in wanted.items():
            target = (
                report.unchanged if present.get(event_type_filter) == settings else report.written
            )
            target.append(event_type_filter)
        report.removed.extend(f for f in present if f not in wanted)
        if dry_run or not (report.written or report.removed):
            return report
        audit_id = save(
            conn,
            db,
            [
                *(written(f, wanted[f], layer="file", expires_at=None) for f in report.written),
                *(deleted(f, layer="file") for f in report.removed),
            ],
            actor=actor,
            action="apply controls",
            details={"written": report.written, "removed": report.removed},
        )
    return ApplyReport(report.written, report.removed, report.unchanged, audit_id, note)
