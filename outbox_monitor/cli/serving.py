"""The long-running commands and their probe: ``dashboard``, ``scheduler``, ``demo`` (and its
switches ``demo-downstream``, ``demo-forgotten-transaction``), ``simulate`` and the
container's ``healthcheck``. Each imports what it serves (Streamlit, APScheduler, the demo)
only when it runs."""

import json
import sys
from collections.abc import Callable

import click

from outbox_monitor.cli.support import (
    DURATION,
    DURATION_OR_ZERO,
    common_options,
    open_checked,
    reports_errors,
    to_jsonable,
)
from outbox_monitor.config.fleet import Outbox
from outbox_monitor.config.settings import Settings, load_settings
from outbox_monitor.durations import format_duration
from outbox_monitor.errors import DatabaseUnavailable


@click.command()
@click.option(
    "--rules",
    "rules_path",
    type=click.Path(dir_okay=False),
    help="The alerts.yml (default: OUTBOX_MONITOR_RULES, ./alerts.yml, the shipped one).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    help="Serve /metrics and /healthz on this port; 0 disables "
    "(default: OUTBOX_MONITOR_METRICS_PORT or 9108).",
)
@click.option(
    "--metrics-address",
    help="Interface of /metrics and /healthz; 0.0.0.0 in a container "
    "(default: OUTBOX_MONITOR_METRICS_ADDRESS or 127.0.0.1).",
)
@common_options(json_output=False, every_outbox=True)
def scheduler(
    outboxes: list,
    rules_path: str | None,
    metrics_port: int | None,
    metrics_address: str | None,
) -> None:
    """Run the background scheduler until stopped: sampler, alert evaluator and Slack
    sender (and the optional reaper and pruner), each only in the process holding the
    evaluator lease; serves /metrics and /healthz. With OUTBOX_MONITOR_OUTBOXES, every
    outbox of the fleet (or the one of --outbox), shared with the other replicas."""
    from outbox_monitor.config.fleet import Fleet, load_fleet
    from outbox_monitor.config.settings import load_settings
    from outbox_monitor.service.scheduler import run_scheduler

    listed = load_fleet(load_settings())
    from_file = listed.path is not None and all(o in listed.outboxes for o in outboxes)
    run_scheduler(
        outboxes[0].settings,
        rules_path=rules_path,
        metrics_port=metrics_port,
        metrics_address=metrics_address,
        fleet=listed.selection(outboxes) if from_file else Fleet(tuple(outboxes)),
    )


@click.command()
@click.option("--address", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(1, 65535), default=8501, show_default=True)
@click.option(
    "--with-scheduler",
    is_flag=True,
    help="Also run the scheduler in-process, with /metrics and /healthz on "
    "OUTBOX_MONITOR_METRICS_ADDRESS/_PORT: with a fleet file, every outbox of it as "
    "`outbox-monitor scheduler` runs them (or the one of --outbox).",
)
@click.option(
    "--insecure-no-auth",
    is_flag=True,
    help="Serve on a non-loopback --address without sign-in (OUTBOX_MONITOR_AUTH local); "
    "prints a warning on every start (or OUTBOX_MONITOR_INSECURE_NO_AUTH=true).",
)
@common_options(json_output=False, every_outbox=True)
def dashboard(
    outboxes: list[Outbox],
    address: str,
    port: int,
    with_scheduler: bool,
    insecure_no_auth: bool,
) -> None:
    """Serve the Streamlit dashboard (on 127.0.0.1 unless a sign-in mode is set); with a
    fleet file, every outbox of it (the Fleet page), and with --with-scheduler a scheduler
    watching every outbox of it (--outbox: that one only)."""
    from outbox_monitor.config.fleet import load_fleet
    from outbox_monitor.service.serve import check_exposure, run_dashboard

    settings = dashboard_settings(outboxes)
    check_exposure(settings, address, insecure_no_auth=insecure_no_auth)
    fleet = None
    if len(outboxes) == 1:  # a fleet's outboxes are checked on its Fleet page, row by row
        check_reachable_or_warn(outboxes[0].settings)
    elif with_scheduler:  # and by its scheduler at start (fleet_scheduler.open_members)
        fleet = load_fleet(load_settings())
    sys.exit(
        run_dashboard(
            settings,
            address=address,
            port=port,
            with_scheduler=with_scheduler,
            insecure_no_auth=insecure_no_auth,
            fleet=fleet,
        )
    )


def check_reachable_or_warn(settings: Settings) -> None:
    """The dashboard's start-up check of its one outbox (``open_checked``): a configuration
    that cannot work stops the start (its error raised); a database that cannot be reached
    does not (issue 29 item 13) — the on-call who opens the dashboard during the outage finds
    every page saying so (``ui.banners``), and the pages reconnect by themselves. A warning
    on stderr names it.

    Raises:
        TableMissing, ColumnsMissing, SchemaNotInitialised, PermissionDenied.
    """
    try:
        with open_checked(settings):
            pass
    except DatabaseUnavailable as error:
        click.echo(
            f"warning: {error.args[0]}; the dashboard starts and every page says the "
            "database is unreachable until it answers (it reconnects by itself)",
            err=True,
        )


def dashboard_settings(outboxes: list[Outbox]) -> Settings:
    """The settings ``dashboard`` serves with: the one outbox's (``--dsn``/``--table``, a
    fleet of one, or ``--outbox``) but the process's role mapping (the dashboard reads each
    outbox's own from the fleet file); the process's settings for a fleet of several, which
    the dashboard (and its scheduler) read from the file.
    """
    process = load_settings()
    if len(outboxes) > 1:
        return process
    roles = {name: getattr(process, name) for name in ("admins", "operators", "viewers")}
    return outboxes[0].settings.model_copy(update=roles)


def _traffic_options(command: Callable) -> Callable:
    """``--rate`` (events per second) and ``--workers`` of the simulated traffic."""
    command = click.option("--workers", type=click.IntRange(1, 64), default=4, show_default=True)(
        command
    )
    return click.option(
        "--rate",
        type=click.FloatRange(0.1, 10_000),
        default=20.0,
        show_default=True,
        help="Events per second.",
    )(command)


@click.command()
@click.option("--port", type=click.IntRange(1, 65535), default=8501, show_default=True)
@_traffic_options
@click.option(
    "--worker",
    type=click.Choice(["simulator", "n8n"]),
    default="simulator",
    show_default=True,
    help="Who works the outbox: simulated worker threads, or the real n8n running the "
    "shipped workflows (install it first: n8n/install.sh; see n8n/README.md).",
)
@click.option(
    "--outboxes",
    type=click.IntRange(1, 3),
    default=1,
    show_default=True,
    help="A fleet of this many outboxes (orders, billing, notifications), each with its own "
    "table, traffic, workers and downstream, listed in a fleet file; orders and billing share "
    "the database shop, notifications has comms. --rate is the fleet's.",
)
@reports_errors
def demo(port: int, rate: float, workers: int, worker: str, outboxes: int) -> None:
    """Throwaway local Postgres + realistic traffic + scheduler + dashboard; Ctrl-C stops
    everything and removes the database."""
    from outbox_monitor.demo.run import run_demo

    sys.exit(run_demo(port=port, rate=rate, workers=workers, worker=worker, outboxes=outboxes))


_demo_url = click.option(
    "--url",
    envvar="OUTBOX_DEMO_DOWNSTREAM_URL",
    show_envvar=True,
    required=True,
    help="The demo's downstream, as its banner prints it.",
)
"""``--url`` of the demo's switches (``demo-downstream``, ``demo-forgotten-transaction``)."""


@click.command("demo-downstream")
@click.argument("action", type=click.Choice(["break", "heal", "status"]))
@click.option(
    "--event-type",
    "event_types",
    multiple=True,
    help="Event type or pattern with % (repeatable). break: default order.paid; heal: "
    "default every broken one.",
)
@_demo_url
@click.option(
    "--json", "as_json", is_flag=True, help="Print the broken (and healed) filters as JSON."
)
@reports_errors
def demo_downstream(action: str, event_types: tuple[str, ...], url: str, as_json: bool) -> None:
    """Break or heal the downstream of a running demo (HTTP 503 for every call of those
    event types, from n8n or the simulated workers), or say what is broken; heal names what
    it healed."""
    from outbox_monitor.demo.outage import request

    before = request(url, "status", ()) if action == "heal" else []
    broken = request(url, action, event_types)
    healed = [f for f in before if f not in broken]
    if as_json:
        click.echo(
            json.dumps({"broken": broken, **({"healed": healed} if action == "heal" else {})})
        )
        return
    if action == "heal":
        click.echo(f"healed: {', '.join(healed)}" if healed else "healed nothing: none matched")
    click.echo(f"broken: {', '.join(broken)}" if broken else "no downstream is broken")


@click.command("demo-forgotten-transaction")
@click.argument("action", type=click.Choice(["start", "end", "status"]))
@_demo_url
@click.option("--json", "as_json", is_flag=True, help="Print the transaction's state as JSON.")
@reports_errors
def demo_forgotten_transaction(action: str, url: str, as_json: bool) -> None:
    """Start or end a forgotten transaction in a running demo (a session idle in a
    transaction, holding the xmin horizon: dead tuples pile up, the Health page names it,
    one alert follows), or say whether one is open; end names what it ended."""
    from outbox_monitor.demo.forgotten_transaction import request

    state = request(url, action)
    ended = state.get("ended")
    if as_json:
        click.echo(json.dumps(state))
    elif ended:
        click.echo(
            f"ended the forgotten transaction: pid {ended['pid']}, application "
            f"{ended['application']}; it held the xmin horizon for "
            f"{format_duration(ended['held_seconds'])}"
        )
    elif state["open"]:
        opened = "already open" if state.get("already_open") else "open"
        click.echo(
            f"forgotten transaction {opened}: pid {state['pid']}, application "
            f"{state['application']}, since {state['since']}, age "
            f"{format_duration(state['age_seconds'])}; end it with "
            f"`demo-forgotten-transaction end` or SELECT pg_terminate_backend({state['pid']});"
        )
    else:
        ended = " (it was ended from outside)" if state["ended_outside"] else ""
        click.echo(f"no forgotten transaction is open{ended}")


@click.command()
@_traffic_options
@click.option("--duration", type=DURATION, help="Stop after this long (default: until Ctrl-C).")
@click.option(
    "--backfill",
    type=DURATION_OR_ZERO,
    default="1h",
    show_default=True,
    help="History to insert before live traffic (0 for none).",
)
@common_options
def simulate(
    settings: Settings,
    as_json: bool,
    rate: float,
    workers: int,
    duration: float | None,
    backfill: float,
) -> None:
    """Publish realistic traffic and run simulated workers against any database."""
    from outbox_monitor.demo.simulate import run_simulation

    with open_checked(settings):
        pass
    counts = run_simulation(
        settings, rate=rate, workers=workers, duration=duration, backfill=backfill
    )
    click.echo(json.dumps(to_jsonable(counts)))


@click.command("healthcheck")
@click.option(
    "--pid",
    type=click.IntRange(1),
    help="The service's process (default: the container's outbox-monitor service).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(0.1, 60),
    default=5.0,
    show_default=True,
    help="Seconds for the HTTP probe.",
)
@click.pass_context
def healthcheck_command(context: click.Context, pid: int | None, timeout: float) -> None:
    """Container HEALTHCHECK: probe what the running role serves (dashboard: /_stcore/health,
    scheduler: /healthz); other commands are healthy. Exit 0 healthy, 1 unhealthy."""
    from outbox_monitor.service.healthcheck import check_health

    # the root group (``outbox-monitor``) parses the command line the service ran
    code, message = check_health(context.find_root().command, pid=pid, timeout=timeout)
    click.echo(message)
    sys.exit(code)
