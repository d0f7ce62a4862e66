"""Issue 10 item 15: a bad table name is a usage error (exit 2, as click and argparse
exit), naming where the value came from: the `--table` option, or the environment
variable OUTBOX_MONITOR_TABLE with a hint to fix it there. Nothing connects to a database."""

import json

import pytest
from click.testing import CliRunner

from outbox_monitor.cli import main

BAD_NAMES = ["a.b.c", "orders; drop table x", ""]


@pytest.fixture
def cli(monkeypatch):
    monkeypatch.delenv("OUTBOX_MONITOR_TABLE", raising=False)
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", "postgresql://nobody@127.0.0.1:9/none")

    def run(*args: str, **env: str):
        return CliRunner(env=env).invoke(main, list(args), catch_exceptions=False)

    return run


@pytest.mark.parametrize("name", BAD_NAMES)
@pytest.mark.parametrize("command", [["status"], ["replay", "--id", "1"], ["check"]])
def test_a_bad_table_option_is_a_usage_error(cli, command, name):
    result = cli(*command, "--table", name)

    assert result.exit_code == 2, result.output
    assert "Invalid value for '--table'" in result.stderr
    assert "expected schema.table" in result.stderr
    assert "environment variable" not in result.stderr  # the option is to fix
    assert "Traceback" not in result.output


def test_a_bad_table_option_under_json_is_one_json_object(cli):
    result = cli("status", "--json", "--table", "a.b.c")

    assert result.exit_code == 2
    payload = json.loads(result.stdout)
    assert "'--table'" in payload["error"] and "a.b.c" in payload["error"]


@pytest.mark.parametrize("command", [["status"], ["replay", "--id", "1"], ["check"]])
def test_a_bad_table_variable_is_a_usage_error_naming_the_variable(cli, command):
    result = cli(*command, OUTBOX_MONITOR_TABLE="a.b.c")

    assert result.exit_code == 2, result.output
    assert "OUTBOX_MONITOR_TABLE: expected schema.table" in result.stderr
    assert "environment variable" in result.stderr
    assert "--table" not in result.stderr.split("OUTBOX_MONITOR_TABLE:")[0]


def test_a_bad_dsn_option_is_a_usage_error_whose_hint_names_the_option(cli):
    result = cli("status", "--dsn", "not a dsn")

    assert result.exit_code == 2, result.output
    assert "--dsn: not a connection string" in result.stderr
    assert "Fix the option(s) above" in result.stderr
    assert "environment variable" not in result.stderr
