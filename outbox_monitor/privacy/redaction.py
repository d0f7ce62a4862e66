"""Payload privacy: hide sensitive JSON keys and values before anything is shown or sent.

Redaction is display-only: the UI, the CSV export and Slack messages show redacted copies;
nothing in the database changes. Two kinds of rules come from the settings
(docs/security.md):

- ``redact_keys``: case-insensitive ``fnmatch`` globs (``*email*``, ``card*``) matched
  against JSON key names at any depth, including keys of objects inside arrays; the value
  of a matching key becomes the string ``"[redacted]"``, whatever its type.
- ``redact_values``: detectors applied to every other string: ``card`` (Luhn-valid numbers
  of 13–19 digits, spaces or dashes allowed between digit groups), ``email`` (also
  URL-encoded: ``frank%40example.com``), or a regular expression; each match becomes
  ``[redacted]``.

Free text (``last_error``, error samples in Slack) gets the value detectors plus the key
globs on ``key=value``, ``key: value`` and ``"key": "value"`` pairs, so an error quoting a
JSON body or a URL with ``?token=…`` is covered too. JSON text is scanned without being
parsed into Python values: number literals, key order and layout stay as they were, and a
cut or invalid text (the 256 KiB head of a big payload) is redacted as far as it goes, the
invalid rest as free text. Nothing here recurses, so deep nesting cannot overflow a stack.

The value detectors live in ``value_detectors``. Nothing here imports Streamlit or the
settings module.
"""

import fnmatch
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Protocol

from outbox_monitor.privacy.value_detectors import REDACTED, check_value_detector

_REDACTED_JSON = json.dumps(REDACTED)
ERROR_HEAD_CHARS = 200
"""How much of a ``last_error`` the tables show. The queries read up to 2,000 characters
(SPEC §1's cap) and the text is cut after redaction (``redact_rows``'s ``head``), never
before: a secret cut in half is no longer recognised (``4111 1111 1111 1`` is no card
number, ``gina@example`` no address) and would be shown."""

# free text: a key (quoted, or a bare word) and its separator, then its value
_KEY_SEPARATOR = re.compile(
    r"""(?:(?P<q>["'])(?P<quoted>[^"'\\\n]{1,200})(?P=q)"""
    r"""|(?<![\w.-])(?P<bare>[^\W\d][\w.-]{0,199}))"""
    r"""(?P<sep>\s*(?:=>|[:=])\s*)"""
)
_PAIR_VALUE = re.compile(
    r""""(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*\'"""
    # a bare value never ends with a colon: "email=gina@example.com: bounced"
    r"""|(?:(?:Bearer|Basic|Token|Digest)\s+)?[^\s,;&"'<>(){}\[\]]*[^\s,;&"'<>(){}\[\]:]""",
    re.IGNORECASE,
)

# JSON text scanning
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_SCALAR = re.compile(r"-?[0-9][0-9.eE+-]*|true|false|null")
_BRACKETS = re.compile(r'["{}\[\]]')
_DECODER = json.JSONDecoder(strict=False)


def _json_string(text: str) -> str:
    """``text`` as a JSON string literal (non-ASCII kept, unless it holds lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(text)
    return json.dumps(text, ensure_ascii=False)


class Redactor:
    """Redacts JSON values, JSON text and free text by key globs and value detectors.

    Build it with ``redactor_for(settings)`` (cached) or directly for tests. A redactor
    without keys and detectors changes nothing (``enabled`` is false).

    Args:
        keys: case-insensitive ``fnmatch`` globs of JSON key names.
        values: value detectors: ``card``, ``email`` or regular expressions.

    Raises:
        ValueError: an invalid ``values`` entry (see ``check_value_detector``).
    """

    def __init__(self, keys: Iterable[str] = (), values: Iterable[str] = ()) -> None:
        self.keys = tuple(k.strip() for k in keys if k.strip())
        self.values = tuple(v.strip() for v in values if v.strip())
        self._detectors = [check_value_detector(v) for v in self.values]
        self._key_pattern = (
            re.compile(
                "|".join(f"(?:{fnmatch.translate(glob)})" for glob in self.keys), re.IGNORECASE
            )
            if self.keys
            else None
        )

    def __repr__(self) -> str:
        return f"Redactor(keys={self.keys!r}, values={self.values!r})"

    @property
    def enabled(self) -> bool:
        """Whether anything is redacted at all."""
        return bool(self.keys or self.values)

    def matches_key(self, key: str) -> bool:
        """Whether the value of a JSON key named ``key`` is redacted (case-insensitive)."""
        return self._key_pattern is not None and self._key_pattern.match(key) is not None

    # ---------------------------------------------------------------------------- free text

    def _detect(self, text: str) -> str:
        """The value detectors on ``text``, leaving ``[redacted]`` markers alone."""
        if not self._detectors or not text:
            return text
        parts = text.split(REDACTED)
        for index, part in enumerate(parts):
            for detector in self._detectors:
                part = detector(part)
            parts[index] = part
        return REDACTED.join(parts)

    def _redact_pairs(self, text: str) -> str:
        """``key=value`` / ``key: value`` / ``"key": "value"`` pairs of matching keys."""
        if self._key_pattern is None:
            return text
        pieces: list[str] = []
        last = 0
        for pair in _KEY_SEPARATOR.finditer(text):
            if pair.start() < last:
                continue
            key = pair.group("quoted") or pair.group("bare")
            if not self.matches_key(key):
                continue
            value = _PAIR_VALUE.match(text, pair.end())
            if value is None:
                continue
            quote = value.group()[0] if value.group()[0] in "\"'" else ""
            pieces.append(text[last : value.start()])
            pieces.append(f"{quote}{REDACTED}{quote}")
            last = value.end()
        if not pieces:
            return text
        pieces.append(text[last:])
        return "".join(pieces)

    def redact_text(self, text: str | None) -> str | None:
        """Redact free text: an error message, a log line, a string inside a payload.

        Args:
            text: any text; ``None`` stays ``None``.

        Returns:
            The text with values of ``key=value``, ``key: value``, ``"key": value`` (and
            ``'key': value``, ``key => value``) pairs whose key matches a glob, and every
            detector match, replaced by ``[redacted]`` (a quoted value keeps its quotes).
        """
        if text is None or not self.enabled or not isinstance(text, str):
            return text
        return self._detect(self._redact_pairs(text))

    # ---------------------------------------------------------------------------- values

    def redact_rows(
        self,
        rows: Sequence[Mapping[str, Any]],
        fields: Iterable[str] = ("last_error",),
        *,
        head: int | None = None,
    ) -> list[dict[str, Any]]:
        """Copies of ``rows`` with the text ``fields`` (e.g. ``last_error``) through
        ``redact_text``, then cut to their first ``head`` characters when given (redacted
        whole first: see ``ERROR_HEAD_CHARS``); other fields and missing fields are left
        as they are."""
        names = tuple(fields)

        def shown(value: Any) -> Any:
            value = self.redact_text(value)
            return value[:head] if head is not None and isinstance(value, str) else value

        return [{k: shown(v) if k in names else v for k, v in row.items()} for row in rows]

    # ---------------------------------------------------------------------------- JSON text

    def _string_token(self, token: str, *, complete: bool) -> tuple[str, str]:
        """A JSON string token (with its quotes; unterminated when not ``complete``):
        ``(shown, value)`` — the token redacted (the token itself when nothing in it is)
        and the string it holds (the raw text between the quotes when it cannot be
        decoded)."""
        inner = token[1:-1] if complete else token[1:]
        decoded = inner
        if complete and "\\" in inner:
            try:
                decoded = _DECODER.decode(token)
            except ValueError:  # an invalid escape: treat the raw text as the value
                decoded = inner
        shown = self.redact_text(decoded) or ""
        if shown == decoded:
            return token, decoded
        if decoded is not inner:
            return _json_string(shown), decoded
        return (f'"{shown}"' if complete else f'"{shown}'), decoded

    @staticmethod
    def _value_end(text: str, pos: int) -> int | None:
        """End of the JSON value starting at ``pos`` (``len(text)`` when cut short), or
        ``None`` when no value starts there."""
        char = text[pos]
        if char == '"':
            string = _STRING.match(text, pos)
            return string.end() if string else len(text)
        if char in "{[":
            depth = 0
            for found in _BRACKETS.finditer(text, pos):
                mark = found.group()
                if mark == '"':
                    if found.start() < pos:  # inside a string already skipped
                        continue
                    string = _STRING.match(text, found.start())
                    if string is None:
                        return len(text)
                    pos = string.end()
                    continue
                if found.start() < pos:
                    continue
                depth += 1 if mark in "{[" else -1
                if depth == 0:
                    return found.end()
            return len(text)
        scalar = _SCALAR.match(text, pos)
        return scalar.end() if scalar and scalar.end() > pos else None

    def redact_json_text(self, text: str | None) -> str | None:
        """Redact JSON text (a payload, pretty or compact, whole or cut short).

        The text is scanned token by token: the value of a key matching a glob becomes
        ``"[redacted]"``, other strings (keys included) go through ``redact_text``;
        whitespace, number literals and key order stay as they are. Where the text stops
        being JSON, the rest is redacted as free text; a text cut in the middle (a head)
        is redacted up to its end (a cut value of a matching key becomes
        ``"[redacted]"``).

        Args:
            text: JSON text; ``None`` stays ``None``.

        Returns:
            The redacted text (valid JSON when ``text`` was).
        """
        if text is None or not self.enabled:
            return text
        out: list[str] = []
        # frames: [kind ("{" or "["), expecting ("key", "colon", "value", "comma"), redact]
        stack: list[list[Any]] = []
        keys: dict[str, tuple[str, bool]] = {}
        done = False
        pos, size = 0, len(text)
        while True:
            blank = _WHITESPACE.match(text, pos)
            out.append(blank.group())
            pos = blank.end()
            if pos >= size:
                break
            char = text[pos]
            frame = stack[-1] if stack else None
            expecting = frame[1] if frame else ("end" if done else "value")
            closed = False
            if expecting == "key" and char == '"':
                string = _STRING.match(text, pos)
                end = string.end() if string else size
                token = text[pos:end]
                if token not in keys:  # keys repeat: redact and match each one once
                    shown, key = self._string_token(token, complete=string is not None)
                    keys[token] = shown, self.matches_key(key)
                shown, frame[2] = keys[token]
                out.append(shown)
                pos, frame[1] = end, "colon"
                continue
            if expecting == "colon" and char == ":":
                out.append(char)
                pos, frame[1] = pos + 1, "value"
                continue
            if expecting == "comma" and char == ",":
                out.append(char)
                pos, frame[1] = pos + 1, "key" if frame[0] == "{" else "value"
                continue
            if frame and expecting in ("key", "comma", "value") and char in "}]":
                # an object or array ends (also when empty, or after a trailing comma)
                if char != ("}" if frame[0] == "{" else "]"):
                    break
                out.append(char)
                pos = pos + 1
                stack.pop()
                closed = True
            elif expecting == "value":
                if frame and frame[2]:  # the value of a key to redact, whatever it is
                    end = self._value_end(text, pos)
                    if end is None:  # not JSON: hide up to the next delimiter
                        skipped = re.match(r"[^,}\]\n]*", text[pos:])
                        end = pos + (skipped.end() if skipped else 0)
                    out.append(_REDACTED_JSON)
                    pos = end
                elif char in "{[":
                    out.append(char)
                    pos += 1
                    stack.append([char, "key" if char == "{" else "value", False])
                    continue
                elif char == '"':
                    string = _STRING.match(text, pos)
                    end = string.end() if string else size
                    out.append(self._string_token(text[pos:end], complete=string is not None)[0])
                    pos = end
                else:
                    scalar = _SCALAR.match(text, pos)
                    if scalar is None or scalar.end() == pos:
                        break
                    out.append(scalar.group())
                    pos = scalar.end()
                closed = True
            else:
                break
            if closed:
                if stack:
                    stack[-1][1], stack[-1][2] = "comma", False
                else:
                    done = True
        if pos < size:  # the rest is not JSON: redact it as free text
            out.append(self.redact_text(text[pos:]) or "")
        return "".join(out)


@lru_cache(maxsize=32)
def _cached(keys: tuple[str, ...], values: tuple[str, ...]) -> Redactor:
    return Redactor(keys, values)


class RedactionSettings(Protocol):
    """What a redactor is built from: ``config.settings.Settings`` (privacy/ imports nothing of
    config/, which checks its value detectors at start with ``value_detectors``)."""

    redact_keys: Sequence[str]
    redact_values: Sequence[str]


def redactor_for(settings: RedactionSettings) -> Redactor:
    """The redactor of ``settings.redact_keys`` and ``settings.redact_values`` (cached).

    Raises:
        ValueError: an invalid value detector (settings loaded by ``load_settings`` were
            already checked, so this does not happen for them).
    """
    return _cached(tuple(settings.redact_keys), tuple(settings.redact_values))
