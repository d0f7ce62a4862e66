"""What ``outbox-monitor --help`` and each command's ``--help`` offer: an option only where it
means something (``--json`` only on commands that print JSON), and words a user can follow
(no number of our issue tracker, there or in the shipped alerts.yml)."""

import re
from collections.abc import Iterator
from pathlib import Path

import click
from click.testing import CliRunner

from outbox_monitor.cli import main
from outbox_monitor.config.settings import ENV_PREFIX, Settings

REPO = Path(__file__).resolve().parents[2]
ISSUE = re.compile(r"\bissues? \d+", re.IGNORECASE)


def help_text(*command: str) -> str:
    result = CliRunner().invoke(main, [*command, "--help"], prog_name="outbox-monitor")
    assert result.exit_code == 0, result.output
    return result.output


def test_the_services_offer_no_json_option():
    for service in ("scheduler", "dashboard"):
        text = help_text(service)
        assert "--dsn TEXT" in text and "--table SCHEMA.TABLE" in text
        assert "--json" not in text, service
    assert "--json  " in help_text("status")  # a command that prints JSON keeps it


def every_help_text() -> dict[str, str]:
    """The ``--help`` of the group and of every command under it, by command path."""
    return {path: help_text(*path.split()) for path, _ in every_command()}


def test_no_help_text_nor_shipped_file_cites_our_issue_tracker():
    texts = every_help_text()
    assert {"status", "alerts validate", "init-db"} <= set(texts)
    texts["alerts.yml"] = (REPO / "alerts.yml").read_text()
    texts["init-db --print-grants"] = CliRunner().invoke(main, ["init-db", "--print-grants"]).output
    cited = {where: ISSUE.findall(text) for where, text in texts.items() if ISSUE.search(text)}
    assert cited == {}
    # what replaced "issue 14 item 1/2": what the keys hold
    assert "who holds the xmin horizon (key health); and how Postgres plans the" in " ".join(
        texts["status"].split()
    )


def test_the_reference_names_every_command_init_db_print_grants_and_healthcheck():
    page = (REPO / "docs" / "reference" / "cli.md").read_text()
    listed = set(re.findall(r"^- `outbox-monitor ([\w-]+)`", page, re.MULTILINE))
    assert listed == set(main.list_commands(click.Context(main)))
    init_db = page.split("## outbox-monitor init-db\n", 1)[1].split("\n## ", 1)[0]
    for option in ("--print-grants", "--viewer-role", "--scheduler-role", "--operator-role"):
        assert f"| `{option}` |" in init_db
    healthcheck = page.split("## outbox-monitor healthcheck\n", 1)[1].split("\n## ", 1)[0]
    assert "| `--pid` |" in healthcheck and "| `--timeout` |" in healthcheck
    top = " ".join(help_text().split())
    assert (
        "init-db Create the schema and the recommended indexes (with --create-table, a missing "
        "outbox table); with --print-grants, print the database roles' GRANT statements "
        "instead. limit"
    ) in top
    assert "healthcheck Container HEALTHCHECK: probe what the" in top


def every_command(
    command: click.Command = main, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, click.Command]]:
    """Every command under the group (and the group), with its command path."""
    yield " ".join(path), command
    if isinstance(command, click.Group):
        context = click.Context(command)
        for name in command.list_commands(context):
            yield from every_command(command.get_command(context, name), (*path, name))


NOT_SETTINGS = {("breaker", "window")}
"""Options named as a setting that do not fall back on it: a breaker's own window."""


def test_every_option_that_falls_back_on_a_variable_names_it_in_its_help():
    options = [
        (path, option)
        for path, command in every_command()
        for option in command.params
        if isinstance(option, click.Option)
    ]
    # click reads an option's envvar itself: --help shows it only with show_envvar
    assert [(p, o.opts) for p, o in options if o.envvar and not o.show_envvar] == []
    unnamed = [
        (path, option.opts[0])
        for path, option in options
        if not option.envvar
        and option.name in Settings.model_fields
        and (path, option.name) not in NOT_SETTINGS
        and f"{ENV_PREFIX}{option.name.upper()}" not in (option.help or "")
    ]
    assert unnamed == []
    assert "(default: OUTBOX_MONITOR_LOCK_TIMEOUT or 15m)" in " ".join(help_text("status").split())


def test_the_top_level_help_cites_every_section_of_the_spec():
    sections = re.findall(r"^## (\d+)\. ", (REPO / "docs" / "SPEC.md").read_text(), re.MULTILINE)
    assert sections[-1] == "5"  # flow control
    assert f"(SPEC §1–{sections[-1]})" in " ".join(help_text().split())


def test_the_demo_fleet_is_as_its_help_and_the_docs_say(tmp_path):
    from outbox_monitor.demo.fleet import DEMO_FLEET, write_fleet_file
    from outbox_monitor.demo.lifecycle import DEMO_LOCK_TIMEOUT

    databases = {member.name: member.database for member in DEMO_FLEET}
    assert databases == {"orders": "shop", "billing": "shop", "notifications": "comms"}
    text = " ".join(help_text("demo").split())
    assert (
        "each with its own table, traffic, workers and downstream, listed in a fleet file; "
        "orders and billing share the database shop, notifications has comms."
    ) in text
    assert "own traffic, database" not in text
    # docs/fleet.md shows the fleet file the demo writes, as it writes it
    page = (REPO / "docs" / "fleet.md").read_text()
    section = page.split("## A fleet in the demo\n", 1)[1].split("\n## ", 1)[0]
    shown = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    written = write_fleet_file(tmp_path, DEMO_FLEET, lock_timeout=f"{DEMO_LOCK_TIMEOUT / 60:g}m")
    assert shown == written.read_text()
    assert "the two-database example above" not in page
