"""The outbox-monitor command on a real database: JSON output, confirmations, exit codes."""

import json
import os
import pty
import subprocess
import sys

import psycopg
import pytest
from click.testing import CliRunner

from outbox_monitor.cli import main
from outbox_monitor.store import schema


@pytest.fixture
def cli(dsn, monkeypatch):
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", dsn)
    monkeypatch.setenv("OUTBOX_MONITOR_ACTOR", "cli-tester")
    runner = CliRunner()

    def run(*args, input=None):
        return runner.invoke(
            main, list(args), input=input, catch_exceptions=False, prog_name="outbox-monitor"
        )

    return run


def _json(result):
    return json.loads(result.stdout)


def test_status_json_has_every_spec_key_with_hand_computed_values(cli, rows):
    rows.add(event_type="order.paid", status="pending", created_ago=600)
    rows.add(  # a retry in backoff
        event_type="order.paid",
        status="pending",
        created_ago=10,
        available_ago=-120,
        attempts=1,
        last_error="HTTP 503 from erp for account 12345",
    )
    rows.add(event_type="invoice.sent", status="done", created_ago=70, processed_ago=40)
    rows.add(event_type="invoice.sent", status="done", created_ago=100, processed_ago=40)
    rows.add(event_type="payment.captured", status="failed", processed_ago=300, attempts=10)
    rows.add(event_type="crm.upsert", status="processing", locked_ago=1200, attempts=2)
    result = cli("status", "--json", "--window", "1h", "--lock-timeout", "15m")
    assert result.exit_code == 0
    figures = _json(result)
    assert figures["queue_depth"] == 1
    assert figures["pending_total"] == 2
    assert figures["scheduled_retries"] == 1
    assert 600 <= figures["oldest_pending_age_seconds"] < 605
    assert (figures["processing"], figures["stuck_locks"]) == (1, 1)
    # done durations 30 s and 60 s: p50 = 45, p95 = 30 + 0.95·30 = 58.5, p99 = 59.7
    assert figures["latency_seconds"] == pytest.approx({"p50": 45, "p95": 58.5, "p99": 59.7})
    assert figures["processed_per_minute"] == pytest.approx(2 / 60)
    assert figures["created_per_minute"] == pytest.approx(6 / 60)
    assert figures["failed_in_window"] == 1
    assert figures["failed_by_event_type"] == {"payment.captured": 1}
    assert figures["attempts_histogram"] == {"0": 1, "1": 1, "2": 1, "10": 1}
    assert figures["retrying"] == 1  # pending after a failure; the processing row is not
    groups = [
        (g["event_type"], g["fingerprint"], g["retrying"]) for g in figures["retry_error_groups"]
    ]
    assert groups == [("order.paid", "HTTP 503 from erp for account <n>", 1)]


def test_status_event_type_pattern_and_human_output(cli, rows):
    rows.add(event_type="notification.email", status="pending", created_ago=400)
    rows.add(event_type="order.paid", status="pending", created_ago=900)
    figures = _json(cli("status", "--json", "--event-type", "notification.%"))
    assert figures["queue_depth"] == 1
    assert 400 <= figures["oldest_pending_age_seconds"] < 405
    text = cli("status").stdout
    assert "queue depth (due now)" in text and "15m" in text


def test_status_shows_retrying_and_its_error_groups(cli, rows):
    for account in ("12345", "67890"):  # one group: the ids differ only by a number
        rows.add(
            event_type="erp.sync",
            status="pending",
            attempts=2,
            available_ago=-60,
            last_error=f"HTTP 503 from erp for account {account}",
        )
    rows.add(event_type="erp.sync", status="pending", attempts=1, last_error="HTTP 401 from erp")
    rows.add(event_type="erp.sync", status="failed", attempts=10, processed_ago=30)
    rows.add(event_type="erp.sync", status="pending", attempts=0)
    figures = _json(cli("status", "--json"))
    assert figures["retrying"] == 3
    groups = [(g["fingerprint"], g["retrying"]) for g in figures["retry_error_groups"]]
    assert groups == [("HTTP 503 from erp for account <n>", 2), ("HTTP 401 from erp", 1)]
    text = cli("status").stdout
    assert "  retrying (attempts > 0)    3\n" in text
    assert "    retrying erp.sync          2: HTTP 503 from erp for account <n>\n" in text


def test_status_text_separates_thousands_in_every_count(cli, rows, conn):
    rows.add_dead_letters(3852)  # order.paid, failed 30 min ago at 10 attempts
    conn.execute(
        "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key,"
        " payload, created_at) SELECT 'crm.upsert', 'contact', g::text, 'due:' || g, '{}',"
        " now() - interval '1 minute' FROM generate_series(1, 1500) AS g"
    )
    text = cli("status").stdout
    assert "  queue depth (due now)      1,500\n" in text
    assert "  pending total              1,500\n" in text
    assert "  failed in window           3,852\n" in text
    assert "    failed order.paid          3,852\n" in text
    assert "  rows by attempts           0: 1,500; 10: 3,852\n" in text


def test_replay_without_terminal_or_yes_changes_nothing_and_exits_2(cli, rows):
    row_id = rows.add(status="failed", processed_ago=60)
    result = cli("replay", "--event-type", "order.paid", "--json")
    assert result.exit_code == 2
    assert _json(result)["applied"] is False
    assert rows.get(row_id)["status"] == "failed"


def test_replay_dry_run_then_yes_and_ids_beyond_2_53(cli, rows, conn):
    big = 2**53 + 1
    rows.add(status="failed", processed_ago=60, id=big, last_error="HTTP 500")
    rows.add(status="failed", processed_ago=60, id=big - 1)
    dry = _json(cli("replay", "--id", str(big), "--dry-run", "--json"))
    assert (dry["matched"], dry["applied"], dry["sample"][0]["id"]) == (1, False, str(big))
    assert rows.get(big)["status"] == "failed"
    done = _json(cli("replay", "--id", str(big), "--yes", "--json"))
    assert (done["changed"], done["skipped"], done["ids"]) == (1, 0, [str(big)])
    assert rows.get(big)["status"] == "pending"
    assert rows.get(big - 1)["status"] == "failed"
    again = _json(cli("replay", "--id", str(big), "--yes", "--json"))
    assert again["matched"] == 0
    audit = conn.execute("SELECT actor, affected_ids FROM outbox_monitor.audit_log").fetchall()
    assert audit == [{"actor": "cli-tester", "affected_ids": [big]}]


def test_replay_since_until_are_on_the_time_of_failure(cli, rows):
    recent = rows.add(status="failed", created_ago=90_000, processed_ago=600)
    rows.add(status="failed", created_ago=90_000, processed_ago=7200)
    result = _json(cli("replay", "--since", "1h", "--yes", "--json", "--actor", "alice"))
    assert result["ids"] == [str(recent)]


def test_bad_id_and_bad_duration_are_usage_errors(cli):
    assert cli("replay", "--id", "12abc").exit_code == 2
    assert cli("replay", "--id", str(2**63)).exit_code == 2
    result = cli("reap", "--lock-timeout", "soon")
    assert result.exit_code == 2
    assert "90s, 15m, 1h or 30d" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["status", "--window", "abc"], "expected a duration"),
        (["status", "--window", "0s"], "must be longer than 0 s"),
        (["reap", "--lock-timeout", "0s"], "must be longer than 0 s"),
        (["status", "--window", "9999999d"], "longer than 100 years"),
        (["replay", "--id", "xyz"], "expected an integer row id"),
        (["replay", "--id", "-1"], "ids run from 1 to 2^63-1"),
    ],
)
def test_usage_errors_under_json_are_one_json_object(cli, args, message):
    result = cli(*args, "--json")
    assert result.exit_code == 2
    payload = json.loads(result.stdout)
    assert message in payload["error"]
    assert payload["hint"].startswith("see `outbox-monitor ")


def test_a_malformed_dsn_names_the_option_not_a_traceback(cli):
    result = cli("status", "--json", "--dsn", "not a dsn")
    assert result.exit_code == 2  # a usage error (issue 10 item 15)
    assert "--dsn: not a connection string" in json.loads(result.stdout)["error"]


def test_reap_and_prune_with_yes(cli, rows):
    stuck = rows.add(status="processing", locked_ago=3600, attempts=1)
    old = rows.add(status="done", created_ago=40 * 86400, processed_ago=35 * 86400)
    reaped = _json(cli("reap", "--yes", "--json"))
    assert (reaped["changed"], reaped["dead_lettered"]) == (1, 0)
    assert rows.get(stuck)["status"] == "pending"
    pruned = _json(cli("prune", "--done-older-than", "30d", "--yes", "--json"))
    assert (pruned["matched"], pruned["changed"], pruned["ids"]) == (1, 1, [str(old)])


def test_errors_are_one_json_object_and_exit_1(monkeypatch, empty_dsn):
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", empty_dsn)
    result = CliRunner().invoke(main, ["status", "--json"])
    assert result.exit_code == 1
    payload = json.loads(result.stdout)
    assert "does not exist" in payload["error"]
    assert "init-db" in payload["hint"]


def test_init_db_json_then_status_works(monkeypatch, empty_dsn):
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", empty_dsn)
    first = json.loads(CliRunner().invoke(main, ["init-db", "--create-table", "--json"]).stdout)
    assert first["applied_migrations"] == [
        "001_core",
        "002_alerts",
        "003_audit_function",
        "004_leadership",
        "005_test_notification_function",
        "006_error_groups_cache",
        "007_error_groups_owner_tables_only",
        "008_flow_control",
        "009_claim_skips_held_rows",
        "010_outcomes_only_with_breakers",
        "011_claim_plans",
        "012_health_samples",
        "013_workers_seen",
        "014_event_type_samples",
        "015_timeline_indexes",
        "016_own_retention",
        "017_alert_state_per_outbox",
        "018_scheduler_replicas",
        "019_audit_login",
        "020_writer_outcomes",
        "021_alert_episode_ids",
        "022_control_change_barrier",
        "023_workers_seen_last_fail",
        "024_bounded_type_keys",
        "025_retry_error_groups_cache",
        "026_retry_error_group_counts",
        "027_alert_inhibited_by",
        "028_slack_actions",
        "029_alert_groups",
        "030_static_worker_functions",
        "031_backlog_snapshots",
        "032_worker_function_names_at_the_seam",
        "033_finished_by_event_type_sample",
        "034_worker_function_names_of_hex_tables",
        "035_backlog_snapshot_window",
    ]
    second = json.loads(CliRunner().invoke(main, ["init-db", "--json"]).stdout)
    assert second["applied_migrations"] == second["created_tables"] == []
    assert CliRunner().invoke(main, ["status", "--json"]).exit_code == 0


def test_interactive_confirmation_on_a_terminal(dsn, rows):
    row_id = rows.add(status="failed", processed_ago=60)
    leader, follower = pty.openpty()
    env = {**os.environ, "OUTBOX_MONITOR_DSN": dsn}
    process = subprocess.Popen(
        [sys.executable, "-m", "outbox_monitor", "replay", "--event-type", "order.paid"],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    output = b""
    while b"[y/N]" not in output:
        output += os.read(leader, 1024)
    os.write(leader, b"y\n")
    assert process.wait(timeout=30) == 0
    os.close(leader)
    assert b"replay preview: 1 row(s) match" in output
    assert rows.get(row_id)["status"] == "pending"


def test_init_db_that_cannot_drop_a_retired_index_exits_1_naming_it(cli, dsn, conn, monkeypatch):
    conn.execute(
        "CREATE INDEX integration_outbox_created_at_idx ON integration_outbox (created_at)"
    )
    conn.execute(  # as an earlier release's init-db left them (up to migration 005)
        "UPDATE outbox_monitor.schema_migrations SET applied_at = applied_at - interval '1 day'"
        " WHERE version <= 5"
    )
    monkeypatch.setattr(schema, "DROP_LOCK_TIMEOUT_SECONDS", 0.3)
    with psycopg.connect(dsn) as holder:
        holder.execute("LOCK TABLE integration_outbox IN SHARE UPDATE EXCLUSIVE MODE")
        result = cli("init-db")
    assert result.exit_code == 1
    assert "error: could not drop integration_outbox_created_at_idx" in result.stderr
    assert "lock timeout (0.3 s)" in result.stderr

    result = cli("init-db", "--json")
    assert result.exit_code == 0
    assert _json(result)["dropped_indexes"] == ["integration_outbox_created_at_idx"]


# What a command may not import at start-up (issue 11 §6): the dashboard's and the
# scheduler's libraries, and the rules engine with YAML (only `check` and `alerts` read
# alerts.yml). A name stands for the module and its submodules.
SERVICE_MODULES = (
    "streamlit",
    "pandas",
    "numpy",
    "altair",
    "apscheduler",
    "slack_sdk",
    "prometheus_client",
    "outbox_monitor.ui",
    "outbox_monitor.service.scheduler",
)
RULES_MODULES = ("yaml", "outbox_monitor.alerts.rules", "outbox_monitor.alerts.measure")


def _start(args: list[str], env: dict[str, str]) -> tuple[str, set[str]]:
    """Run ``python -X importtime -m outbox_monitor ARGS`` (the module path of the installed
    ``outbox-monitor`` script); returns its stdout and the modules it imported."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "outbox_monitor", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:")
    }
    return result.stdout, imported


def _among(imported: set[str], names: tuple[str, ...]) -> set[str]:
    return {m for m in imported for n in names if m == n or m.startswith(n + ".")}


def test_status_json_imports_neither_services_nor_rules(dsn, rows):
    rows.add(status="pending", created_ago=60)
    env = {**os.environ, "OUTBOX_MONITOR_DSN": dsn}
    stdout, imported = _start(["status", "--json"], env)
    assert json.loads(stdout)["queue_depth"] == 1
    assert _among(imported, SERVICE_MODULES + RULES_MODULES) == set()
    assert "outbox_monitor.figures.metrics" in imported
    # --help lists every command (`check` and `alerts` loaded for their help lines, the
    # rules engine not)...
    stdout, imported = _start(["--help"], env)
    assert "check" in stdout and "alerts" in stdout
    assert _among(imported, SERVICE_MODULES + RULES_MODULES) == set()
    # ...and a command that reads alerts.yml loads the rules engine when chosen.
    stdout, imported = _start(["alerts", "validate"], env)
    assert "valid" in stdout
    assert {"yaml", "outbox_monitor.alerts.rules"} <= imported  # validate measures nothing
