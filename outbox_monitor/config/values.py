"""The value types and checks of single settings: durations, comma lists, table names, interface
addresses, networks, DSNs, role entries, header names and OIDC values."""

import ipaddress
import json
import re
from typing import Annotated
from urllib.parse import urlsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict
from pydantic import BeforeValidator, SecretStr, WithJsonSchema
from pydantic_settings import NoDecode

from outbox_monitor.durations import duration_json_schema, parse_duration

_OFF = ("", "off", "none", "false", "no")
_EMAIL_ENTRY = re.compile(r"(\*|[^\s,;@*]+)?@[^\s,;@*]+")
"""A role entry naming an e-mail (``alice@example.com``), a domain (``@example.com``,
``*@example.com``)."""
_CLAIM_ENTRY = re.compile(r"[A-Za-z_][\w.:-]*=[^\s,;]+")
"""A role entry matching an ID-token claim (``groups=oncall``)."""
MIN_COOKIE_SECRET_CHARS = 32
_NAME_PART = r"[A-Za-z_][A-Za-z0-9_$]*"
_QUALIFIED = re.compile(rf"^(?:({_NAME_PART})\.)?({_NAME_PART})$")
TABLE_NAME_PATTERN = rf"^\s*(?:{_NAME_PART}\.)?{_NAME_PART}\s*$"
"""What ``split_table_name`` accepts, as a regular expression (of JSON Schema too)."""

Seconds = Annotated[float, BeforeValidator(parse_duration), WithJsonSchema(duration_json_schema())]


def _optional_duration(value: object) -> float | None:
    """A duration, or ``None`` for unset/empty/``off`` (a feature that is off)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in _OFF):
        return None
    return parse_duration(value)


OptionalSeconds = Annotated[float | None, BeforeValidator(_optional_duration)]


def _share(value: object) -> object:
    """A share as a fraction: ``"50%"`` → ``0.5``; a number (``0.5``, ``"0.5"``) is kept for
    the field's bounds to check, but one above 1 (``50``) is refused as ambiguous."""
    text = value.strip() if isinstance(value, str) else None
    try:
        share = float(text[:-1]) / 100 if text and text.endswith("%") else float(value)
    except (TypeError, ValueError):
        raise ValueError(f"not a share: {value!r} (write 50% or 0.5)") from None
    if share > 1 and not (text and text.endswith("%")):
        raise ValueError(f"a share is at most 1: write {share:g}% or {share / 100:g}, not {value}")
    return share


Share = Annotated[float, BeforeValidator(_share)]
"""A share of something, as a fraction (``0.5``) or a percentage (``50%``)."""


def _comma_list(value: object) -> object:
    """``"a, b,,c"`` → ``("a", "b", "c")``; a JSON array (``'["\\d{3,4}", "card"]'``, for
    entries that contain a comma) is read as JSON; a list or tuple is kept; ``off``/empty
    → ``()``."""
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in _OFF:
            return ()
        if text.startswith("["):
            try:
                items = json.loads(text)
            except json.JSONDecodeError as error:
                raise ValueError(f"not a JSON array of strings: {error}") from None
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise ValueError("expected a JSON array of strings")
            return tuple(item.strip() for item in items if item.strip())
        return tuple(part.strip() for part in text.split(",") if part.strip())
    return value


CommaList = Annotated[tuple[str, ...], NoDecode, BeforeValidator(_comma_list)]


_SLACK_ID = re.compile(r"^[A-Z0-9]{2,30}$")


def slack_person(entry: str) -> tuple[str, str, str]:
    """One entry of ``OUTBOX_MONITOR_SLACK_ACTIONS_PEOPLE``: ``TEAM/USER=e-mail``.

    Args:
        entry: e.g. ``T0123ABCD/U0456EFGH=alice@example.com``.

    Returns:
        ``(team_id, user_id, e-mail)``, the e-mail lower-case.

    Raises:
        ValueError: not of that form, or an id that is not Slack's (capitals and digits),
            naming the entry.
    """
    ids, sep, email = entry.partition("=")
    team, slash, user = ids.strip().partition("/")
    email = email.strip().lower()
    if not (sep and slash and _SLACK_ID.match(team) and _SLACK_ID.match(user) and "@" in email):
        raise ValueError(
            f"expected TEAM/USER=e-mail entries such as T0123ABCD/U0456EFGH=alice@example.com "
            f"(Slack's team and user ids), got {entry!r}"
        )
    return team, user, email


def split_table_name(name: str) -> tuple[str, str]:
    """Split ``schema.table`` (or ``table``, meaning ``public.table``) into its two parts.

    Args:
        name: an unquoted Postgres name, optionally schema-qualified.

    Returns:
        ``(schema, table)``; each part later enters SQL only as ``psycopg.sql.Identifier``.

    Raises:
        ValueError: the name is not ``table`` or ``schema.table`` of letters, digits, ``_``.
    """
    match = _QUALIFIED.match(name.strip())
    if not match:
        raise ValueError(f"expected schema.table (letters, digits, _), got {name!r}")
    return match.group(1) or "public", match.group(2)


_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def interface_address(value: str) -> str:
    """``value`` stripped when it is an IP literal (``127.0.0.1``, ``0.0.0.0``, ``::``) or
    a host name of RFC 1123's form (``localhost``, ``monitor.internal``); whether it can
    be bound is known only when the server starts (``export.server.MetricsServer.start``).

    Raises:
        ValueError: anything else (``1.2.3.999``, ``a_b``, ``http://x``), with an example.
    """
    address = value.strip()
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        pass
    labels = address.removesuffix(".").split(".")
    if (
        len(address) > 253
        or not all(_HOST_LABEL.fullmatch(label) for label in labels)
        or labels[-1].isdigit()  # 1.2.3.999 is a bad IP, not a host name
    ):
        raise ValueError(
            f"expected an interface address (an IP such as 127.0.0.1, 0.0.0.0 or ::, or a "
            f"host name), got {value[:60]!r}"
        )
    return address


WIDEST_TRUSTED_PREFIX = {4: 8, 6: 7}
"""The widest network a list of trusted proxies may hold, by IP version: 10.0.0.0/8 and the
IPv6 unique-local fc00::/7 are private ranges; 0.0.0.0/0, ::/0 or a /1 would believe an
identity header from the whole internet."""


def check_networks(value: tuple[str, ...]) -> tuple[str, ...]:
    """Networks in CIDR notation (``10.0.0.0/8``, ``fd00::/8``; a bare address is its own
    network, ``/32`` or ``/128``), written as ``ipaddress`` writes them.

    Returns:
        The networks' texts, normalised (``10.0.0.1`` → ``10.0.0.1/32``).

    Raises:
        ValueError: naming the first entry that is not a network, has host bits set
            (``10.0.0.5/8``: which was meant, the host or the network?), or is wider than
            ``WIDEST_TRUSTED_PREFIX`` (``0.0.0.0/0``).
    """
    networks = []
    for entry in value:
        try:
            network = ipaddress.ip_network(entry)
        except ValueError as error:
            raise ValueError(
                f"{entry[:60]!r} is not a network in CIDR notation such as 10.0.0.0/8, "
                f"172.16.0.0/12 or fd00::/8 ({error})"
            ) from None
        if network.prefixlen < WIDEST_TRUSTED_PREFIX[network.version]:
            raise ValueError(
                f"{network} trusts {network.num_addresses:,} addresses: anyone who reaches "
                "the dashboard from one of them could send an identity header and be "
                "believed; list your proxies' own networks (at most "
                f"/{WIDEST_TRUSTED_PREFIX[network.version]}, e.g. 10.0.0.0/8 or fc00::/7)"
            )
        networks.append(str(network))
    return tuple(networks)


def check_dsn(value: str | None) -> str | None:
    """``value`` when it is unset or a connection string or URI libpq parses.

    Raises:
        ValueError: why not, without quoting a secret of it (``_without_secrets``).
    """
    if value:
        try:
            parts = conninfo_to_dict(value)
        except psycopg.ProgrammingError as error:
            raise ValueError(
                "not a connection string or URI "
                f"(e.g. postgresql://user:password@host:5432/dbname): {_without_secrets(error)}"
            ) from None
        if "@" in str(parts.get("host") or ""):
            raise ValueError("the user or password contains '@': percent-encode it as %40 in a URI")
    return value


def _without_secrets(error: psycopg.ProgrammingError) -> str:
    """libpq's reason why a DSN does not parse, with every quoted fragment of the DSN that
    is not a connection keyword replaced by "…" (libpq quotes the offending text, which may
    be a password: ``unexpected spaces found in "pass word"``)."""
    keywords = {option.keyword.decode() for option in psycopg.pq.Conninfo.get_defaults()}
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    kept = keywords | {"=", ""}
    return re.sub(r'"([^"]*)"', lambda m: m.group(0) if m.group(1) in kept else '"…"', reason)


def check_role_entries(value: tuple[str, ...]) -> tuple[str, ...]:
    """The entries of a role setting, each an e-mail, a domain or a claim match; e-mails and
    domains lowercased.

    Raises:
        ValueError: naming the first entry that is none of them.
    """
    for entry in value:
        if not (_EMAIL_ENTRY.fullmatch(entry) or _CLAIM_ENTRY.fullmatch(entry)):
            raise ValueError(
                f"{entry!r} is not an e-mail (alice@example.com), a domain (@example.com) "
                "or a claim match (groups=oncall)"
            )
    return tuple(entry.lower() if "@" in entry else entry for entry in value)


def check_header_name(value: str | None) -> str | None:
    """``value`` when it is unset or an HTTP header name.

    Raises:
        ValueError: naming the value.
    """
    if value is not None and not re.fullmatch(r"[A-Za-z0-9-]+", value):
        raise ValueError(f"expected an HTTP header name such as X-Forwarded-Email, got {value!r}")
    return value


def check_oidc_url(value: str | None, field_name: str | None) -> str | None:
    """An OIDC URL setting (``field_name``) stripped: http(s), and the redirect URL Streamlit's
    ``/oauth2callback``.

    Raises:
        ValueError: naming the value.
    """
    if value is None:
        return value
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"expected an http(s) URL, got {value!r}")
    if field_name == "oidc_redirect_url" and not parts.path.endswith("/oauth2callback"):
        raise ValueError(
            "Streamlit receives the sign-in at /oauth2callback: expected "
            f"https://<dashboard>/oauth2callback, got {value!r}"
        )
    return value.strip()


def check_oidc_secret(value: SecretStr | None, field_name: str | None) -> SecretStr | None:
    """An OIDC secret setting (``field_name``): not empty; the cookie secret at least
    ``MIN_COOKIE_SECRET_CHARS`` characters.

    Raises:
        ValueError: what is wrong, without the secret.
    """
    if value is None:
        return value
    length = len(value.get_secret_value().strip())
    if field_name == "oidc_cookie_secret" and length < MIN_COOKIE_SECRET_CHARS:
        raise ValueError(
            f"at least {MIN_COOKIE_SECRET_CHARS} random characters (it signs the session "
            f"cookie), got {length}; e.g. `openssl rand -hex 32`"
        )
    if length == 0:
        raise ValueError("empty")
    return value
