"""Item 12: outbox text cannot forge a log line, and actor names are one line of printable
text wherever they come from.

The log test runs a real ``outbox-monitor scheduler`` whose alert rule fires for a
dead-lettered event of type ``"x\\nERROR fake line"`` (its "alert … firing" log line names
the instance), and reads the process's stderr. The actor test runs the real CLI replay
with ``--actor "ops\\n@evil"`` and reads the audit row.
"""

import io
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from outbox_monitor.access import Identity, Role, normalise_actor
from outbox_monitor.logs import OneLineFormatter
from tests.alerting import rules_file, wait_for

REPO = Path(__file__).resolve().parents[2]
FORGED = "x\nERROR fake line"
RULES = {
    "version": 1,
    "defaults": {"interval": "1s", "for": "0s", "keep_firing_for": "0s"},
    "routes": {"oncall": {"webhook_url_env": "SLACK_WEBHOOK_URL", "repeat_interval": "1h"}},
    "rules": [
        {
            "name": "x-failed",
            "metric": "failed_in_window",
            "event_type": "x%",
            "window": "15m",
            "by": ["event_type"],
            "op": ">",
            "threshold": 0,
            "severity": "critical",
            "route": "oncall",
            "summary": "{{ value }} x event(s) dead-lettered",
        }
    ],
}
RECORD_START = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ ")
"""The start of a record's line in ``logs.LOG_FORMAT``."""


def command_environment(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OUTBOX_MONITOR_", "SLACK_"))}
    return {**env, **settings}


def test_an_event_type_with_a_newline_stays_on_its_log_line(dsn, rows, slack_sink, tmp_path):
    rows.add(event_type=FORGED, status="failed", attempts=10, processed_ago=60, last_error="e")
    env = command_environment(
        OUTBOX_MONITOR_DSN=dsn, SLACK_WEBHOOK_URL=slack_sink.webhook_url, HOME=str(tmp_path)
    )
    stderr_path = tmp_path / "scheduler.log"
    rules = rules_file(tmp_path, RULES)
    with stderr_path.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "outbox_monitor", "scheduler", "--rules", str(rules)],
            cwd=REPO,
            env={**env, "OUTBOX_MONITOR_METRICS_PORT": "0"},
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
        )
    try:
        started = time.monotonic()
        fired = wait_for(lambda: "alert x-failed" in stderr_path.read_text(), timeout=60, step=0.2)
        seconds = time.monotonic() - started
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    lines = stderr_path.read_text().splitlines()
    assert fired, "\n".join(lines)
    forged = [line for line in lines if "fake line" in line]
    assert len(forged) == 1, "\n".join(lines)
    assert RECORD_START.match(forged[0]), forged[0]
    assert (
        "INFO outbox_monitor.scheduler: alert x-failed [event_type=x\\nERROR fake line]:"
        in (forged[0])
    )
    assert not any(line.startswith("ERROR") for line in lines)
    assert seconds < 60


def test_a_traceback_is_indented_and_its_text_escaped():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(OneLineFormatter("%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("tests.faults.forged")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        raise RuntimeError(f"handler failed on {FORGED}\r\x1b[2K")
    except RuntimeError:
        logger.exception("event %s failed", FORGED)
    finally:
        logger.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "ERROR tests.faults.forged: event x\\nERROR fake line failed"
    assert lines[1] == "  Traceback (most recent call last):"
    assert lines[-2:] == [
        "  RuntimeError: handler failed on x",
        "  ERROR fake line\\r\\x1b[2K",
    ]
    assert all(line.startswith("  ") for line in lines[1:])


def test_an_actor_with_a_newline_is_audited_on_one_line(dsn, rows, conn, tmp_path):
    dead = rows.add(status="failed", attempts=10, processed_ago=60, last_error="e")
    done = subprocess.run(
        [
            *(sys.executable, "-m", "outbox_monitor", "replay", "--id", str(dead), "--yes"),
            *("--actor", "ops\n@evil\u202e\x1b[31m"),
        ],
        cwd=REPO,
        env=command_environment(OUTBOX_MONITOR_DSN=dsn, HOME=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    audit = conn.execute("SELECT actor FROM outbox_monitor.audit_log").fetchall()
    assert [a["actor"] for a in audit] == ["ops @evil [31m"]


def test_actor_names_are_normalised():
    assert normalise_actor("ops\n@evil") == "ops @evil"
    assert normalise_actor("  alice@example.com\r\n") == "alice@example.com"
    assert normalise_actor("a\u2028b\u2029c\u0085d") == "a b c d"
    assert normalise_actor("bob\u202e\u200b\ufeff") == "bob"
    assert normalise_actor("e\u0301") == "\u00e9"  # NFC
    assert normalise_actor("x" * 500) == "x" * 200


def test_an_actor_name_with_nothing_printable_is_refused(dsn, rows, conn, tmp_path):
    dead = rows.add(status="failed", attempts=10, processed_ago=60, last_error="e")
    done = subprocess.run(
        [sys.executable, "-m", "outbox_monitor", "replay", "--id", str(dead), "--yes"],
        cwd=REPO,
        env=command_environment(OUTBOX_MONITOR_DSN=dsn, HOME=str(tmp_path))
        | {"OUTBOX_MONITOR_ACTOR": "\n\u202e\t"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr  # a setting that cannot be used
    assert done.stderr.startswith("error: the actor name '\\n\\u202e\\t' has no printable")
    assert "Traceback" not in done.stderr
    assert conn.execute("SELECT count(*) AS n FROM outbox_monitor.audit_log").fetchone()["n"] == 0
    assert rows.get(dead)["status"] == "failed"
    with pytest.raises(ValueError, match="an identity needs a printable name"):
        Identity("\x00\n", Role.viewer, "proxy")


HOSTILE_TYPE = "order.paid\n\r\x1b]0;x\x07"
"""An event type with a newline, a carriage return and a terminal-title escape ending in
BEL: printed raw, it retitles the terminal and starts a line of its own."""
HOSTILE_ERROR = "boom\nerror: forged line\r\x1b]0;x\x07"
RAW_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")
"""A control character other than the newline that ends each line."""
HOSTILE_TRIGGER = """
    CREATE FUNCTION refuse_hostile() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'refused %', OLD.event_type;
    END
    $$;
    CREATE TRIGGER refuse_hostile BEFORE UPDATE ON integration_outbox
        FOR EACH ROW EXECUTE FUNCTION refuse_hostile();
"""


def run_cli(dsn: str, home: Path, *args: str) -> subprocess.CompletedProcess:
    """The real CLI's run, stdout and stderr decoded as they were written (no universal
    newlines: a ``\r`` stays a ``\r``)."""
    done = subprocess.run(
        [sys.executable, "-m", "outbox_monitor", *args],
        cwd=REPO,
        env=command_environment(OUTBOX_MONITOR_DSN=dsn, OUTBOX_MONITOR_ACTOR="ops", HOME=str(home)),
        capture_output=True,
        timeout=120,
        check=False,
    )
    done.stdout, done.stderr = done.stdout.decode(), done.stderr.decode()
    return done


def test_the_cli_prints_outbox_text_escaped(dsn, rows, conn, tmp_path):
    """Before: the replay preview, ``status``, ``check`` and the ``error:`` summary of an
    action printed event types, ``last_error`` and the database's error text raw."""
    dead = rows.add(
        event_type=HOSTILE_TYPE,
        status="failed",
        attempts=10,
        processed_ago=60,
        last_error=HOSTILE_ERROR,
    )
    shown_type = "order.paid\\n\\r\\x1b]0;x\\x07"
    shown_error = "boom\\nerror: forged line\\r\\x1b]0;x\\x07"

    preview = run_cli(dsn, tmp_path, "replay", "--id", str(dead), "--dry-run")
    assert preview.returncode == 0, preview.stderr
    assert not RAW_CONTROL.search(preview.stdout), repr(preview.stdout)
    lines = preview.stdout.splitlines()
    assert len(lines) == 2, lines  # the heading and the one sampled row
    assert lines[0] == "replay preview: 1 row(s) match"
    assert lines[1].startswith(f"  #{dead}: event_type={shown_type}, ")
    assert lines[1].endswith(f"last_error={shown_error}")

    status = run_cli(dsn, tmp_path, "status")
    assert status.returncode == 0, status.stderr
    assert not RAW_CONTROL.search(status.stdout), repr(status.stdout)
    assert f"    failed {shown_type:<19} 1" in status.stdout.splitlines()

    rules = rules_file(
        tmp_path, {**RULES, "rules": [{**RULES["rules"][0], "event_type": "order%"}]}
    )
    check = run_cli(dsn, tmp_path, "check", "--rules", str(rules))
    assert check.returncode == 1, check.stderr  # breached
    assert not RAW_CONTROL.search(check.stdout), repr(check.stdout)
    table = check.stdout.splitlines()
    assert len(table) == 3, table  # the heading, the one instance, the summary
    assert table[1].split()[:2] == ["x-failed", f"event_type={shown_type}"]

    conn.execute(HOSTILE_TRIGGER)
    applied = run_cli(dsn, tmp_path, "replay", "--id", str(dead), "--yes")
    assert applied.returncode == 1, applied.stderr
    assert not RAW_CONTROL.search(applied.stderr), repr(applied.stderr)
    errors = applied.stderr.splitlines()
    # a row the table refuses is left, named and audited (issue 29 item 1): the WARNING log
    # lines (logs.OneLineFormatter) of the row and of the run, and the CLI's warning
    assert len(errors) == 3, errors
    assert all(RECORD_START.match(line) for line in errors[:2])
    assert "WARNING outbox_monitor.actions" in errors[0]
    assert errors[2] == (
        f"warning: row {dead} left as it was, the table refused it: refused {shown_type}"
        " (SQLSTATE P0001)"
    )
    assert rows.get(dead)["status"] == "failed"
