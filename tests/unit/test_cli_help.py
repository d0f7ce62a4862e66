"""What ``outbox-monitor --help`` and each command's ``--help`` offer: an option only where it
means something (``--json`` only on commands that print JSON), and words a user can follow
(no number of our issue tracker, there or in the shipped alerts.yml)."""

import re
from pathlib import Path

import click
from click.testing import CliRunner

from outbox_monitor.cli import main

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


def every_help_text(command: click.Command = main, path: tuple[str, ...] = ()) -> dict[str, str]:
    """The ``--help`` of the group and of every command under it, by command path."""
    texts = {" ".join(path): help_text(*path)}
    if isinstance(command, click.Group):
        context = click.Context(command)
        for name in command.list_commands(context):
            texts.update(every_help_text(command.get_command(context, name), (*path, name)))
    return texts


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


def test_the_synopsis_names_every_command_init_db_print_grants_and_healthcheck():
    readme = (REPO / "README.md").read_text()
    block = readme.split("## CLI\n\n```\n", 1)[1].split("```", 1)[0].splitlines()
    listed = {line.split()[1] for line in block if line.startswith("outbox-monitor ")}
    assert listed == set(main.list_commands(click.Context(main)))
    assert (
        "outbox-monitor init-db  --print-grants [--viewer-role R] [--scheduler-role R] "
        "[--operator-role R] [--json]"
    ) in block
    assert "outbox-monitor healthcheck [--pid PID] [--timeout 5]" in block
    top = " ".join(help_text().split())
    assert (
        "init-db Create the schema and the recommended indexes; with --print-grants, print the "
        "database roles' GRANT statements instead. limit"
    ) in top
    assert "healthcheck Container HEALTHCHECK: probe what the" in top
