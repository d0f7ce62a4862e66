"""The dashboard's door: who is looking (local user, OIDC sign-in or trusted proxy header)
and the pages they may see. docs/security.md describes the modes and roles.

``identity(settings)`` either returns the identity of this browser session or renders a
page of its own (sign in, ask for access, refused) and stops the run: nothing below it in
dashboard.py runs for someone without a role.
"""

import ipaddress
import logging
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import streamlit as st
from streamlit import runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

from outbox_monitor.access import (
    FORWARDED_ALLOW_IPS,
    Identity,
    Role,
    is_loopback,
    local_identity,
    name_refusal,
    role_for,
    trusted_proxy,
)
from outbox_monitor.config.fleet import Fleet, Outbox
from outbox_monitor.config.settings import Settings
from outbox_monitor.ui import deep_link, format

log = logging.getLogger(__name__)
_NOT_IN_AN_ADDRESS = r"\s,;@\x00-\x1f\x7f-\x9f"
ONE_ADDRESS = re.compile(rf"[^{_NOT_IN_AN_ADDRESS}]+@[^{_NOT_IN_AN_ADDRESS}]+")
"""One e-mail address: no spaces, list separators or control characters."""
MAX_LOGGED_NAME = 300
"""Characters of a refused header value quoted in the log line (a longer one is cut)."""


def _stop_on(page_title: str, body: Any, paths: Sequence[str] = ()) -> NoReturn:
    """Render ``body`` as the only page (no other page is listed) and stop the run; it is
    served at ``/`` and at each of ``paths`` too (a link to a page then shows it at that
    URL, not "Page not found")."""
    pages = [st.Page(body, title=page_title, url_path="access", default=True)]
    pages += [st.Page(body, title=page_title, url_path=path) for path in paths if path]
    st.navigation(pages, position="hidden")
    st.title(page_title)
    body()
    st.stop()


def _refused(title: str, message: str, *, sign_out: bool = False) -> NoReturn:
    def body() -> None:
        st.error(message, icon=":material/lock:")
        if sign_out and st.button("Sign out", key="access.sign_out"):
            st.logout()

    _stop_on(title, body)


def _sign_in(paths: Sequence[str]) -> NoReturn:
    def body() -> None:
        deep_link.remember()  # the sign-in callback lands on "/": "/" sends back here
        st.write(
            "outbox-monitor shows event payloads and can replay, reap and prune: sign in "
            "with your organisation's account to continue."
        )
        if st.button("Sign in", key="access.sign_in", type="primary"):
            st.login()

    _stop_on("Sign in", body, paths)


def _oidc_identity(settings: Settings, paths: Sequence[str]) -> Identity:
    claims: Mapping[str, Any] = st.user.to_dict()
    if "is_logged_in" not in claims:  # Streamlit found no [auth] secrets
        _refused(
            "Sign-in is not configured",
            "OUTBOX_MONITOR_AUTH is oidc, but Streamlit has no [auth] settings: set "
            "OUTBOX_MONITOR_OIDC_METADATA_URL, _CLIENT_ID, _CLIENT_SECRET, _COOKIE_SECRET "
            "and _REDIRECT_URL and start it with `outbox-monitor dashboard` (docs/security.md).",
        )
    if not claims["is_logged_in"]:
        _sign_in(paths)
    email = claims.get("email")
    role = role_for(settings, email, claims)
    name = str(email or claims.get("sub") or "unknown")
    if role is None:
        _refused(
            "Ask for access",
            f"You are signed in as {format.md_code(name)}, but no role of outbox-monitor "
            "matches your account. Ask an admin to add your e-mail, domain or group to "
            "OUTBOX_MONITOR_VIEWERS (or _OPERATORS, _ADMINS).",
            sign_out=True,
        )
    return Identity(name, role, "oidc")


def _one_header_value(name: str) -> str | None:
    """The value of the request header ``name`` sent once, ``None`` when it is absent;
    a header sent on more than one line is refused (no identity) with a log line.

    A proxy that appends its own line after the client's (rather than replacing it)
    would otherwise let the client's line, the first, name who is signed in.
    """
    values = st.context.headers.get_all(name)
    if len(values) > 1:
        log.warning(
            "proxy sign-in refused: the request carries %d %s header lines (one is "
            "expected, set by the proxy; the client may have sent its own)",
            len(values),
            name,
        )
        _refused(
            "No identity",
            f"This request carries {len(values)} lines of the {format.md_code(name)} "
            "header, so none of them is believed: the authenticating proxy must set it, "
            "replacing any the browser sent, not add a line to it.",
        )
    return values[0] if values else None


def _proxy_claims(settings: Settings, email: str) -> dict[str, Any]:
    """The claims a proxy sign-in maps by: its e-mail, and the groups of
    ``OUTBOX_MONITOR_PROXY_GROUPS_HEADER`` when that is set (comma-separated)."""
    header = settings.proxy_groups_header
    raw_groups = _one_header_value(header) if header else None
    groups = [g.strip() for g in (raw_groups or "").split(",") if g.strip()]
    return {"groups": groups, "email": email}


def _peer() -> str | None:
    """The address of the connection that carried this session's websocket: its TCP peer
    (behind a proxy chain, the last proxy's address), never a client named by
    ``X-Forwarded-For``. ``None`` when the session has no client (AppTest), and then no
    headers either.

    Streamlit's ``st.context.ip_address`` reads it from uvicorn, which replaces it with the
    ``X-Forwarded-For`` value when the peer is one of ``FORWARDED_ALLOW_IPS`` (by default
    ``127.0.0.1,::1``); ``outbox-monitor dashboard`` sets that variable empty. Started
    another way, a request carrying ``X-Forwarded-For`` has no known peer: refused.
    The address is the connection's own (``_connection_address``: ``::1`` is not
    ``127.0.0.1``); a session with headers but no recorded peer is read as ``127.0.0.1``.
    """
    if os.environ.get(FORWARDED_ALLOW_IPS) != "" and "X-Forwarded-For" in st.context.headers:
        log.warning(
            "proxy sign-in refused: the connection's address is unknown (Streamlit's server "
            "may have replaced it with X-Forwarded-For, %s=%r); start the dashboard with "
            "`outbox-monitor dashboard`, which sets it empty",
            FORWARDED_ALLOW_IPS,
            os.environ.get(FORWARDED_ALLOW_IPS),
        )
        _refused(
            "No identity",
            "This request's connection address is unknown (it carries X-Forwarded-For and "
            f"Streamlit's server believes it: {FORWARDED_ALLOW_IPS} is not empty), so its "
            "identity header is not believed. Start the dashboard with `outbox-monitor "
            "dashboard` (docs/security.md).",
        )
    raw = _connection_address() or st.context.ip_address
    if st.context.headers and raw is None:  # no session client: read as 127.0.0.1
        return "127.0.0.1"
    return raw if isinstance(raw, str) else None


def _connection_address() -> str | None:
    """The TCP peer of this session's websocket as Streamlit's server recorded it, ``::1``
    and ``127.0.0.1`` told apart (``st.context.ip_address`` gives both as ``None``, so a
    proxy at ``::1`` was taken for ``127.0.0.1``: refused by a list of ``::1/128``, believed
    by one of ``127.0.0.1/32``); ``None`` when the session has no client (AppTest)."""
    script = get_script_run_ctx()
    if script is None or not runtime.exists():
        return None
    client = runtime.get_instance().get_client(script.session_id)
    address = getattr(getattr(client, "client_context", None), "remote_ip", None)
    return address if isinstance(address, str) else None


def _proxy_email(settings: Settings) -> str:
    """The value of the proxy's identity header, outer spaces stripped (``""`` when absent),
    from a trusted proxy and exactly as it will be shown and audited; else a page of its
    own and a WARNING log line:

    - the connection's peer (``_peer``) is outside ``OUTBOX_MONITOR_TRUSTED_PROXIES``
      (empty: loopback only): no header of it is believed;
    - the value's cleaned form (``access.normalise_actor``) differs from it, or it is longer
      than the cut (``access.name_refusal``): the role would be mapped from one name and
      another shown and audited.
    """
    peer = _peer()
    if peer is not None and not trusted_proxy(settings, peer):
        log.warning(
            "proxy sign-in refused: a request from %s, which OUTBOX_MONITOR_TRUSTED_PROXIES "
            "(%s) does not hold; its %s header is not believed",
            peer,
            ", ".join(settings.trusted_proxies) or "empty: loopback only",
            settings.proxy_header,
        )
        _refused(
            "No identity",
            f"This request comes from {format.md_code(peer)}, which is not a trusted proxy "
            "(OUTBOX_MONITOR_TRUSTED_PROXIES), so its identity header is not believed. Open "
            "the dashboard through the authenticating proxy's address.",
        )
    email = (_one_header_value(settings.proxy_header) or "").strip()
    refusal = name_refusal(email) if email else None
    if refusal is not None:
        log.warning(
            "proxy sign-in refused: the %s header's value %r cannot be a name as it is: %s",
            settings.proxy_header,
            email[:MAX_LOGGED_NAME],
            refusal,
        )
        _refused(
            "No identity",
            f"The {format.md_code(settings.proxy_header)} header's value cannot be a name as "
            f"it is ({refusal}), so it is not believed: the name mapped to a role, shown "
            "and audited must be the one the proxy sent.",
        )
    return email


def _proxy_identity(settings: Settings) -> Identity:
    email = _proxy_email(settings)
    if not email:
        _refused(
            "No identity",
            f"This dashboard expects the authenticating proxy in front of it to send the "
            f"{format.md_code(settings.proxy_header)} header, and this request has none. "
            "Open the dashboard through the proxy's address.",
        )
    if not ONE_ADDRESS.fullmatch(email):
        _refused(
            "No identity",
            f"The {format.md_code(settings.proxy_header)} header holds "
            f"{format.md_code(email)}, not one e-mail address: the proxy must set it (not "
            "append to it).",
        )
    role = role_for(settings, email, _proxy_claims(settings, email))
    if role is None:
        _refused(
            "Ask for access",
            f"The proxy says you are {format.md_code(email)}, but no role of "
            "outbox-monitor matches. Ask an admin to add your e-mail, domain or group to "
            "OUTBOX_MONITOR_VIEWERS (or _OPERATORS, _ADMINS).",
        )
    return Identity(email, role, "proxy")


def _remote_client() -> str | None:
    """The browser's address when it is on another machine, else ``None`` (an IPv4 address
    mapped into IPv6, ``::ffff:10.0.0.5``, is given as ``10.0.0.5``)."""
    raw = st.context.ip_address  # None for 127.0.0.1 and ::1
    if not isinstance(raw, str):  # None, or no client at all (AppTest)
        return None
    try:
        address = ipaddress.ip_address(raw)
    except ValueError:
        return raw
    address = getattr(address, "ipv4_mapped", None) or address
    return None if is_loopback(str(address)) else str(address)


def identity(settings: Settings, paths: Sequence[str] = ()) -> Identity:
    """The identity of this browser session, or a page of its own and ``st.stop()``.

    ``paths``: the dashboard pages' ``url_path``; the sign-in page answers at each, and
    keeps the link it was opened at through the sign-in (``deep_link``).

    - ``local`` (``OUTBOX_MONITOR_AUTH`` unset): the local user, ``admin``
      (``access.local_identity``). Refused, without ``OUTBOX_MONITOR_INSECURE_NO_AUTH``,
      when Streamlit listens on a non-loopback address or the browser is on another
      machine (``streamlit run`` listens on every interface by default).
    - ``oidc``: ``st.user`` after ``st.login``; a sign-in page until then; the role from
      the mapping (``access.role_for`` on the e-mail and ID-token claims).
    - ``proxy``: the e-mail in ``OUTBOX_MONITOR_PROXY_HEADER``, trusted only in this
      mode, only from a connection whose peer ``OUTBOX_MONITOR_TRUSTED_PROXIES`` holds
      (empty: loopback), and only when it is a name as it is (``access.name_refusal``);
      groups from ``OUTBOX_MONITOR_PROXY_GROUPS_HEADER`` only when it is set (no
      groups header is read by default: one the proxy does not set comes from the browser).

    Returns:
        The ``Identity``; a session without a role never gets past this call.
    """
    if settings.auth == "oidc":
        return _oidc_identity(settings, paths)
    if settings.auth == "proxy":
        return _proxy_identity(settings)
    address = st.get_option("server.address")
    exposed = bool(address and not is_loopback(address))
    remote = _remote_client()
    if (exposed or remote is not None) and not settings.insecure_no_auth:
        where = format.md_code(address) if exposed else "every interface"
        _refused(
            "Sign-in required",
            f"This dashboard listens on {where} without a sign-in mode"
            + (f" and this request comes from {format.md_code(remote)}" if remote else "")
            + ". Set OUTBOX_MONITOR_AUTH=oidc or proxy (docs/security.md), serve it on "
            "127.0.0.1 with `outbox-monitor dashboard`, or set "
            "OUTBOX_MONITOR_INSECURE_NO_AUTH=true if a network boundary already guards it.",
        )
    return local_identity(settings)


def for_outbox(identity: Identity, settings: Settings) -> Identity | None:
    """The same person's identity on the outbox of ``settings``: the role its mapping gives
    them (``access.role_for``; a fleet file's ``access`` of that outbox, else the process's
    OUTBOX_MONITOR_ADMINS/OPERATORS/VIEWERS), read again from the sign-in (ID token or proxy
    headers). A local identity (no sign-in) is returned as it is.

    Returns:
        The identity with that role, or ``None`` when the mapping gives them none.
    """
    if identity.source == "oidc":
        claims: Mapping[str, Any] = st.user.to_dict()
        role = role_for(settings, claims.get("email"), claims)
    elif identity.source == "proxy":
        role = role_for(settings, identity.name, _proxy_claims(settings, identity.name))
    else:
        return identity
    if role is None:
        return None
    return identity if role == identity.role else Identity(identity.name, role, identity.source)


def _signed_in(settings: Settings) -> tuple[str, Mapping[str, Any]] | None:
    """Who signed in: the e-mail (or ``sub``) and the claims the role mapping reads; ``None``
    in local mode and before a sign-in (no OIDC login, no single e-mail in the proxy's
    header: ``identity`` then draws its own page). Nothing is drawn but a proxy header that
    is never believed (``_proxy_email``, ``_one_header_value``): its "No identity" page."""
    if settings.auth == "oidc":
        claims: Mapping[str, Any] = st.user.to_dict()
        if not claims.get("is_logged_in"):
            return None
        return str(claims.get("email") or claims.get("sub") or "unknown"), claims
    if settings.auth == "proxy":
        email = _proxy_email(settings)
        if ONE_ADDRESS.fullmatch(email):
            return email, _proxy_claims(settings, email)
    return None


def may_view(settings: Settings) -> bool:
    """Whether this session gets a role from the outbox's mapping (``access.role_for``; a
    fleet entry's ``access``), read before ``identity``: always in local mode and before a
    sign-in (the sign-in page comes first)."""
    signed = _signed_in(settings)
    return signed is None or role_for(settings, signed[1].get("email"), signed[1]) is not None


def first_viewable(fleet: Fleet) -> Outbox | None:
    """The fleet's first outbox this session may view (``may_view``), ``None`` for none."""
    return next((o for o in fleet.outboxes if may_view(o.settings)), None)


def admitting(fleet: Fleet, wanted: Settings) -> Settings:
    """The outbox whose role mapping ``identity`` admits this session by: ``wanted`` (the
    outbox of the URL or the sidebar) when the person may view it, else the fleet's first
    they may view (their pages then ask them to choose another, ``state.context``).

    Raises:
        Streamlit's stop, after one "Ask for access" page naming the outboxes, when the
        person may view none of a fleet of several (a single outbox: ``identity``'s page).
    """
    if may_view(wanted):
        return wanted
    viewable = first_viewable(fleet)
    if viewable is not None or len(fleet.outboxes) == 1:
        return viewable.settings if viewable else wanted
    signed = _signed_in(wanted)
    name = format.md_code(signed[0] if signed else "unknown")
    _refused(
        "Ask for access",
        f"You are signed in as {name}, but none of this dashboard's outboxes "
        f"({', '.join(fleet.names)}) gives you a role. Ask an admin to add your e-mail, "
        "domain or group to an outbox's `access` in the fleet file "
        "(OUTBOX_MONITOR_OUTBOXES), or to OUTBOX_MONITOR_VIEWERS (or _OPERATORS, _ADMINS).",
        sign_out=wanted.auth == "oidc",
    )


def pages_for(identity: Identity, pages: Mapping[Role, list]) -> list:
    """The pages ``identity`` may open: those of its role and every lower role.

    Args:
        identity: who is looking.
        pages: least role → the ``st.Page`` objects that need it.

    Returns:
        The allowed pages, in the order given.
    """
    return [page for role, listed in pages.items() if identity.can(role) for page in listed]


def sidebar_account(identity: Identity) -> None:
    """The sidebar line naming who is looking and their role, with sign-out under OIDC."""
    st.sidebar.caption(
        f"Signed in as {format.md_code(identity.name)} · {identity.role.name}"
        if identity.source != "local"
        else f"Acting as {format.md_code(identity.name)} (local, {identity.role.name})"
    )
    if identity.source == "oidc" and st.sidebar.button("Sign out", key="access.sidebar_out"):
        st.logout()
