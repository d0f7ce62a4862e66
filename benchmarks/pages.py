"""Benchmark of page load times in headless Chromium against Streamlit's own floor (issue 11,
item 5).

Starts its own throwaway PostgreSQL cluster, seeds ``--rows`` realistic outbox rows exactly
as ``figures.py`` does (30 days, ≈ 1 % dead letters, a backlog, the sampler's rows), runs
``init-db`` (``schema.init_db``: the ``outbox_monitor`` schema and the recommended indexes),
then serves two Streamlit servers with the flags of ``outbox-monitor dashboard``
(``serve.streamlit_command``; access mode local on 127.0.0.1):

- the product's dashboard (``serve.start_dashboard``);
- the floor: a bare page of 8 static ``st.metric`` tiles, written by the benchmark to a
  temporary folder — what Streamlit itself costs to show 8 tiles.

Each is timed in Debian's headless Chromium through Playwright (``/usr/bin/chromium``, never a
downloaded browser) until its content is shown: the floor and the Overview when 8 metric
tiles have values, Dead letters when its error-group table is drawn. Time is read in the
page: ``performance.now()`` (from the start of the navigation) when a ``MutationObserver``
first sees the content, so Playwright's polling adds nothing.

- cold: a fresh browser context (no HTTP cache, no session) and empty server caches. The
  servers keep running (Python modules imported, as on a server that has served before);
  their caches are emptied right before the sample by Streamlit's own "Clear cache" message
  (a ``BackMsg`` with ``clear_cache`` sent over the server's websocket, what the app menu's
  "Clear cache" sends): every ``st.cache_data`` and ``st.cache_resource`` entry is dropped,
  the database pool included.
- warm: a reload of the same tab as soon as the cold run has finished (the script idle), so
  the browser's HTTP cache and the server caches are filled.

Samples are interleaved: every round loads every page once, in a new order each round, so
load drifts hit all pages alike. The report gives medians of ``--repeat`` samples, the ratio
of each page's median to the floor's median of the same run (the gate: ≤ 1.15) and, in
brackets, the median of the round-by-round ratios (each page against the floor of its own
round, which a load spike in one round moves less; the gate holds both), the time until the
script run finished (charts and all), the script runs per load (``script_finished`` messages
on the page's websocket: full and fragment runs), the SQL statements each load ran in
Postgres (``pg_stat_statements``, top level) and the machine's 1-minute load average at each
sample, before and after.

With ``--framework-costs`` it also times reference pages without database or product code:
the floor plus one feature of the dashboard's pages each (the sidebar's three filter widgets
before the tiles; five altair charts after the tiles; help and delta on every tile; the
dashboard's whole layout: navigation of five pages, title, sidebar filters and captions),
and a bare page with one ``st.dataframe`` of 200 error groups (the Dead letters page's
content alone): what Streamlit itself charges for each.

Ports: the dashboard 8611, the baseline 8612, the floor 8613 and the ``--framework-costs``
pages 8614-8618, PostgreSQL 8619 (``--port``, ``--floor-port``: the first of the floor
pages, ``--pg-port``).

``--baseline DIR`` serves the dashboard of another checkout too (e.g. ``git archive`` of an
earlier commit, extracted), on 8612 with that checkout's own command line, and times its
Overview and Dead letters in the same interleaved rounds: before and after under the same
load.

Usage (from the repository root)::

    .venv/bin/python benchmarks/pages.py [--rows 200000] [--repeat 7]
    .venv/bin/python benchmarks/pages.py --smoke      # 20,000 rows, 2 repeats, < 60 s
    .venv/bin/python benchmarks/pages.py --framework-costs --baseline /tmp/before

The report goes to stdout as Markdown; progress goes to stderr. With ``--gate`` the exit
status is 1 when a ratio is above the gate. The benchmark's SQL is in
``benchmarks/queries.sql`` (named blocks).
"""

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

# figures.py, and this checkout's package and test helpers (not another install's)
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from figures import (  # figures.py: the script next to this one, on sys.path above
    STATEMENT_TIMEOUT_SECONDS,
    RecordingDatabase,
    log,
    seed,
)
from playwright.sync_api import Browser, Page, WebSocket, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from websockets.sync.client import connect

from outbox_monitor.config.settings import Settings, load_settings
from outbox_monitor.demo.pgcluster import TemporaryCluster, port_in_use
from outbox_monitor.service.serve import (
    dashboard_script,
    settings_environment,
    start_dashboard,
    stop_process,
    streamlit_command,
    wait_until_healthy,
)
from outbox_monitor.store.schema import init_db
from tests.browser_support import CHROMIUM, CHROMIUM_ARGS

GATE = 1.15
"""A page may take at most this many times the floor's time, cold and warm (issue 11)."""
ADDRESS = "127.0.0.1"
DASHBOARD_PORT, BASELINE_PORT, FLOOR_PORT, CLUSTER_PORT = 8611, 8612, 8613, 8619
"""Ports of this benchmark (8611-8619 are reserved for it); the --framework-costs pages take
the five ports after the floor's (8614-8618)."""
VIEWPORT = {"width": 1400, "height": 1000}
CONTENT_TIMEOUT_MS = 60_000
IDLE_SELECTOR = '[data-testid="stApp"][data-test-script-state="notRunning"]'
FLOOR_SCRIPT = """\
import streamlit as st

for row in range(2):
    for number, column in enumerate(st.columns(4), start=4 * row + 1):
        column.metric(f"Tile {number}", f"{number * 1111:,}", border=True)
"""
# --framework-costs: the floor plus one feature of the dashboard's pages each, to show what
# Streamlit itself charges for it (no database, no product code).
SIDEBAR_FILTERS = """\
with st.sidebar:
    st.text_input("Event type", key="event_type", placeholder="all")
    st.selectbox("Window", ["15m", "1h", "6h", "24h"], index=1, key="window")
    st.selectbox("Refresh every", ["5s", "10s", "30s", "1m"], index=1, key="refresh")
"""
FIVE_CHARTS = """\
from datetime import datetime, timedelta, timezone

import altair as alt
import pandas as pd

now = datetime.now(timezone.utc)
frame = pd.DataFrame({"t": [now - timedelta(minutes=m) for m in range(60)], "v": range(60)})
for _ in range(5):
    chart = alt.Chart(frame).mark_line().encode(x="t:T", y="v:Q").properties(height=220)
    st.altair_chart(chart, width="stretch")
"""
BARE_TABLE = """\
import pandas as pd
import streamlit as st

rows = [
    {"group_id": f"{n:012x}", "event_type": "order.paid", "failed": 10 * n,
     "first_seen": pd.Timestamp("2026-01-01", tz="UTC"),
     "last_seen": pd.Timestamp("2026-01-02", tz="UTC"),
     "fingerprint": f"HTTP 500 from api.example (request <id>) #{n}",
     "sample_error": "HTTP 500 Internal Server Error " + "x" * 200}
    for n in range(200)
]
st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
"""
DASHBOARD_LAYOUT = (
    """\
import streamlit as st

st.set_page_config(page_title="outbox-monitor", layout="wide")


def tiles():
"""
    + "".join("    " + line + "\n" for line in FLOOR_SCRIPT.splitlines()[2:])
    + """

names = ["Overview", "Events", "Dead letters", "Alerts", "Actions"]
pages = [st.Page(tiles, title="Overview", url_path="overview", default=True)] + [
    st.Page(lambda: None, title=name, url_path=name.lower().replace(" ", "_"))
    for name in names[1:]
]
page = st.navigation(pages)
"""
    + SIDEBAR_FILTERS
    + """
st.title(page.title)
st.sidebar.caption("Acting as `root` (local, admin)")
st.sidebar.caption("Outbox `public.integration_outbox`")
page.run()
"""
)
FRAMEWORK_COSTS = {
    "floor_sidebar": (
        "floor + sidebar filters before the tiles",
        FLOOR_SCRIPT.replace("\nfor row", "\n" + SIDEBAR_FILTERS + "\nfor row", 1),
    ),
    "floor_charts": ("floor + 5 altair charts after the tiles", FLOOR_SCRIPT + FIVE_CHARTS),
    "floor_help": (
        "floor + help and delta on each tile",
        FLOOR_SCRIPT.replace(
            "border=True)",
            'border=True, help="What it counts.", delta="within SLO", delta_arrow="off")',
        ),
    ),
    "floor_layout": (
        "floor in the dashboard's layout (navigation of 5 pages, title, sidebar filters and "
        "captions)",
        DASHBOARD_LAYOUT,
    ),
    "bare_table": ("bare page: one st.dataframe of 200 error groups", BARE_TABLE),
}
"""Server name → (page name, script) of the optional reference pages."""

# Content conditions, evaluated in the page on every DOM change until they hold.
TILES_FILLED = """(() => {
    const values = document.querySelectorAll('[data-testid="stMetricValue"]');
    return values.length >= 8 && [...values].every((v) => v.textContent.trim() !== "");
})()"""
TABLE_SHOWN = """(() => {
    const canvas = document.querySelector('[data-testid="stDataFrame"] canvas');
    return canvas !== null && canvas.width > 0 && canvas.height > 0;
})()"""
OBSERVER = """(() => {
    const shown = () => %s;
    const observer = new MutationObserver(() => {
        if (window.__contentShown === undefined && shown()) {
            window.__contentShown = performance.now();
            observer.disconnect();
        }
    });
    observer.observe(document, {childList: true, subtree: true, characterData: true,
                                attributes: true});
})();"""


@dataclass(frozen=True)
class Target:
    """One page to time: ``server`` is ``"dashboard"``, ``"floor"`` or a
    ``FRAMEWORK_COSTS`` key."""

    name: str
    server: str
    path: str
    content: str  # JS condition
    what: str


TARGETS = (
    Target("floor (8 static st.metric)", "floor", "/", TILES_FILLED, "8 tiles have values"),
    Target("Overview", "dashboard", "/overview", TILES_FILLED, "8 tiles have values"),
    Target("Dead letters", "dashboard", "/dead_letters", TABLE_SHOWN, "error-group table drawn"),
)


@dataclass
class Samples:
    """Per load: ms from navigation start to content shown (``cold``, ``warm``) and to the
    end of the script run (``*_idle``), script runs, SQL statements, 1-min load average."""

    cold: list[float] = field(default_factory=list)
    warm: list[float] = field(default_factory=list)
    cold_idle: list[float] = field(default_factory=list)
    warm_idle: list[float] = field(default_factory=list)
    cold_runs: list[int] = field(default_factory=list)
    warm_runs: list[int] = field(default_factory=list)
    cold_statements: list[int] = field(default_factory=list)
    warm_statements: list[int] = field(default_factory=list)
    load: list[float] = field(default_factory=list)


def uptime() -> str:
    """``uptime``'s load averages (1, 5, 15 min)."""
    text = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return text.split("load average:")[-1].strip()


def load_1min() -> float:
    """The 1-minute load average."""
    with open("/proc/loadavg") as loadavg:
        return float(loadavg.read().split()[0])


def require_free(port: int) -> None:
    """Stop the benchmark when ``port`` is taken: another server there would answer the
    health check and be timed instead of ours."""
    if port_in_use(ADDRESS, port):
        raise SystemExit(f"port {port} is in use: stop what listens there or pick another")


def clear_server_caches(url: str) -> None:
    """Empty every ``st.cache_data`` and ``st.cache_resource`` of the Streamlit server at
    ``url``: the ``clear_cache`` message its app menu sends, over a websocket of its own."""
    stream = url.replace("http://", "ws://", 1) + "/_stcore/stream"
    with connect(stream, subprotocols=["streamlit"], open_timeout=10) as websocket:
        websocket.send(BackMsg(clear_cache=True).SerializeToString())
    time.sleep(0.2)  # handled on receipt; let the pools close before the clock starts


@contextmanager
def serve(
    command: list[str], cwd: Path, log_path: Path, port: int, env: dict[str, str] | None = None
) -> Iterator[str]:
    """Run a Streamlit command until the block ends; yields its base URL once healthy."""
    with log_path.open("wb") as output:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        try:
            wait_until_healthy(process, address=ADDRESS, port=port, log_path=log_path)
            yield f"http://{ADDRESS}:{port}"
        finally:
            stop_process(process)


@contextmanager
def serve_dashboard(settings: Settings, log_path: Path, port: int) -> Iterator[str]:
    """``serve.start_dashboard`` (what ``outbox-monitor dashboard`` runs) until the block ends."""
    with log_path.open("wb") as output:
        process = start_dashboard(settings, address=ADDRESS, port=port, output=output)
        try:
            wait_until_healthy(process, address=ADDRESS, port=port, log_path=log_path)
            yield f"http://{ADDRESS}:{port}"
        finally:
            stop_process(process)


def baseline_command(checkout: Path, port: int) -> list[str]:
    """The command line with which the dashboard of another checkout serves itself: that
    checkout's own ``serve.streamlit_command`` (its flags, its ``dashboard.py``)."""
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); "
        "from outbox_monitor.service.serve import streamlit_command; "
        "print(json.dumps(streamlit_command(address=sys.argv[2], port=int(sys.argv[3]))))"
    )
    printed = subprocess.run(
        [sys.executable, "-c", code, str(checkout), ADDRESS, str(port)],
        cwd=checkout,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(printed)


def floor_command(script: Path, port: int) -> list[str]:
    """The dashboard's own command line (``serve.streamlit_command``) serving ``script``."""
    command = streamlit_command(address=ADDRESS, port=port)
    command[command.index(str(dashboard_script()))] = str(script)
    return command


class RunCounter:
    """Script runs the server finished for this page (full runs and fragment runs): the
    ``script_finished`` messages on the page's websockets."""

    def __init__(self, page: Page) -> None:
        self.finished = 0
        page.on("websocket", self._watch)

    def _watch(self, websocket: WebSocket) -> None:
        websocket.on("framereceived", self._frame)

    def _frame(self, payload: bytes | str) -> None:
        if isinstance(payload, bytes):
            message = ForwardMsg()
            message.ParseFromString(payload)
            self.finished += message.WhichOneof("type") == "script_finished"


def load_ms(page: Page, navigate: Callable[[], object]) -> tuple[float, float]:
    """Navigate, wait until the content condition holds, then until the script run has
    finished; ms from navigation start to each."""
    navigate()
    page.wait_for_function(
        "window.__contentShown !== undefined", polling=50, timeout=CONTENT_TIMEOUT_MS
    )
    page.wait_for_selector(IDLE_SELECTOR, state="attached", timeout=CONTENT_TIMEOUT_MS)
    return page.evaluate("[window.__contentShown, performance.now()]")


class StatementCounter:
    """Statements Postgres ran between ``reset()`` and ``count()`` (``pg_stat_statements``,
    top level, its own queries left out)."""

    def __init__(self, db: RecordingDatabase) -> None:
        self.db = db

    def reset(self) -> None:
        self.db.fetch_one("benchmark_pgss_reset")

    def count(self) -> int:
        return int(self.db.fetch_one("benchmark_pgss_calls")["calls"])


def sample(
    browser: Browser, url: str, target: Target, counter: StatementCounter, samples: Samples
) -> None:
    """One cold load (fresh context, server caches cleared) and one warm reload."""
    clear_server_caches(url)
    context = browser.new_context(viewport=VIEWPORT)
    try:
        context.add_init_script(OBSERVER % target.content)
        page = context.new_page()
        runs = RunCounter(page)
        address = url + target.path
        load = load_1min()
        counter.reset()
        cold = load_ms(page, lambda: page.goto(address, wait_until="commit"))
        cold_statements, cold_runs = counter.count(), runs.finished
        counter.reset()
        warm = load_ms(page, lambda: page.reload(wait_until="commit"))
        warm_statements, warm_runs = counter.count(), runs.finished - cold_runs
    except PlaywrightTimeout:
        text = page.inner_text("body")[-500:]
        raise SystemExit(
            f"{target.name}: {target.what} did not happen; the page shows: {text}"
        ) from None
    finally:
        context.close()
    samples.load.append(load)
    samples.cold.append(cold[0])
    samples.cold_idle.append(cold[1])
    samples.warm.append(warm[0])
    samples.warm_idle.append(warm[1])
    samples.cold_runs.append(cold_runs)
    samples.warm_runs.append(warm_runs)
    samples.cold_statements.append(cold_statements)
    samples.warm_statements.append(warm_statements)


def enable_statement_stats(cluster: TemporaryCluster, settings: Settings) -> None:
    """Load ``pg_stat_statements`` (a restart of the throwaway server) and create it."""
    db = RecordingDatabase(settings)
    with db.direct_connection(statement_timeout=None) as conn:
        conn.execute(db.compose("benchmark_pgss_preload"))
    cluster.pause()
    cluster.resume()
    with db.direct_connection(statement_timeout=None) as conn:
        conn.execute(db.compose("benchmark_pgss_create"))


def ms(value: float) -> str:
    return f"{value:,.0f}"


def spread(values: list[float]) -> str:
    """``median (min–max)`` in whole ms."""
    return f"{ms(statistics.median(values))} ({ms(min(values))}–{ms(max(values))})"


def print_report(
    args: argparse.Namespace,
    shape: dict,
    targets: tuple[Target, ...],
    results: dict[str, Samples],
    loads: tuple[str, str],
    wall: float,
) -> bool:
    """Print the Markdown report; returns whether every page is within the gate."""
    command = " ".join(["benchmarks/pages.py", *sys.argv[1:]])
    print("## Setup\n")
    print(f"- command: `.venv/bin/python {command}`")
    print(
        f"- machine: {platform.machine()}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}; load average (1, 5, 15 min) before: {loads[0]}; "
        f"after: {loads[1]}"
    )
    print(
        f"- table: {shape['total']:,} rows seeded as figures.py does ("
        + ", ".join(f"{status} {rows:,}" for status, rows in shape["counts"].items())
        + f"); seed {shape['seed_seconds']:.1f} s; init-db with the recommended indexes"
    )
    print(
        f"- {args.repeat} samples per page, interleaved; cold = fresh browser context + server "
        "caches cleared (Streamlit's clear_cache message: st.cache_data and st.cache_resource, "
        "pool included), server running; warm = reload once the cold run is idle"
    )
    print(
        "- time = ms from navigation start until the content is shown (in-page "
        "performance.now() at the DOM change); whole run "
        f"{wall:.0f} s\n"
    )
    floor = results[targets[0].name]
    floor_cold, floor_warm = statistics.median(floor.cold), statistics.median(floor.warm)
    within = True
    print(
        "| page | content | cold ms median (min–max) | cold ÷ floor (by round) "
        "| warm ms median (min–max) | warm ÷ floor (by round) | script finished cold / warm, ms "
        "| load avg (1 min) median (min–max) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for target in targets:
        s = results[target.name]
        cold, warm = statistics.median(s.cold), statistics.median(s.warm)
        ratios = []
        for value, base, own, floors in (
            (cold, floor_cold, s.cold, floor.cold),
            (warm, floor_warm, s.warm, floor.warm),
        ):
            ratio = value / base
            # the same ratio taken round by round (each page against the floor of its own
            # round), which a load spike in one round moves less
            by_round = statistics.median(a / b for a, b in zip(own, floors, strict=True))
            over = max(ratio, by_round) > GATE and target.server == "dashboard"
            within = within and not over
            ratios.append(f"{ratio:.2f} ({by_round:.2f})" + (" **OVER**" if over else ""))
        print(
            f"| {target.name} | {target.what} | {spread(s.cold)} | {ratios[0]} "
            f"| {spread(s.warm)} | {ratios[1]} "
            f"| {ms(statistics.median(s.cold_idle))} / {ms(statistics.median(s.warm_idle))} "
            f"| {statistics.median(s.load):.2f} ({min(s.load):.2f}–{max(s.load):.2f}) |"
        )
    print(
        "\n| page | script runs per load, cold / warm | SQL statements per load, cold / warm "
        "| SQL statements per run, cold / warm |"
    )
    print("|---|---:|---:|---:|")
    for target in targets:
        s = results[target.name]
        runs = (statistics.median(s.cold_runs), statistics.median(s.warm_runs))
        statements = (statistics.median(s.cold_statements), statistics.median(s.warm_statements))
        per_run = " / ".join(
            f"{count / max(run, 1):.1f}" for count, run in zip(statements, runs, strict=True)
        )
        print(
            f"| {target.name} | {runs[0]:g} / {runs[1]:g} | {statements[0]:g} / "
            f"{statements[1]:g} | {per_run} |"
        )
    verdict = "every page within" if within else "**a page over**"
    print(f"\nGate: {GATE:.2f}× the floor, cold and warm — {verdict}.\n")
    return within


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000, help="outbox rows to seed")
    parser.add_argument("--repeat", type=int, default=7, help="samples per page")
    parser.add_argument(
        "--smoke", action="store_true", help="20,000 rows and 2 repeats unless given (< 60 s)"
    )
    parser.add_argument("--port", type=int, default=DASHBOARD_PORT, help="dashboard port")
    parser.add_argument(
        "--floor-port",
        type=int,
        default=FLOOR_PORT,
        help="floor page port (the --framework-costs pages take the next ones)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a checkout of an earlier commit: its dashboard is served too (port "
        f"{BASELINE_PORT}, its own command line) and timed in the same rounds",
    )
    parser.add_argument(
        "--baseline-overview-at-root",
        action="store_true",
        help="the baseline is from before the Overview had its own URL /overview (issue 15): "
        "time its Overview at /",
    )
    parser.add_argument(
        "--framework-costs",
        action="store_true",
        help="also time the floor plus one feature of the pages each (sidebar filters, "
        "5 altair charts, help and delta on the tiles): Streamlit's own price for them",
    )
    parser.add_argument("--pg-port", type=int, default=CLUSTER_PORT, help="PostgreSQL port")
    parser.add_argument("--gate", action="store_true", help="exit 1 when a page is over the gate")
    args = parser.parse_args(argv)
    if args.smoke:
        given = set(argv if argv is not None else sys.argv[1:])
        args.rows = args.rows if "--rows" in given else 20_000
        args.repeat = args.repeat if "--repeat" in given else 2
    if args.rows < 1000 or args.repeat < 1:
        parser.error("need --rows >= 1000, --repeat >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    before = uptime()
    log("starting a throwaway PostgreSQL cluster")
    require_free(args.pg_port)
    with (
        TemporaryCluster(port=args.pg_port) as cluster,
        ExitStack() as stack,
        tempfile.TemporaryDirectory(prefix="outbox-monitor-pages-") as folder,
    ):
        settings = load_settings(dsn=cluster.dsn, statement_timeout=STATEMENT_TIMEOUT_SECONDS)
        enable_statement_stats(cluster, settings)
        db = stack.enter_context(RecordingDatabase(settings))
        init_db(db, create_table=True, create_indexes=False)
        log(f"seeding {args.rows:,} rows")
        shape = seed(db, args.rows, 30)
        shape["counts"] = {
            row["status"]: row["rows"] for row in db.fetch_all("benchmark_status_counts")
        }
        shape["total"] = sum(shape["counts"].values())
        if not shape["counts"].get("failed"):
            raise SystemExit("no dead letters seeded: the Dead letters page would show no table")
        log("init-db (recommended indexes)")
        init_db(db)

        scripts = {"floor": FLOOR_SCRIPT}
        if args.framework_costs:
            scripts |= {server: script for server, (_, script) in FRAMEWORK_COSTS.items()}
        ports = {"dashboard": args.port} | {
            server: args.floor_port + offset for offset, server in enumerate(scripts)
        }
        for port in ports.values():
            require_free(port)
        log("serving " + ", ".join(f"{server} on {port}" for server, port in ports.items()))
        urls = {
            "dashboard": stack.enter_context(
                serve_dashboard(
                    load_settings(dsn=cluster.dsn),
                    Path(folder) / "dashboard.log",
                    ports["dashboard"],
                )
            )
        }
        for server, text in scripts.items():
            script = Path(folder) / f"{server}.py"
            script.write_text(text)
            urls[server] = stack.enter_context(
                serve(
                    floor_command(script, ports[server]),
                    Path(folder),
                    Path(folder) / f"{server}.log",
                    ports[server],
                )
            )
        if args.baseline:
            require_free(BASELINE_PORT)
            urls["baseline"] = stack.enter_context(
                serve(
                    baseline_command(args.baseline, BASELINE_PORT),
                    args.baseline,
                    Path(folder) / "baseline.log",
                    BASELINE_PORT,
                    env={**os.environ, **settings_environment(load_settings(dsn=cluster.dsn))},
                )
            )
        baseline = tuple(
            Target(
                f"{target.name} (baseline)",
                "baseline",
                ("/" if args.baseline_overview_at_root else target.path)
                if target.path == "/overview"
                else target.path,
                target.content,
                target.what,
            )
            for target in TARGETS
            if args.baseline and target.server == "dashboard"
        )
        targets = (
            TARGETS
            + baseline
            + tuple(
                Target(name, server, "/", TABLE_SHOWN, "table drawn")
                if server == "bare_table"
                else Target(name, server, "/", TILES_FILLED, "8 tiles have values")
                for server, (name, _) in FRAMEWORK_COSTS.items()
                if server in urls
            )
        )
        counter = StatementCounter(db)
        results = {target.name: Samples() for target in targets}
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                log("one untimed round (servers import their modules, Chromium starts)")
                for target in targets:
                    sample(browser, urls[target.server], target, counter, Samples())
                for round_number in range(1, args.repeat + 1):
                    # a new order every round: no page always follows another
                    for target in random.Random(round_number).sample(targets, len(targets)):
                        sample(browser, urls[target.server], target, counter, results[target.name])
                    log(
                        f"round {round_number}/{args.repeat}: "
                        + ", ".join(
                            f"{name} {s.cold[-1]:.0f}/{s.warm[-1]:.0f} ms"
                            for name, s in results.items()
                        )
                    )
            finally:
                browser.close()
        log("stopping the servers and the cluster")
    within = print_report(
        args, shape, targets, results, (before, uptime()), time.perf_counter() - started
    )
    return 1 if args.gate and not within else 0


if __name__ == "__main__":
    sys.exit(main())
