"""Optional query conditions as psycopg.sql fragments with bound parameters."""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg import sql

EVENT_TYPE_KEY_CHARS = 200
"""How many characters of ``event_type`` the indexes by type key on (``left(event_type, 200)``:
``store.indexes`` says why)."""


def like_escape(text: str) -> str:
    """Escape ``\\`` and ``_`` so that only ``%`` stays a wildcard in a LIKE pattern."""
    return text.replace("\\", "\\\\").replace("_", "\\_")


class ExactEventType(str):
    """One event type as stored, compared for equality even when it holds ``%`` or
    ``_``: a ``by: [event_type]`` alert instance's own value (issue 10 item 14). SPEC §2's
    filter language has no way to write a literal ``%``, so the value says it is not a
    filter by its type; it passes unchanged through every ``event_type=`` argument."""

    __slots__ = ()


@dataclass
class Where:
    """A growing list of ``AND …`` conditions and their parameters.

    Each condition is a constant SQL text of this package with ``%(name)s`` placeholders;
    user input only ever travels in ``params``. Use ``fragment`` as a query's
    ``{and_filters}`` and merge ``params`` into the query's parameters. With ``keyed`` (the
    statements on dead letters, which ``failed_by_type`` serves), ``keys`` holds conditions
    the others imply, stated so that the planner can use an index by type (``event_type``);
    elsewhere they are left out: Postgres takes a key and the condition implying it for
    independent and would count the share of the type twice, misjudging plans.
    ``estimated_fragment`` always leaves them out, for the dashboard's row estimates.
    """

    conditions: list[sql.Composable] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    keys: list[sql.Composable] = field(default_factory=list)
    keyed: bool = False

    def add(self, condition: str | sql.Composable, **params: Any) -> "Where":
        """Append one condition with its parameters; returns ``self`` for chaining."""
        self.conditions.append(sql.SQL(condition) if isinstance(condition, str) else condition)
        self.params.update(params)
        return self

    def event_type(self, value: str | None) -> "Where":
        """SPEC §2 event-type filter: a value with ``%`` is a LIKE pattern in which ``_``
        and ``\\`` are literal; any other value, and an ``ExactEventType`` always, is
        compared for equality; empty = no filter.

        ``keyed``: each condition also states what it implies of ``left(event_type, 200)``,
        the key of the indexes by type (``EVENT_TYPE_KEY_CHARS``), so that the
        planner can find the rows through them; the exact condition rechecks each row.
        """
        if not value:
            return self
        if "%" in value and not isinstance(value, ExactEventType):
            head = value.split("%", 1)[0]  # empty for a pattern starting with %: no key
            if len(head) >= EVENT_TYPE_KEY_CHARS:
                self._key("=", head[:EVENT_TYPE_KEY_CHARS])
            elif head:
                self._key("LIKE", like_escape(head) + "%")
            return self.add("event_type LIKE %(event_type)s", event_type=like_escape(value))
        self._key("=", str(value)[:EVENT_TYPE_KEY_CHARS])
        return self.add("event_type = %(event_type)s", event_type=str(value))

    def between(self, column: str, since: datetime | None, until: datetime | None) -> "Where":
        """``column >= since`` and/or ``column < until``; ``None`` leaves that side open."""
        for bound, operator, value in (("since", ">=", since), ("until", "<", until)):
            if value is not None:
                name = f"{column}_{bound}"
                self.add(
                    sql.SQL("{} {} {}").format(
                        sql.Identifier(column), sql.SQL(operator), sql.Placeholder(name)
                    ),
                    **{name: value},
                )
        return self

    def _key(self, operator: str, key: str) -> None:
        """With ``keyed``, the condition ``left(event_type, 200) <operator> key``."""
        if self.keyed:
            self.keys.append(
                sql.SQL(f"left(event_type, {EVENT_TYPE_KEY_CHARS}) {operator} %(event_type_key)s")
            )
            self.params["event_type_key"] = key

    @property
    def fragment(self) -> sql.Composable:
        """The conditions and keys as `` AND c1 AND c2`` (empty when there are none)."""
        return _and(self.keys + self.conditions)

    @property
    def estimated_fragment(self) -> sql.Composable:
        """The conditions without the keys, for the planner's estimate of the rows they match
        (``figures.estimates.planner_rows``): Postgres takes a key and the condition that
        implies it for independent, and would count the share of the type twice."""
        return _and(self.conditions)


def _and(conditions: list[sql.Composable]) -> sql.Composable:
    """`` AND (c1) AND (c2)``, empty for none."""
    if not conditions:
        return sql.SQL("")
    wrapped = [sql.SQL("({})").format(condition) for condition in conditions]
    return sql.SQL(" AND ") + sql.SQL(" AND ").join(wrapped)
