"""``python -m outbox_monitor.ui.streamlit_main run dashboard.py …``: Streamlit's own command
line (``service.serve.streamlit_command`` starts the dashboard with it), told first that the
``pages/`` folder beside ``dashboard.py`` holds ``st.navigation``'s page scripts.

Left to itself, Streamlit sees a ``pages/`` folder at its first script run and serves the
process's first runs the legacy way (each file a page of its own) until a script calls
``st.navigation``: a typed path such as ``/dead-letters`` then gets its "Page not found"
dialog before ``dashboard.py`` can answer it (``ui.typed_paths``), and the first page of the
process runs twice (``ui.state.ensure_dashboard_run``, still needed under AppTest).
"""

from streamlit.runtime.pages_manager import PagesManager
from streamlit.web.cli import main


def run() -> None:
    """Serve as ``streamlit`` does, with ``st.navigation`` deciding every page from the
    first run (command line and exit codes: ``streamlit run --help``)."""
    PagesManager.uses_pages_directory = False
    main()


if __name__ == "__main__":
    run()
