"""What ``outbox-monitor --help`` and each command's ``--help`` offer: an option only where it
means something (``--json`` only on commands that print JSON)."""

from click.testing import CliRunner

from outbox_monitor.cli import main


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
