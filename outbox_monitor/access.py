"""Who is acting and what they may do: identities, roles, the role mapping, the checks.

Three roles, each including the one before (docs/security.md):
``viewer`` — figures, charts, rows and alerts, payloads redacted;
``operator`` — also reap, replay, prune, silences and raw payloads (each reveal audited);
``admin`` — also settings-like pages.

Every function that changes the outbox or reveals a payload calls ``require`` with the
identity it was given, so a hidden button is never the only guard. Nothing here imports
Streamlit: the dashboard finds the identity (``ui.access``), the CLI and the scheduler
act as local identities.
"""

import fnmatch
import getpass
import ipaddress
import os
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from outbox_monitor.config.settings import Settings
from outbox_monitor.errors import AccessDenied, ConfigError


class Role(IntEnum):
    """A role; a higher one includes every right of the lower ones."""

    viewer = 1
    operator = 2
    admin = 3


MAX_ACTOR_LENGTH = 200
"""Characters of an actor's name kept (the audit log's ``actor``; the SQL function
``outbox_monitor.record_audit`` refuses longer ones)."""
_BLANK_CATEGORIES = frozenset({"Cc", "Zs", "Zl", "Zp"})
"""Unicode categories read as a space: control characters (newlines, tabs …), spaces and
line or paragraph separators."""


def normalise_actor(name: str) -> str:
    """An actor's name as it is shown and audited: one line of printable text.

    NFC-composed; control characters (``\\n``, ``\\r``, ``\\t``, ``\\x1b`` …) and
    Unicode line/paragraph separators become spaces; other characters of category C
    (format characters such as U+202E RIGHT-TO-LEFT OVERRIDE, surrogates, unassigned and
    private-use code points) are dropped; runs of spaces become one; cut to
    ``MAX_ACTOR_LENGTH`` characters. ``"ops\\n@evil"`` → ``"ops @evil"``.

    Args:
        name: the raw name (an e-mail, an OS user, ``--actor``).

    Returns:
        The normalised name; ``""`` when nothing printable is left.
    """
    kept = []
    for char in unicodedata.normalize("NFC", name):
        category = unicodedata.category(char)
        if category in _BLANK_CATEGORIES:
            kept.append(" ")
        elif not category.startswith("C"):
            kept.append(char)
    return " ".join("".join(kept).split())[:MAX_ACTOR_LENGTH].strip()


@dataclass(frozen=True)
class Identity:
    """Who is acting: ``name`` (an e-mail when signed in; recorded in the audit log),
    ``role`` and ``source`` (``local``, ``oidc``, ``proxy``, ``cli`` or ``scheduler``).

    The name is normalised on creation (``normalise_actor``), so no identity's name holds
    a control character or a newline, whoever built it.

    Raises:
        ValueError: nothing printable is left of the name.
    """

    name: str
    role: Role
    source: str

    def __post_init__(self) -> None:
        name = normalise_actor(self.name)
        if not name:
            raise ValueError(f"an identity needs a printable name, got {self.name!r}")
        object.__setattr__(self, "name", name)

    def can(self, role: Role) -> bool:
        """Whether this identity has ``role`` or a higher one."""
        return self.role >= role


SCHEDULER = Identity("scheduler", Role.admin, "scheduler")
"""The scheduler's automatic reap and prune act as this identity."""


def default_actor() -> str:
    """The local user's name: ``OUTBOX_MONITOR_ACTOR`` or the OS user (SPEC §4)."""
    return os.environ.get("OUTBOX_MONITOR_ACTOR") or getpass.getuser()


def local_identity(
    settings: Settings, *, name: str | None = None, source: str = "local"
) -> Identity:
    """The identity of someone at this machine (local dashboard mode, the CLI).

    They hold the database credentials already, so they get ``admin``; the database
    grants of their DSN are what limits them (docs/security.md).

    Args:
        settings: for ``OUTBOX_MONITOR_ACTOR``.
        name: an explicit name (the CLI's ``--actor``), else the settings' actor, else the
            OS user.
        source: ``local`` (dashboard) or ``cli``.

    Returns:
        An ``admin`` identity, its name normalised (``normalise_actor``).

    Raises:
        ConfigError: the chosen name has no printable character (``--actor $'\\n'``).
    """
    chosen = name or settings.actor or default_actor()
    if not normalise_actor(chosen):
        raise ConfigError(
            f"the actor name {chosen!r} has no printable character",
            hint="Pass --actor or set OUTBOX_MONITOR_ACTOR to a name such as an e-mail "
            "address; the audit log records it.",
        )
    return Identity(chosen, Role.admin, source)


def name_refusal(received: str) -> str | None:
    """Why a name received from outside (a proxy's identity header) cannot be an identity's
    name as it is, or ``None`` when it can: the role, the name shown and the name audited
    are then one value, the one received.

    Args:
        received: the value as received (outer spaces already stripped).

    Returns:
        ``None`` when ``normalise_actor`` keeps ``received`` as it is; else the reason in
        words: longer than ``MAX_ACTOR_LENGTH`` characters (the audit log's cut), or the
        characters cleaning would drop or change (``U+00AD`` …; or "not in NFC form").
    """
    if len(received) > MAX_ACTOR_LENGTH:
        return (
            f"it is {len(received)} characters long, more than the {MAX_ACTOR_LENGTH} the "
            "audit log keeps"
        )
    if normalise_actor(received) == received:
        return None
    unclean = sorted(
        {
            f"U+{ord(char):04X}"
            for char in received
            if unicodedata.category(char)[0] in "CZ" and char != " "
        }
    )
    what = ", ".join(unclean) if unclean else "characters not in Unicode's composed form (NFC)"
    return f"it holds {what}, which the name shown and audited would not"


LOOPBACK_PROXIES = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
"""Where identity headers are believed from when ``OUTBOX_MONITOR_TRUSTED_PROXIES`` is empty."""
FORWARDED_ALLOW_IPS = "FORWARDED_ALLOW_IPS"
"""uvicorn's variable (Streamlit's server): the peers whose ``X-Forwarded-For`` replaces the
connection's address that ``st.context.ip_address`` reads (uvicorn's default:
``127.0.0.1,::1``). ``outbox-monitor dashboard`` sets it empty, so that address is always
the connection's peer."""


def trusted_proxy(settings: Settings, peer: str) -> bool:
    """Whether identity headers arriving on a connection from ``peer`` are believed
    (``proxy`` mode; Grafana's ``auth.proxy`` whitelist).

    Args:
        settings: ``trusted_proxies``, CIDRs; empty means loopback (``LOOPBACK_PROXIES``).
        peer: the connection's peer address, IPv4 or IPv6 (an IPv4 address mapped into
            IPv6, ``::ffff:10.0.0.5``, counts as ``10.0.0.5``).

    Returns:
        ``True`` when a network of the list (or loopback, for an empty list) holds ``peer``;
        ``False`` otherwise, and for anything that is not an IP address.
    """
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return False
    address = getattr(address, "ipv4_mapped", None) or address
    networks = [ipaddress.ip_network(n) for n in settings.trusted_proxies] or LOOPBACK_PROXIES
    return any(address in network for network in networks)


def is_loopback(address: str) -> bool:
    """Whether a listening address is reachable from this machine only.

    Args:
        address: ``localhost``, an IPv4 or IPv6 address (``[::1]`` brackets allowed).

    Returns:
        ``True`` for ``localhost`` and every loopback address: all of ``127.0.0.0/8``,
        ``::1`` and IPv4 loopback mapped into IPv6 (``::ffff:127.0.0.2``); ``False`` for
        anything else, the wildcard ``0.0.0.0`` and other host names included.
    """
    if address.lower() == "localhost":
        return True
    try:
        parsed = ipaddress.ip_address(address.removeprefix("[").removesuffix("]"))
    except ValueError:
        return False
    return (getattr(parsed, "ipv4_mapped", None) or parsed).is_loopback


def _claim_values(claims: Mapping[str, Any], name: str) -> set[str]:
    value = claims.get(name)
    if value is None:
        return set()
    if isinstance(value, list | tuple | set):
        return {str(item) for item in value}
    if isinstance(value, str):
        return {value}
    return {str(value)}


def _matches(entry: str, email: str | None, claims: Mapping[str, Any]) -> bool:
    if "@" in entry:
        if not email:
            return False
        if entry.startswith("@"):
            return email.endswith(entry)
        if entry.startswith("*@"):
            return email.endswith(entry[1:])
        return fnmatch.fnmatchcase(email, entry) if "*" in entry else email == entry
    claim, _, wanted = entry.partition("=")
    return wanted in _claim_values(claims, claim.strip())


def role_for(
    settings: Settings, email: str | None, claims: Mapping[str, Any] | None = None
) -> Role | None:
    """The role the mapping gives a signed-in person (docs/security.md).

    Entries of ``OUTBOX_MONITOR_ADMINS``, ``…_OPERATORS`` and ``…_VIEWERS`` are e-mails
    (``alice@example.com``), domains (``@example.com``) or claim matches
    (``groups=oncall``: the ID token's — or the proxy's groups header's — ``groups`` claim
    holds ``oncall``). The highest matching role wins.

    Args:
        settings: the mapping.
        email: the person's e-mail (compared lower-case), or ``None``.
        claims: ID-token claims (or ``{"groups": [...]}`` from a proxy header).

    Returns:
        The role, or ``None`` when nothing matches (no access).
    """
    address = email.strip().lower() if email else None
    for role, entries in (
        (Role.admin, settings.admins),
        (Role.operator, settings.operators),
        (Role.viewer, settings.viewers),
    ):
        if any(_matches(entry, address, claims or {}) for entry in entries):
            return role
    return None


def require(identity: Identity, role: Role, what: str) -> None:
    """Refuse ``what`` unless ``identity`` has ``role`` (the server-side check).

    Args:
        identity: who asks.
        role: the least role ``what`` needs.
        what: the refused thing in words (``"replay dead-lettered events"``).

    Raises:
        AccessDenied: the identity's role is lower; the message names both roles.
    """
    if not identity.can(role):
        raise AccessDenied(
            f"{identity.name} ({identity.role.name}) may not {what}: it needs the {role.name} role",
            hint="Ask an admin of outbox-monitor to add you to "
            f"OUTBOX_MONITOR_{role.name.upper()}S.",
        )
