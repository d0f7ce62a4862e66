"""Where a page load's time goes, in the browser and in the server, on one clock (issue 32
item 4).

``pages.py`` times a page until its content is shown; this script says what happens
meanwhile. It seeds a throwaway cluster as ``pages.py`` does, serves the dashboard and the
floor (``pages.py``'s bare page of 8 ``st.metric``) with the dashboard's own command line,
each through this script's ``serve`` mode: Streamlit's command line after four wrappers that
write one JSON line per event with the epoch time (ms) to a log — a script run's start and
end, each ``ForwardMsg`` the script enqueues (a delta with its element type), each message
the server writes to the websocket, each ``BackMsg`` it receives. No product code exists for
it.

In headless Chromium (``/usr/bin/chromium``) it loads the page cold (fresh context, server
caches cleared as ``pages.py`` does) and reloads it warm twice, ``--repeat`` times in
interleaved rounds, and reads in the page, from the start of the navigation: the document's
``DOMContentLoaded``, each request of ``_stcore/health`` (Streamlit's frontend probes the
page's own path first, ``/overview/_stcore/health``, and after its 404 waits 100 ms before
it tries the root), the websocket's opening, and when a ``MutationObserver`` first sees the
sidebar's input, the first metric tile, the 8 tiles with values (``pages.py``'s "content
shown") and the script state idle. The server's events are placed on the same clock
(``performance.timeOrigin``; browser and server share the machine's clock).

With ``--profile DIR`` the server also writes a ``cProfile`` of every script run to DIR
(``<pid>-<n>.prof``; ``pstats`` reads them): the ms it adds are in the timeline too. With
``--cpu-profile`` Chromium's own CPU profiler (over CDP) samples each page's first warm
reload, and a table gives the browser's self time per script file (its overhead is in those
loads' milestones too).

Usage (from the repository root)::

    .venv/bin/python benchmarks/page_timeline.py [--rows 200000] [--repeat 5] [--path /overview]

A third page is timed beside them: the floor's 8 tiles as the second page of a bare two-page
app, at its own path ``/tiles`` (``PATHED_FLOOR``), which pays the probe as a dashboard page does.

Ports: the dashboard 8621, the floor 8622, the floor at a path 8623, PostgreSQL 8629
(``--port``: the dashboard's, the floors' are the next two; ``--pg-port``). The report goes
to stdout as Markdown; progress to stderr.
"""

import argparse
import json
import os
import random
import re
import statistics
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

SERVE = "serve"
PATHED_FLOOR = """\
import streamlit as st


def tiles():
    for row in range(2):
        for number, column in enumerate(st.columns(4), start=4 * row + 1):
            column.metric(f"Tile {number}", f"{number * 1111:,}", border=True)


st.navigation(
    [st.Page(lambda: None, title="Home", default=True), st.Page(tiles, url_path="tiles")],
    position="hidden",
).run()
"""
"""The floor's 8 tiles as the second page of a bare two-page app, loaded at its own path
``/tiles``: what Streamlit charges a page that is not the root (the base-path probe)."""
"""``page_timeline.py serve LOG [PROFILE_DIR|-] run SCRIPT …``: Streamlit, instrumented."""


def instrument(log_path: str, profile_dir: str | None) -> None:
    """Wrap Streamlit's script run, message enqueue, websocket send and BackMsg handling so
    that each writes a JSON line ``{"t": epoch ms, "ev": …}`` to ``log_path``; with
    ``profile_dir``, each script run is profiled (``cProfile``) into that folder."""
    import cProfile

    from streamlit.runtime import app_session, runtime
    from streamlit.runtime.scriptrunner import script_runner

    output = open(log_path, "a", buffering=1)  # noqa: SIM115 (open for the server's life)
    lock = threading.Lock()
    runs = [0]

    def record(**event: object) -> None:
        event["t"] = time.time() * 1000
        with lock:
            output.write(json.dumps(event) + "\n")

    run_script = script_runner.ScriptRunner._run_script

    def timed_run(self, rerun_data):
        record(ev="run_start", fragment=bool(rerun_data.fragment_id_queue))
        profile = cProfile.Profile() if profile_dir else None
        if profile:
            profile.enable()
        try:
            return run_script(self, rerun_data)
        finally:
            if profile:
                profile.disable()
                runs[0] += 1
                profile.dump_stats(os.path.join(profile_dir, f"{os.getpid()}-{runs[0]}.prof"))
            record(ev="run_end")

    enqueue = app_session.AppSession._enqueue_forward_msg

    def recorded_enqueue(self, msg):
        kind = msg.WhichOneof("type")
        element = None
        if kind == "delta":
            delta = msg.delta.WhichOneof("type")
            if delta == "new_element":
                element = msg.delta.new_element.WhichOneof("type")
            elif delta == "add_block":
                element = "block"
        record(ev="enqueue", kind=kind, element=element)
        return enqueue(self, msg)

    handle = app_session.AppSession.handle_backmsg

    def recorded_handle(self, msg):
        record(ev="back", kind=msg.WhichOneof("type"))
        return handle(self, msg)

    send = runtime.Runtime._send_message

    def recorded_send(self, session_info, msg):
        record(ev="send", kind=msg.WhichOneof("type"))
        return send(self, session_info, msg)

    script_runner.ScriptRunner._run_script = timed_run
    app_session.AppSession._enqueue_forward_msg = recorded_enqueue
    app_session.AppSession.handle_backmsg = recorded_handle
    runtime.Runtime._send_message = recorded_send


def serve_instrumented(argv: list[str]) -> None:
    """The ``serve`` mode: ``argv`` = ``[LOG, PROFILE_DIR or "-", *streamlit arguments]``."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    instrument(argv[0], None if argv[1] == "-" else argv[1])
    from outbox_monitor.ui.streamlit_main import run

    sys.argv = ["streamlit", *argv[2:]]
    run()


# In the page, from navigation start: milestones by DOM condition, and the websocket's life.
MILESTONES = """(() => {
  window.__ms = {};
  const mark = (k) => { if (window.__ms[k] === undefined) window.__ms[k] = performance.now(); };
  const checks = {
    sidebar_input: () => document.querySelector('[data-testid="stSidebar"] input') !== null,
    first_metric: () => document.querySelector('[data-testid="stMetric"]') !== null,
    tiles: () => { const v = document.querySelectorAll('[data-testid="stMetricValue"]');
      return v.length >= 8 && [...v].every((x) => x.textContent.trim() !== ""); },
    idle: () => document.querySelector(
      '[data-testid="stApp"][data-test-script-state="notRunning"]') !== null,
  };
  new MutationObserver(() => { for (const [k, f] of Object.entries(checks)) {
      if (window.__ms[k] === undefined && f()) mark(k); } }).observe(
      document, {childList: true, subtree: true, characterData: true, attributes: true});
  document.addEventListener("DOMContentLoaded", () => mark("dom_content_loaded"));
  const Native = window.WebSocket;
  window.WebSocket = function (...args) {
    const socket = new Native(...args);
    socket.addEventListener("open", () => mark("ws_open"));
    socket.addEventListener("message", () => mark("ws_first_message"));
    return socket;
  };
  window.WebSocket.prototype = Native.prototype;
  Object.assign(window.WebSocket, Native);
})();"""
READ = """() => ({origin: performance.timeOrigin, now: performance.now(), ms: window.__ms,
  probes: performance.getEntriesByType('resource')
    .filter((e) => e.name.endsWith('_stcore/health'))
    .map((e) => [new URL(e.name).pathname, e.startTime, e.responseEnd])})"""
ROWS = (
    ("dom_content_loaded", "DOMContentLoaded"),
    ("root_probe", "`/_stcore/health` requested (after a 404 of the page's path: +100 ms)"),
    ("ws_open", "websocket open"),
    ("run_start", "server: script run starts"),
    ("first_metric_sent", "server: first st.metric enqueued"),
    ("run_end", "server: script run ends"),
    ("finished_sent", "server: script_finished written"),
    ("sidebar_input", "browser: sidebar input in the DOM"),
    ("first_metric", "browser: first metric in the DOM"),
    ("tiles", "browser: 8 tiles have values (pages.py's content shown)"),
    ("idle", "browser: script state idle"),
)


def self_ms(profile: dict) -> dict[str, float]:
    """A Chromium CPU profile (CDP ``Profiler.stop``) as ms of self time per script file (its
    name) or V8 pseudo-frame (``(program)``: the renderer's own work, ``(idle)``,
    ``(garbage collector)``) or built-in function."""
    frames = {node["id"]: node["callFrame"] for node in profile["nodes"]}
    spent: dict[str, float] = {}
    for node, delta in zip(profile["samples"], profile["timeDeltas"], strict=True):
        frame = frames[node]
        where = frame["url"].rsplit("/", 1)[-1] or frame["functionName"] or "(native)"
        spent[where] = spent.get(where, 0.0) + delta / 1000
    return spent


def slug(name: str) -> str:
    """A page's name as a file name (``floor at /tiles`` → ``floor_at_tiles``)."""
    return re.sub(r"\W+", "_", name)


def timeline(load: dict, events: list[dict]) -> dict[str, float | None]:
    """One load's milestones, ms from navigation start (server events on the same clock)."""
    origin = load["origin"]
    mine = [e for e in events if origin <= e["t"] <= origin + load["now"]]

    def first(**match: object) -> float | None:
        found = [e["t"] - origin for e in mine if all(e.get(k) == v for k, v in match.items())]
        return found[0] if found else None

    root = [start for path, start, _ in load["probes"] if path == "/_stcore/health"]
    row = dict(load["ms"])
    row |= {
        "root_probe": root[0] if root else None,
        "page_probes": sum(path != "/_stcore/health" for path, _, _ in load["probes"]),
        "run_start": first(ev="run_start", fragment=False),
        "first_metric_sent": first(ev="enqueue", element="metric"),
        "run_end": first(ev="run_end"),
        "finished_sent": first(ev="send", kind="script_finished"),
        "runs": sum(e["ev"] == "run_start" for e in mine),
        "elements": sum(e["ev"] == "enqueue" and e["kind"] == "delta" for e in mine),
    }
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000, help="outbox rows to seed")
    parser.add_argument("--repeat", type=int, default=5, help="rounds (after one untimed)")
    parser.add_argument("--path", default="/overview", help="the dashboard page to load")
    parser.add_argument("--port", type=int, default=8621, help="dashboard port (floor: +1)")
    parser.add_argument("--pg-port", type=int, default=8629, help="PostgreSQL port")
    parser.add_argument("--profile", type=Path, help="folder for a cProfile of every run")
    parser.add_argument(
        "--cpu-profile",
        action="store_true",
        help="Chromium's CPU profile of each page's first warm reload, by script file",
    )
    args = parser.parse_args(argv)

    sys.path.insert(0, str(Path(__file__).parent))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from figures import STATEMENT_TIMEOUT_SECONDS, RecordingDatabase, log, seed
    from playwright.sync_api import sync_playwright

    import pages
    from outbox_monitor.access import FORWARDED_ALLOW_IPS
    from outbox_monitor.config.settings import load_settings
    from outbox_monitor.demo.pgcluster import TemporaryCluster
    from outbox_monitor.service.serve import (
        dashboard_script,
        settings_environment,
        streamlit_command,
    )
    from outbox_monitor.store.schema import init_db
    from tests.browser_support import CHROMIUM, CHROMIUM_ARGS

    for port in (args.port, args.port + 1, args.port + 2, args.pg_port):
        pages.require_free(port)
    before = pages.uptime()
    with (
        TemporaryCluster(port=args.pg_port) as cluster,
        ExitStack() as stack,
        tempfile.TemporaryDirectory(prefix="outbox-monitor-timeline-") as folder,
    ):
        settings = load_settings(dsn=cluster.dsn, statement_timeout=STATEMENT_TIMEOUT_SECONDS)
        db = stack.enter_context(RecordingDatabase(settings))
        init_db(db, create_table=True, create_indexes=False)
        log(f"seeding {args.rows:,} rows")
        seed(db, args.rows, 30)
        init_db(db)
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
        floor = Path(folder) / "floor.py"
        floor.write_text(pages.FLOOR_SCRIPT)
        env = {
            **os.environ,
            **settings_environment(load_settings(dsn=cluster.dsn)),
            FORWARDED_ALLOW_IPS: "",
        }
        pathed = Path(folder) / "floor_at_path.py"
        pathed.write_text(PATHED_FLOOR)
        servers = {
            "dashboard": (args.port, dashboard_script()),
            "floor": (args.port + 1, floor),
            "floor at /tiles": (args.port + 2, pathed),
        }
        urls = {}
        for name, (port, script) in servers.items():
            command = streamlit_command(address=pages.ADDRESS, port=port)
            command[command.index(str(dashboard_script()))] = str(script)
            profile = str(args.profile) if args.profile and name == "dashboard" else "-"
            wrapped = [sys.executable, __file__, SERVE, f"{folder}/{slug(name)}.jsonl", profile]
            urls[name] = stack.enter_context(
                pages.serve(
                    wrapped + command[3:],
                    script.parent,
                    Path(folder) / f"{slug(name)}.log",
                    port,
                    env=env,
                )
            )
        paths = {"dashboard": args.path, "floor": "/", "floor at /tiles": "/tiles"}
        loads: list[dict] = []
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                for round_number in range(args.repeat + 1):
                    for name in random.Random(round_number).sample(list(urls), len(urls)):
                        pages.clear_server_caches(urls[name])
                        context = browser.new_context(viewport=pages.VIEWPORT)
                        context.add_init_script(MILESTONES)
                        page = context.new_page()
                        cdp = context.new_cdp_session(page) if args.cpu_profile else None
                        if cdp:
                            cdp.send("Profiler.enable")
                            cdp.send("Profiler.setSamplingInterval", {"interval": 250})
                        for kind in ("cold", "warm", "warm again"):
                            load = pages.load_1min()
                            profiling = cdp is not None and kind == "warm"
                            if profiling:
                                cdp.send("Profiler.start")
                            if kind == "cold":
                                page.goto(urls[name] + paths[name], wait_until="commit")
                            else:
                                page.reload(wait_until="commit")
                            page.wait_for_function(
                                "window.__ms.tiles !== undefined && window.__ms.idle !== undefined",
                                polling=50,
                                timeout=pages.CONTENT_TIMEOUT_MS,
                            )
                            cpu = cdp.send("Profiler.stop")["profile"] if profiling else None
                            time.sleep(0.3)  # the last messages' events reach the log
                            if round_number:
                                loads.append(
                                    page.evaluate(READ)
                                    | {"name": name, "kind": kind, "load": load}
                                    | ({"cpu": self_ms(cpu)} if cpu else {})
                                )
                        context.close()
                    log(f"round {round_number}/{args.repeat}")
            finally:
                browser.close()
        events = {
            name: [
                json.loads(line)
                for line in Path(f"{folder}/{slug(name)}.jsonl").read_text().splitlines()
            ]
            for name in urls
        }
    print_report(args, loads, events, before)
    return 0


def print_report(
    args: argparse.Namespace, loads: list[dict], events: dict[str, list[dict]], before: str
) -> None:
    """The Markdown table: per page and load kind, each milestone's median ms."""
    sys.path.insert(0, str(Path(__file__).parent))
    import pages

    groups: dict[tuple[str, str], list[dict]] = {}
    for load in loads:
        groups.setdefault((load["name"], load["kind"]), []).append(
            timeline(load, events[load["name"]]) | {"load": load["load"], "cpu": load.get("cpu")}
        )
    command = " ".join(["benchmarks/page_timeline.py", *sys.argv[1:]])
    print(f"- command: `.venv/bin/python {command}`")
    print(f"- load average before: {before}; after: {pages.uptime()}")
    print(
        f"- {args.repeat} rounds, interleaved; dashboard page {args.path}; ms from navigation "
        "start, median (min–max)\n"
    )
    columns = sorted(groups, key=lambda key: (key[0] == "dashboard", key[0], key[1]))
    profiled = {c: [row["cpu"] for row in groups[c] if row.get("cpu")] for c in columns}
    profiled = {c: rows for c, rows in profiled.items() if rows}
    if profiled:
        print_cpu(profiled)
    print("| milestone | " + " | ".join(f"{name} {kind}" for name, kind in columns) + " |")
    print("|---|" + "---:|" * len(columns))

    def cell(values: list, digits: int) -> str:
        values = [v for v in values if v is not None]
        if not values:
            return "–"
        median, low, high = statistics.median(values), min(values), max(values)
        return f"{median:,.{digits}f} ({low:,.{digits}f}–{high:,.{digits}f})"

    for key, label in (
        *ROWS,
        ("page_probes", "requests of `<page path>/_stcore/health` (404)"),
        ("runs", "script runs"),
        ("elements", "deltas enqueued"),
        ("load", "load average (1 min)"),
    ):
        print(
            f"| {label} | "
            + " | ".join(
                cell([row.get(key) for row in groups[c]], 2 if key == "load" else 0)
                for c in columns
            )
            + " |"
        )


def print_cpu(profiled: dict[tuple[str, str], list[dict[str, float]]]) -> None:
    """The browser's main thread during the profiled reloads: median ms of self time per
    script file, the 15 costliest on the dashboard first (printed before the milestones)."""
    every = sorted({where for rows in profiled.values() for row in rows for where in row})

    def median(rows: list[dict[str, float]], where: str) -> float:
        return statistics.median(row.get(where, 0.0) for row in rows)

    dashboard = [c for c in profiled if c[0] == "dashboard"] or list(profiled)
    costliest = sorted(every, key=lambda w: -median(profiled[dashboard[0]], w))[:15]
    print(
        "Chromium's CPU profile of the first warm reload (sampled every 0.25 ms, from the "
        "reload until the tiles and the idle state are shown), self ms per script file, median:\n"
    )
    print("| script or frame | " + " | ".join(f"{n} {k}" for n, k in profiled) + " |")
    print("|---|" + "---:|" * len(profiled))
    for where in ["total", *costliest]:
        cells = [
            statistics.median(sum(row.values()) for row in rows)
            if where == "total"
            else median(rows, where)
            for rows in profiled.values()
        ]
        print(f"| {where} | " + " | ".join(f"{value:,.1f}" for value in cells) + " |")
    print()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == SERVE:
        serve_instrumented(sys.argv[2:])
    else:
        sys.exit(main())
