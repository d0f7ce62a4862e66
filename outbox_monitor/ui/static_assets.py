"""Recovery from a stylesheet that failed to load (issue 15 item 8): Streamlit loads the
code of some elements (the dataframe grid, charts) the first time a page draws one; when
the request for that chunk's stylesheet fails (a server busy with a replay, a proxy's
timeout), Vite's loader throws "Unable to preload CSS for …" and Streamlit shows that box
in place of every such element until the page is reloaded (the failed import is kept).

``recover_failed_stylesheets`` installs, once per browser tab, a listener of Vite's
``vite:preloadError`` event that lets the element's code load anyway and fetches the
stylesheet again (5 tries, 1 s apart), so the tables appear without a manual reload. A
script chunk that failed ("Failed to fetch dynamically imported module", seen at a demo's
start under load: the sidebar's inputs replaced by that error) cannot be fetched again in
the page — the browser keeps the failed import — so the tab reloads itself, at most once in
``RELOAD_GUARD_S`` seconds. This script is itself an element whose code Streamlit loads
lazily, so under load a chunk or a stylesheet may fail before the listener exists (seen in a
fresh-clone CI: the dead letters' grid replaced by "Unable to preload CSS" for 60 s): for
``SCAN_S`` seconds after it is installed, an error box of either failed import already on
the page reloads the tab too (same guard).
"""

import streamlit as st

RETRIES = 5
RETRY_DELAY_MS = 1000
RELOAD_GUARD_S = 30
"""A script chunk that failed to load reloads the tab at most once in this many seconds."""
SCAN_S = 20
"""For this many seconds after the listener is installed, look for a failed import's error."""

_LISTENER = f"""<script>
if (!window.__outboxMonitorStylesheetRetry) {{
  window.__outboxMonitorStylesheetRetry = true;
  const load = (href, left) => {{
    document.querySelectorAll('link[rel="stylesheet"]').forEach((old) => {{
      if (old.href === href) old.remove();
    }});
    const link = document.createElement("link");
    link.rel = "stylesheet";
    link.crossOrigin = "";
    link.href = href;
    link.addEventListener("error", () => {{
      if (left > 0) setTimeout(() => load(href, left - 1), {RETRY_DELAY_MS});
      else console.error("outbox-monitor: stylesheet " + href + " did not load");
    }});
    document.head.appendChild(link);
  }};
  // a script chunk: the browser keeps a failed module import for the page's life, so only
  // a reload fetches it again; at most once per {RELOAD_GUARD_S} s, else Streamlit's error stands
  const reload = (message) => {{
    const key = "outboxMonitorChunkReload";
    const last = Number(sessionStorage.getItem(key) || 0);
    if (Date.now() - last < {RELOAD_GUARD_S} * 1000) return false;
    sessionStorage.setItem(key, String(Date.now()));
    console.error("outbox-monitor: reloading after a failed script chunk: " + message);
    location.reload();
    return true;
  }};
  window.addEventListener("vite:preloadError", (event) => {{
    const message = String(event.payload?.message);
    const found = /Unable to preload CSS for (\\S+)/.exec(message);
    if (found) {{
      event.preventDefault();  // the element's code loads; its stylesheet is fetched again
      load(found[1], {RETRIES});
      return;
    }}
    if (reload(message)) event.preventDefault();
  }});
  // a chunk or stylesheet that failed before this listener existed left its error box on
  // the page (the element's import failed for good): only a reload fetches it again
  const failedImports = ["Failed to fetch dynamically imported module", "Unable to preload CSS"];
  const started = Date.now();
  const scan = setInterval(() => {{
    const shown = [...document.querySelectorAll('[role="alert"]')].find(
      (box) => failedImports.some((text) => box.textContent.includes(text)));
    if ((shown && reload(shown.textContent)) || Date.now() - started > {SCAN_S} * 1000) {{
      clearInterval(scan);
    }}
  }}, 500);
}}
</script>"""


def recover_failed_stylesheets() -> None:
    """Install the stylesheet retry in this browser tab (a no-op after the first run: the
    listener is registered once per tab). Call it before any element that loads code of
    its own (``dashboard.py`` does, right after ``st.set_page_config``)."""
    st.html(_LISTENER, unsafe_allow_javascript=True)
