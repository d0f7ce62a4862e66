"""``outbox-monitor check`` and ``outbox-monitor alerts validate|test`` (issue 3 §4).

``check`` evaluates every rule once against the current figures, ignoring ``for`` and
``keep_firing_for``, for cron and CI: exit 0 when nothing is breached, 1 when a rule is
breached now, 2 on errors (configuration, rules file, database).

The rules engine (``alerts.rules``, ``alerts.measure``) and YAML are imported when one of
these commands runs, not when ``outbox-monitor --help`` lists them.
"""

import os
import sys
from typing import TYPE_CHECKING, Any

import click

from outbox_monitor.access import local_identity
from outbox_monitor.cli.support import (
    DSN_OPTION,
    JSON_OPTION,
    OUTBOX_OPTION,
    TABLE_OPTION,
    command_outboxes,
    echo,
    emit_json,
    open_checked,
    reports_errors,
)
from outbox_monitor.config.settings import load_settings
from outbox_monitor.durations import format_duration
from outbox_monitor.errors import DatabaseUnavailable, OutboxMonitorError
from outbox_monitor.logs import escape_controls
from outbox_monitor.store.db import Database

if TYPE_CHECKING:
    from outbox_monitor.alerts.rules import RuleSet

EXIT_OK = 0
EXIT_BREACHED = 1
EXIT_ERRORS = 2

RULES_HELP = (
    "Rules file (default: OUTBOX_MONITOR_RULES, else alerts.yml in the current directory, "
    "else the shipped alerts.yml)."
)


def _load(rules_path: str | None, *, with_fleet: bool = False) -> "RuleSet":
    """The rules file; ``with_fleet``: checked against the fleet file (``OUTBOX_MONITOR_OUTBOXES``)
    when one is set, so a rule naming an outbox it does not list is a problem."""
    from outbox_monitor.alerts.rules_file import load_rules, resolve_rules_path
    from outbox_monitor.config.fleet import FLEET_ENV, load_fleet

    fleet = None
    if with_fleet and os.environ.get(FLEET_ENV):
        fleet = load_fleet(load_settings())
    return load_rules(resolve_rules_path(rules_path), fleet)


def _row(rule: Any, instance: str | None, value: float | None, **extra: Any) -> dict[str, Any]:
    from outbox_monitor.alerts import measure

    return {
        "rule": rule.name,
        "instance": instance,
        "metric": rule.metric,
        "value": value,
        "threshold": rule.threshold,
        "op": rule.op,
        "breached": measure.breached(rule, value),
        **extra,
    }


@click.command()
@click.option("--rules", "rules_path", metavar="FILE", help=RULES_HELP)
@DSN_OPTION
@TABLE_OPTION
@OUTBOX_OPTION
@JSON_OPTION
@reports_errors(exit_code=EXIT_ERRORS)
def check(
    rules_path: str | None, dsn: str | None, table: str | None, outbox: str | None, as_json: bool
) -> None:
    """Evaluate every alert rule of the outbox once against the current figures (no
    for/keep_firing_for): the rules that select it (a rule's `outboxes`).

    Exit 0: nothing breached; 1: a rule is breached now; 2: errors (configuration, rules
    file, database, a rule's query)."""

    from outbox_monitor.alerts import measure
    from outbox_monitor.alerts.outbox_scope import selected_rules

    ruleset = _load(rules_path)
    [target] = command_outboxes(outbox, dsn, table)
    results: list[dict[str, Any]] = []
    rules = selected_rules(ruleset, target, target.settings.fleet_outbox)
    with open_checked(target.settings) as db:
        for rule in rules:
            try:
                measurements = measure.measure(db, rule)
            except DatabaseUnavailable:
                raise
            except OutboxMonitorError as error:
                results.append(_row(rule, None, None, error=str(error.args[0])))
                continue
            if not measurements:  # a `by` rule with no event type to watch right now
                results.append(_row(rule, None, None))
            for item in measurements:  # a forecast says what it is made of, or why none
                said = {"forecast": item.forecast.text} if item.forecast is not None else {}
                results.append(_row(rule, item.instance, item.value, **said))
    breached = sum(result["breached"] for result in results)
    errors = sum("error" in result for result in results)
    if as_json:
        emit_json({"rules": results, "breached": breached, "errors": errors, "file": ruleset.path})
    else:
        _print_table(ruleset, results)
        echo(f"{breached} breached, {errors} error(s) — {len(rules)} rule(s) from {ruleset.path}")
    sys.exit(EXIT_ERRORS if errors else EXIT_BREACHED if breached else EXIT_OK)


def _print_table(ruleset: "RuleSet", results: list[dict[str, Any]]) -> None:
    lines = [("RULE", "INSTANCE", "VALUE", "CONDITION", "STATE")]
    for result in results:
        rule = ruleset.rule(result["rule"])
        if "error" in result:
            instance, state = "", f"ERROR: {result['error']}"
        else:
            instance = "(no event types)" if result["instance"] is None else result["instance"]
            state = "BREACHED" if result["breached"] else "ok"
            if result["value"] is None and "forecast" in result:
                state = f"{state}: {result['forecast']}"
        cells = (rule.name, instance, rule.format(result["value"]), rule.condition, state)
        lines.append(tuple(escape_controls(cell) for cell in cells))  # escaped, then aligned
    widths = [max(len(line[column]) for line in lines) for column in range(4)]
    for line in lines:
        cells = [text.ljust(width) for text, width in zip(line, widths, strict=False)]
        echo("  ".join([*cells, line[4]]))


@click.group()
def alerts() -> None:
    """Alert rules (alerts.yml) and their Slack routes."""


@alerts.command()
@click.option("--rules", "rules_path", metavar="FILE", help=RULES_HELP)
@reports_errors(exit_code=EXIT_ERRORS)
def validate(rules_path: str | None) -> None:
    """Check the rules file; print every problem (exit 2) or a one-line summary (exit 0).
    With a fleet file (OUTBOX_MONITOR_OUTBOXES), the outboxes rules name must be in it."""
    ruleset = _load(rules_path, with_fleet=True)
    routes = ", ".join(f"{name} ({_destination(route)})" for name, route in ruleset.routes.items())
    echo(
        f"{ruleset.path}: valid — {len(ruleset.rules)} rule(s), {len(ruleset.routes)} "
        f"route(s){': ' + routes if routes else ''}; evaluated every "
        f"{format_duration(ruleset.defaults.interval)}"
        + (f"; {len(ruleset.inhibit)} inhibit entr(ies)" if ruleset.inhibit else "")
    )


def _destination(route: Any) -> str:
    """A route in ``validate``'s line: its channel, ``$VARIABLE`` of its webhook, or
    ``alertmanager <URLs or $VARIABLE>`` (URLs without credentials)."""
    from outbox_monitor.alerts.alertmanager import shown_url
    from outbox_monitor.alerts.route_model import ALERTMANAGER

    if route.type == ALERTMANAGER:
        urls = route.alertmanager_urls
        shown = ", ".join(map(shown_url, urls)) if urls else f"${route.alertmanager_urls_env}"
        return f"alertmanager {shown}"
    return route.channel or f"${route.webhook_url_env}"


@alerts.command("test")
@click.option("--rules", "rules_path", metavar="FILE", help=RULES_HELP)
@click.option("--route", "route_name", help="Route to test (default: every route).")
@click.option(
    "--actor",
    help="Who sends it, recorded with the message (default: OUTBOX_MONITOR_ACTOR or the OS user).",
)
@JSON_OPTION
@reports_errors(exit_code=EXIT_ERRORS)
def test_command(
    rules_path: str | None, route_name: str | None, actor: str | None, as_json: bool
) -> None:
    """Send a test message through a route (every route by default) now, and record it in
    the notifications the Alerts page lists (through OUTBOX_MONITOR_ACTIONS_DSN, else
    OUTBOX_MONITOR_DSN).

    Exit 0 when every message was accepted and recorded, 2 otherwise (unknown route, Slack
    variable not set, Slack refused or unreachable, the database did not record it)."""
    from outbox_monitor.alerts.route_check import send_test  # slack-sdk only when needed

    ruleset = _load(rules_path)
    settings = load_settings()
    with Database(settings, purpose="actions") as db:
        identity = local_identity(settings, name=actor, source="cli")
        results = send_test(db, ruleset, route_name, requested_by=identity.name)
    failed = [
        name
        for name, outcome in results.items()
        if not outcome.get("ok") or "record_error" in outcome
    ]
    if as_json:
        emit_json({"routes": results, "failed": len(failed), "file": ruleset.path})
    else:
        _print_test_results(ruleset, results)
    sys.exit(EXIT_ERRORS if failed else EXIT_OK)


def _print_test_results(ruleset: "RuleSet", results: dict[str, dict[str, Any]]) -> None:
    if not results:
        echo(f"{ruleset.path} defines no routes; nothing to test.")
    for name, outcome in results.items():
        where = outcome.get("destination", "")
        recorded = (
            f" (notification #{outcome['notification_id']})" if "notification_id" in outcome else ""
        )
        if outcome.get("ok"):
            echo(f"route {name}: test message posted to {where}{recorded}")
        else:
            message = (
                f"route {name}: test message to {where} failed: {outcome.get('error')}{recorded}"
            )
            echo(message, fg="red", err=True)
        if "record_error" in outcome:
            echo(
                f"route {name}: the test message was not recorded in the notifications: "
                f"{outcome['record_error']}",
                fg="red",
                err=True,
            )
