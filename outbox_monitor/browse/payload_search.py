"""Payload search (issue 15 item 6): JSON containment and key-path equality over a
``created_at`` range, keyset pages, the plan and its index advice, and the privacy guard.

SPEC §1 types ``payload`` as ``jsonb`` (``schema.check_outbox_table`` refuses another type),
so the two searches are ``payload @> %(document)s::jsonb`` and
``payload #>> %(path)s::text[] = %(value)s``, always within ``since <= created_at < until``,
newest first by ``(created_at, id)``, one keyset page at a time, under the statement timeout.
``payload_plan.explain_search`` plans it first (EXPLAIN, never ANALYZE) and names the index
that would serve it. A search that times out raises ``PayloadSearchTimeout``, never an empty
page.

Privacy (docs/security.md): a search is an oracle for the values it names, so a search whose
keys match the redaction's key globs, or whose strings a value detector would hide, needs
the role that may reveal payloads (``operator``); it then runs on the actions Database with
an audit row (action ``payload search``: the keys, never the values; the ids it found), as a
reveal is audited. Rows are returned like ``events.list_events``'s, without payload.
"""

import json
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from outbox_monitor.access import Identity, Role, require
from outbox_monitor.errors import QueryTimeout
from outbox_monitor.privacy.redaction import Redactor
from outbox_monitor.store.audit import note_read
from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import Where

MAX_DOCUMENT_CHARS = 10_000
"""Longest JSON document accepted, in characters (a search names a few keys; more is a paste
of a whole payload, which no index serves better)."""
MAX_DEPTH = 32
"""Deepest nesting of objects and arrays accepted in a document."""
MAX_PATH_SEGMENTS = 32
MAX_TEXT_CHARS = 1000
"""Longest path (as typed) and longest value, in characters."""
MAX_NUMERIC_EXPONENT = 131_071
MAX_NUMERIC_SCALE = 16_383
"""Postgres' ``numeric`` (and so jsonb's numbers): at most 131,072 digits before the decimal
point and 16,383 after it; a number past them would fail in the database, not here."""
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
AUDIT_ACTION = "payload search"


class SearchInputError(ValueError):
    """A search input that cannot be run; ``field`` names it (``document``, ``path``,
    ``value``, ``created since``, ``created until``) and the message says what to type."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class PayloadSearchTimeout(QueryTimeout):
    """A payload search cancelled by the statement timeout: no result, not "no matches"."""


def _check_text(text: str, field: str) -> None:
    if "\x00" in text:
        raise SearchInputError(field, "contains a NUL character (U+0000), which jsonb cannot hold")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise SearchInputError(
            field, f"contains an unpaired surrogate (U+{ord(text[error.start]):04X})"
        ) from None


def _number(text: str) -> Decimal:
    """A JSON number as typed, within what Postgres' ``numeric`` (hence jsonb) holds."""
    number = Decimal(text)
    if number.adjusted() > MAX_NUMERIC_EXPONENT or -number.as_tuple().exponent > MAX_NUMERIC_SCALE:
        raise ValueError(
            f"the number {text[:20]}{'…' if len(text) > 20 else ''} is out of jsonb's range"
        )
    return number


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _walk(document: Any) -> tuple[list[str], list[str], int]:
    """The keys and the strings (values) of a parsed JSON document at any depth, and its
    depth (iterative: a deep document cannot overflow the stack)."""
    keys: list[str] = []
    strings: list[str] = []
    depth = 0
    stack = [(document, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            depth = max(depth, level + 1)
            keys.extend(node)
            stack.extend((child, level + 1) for child in node.values())
        elif isinstance(node, list):
            depth = max(depth, level + 1)
            stack.extend((child, level + 1) for child in node)
        elif isinstance(node, str):
            strings.append(node)
    return keys, strings, depth


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    return "null" if value is None else "number"


def parse_document(text: str | None) -> dict[str, Any]:
    """A containment document: a JSON object, as ``payload @>`` compares it.

    Args:
        text: the typed JSON (at most ``MAX_DOCUMENT_CHARS`` characters).

    Returns:
        The parsed object (numbers as ``Decimal``, exact as typed).

    Raises:
        SearchInputError: (field ``document``) empty, too long, not JSON (with the line and
            column), not an object, nested deeper than ``MAX_DEPTH``, NaN/Infinity, a number
            or text jsonb cannot hold (past ``numeric``'s range; NUL, a lone surrogate).
    """
    if text is None or not text.strip():
        raise SearchInputError(
            "document", 'empty: type a JSON object, e.g. {"customer": {"id": "42"}}'
        )
    if len(text) > MAX_DOCUMENT_CHARS:
        raise SearchInputError(
            "document",
            f"{len(text):,} characters; a search document takes at most {MAX_DOCUMENT_CHARS:,}: "
            "keep only the keys to match",
        )
    try:
        document = json.loads(
            text, parse_float=_number, parse_int=_number, parse_constant=_no_constant
        )
    except json.JSONDecodeError as error:
        raise SearchInputError(
            "document", f"not valid JSON ({error.msg} at line {error.lineno}, column {error.colno})"
        ) from None
    except (ValueError, RecursionError) as error:
        # NaN/Infinity, a number past numeric's range, or nesting deeper than Python parses
        reason = f"nested deeper than {MAX_DEPTH}" if isinstance(error, RecursionError) else error
        raise SearchInputError("document", str(reason)) from None
    if not isinstance(document, dict):
        raise SearchInputError(
            "document",
            f"a JSON {_json_type(document)} is not an object: containment needs an object "
            'such as {"status": "paid"}',
        )
    keys, strings, depth = _walk(document)
    if depth > MAX_DEPTH:
        raise SearchInputError("document", f"nested {depth} levels deep; at most {MAX_DEPTH}")
    for part in (*keys, *strings):
        _check_text(part, "document")
    return document


def parse_path(text: str | None) -> tuple[str, ...]:
    """A key path: segments separated by dots (``customer.id``, ``items.0.sku``: a number
    is an array index), or a JSON array of strings for keys holding dots
    (``["a.b", "c"]``).

    Raises:
        SearchInputError: (field ``path``) empty, an empty segment, more than
            ``MAX_PATH_SEGMENTS`` segments or ``MAX_TEXT_CHARS`` characters, a JSON array
            of anything but strings, NUL or a lone surrogate.
    """
    value = (text or "").strip()
    if not value:
        raise SearchInputError("path", "empty: type the keys to follow, e.g. customer.id")
    if len(value) > MAX_TEXT_CHARS:
        raise SearchInputError("path", f"{len(value):,} characters; at most {MAX_TEXT_CHARS:,}")
    if value.startswith("["):
        try:
            segments = json.loads(value)
        except json.JSONDecodeError as error:
            raise SearchInputError("path", f"not a JSON array ({error.msg})") from None
        if not isinstance(segments, list) or not all(isinstance(s, str) for s in segments):
            raise SearchInputError("path", 'a JSON array path holds strings only: ["a.b", "c"]')
    else:
        segments = value.split(".")
    if not segments or any(segment == "" for segment in segments):
        raise SearchInputError("path", "has an empty segment: write customer.id, not customer..id")
    if len(segments) > MAX_PATH_SEGMENTS:
        raise SearchInputError("path", f"{len(segments)} segments; at most {MAX_PATH_SEGMENTS}")
    for segment in segments:
        _check_text(segment, "path")
    return tuple(segments)


def parse_value(text: str | None) -> str:
    """The value a key path must equal, as ``#>>`` prints it: a string without its quotes,
    a number as written, ``true``/``false``, an object or array as compact JSON text.

    Raises:
        SearchInputError: (field ``value``) empty, longer than ``MAX_TEXT_CHARS``, NUL or a
            lone surrogate.
    """
    if text is None or text == "":
        raise SearchInputError("value", "empty: type the value the key path must equal")
    if len(text) > MAX_TEXT_CHARS:
        raise SearchInputError("value", f"{len(text):,} characters; at most {MAX_TEXT_CHARS:,}")
    _check_text(text, "value")
    return text


@dataclass(frozen=True)
class PayloadSearch:
    """One search: ``document`` (containment: JSON text as typed, checked by
    ``parse_document``) or ``path`` and ``value`` (equality), with
    ``since <= created_at < until`` and an optional SPEC §2 ``event_type`` filter.
    Build it with ``payload_search``."""

    since: datetime
    until: datetime
    document: str | None = None
    path: tuple[str, ...] | None = None
    value: str | None = None
    event_type: str | None = None

    @property
    def kind(self) -> str:
        """``containment`` or ``path``."""
        return "containment" if self.document is not None else "path"

    def where(self) -> Where:
        """The payload condition (and the event type) as SQL with bound parameters."""
        where = Where().event_type(self.event_type)
        if self.document is not None:
            return where.add("payload @> %(document)s::jsonb", document=self.document)
        return where.add(
            "payload #>> %(path)s::text[] = %(value)s", path=list(self.path or ()), value=self.value
        )


def payload_search(
    *,
    since: datetime | None,
    until: datetime,
    document: str | None = None,
    path: str | None = None,
    value: str | None = None,
    event_type: str | None = None,
) -> PayloadSearch:
    """Validate typed inputs into a ``PayloadSearch``: a ``document`` (``None``: not a
    containment search), else a ``path`` and a ``value``; a time range is required
    (``until`` is "now" when the user left it empty).

    Raises:
        SearchInputError: the field at fault (see ``parse_document``, ``parse_path``,
            ``parse_value``); ``created since`` missing or not before ``until``.
    """
    if since is None:
        raise SearchInputError(
            "created since", "required: a payload search reads a time range (e.g. 1h or 24h)"
        )
    if since >= until:
        raise SearchInputError("created since", "must be before created until")
    if document is not None:
        parse_document(document)
        return PayloadSearch(since, until, document=document, event_type=event_type)
    if path is None:
        raise SearchInputError("document", "give a JSON document, or a key path and a value")
    return PayloadSearch(
        since, until, path=parse_path(path), value=parse_value(value), event_type=event_type
    )


def secret_terms(search: PayloadSearch, redactor: Redactor) -> list[str]:
    """What in ``search`` the redaction hides from viewers (docs/security.md), in words:
    ``key "card_number"`` for a key (or path segment) matching a key glob; ``a key …`` or
    ``a value redaction hides`` for strings a value detector (or a ``key=value`` pair) would
    redact, the value itself never repeated. Empty when nothing is hidden."""
    if not redactor.enabled:
        return []
    if search.document is not None:
        keys, values, _ = _walk(parse_document(search.document))
    else:
        keys, values = list(search.path or ()), [search.value or ""]
    terms: list[str] = []
    for key in keys:
        if redactor.matches_key(key):
            terms.append(f"key {json.dumps(key, ensure_ascii=False)}")
        elif redactor.redact_text(key) != key:
            terms.append("a key redaction hides")
    for text in values:
        if redactor.redact_text(text) != text or redactor.redact_json_text(text) != text:
            terms.append("a value redaction hides")
    return list(dict.fromkeys(terms))


def check_access(search: PayloadSearch, redactor: Redactor, identity: Identity) -> list[str]:
    """Refuse a viewer's search by what redaction hides (a search is an oracle for the
    values it names); call it before planning too (the planner's estimates come from the
    values' statistics).

    Returns:
        ``secret_terms``: empty for a search anyone may run; else the search is allowed to
        ``identity`` (an operator) and must be audited.

    Raises:
        AccessDenied: ``identity`` may not reveal payloads and the search touches what
            redaction hides; the message names the keys, never the values.
    """
    terms = secret_terms(search, redactor)
    if terms:
        require(
            identity, Role.operator, f"search payloads by what redaction hides ({', '.join(terms)})"
        )
    return terms


@dataclass(frozen=True)
class Cursor:
    """Keyset position: the last row of a page (``created_at``, ``id``); the next, older,
    page starts strictly below it."""

    created_at: datetime
    id: int


@dataclass(frozen=True)
class SearchPage:
    """One page of matches (``rows`` as ``events.list_events`` returns them, newest first),
    whether an older page exists, and the audit row of an audited search (else ``None``)."""

    rows: list[dict[str, Any]]
    has_older: bool
    audit_id: int | None = None

    @property
    def next_cursor(self) -> Cursor | None:
        """The cursor of the older page, ``None`` when there is none."""
        if not self.has_older or not self.rows:
            return None
        last = self.rows[-1]
        return Cursor(last["created_at"], last["id"])


def timed_out(db: Database, search: PayloadSearch, advice: str | None) -> PayloadSearchTimeout:
    """The error of a search (or its plan) cancelled by the statement timeout: what timed
    out, that it is no answer, and what to do (narrow the range; add ``advice``, the index
    that would serve it, when there is one)."""
    fix = "Narrow the time range"
    if advice is not None:
        fix += f", or add the index that would serve it: `{advice}` (shown, never run)"
    return PayloadSearchTimeout(
        f"the {search.kind} search of payloads created from {search.since.isoformat()} to "
        f"{search.until.isoformat()} was cancelled after the statement timeout "
        f"({db.settings.statement_timeout:g} s): no result, which is not the same as no match",
        hint=f"{fix}. OUTBOX_MONITOR_STATEMENT_TIMEOUT raises the limit for every query.",
    )


def search_payloads(
    db: Database,
    search: PayloadSearch,
    *,
    identity: Identity,
    redactor: Redactor,
    actions_db: Database | None = None,
    before: Cursor | None = None,
    limit: int = DEFAULT_PAGE_SIZE,
    advice: str | None = None,
) -> SearchPage:
    """One keyset page of the events ``search`` matches, newest first by (created_at, id).

    A search touching what redaction hides (``secret_terms``) is refused unless
    ``identity`` may reveal payloads (operator); then it runs on ``actions_db`` in one
    transaction with an audit row (``payload search``: kind, keys, range; the ids found).

    Args:
        db: the Database of reads.
        identity, redactor: who searches, and what is hidden from viewers.
        actions_db: the Database that writes the audit log (default ``db``).
        before: the last row of the previous page, ``None`` for the newest.
        limit: rows per page, 1–1000.
        advice: the index that would serve the search (``SearchPlan.advice``), named in a
            timeout's hint.

    Returns:
        A ``SearchPage``.

    Raises:
        ValueError: a limit out of range.
        AccessDenied: the search touches redacted keys or values and ``identity`` is a
            viewer; nothing is read.
        PayloadSearchTimeout: the statement timeout cancelled it (what to narrow or add).
        DatabaseUnavailable, PermissionDenied: from the connector.
    """
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise ValueError(f"limit must be between 1 and {MAX_PAGE_SIZE}, got {limit}")
    terms = check_access(search, redactor, identity)
    where = search.where()
    if before is not None:
        where.add(
            "(created_at, id) < (%(before_created_at)s, %(before_id)s)",
            before_created_at=before.created_at,
            before_id=before.id,
        )
    params = {**where.params, "since": search.since, "until": search.until, "limit": limit + 1}
    audit_id = None
    try:
        if not terms:
            rows = db.fetch_all("payload_search_page", params, and_filters=where.fragment)
        else:
            writer = actions_db or db
            with writer.transaction() as conn:
                statement = writer.compose("payload_search_page", and_filters=where.fragment)
                rows = conn.execute(statement, params).fetchall()
                details = {
                    "kind": search.kind,
                    "touches": terms,
                    "since": search.since,
                    "until": search.until,
                    "event_type": search.event_type,
                }
                found = [row["id"] for row in rows[:limit]]
                audit_id = note_read(
                    conn, writer, actor=identity, action=AUDIT_ACTION, details=details, ids=found
                )
    except QueryTimeout as error:
        raise timed_out(db, search, advice) from error
    return SearchPage(rows[:limit], len(rows) > limit, audit_id)
