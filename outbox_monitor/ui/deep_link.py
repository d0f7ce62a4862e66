"""A link into the dashboard kept through the OIDC sign-in (issue 15 item 8): Streamlit's
sign-in callback always lands on ``/`` in a new session, so the sign-in page leaves the
page and query it was opened at in a short-lived browser cookie, and ``/`` sends there
once (``state.open_overview``); the next page drops the cookie from the browser
(``forget``), so that neither a restart (which empties the followed nonces) nor another
dashboard process behind the same address sends ``/`` back to that link again.
"""

import secrets
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import streamlit as st

NEXT_COOKIE = "outbox_monitor_next"
"""The cookie: ``"<nonce> <path>?<query>"``, URL-encoded."""
MAX_AGE_SECONDS = 600
"""How long a sign-in may take before the link is forgotten (the browser drops it)."""

_FORGOTTEN = "deep_link.forgotten"
"""Session state: this session has told the browser to drop ``NEXT_COOKIE``."""

_used: set[str] = set()
_used_lock = threading.Lock()


def remember() -> None:
    """On the sign-in page: set ``NEXT_COOKIE`` in the browser to the page's own path and
    query (as the browser shows them), with a fresh nonce so that it is followed once."""
    nonce = secrets.token_hex(8)
    st.html(
        "<script>document.cookie = "
        f"'{NEXT_COOKIE}=' + encodeURIComponent('{nonce} ' + location.pathname + "
        f"location.search) + '; path=/; max-age={MAX_AGE_SECONDS}; samesite=lax';</script>",
        unsafe_allow_javascript=True,
    )


def recall(pages: Iterable[Any]) -> tuple[Any, dict[str, list[str]]] | None:
    """The page and query the sign-in page was opened at, once per nonce, when the cookie
    names one of ``pages`` (its last path segment is the page's ``url_path``; a prefix
    before it, as a proxy's base path, is allowed).

    Args:
        pages: the dashboard's ``st.Page`` objects this identity may open.

    Returns:
        ``(page, query)`` for ``st.switch_page``, or ``None`` (no cookie, already followed,
        or not a page of the dashboard: the link is then ignored).
    """
    raw = st.context.cookies.get(NEXT_COOKIE)
    if not raw:
        return None
    nonce, _, link = unquote(raw).partition(" ")
    with _used_lock:
        if not nonce or nonce in _used:
            return None
        _used.add(nonce)
    parts = urlsplit(link)
    if parts.scheme or parts.netloc:
        return None
    name = parts.path.rstrip("/").rsplit("/", 1)[-1]
    for page in pages:
        if name and page.url_path == name:
            return page, parse_qs(parts.query, keep_blank_values=True)
    return None


def forget() -> None:
    """Past the sign-in and the root's redirect: when the browser still sends
    ``NEXT_COOKIE``, tell it to drop the cookie (once per session)."""
    if NEXT_COOKIE not in st.context.cookies or st.session_state.get(_FORGOTTEN):
        return
    st.session_state[_FORGOTTEN] = True
    st.sidebar.html(
        f"<script>document.cookie = '{NEXT_COOKIE}=; path=/; max-age=0; samesite=lax';</script>",
        unsafe_allow_javascript=True,
    )
