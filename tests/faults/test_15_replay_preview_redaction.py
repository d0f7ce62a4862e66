"""Issue 10 item 15: `outbox-monitor replay`'s preview shows `last_error` redacted as the
dashboard does (docs/security.md, "Payload redaction"), in text and under --json (real Postgres)."""

import json

import pytest
from click.testing import CliRunner

from outbox_monitor.cli import main
from tests.privacy_samples import ERROR, ERROR_SHOWN, RAW


@pytest.fixture
def cli(dsn, monkeypatch):
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", dsn)
    monkeypatch.setenv("OUTBOX_MONITOR_ACTOR", "cli-tester")
    for name in ("OUTBOX_MONITOR_REDACT_KEYS", "OUTBOX_MONITOR_REDACT_VALUES"):
        monkeypatch.delenv(name, raising=False)  # the shipped defaults

    def run(*args: str):
        return CliRunner().invoke(main, list(args), catch_exceptions=False)

    return run


@pytest.mark.parametrize("confirm", ["--dry-run", None], ids=["dry-run", "no-yes"])
def test_the_replay_preview_prints_the_error_redacted(cli, rows, confirm):
    dead = rows.add(status="failed", attempts=10, processed_ago=60, last_error=ERROR)

    result = cli("replay", "--id", str(dead), *([confirm] if confirm else []))

    assert result.exit_code == (0 if confirm else 2), result.output
    assert f"#{dead}: " in result.stdout and f"last_error={ERROR_SHOWN}" in result.stdout
    assert not any(raw in result.output for raw in RAW)
    assert rows.get(dead)["status"] == "failed"


def test_the_replay_preview_json_sample_is_redacted(cli, rows):
    dead = rows.add(status="failed", attempts=10, processed_ago=60, last_error=ERROR)

    result = cli("replay", "--id", str(dead), "--dry-run", "--json")

    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert [(s["id"], s["last_error"]) for s in payload["sample"]] == [(str(dead), ERROR_SHOWN)]
    assert not any(raw in result.stdout for raw in RAW)
