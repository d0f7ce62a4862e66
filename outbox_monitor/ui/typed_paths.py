"""The paths people type (issue 30 item 7): ``/dead-letters``, ``/deadletters``,
``/Dead_letters`` or ``/Overview`` reach their page, their query kept; a path that names no
page answers with the list of pages, and a page the role may not open says which role it
needs: never Streamlit's bare "Page not found".

Streamlit's router matches a page's ``url_path`` exactly (case and ``_`` included; a
trailing ``/`` is dropped by its frontend). So before ``st.navigation`` runs, the path the
browser asked for is read, and when no page has it a hidden page is added under exactly that
path: it sends a spelling of a page on to the page, and answers anything else itself.
"""

import re
from collections.abc import Mapping, Sequence
from typing import Any

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from outbox_monitor.ui import format


def spelling(name: str) -> str:
    """``name`` as compared with pages' paths and titles: lower case, letters and digits
    only (``Dead-Letters``, ``dead_letters`` and ``dead letters`` are all ``deadletters``)."""
    return re.sub(r"[^0-9a-z]", "", name.casefold())


def meant_page(name: str, pages: Sequence[st.Page]) -> st.Page | None:
    """The page of ``pages`` whose ``url_path`` or title is spelled as ``name`` is.

    Args:
        name: a typed path segment, e.g. ``"Dead-Letters"``.
        pages: the dashboard's pages (hidden ones with an empty path are skipped).

    Returns:
        That page, or ``None`` when none or several match.
    """
    wanted = spelling(name)
    found = [
        page
        for page in pages
        if page.url_path and wanted in {spelling(page.url_path), spelling(page.title)}
    ]
    return found[0] if len(found) == 1 else None


def requested_path() -> str | None:
    """The page path the browser asked for in this run (``"Dead-letters"`` for
    ``/Dead-letters?x=1``), or ``None`` when it named none (the root, a rerun, a click in the
    sidebar, AppTest). Read from Streamlit's page manager, which keeps it for
    ``st.navigation``; a Streamlit without it gives ``None`` and typed paths then get
    Streamlit's own answer."""
    ctx = get_script_run_ctx()
    manager = getattr(ctx, "pages_manager", None)
    name = getattr(manager, "intended_page_name", None)
    return name.strip("/") or None if isinstance(name, str) else None


def typed_path_page(
    allowed: Sequence[st.Page], pages: Mapping[Any, Sequence[st.Page]]
) -> st.Page | None:
    """A hidden page answering the path the browser asked for when no page it may open has it.

    Args:
        allowed: the pages this identity may open (``st.navigation`` gets them).
        pages: least role (``access.Role``) → all the dashboard's pages that need it, so that
            a page this identity may not open is named with the role it needs.

    Returns:
        A hidden ``st.Page`` under exactly the requested path — it switches to the page the
        path spells, its query kept, or says which role the page needs, or lists the pages —
        or ``None`` when the requested path is an allowed page's own (or none was requested).
    """
    name = requested_path()
    if name is None or name in {page.url_path for page in allowed}:
        return None

    def answer() -> None:
        target = meant_page(name, allowed)
        if target is not None:
            query = {key: st.query_params.get_all(key) for key in st.query_params}
            st.switch_page(target, query_params=query)
        closed = meant_page(name, [page for listed in pages.values() for page in listed])
        if closed is not None:
            role = next(role for role, listed in pages.items() if closed in listed)
            st.title(closed.title)
            st.warning(
                f"The {closed.title} page needs the {role.name} role. Your pages:",
                icon=":material/lock:",
            )
        else:
            st.title("No such page")
            st.warning(f"No page has the path {format.md_code('/' + name)}. The pages:")
        for page in allowed:
            if page.url_path:
                st.page_link(page, label=f"{page.title} — /{page.url_path}")
        st.stop()

    return st.Page(answer, title="No such page", url_path=name, visibility="hidden")
