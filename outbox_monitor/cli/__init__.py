"""The ``outbox-monitor`` command: init-db, status, reap, replay, prune, flow control and the
services."""

import logging
import sys
from typing import Any

import click

from outbox_monitor.cli import actions, figures, flow, serving
from outbox_monitor.cli.support import EXIT_NOT_CONFIRMED, LazyGroup, emit_json
from outbox_monitor.logs import configure_logging


class JsonAwareGroup(LazyGroup):
    """A group whose usage errors (``--window abc``, ``--id xyz``) are one JSON object on
    stdout when the command line has ``--json``, as every other outcome of ``--json`` is."""

    def main(self, args: Any = None, **extra: Any) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        if "--json" not in argv:
            return super().main(argv, **extra)
        try:
            outcome = super().main(argv, standalone_mode=False, **extra)
        except click.ClickException as error:
            command = error.ctx.command_path if getattr(error, "ctx", None) else "outbox-monitor"
            emit_json({"error": error.format_message(), "hint": f"see `{command} --help`"})
            sys.exit(error.exit_code)
        except click.Abort:
            sys.exit(EXIT_NOT_CONFIRMED)
        sys.exit(outcome if isinstance(outcome, int) else 0)


@click.group(
    cls=JsonAwareGroup,
    # The rules engine and YAML load only for the commands that read alerts.yml.
    lazy_subcommands={
        "check": "outbox_monitor.cli.alerting:check",
        "claim-advice": "outbox_monitor.cli.claim_advice:claim_advice",
        "alerts": "outbox_monitor.cli.alerting:alerts",
        "outboxes": "outbox_monitor.cli.fleet:outboxes",
        "uninstall": "outbox_monitor.cli.uninstall:uninstall_command",
    },
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="outbox-monitor")
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    envvar="OUTBOX_MONITOR_LOG_LEVEL",
    show_envvar=True,  # an invalid value is then reported with the variable's name
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def main(log_level: str) -> None:
    """outbox-monitor: watch and operate a Postgres transactional outbox (SPEC §1–5).

    Configuration comes from OUTBOX_MONITOR_* environment variables
    (docs/reference/configuration.md); --dsn and --table override the database and the table
    per command.
    """
    configure_logging(log_level.upper())
    # The pool logs every failed reconnect; our own errors already say what is wrong.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)


for command in (
    figures.init_db_command,
    figures.status,
    actions.reap,
    actions.replay,
    actions.prune,
    flow.pause,
    flow.resume,
    flow.limit,
    flow.breaker,
    flow.controls,
    serving.scheduler,
    serving.dashboard,
    serving.demo,
    serving.demo_downstream,
    serving.demo_forgotten_transaction,
    serving.simulate,
    serving.healthcheck_command,
):
    main.add_command(command)
