"""Flow control from the command line (issue 13 item 2): pause --for, resume, limit,
breaker, controls --json and controls apply, against real rows and the real claim."""

import json
from datetime import UTC, timedelta

import pytest
from click.testing import CliRunner

from outbox_monitor import outbox
from outbox_monitor.cli import main


@pytest.fixture
def cli(dsn, monkeypatch):
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", dsn)
    monkeypatch.setenv("OUTBOX_MONITOR_ACTOR", "cli-tester")
    runner = CliRunner()
    return lambda *args: runner.invoke(main, list(args), prog_name="outbox-monitor")


def as_json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_pause_for_30m_holds_the_rows_and_resume_releases_them(cli, conn, rows):
    rows.add(event_type="crm.contact")
    rows.add(event_type="crm.contact")
    rows.add(event_type="order.paid")
    paused = as_json(cli("pause", "crm.%", "--for", "30m", "--reason", "CRM 503s", "--json"))
    assert paused["due_rows_matching"] == {"crm.contact": 2}
    assert paused["after"]["paused"] is True and paused["after"]["pause_reason"] == "CRM 503s"
    until = conn.execute(
        "SELECT extract(epoch FROM paused_until - now()) AS s FROM outbox_monitor.controls"
    ).fetchone()["s"]
    assert 1790 < until <= 1800

    listed = as_json(cli("controls", "--json"))
    (control,) = listed["controls"]
    assert (control["event_type"], control["rows_held"], control["held_by_event_type"]) == (
        "crm.%",
        2,
        {"crm.contact": 2},
    )
    assert control["state"].startswith("paused until ")
    assert "bypasses them" in listed["note"]
    assert [r["event_type"] for r in outbox.claim(conn, "w1")] == ["order.paid"]

    text = cli("resume", "crm.%")
    assert text.exit_code == 0 and "no control (rows flow freely)" in text.output
    assert len(outbox.claim(conn, "w1")) == 2
    actions = conn.execute("SELECT actor, action FROM outbox_monitor.audit_log ORDER BY id")
    assert [(a["actor"], a["action"]) for a in actions] == [
        ("cli-tester", "pause"),
        ("cli-tester", "resume"),
    ]


def test_without_the_flow_control_index_every_listing_and_change_says_claims_read_held_rows(
    cli, rows
):
    rows.add(event_type="crm.contact")
    assert as_json(cli("controls", "--json"))["claims_read_held_rows"] is True
    assert "init-db --flow-control" not in cli("controls").output  # no control: nothing held

    paused = cli("pause", "crm.%")
    assert paused.exit_code == 0 and "init-db --flow-control" in paused.output
    assert "init-db --flow-control" in cli("controls").output

    made = as_json(cli("init-db", "--flow-control", "--json"))
    assert made["created_indexes"] == ["integration_outbox_pending_types_idx"]
    assert as_json(cli("controls", "--json"))["claims_read_held_rows"] is False
    assert "init-db --flow-control" not in cli("controls").output
    assert (
        as_json(cli("limit", "order.%", "--concurrency", "2", "--json"))["claims_read_held_rows"]
        is False
    )


def test_dry_run_previews_and_changes_nothing(cli, conn, rows):
    rows.add(event_type="crm.contact")
    result = as_json(cli("pause", "crm.contact", "--dry-run", "--json"))
    assert (result["applied"], result["due_rows_matching"]) == (False, {"crm.contact": 1})
    assert conn.execute("SELECT count(*) AS n FROM outbox_monitor.controls").fetchone()["n"] == 0


def test_limit_and_breaker_combine_on_one_control(cli, conn):
    as_json(cli("limit", "crm.%", "--concurrency", "3", "--rate", "2.5", "--json"))
    as_json(cli("breaker", "crm.%", "--on", "--cooldown", "2m", "--json"))
    (control,) = as_json(cli("controls", "--json"))["controls"]
    settings = control["settings"]
    assert (settings["concurrency_limit"], settings["rate_per_second"], settings["burst"]) == (
        3,
        2.5,
        3,
    )  # burst defaults to one second's worth, rounded up
    assert (settings["breaker"], settings["breaker_cooldown_seconds"]) == (True, 120)
    assert control["breaker_state"] == "closed"
    as_json(cli("limit", "crm.%", "--no-rate", "--json"))
    (control,) = as_json(cli("controls", "--json"))["controls"]
    assert control["settings"]["rate_per_second"] is None
    assert control["settings"]["concurrency_limit"] == 3


def test_controls_shows_an_open_breakers_cool_down_now_and_its_next_probe(cli, conn):
    as_json(cli("breaker", "crm.%", "--on", "--cooldown", "30s", "--json"))
    # opened ≈ 30 s ago after two failed probes: its 30 s cool-down doubled twice, to 120 s;
    # 29.5 s ago, so that the command, within a second, sees 90.5 s less its delay: "1m 30s"
    opened = conn.execute(
        "UPDATE outbox_monitor.control_state SET breaker_state = 'open', cooldown_seconds = 120,"
        " since = now() - interval '29.5 seconds' RETURNING since, now()"
    ).fetchone()
    since = opened["since"]
    # the next probe's clock time in words (the date only on another UTC day than the
    # command's now, within a second of this one), never ISO
    probe = (since + timedelta(seconds=120)).astimezone(UTC)
    same_day = probe.date() == opened["now"].astimezone(UTC).date()
    next_probe = probe.strftime("%H:%M UTC" if same_day else "%Y-%m-%d %H:%M UTC")

    text = cli("controls")
    assert text.exit_code == 0, text.output
    assert (
        "  breaker: open, cool-down 2m 0s now (set: 30s; each failed probe doubles it); next "
        f"probe at {next_probe} (in 1m 30s)\n"
    ) in text.output
    (control,) = as_json(cli("controls", "--json"))["controls"]
    assert control["settings"]["breaker_cooldown_seconds"] == 30
    assert control["breaker_cooldown_seconds_now"] == 120
    assert control["breaker_next_probe_at"] == (since + timedelta(seconds=120)).isoformat()

    conn.execute("UPDATE outbox_monitor.control_state SET breaker_state = 'half_open'")
    assert "  breaker: half-open, the next claim hands out a probe\n" in cli("controls").output


def test_bad_input_is_refused_with_the_reason(cli):
    result = cli("limit", "crm.%", "--burst", "5")
    assert result.exit_code == 2 and "--burst goes with --rate" in result.output
    result = cli("breaker", "crm.%", "--on", "--cooldown", "1h")
    assert result.exit_code == 1
    assert "breaker_cooldown_seconds" in result.output and "900" in result.output
    result = cli("pause", "crm.%", "--for", "5m", "--until", "10m")
    assert result.exit_code == 2 and "not both" in result.output


def test_controls_apply_reports_and_is_idempotent(cli, conn, tmp_path):
    path = tmp_path / "controls.yml"
    path.write_text(
        "version: 1\n"
        "controls:\n"
        '  - event_type: "crm.%"\n'
        "    concurrency: 5\n"
        "    breaker: {cooldown: 45s}\n"
        "  - event_type: legacy.sync\n"
        "    pause: {reason: decommissioned}\n"
    )
    dry = as_json(cli("controls", "apply", str(path), "--dry-run", "--json"))
    assert (dry["written"], dry["audit_id"]) == (["crm.%", "legacy.sync"], None)
    assert conn.execute("SELECT count(*) AS n FROM outbox_monitor.controls").fetchone()["n"] == 0
    first = as_json(cli("controls", "apply", str(path), "--json"))
    again = as_json(cli("controls", "apply", str(path), "--json"))
    assert first["written"] == ["crm.%", "legacy.sync"] and first["audit_id"] is not None
    assert (again["written"], again["unchanged"], again["audit_id"]) == (
        [],
        ["crm.%", "legacy.sync"],
        None,
    )
    listed = {c["event_type"]: c for c in as_json(cli("controls", "--json"))["controls"]}
    assert listed["crm.%"]["settings"]["breaker_cooldown_seconds"] == 45
    assert listed["legacy.sync"]["state"] == "paused"


def test_a_malformed_controls_file_names_the_entry_and_field(cli, tmp_path):
    path = tmp_path / "controls.yml"
    path.write_text(
        "controls:\n"
        '  - event_type: "crm.%"\n'
        "    concurency: 5\n"
        '  - event_type: "sms.%"\n'
        "    breaker: {cooldown: 1h}\n"
        '  - event_type: "crm.%"\n'
    )
    result = cli("controls", "apply", str(path))
    assert result.exit_code == 2
    assert f'{path}: controls[0] "crm.%": concurency: unknown key; did you mean "concurrency"?' in (
        result.output
    )
    assert f'{path}: controls[1] "sms.%": breaker.cooldown: at most 15m' in result.output


SILENCE_RULES = """
version: 1
defaults: {interval: 30s, for: 0s, keep_firing_for: 0s}
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL}
rules:
  - {name: backlog, metric: queue_depth, op: ">", threshold: 1000, route: oncall}
  - {name: notifications-late, metric: oldest_pending_age, event_type: "notification.%",
     op: ">", threshold: 5m, route: oncall}
  - {name: crm-late, metric: oldest_pending_age, event_type: "crm.%", by: [event_type],
     op: ">", threshold: 5m, route: oncall}
  - {name: crm-failed, metric: failed_in_window, event_type: "crm.%", window: 15m,
     op: ">", threshold: 0, route: oncall}
"""


def test_a_pause_offers_and_silences_the_rules_it_trips_until_resumed(
    cli, conn, tmp_path, monkeypatch
):
    path = tmp_path / "alerts.yml"
    path.write_text(SILENCE_RULES)
    monkeypatch.setenv("OUTBOX_MONITOR_RULES", str(path))
    offered = cli("pause", "crm.%")
    assert "this pause will trip: backlog, crm-late (add --silence" in offered.output
    assert conn.execute("SELECT count(*) AS n FROM outbox_monitor.silences").fetchone()["n"] == 0

    paused = as_json(cli("pause", "crm.%", "--for", "2h", "--silence", "--json"))
    assert paused["rules_tripped"] == ["backlog", "crm-late"]  # not notification.%, failures
    silences = conn.execute(
        "SELECT id, matchers, extract(epoch FROM ends_at - starts_at)::int AS seconds"
        " FROM outbox_monitor.silences ORDER BY id"
    ).fetchall()
    assert [s["id"] for s in silences] == paused["silences"]
    assert [s["matchers"] for s in silences] == [
        {"rule": "backlog"},
        {"rule": "crm-late", "event_type": "crm.%"},  # a by rule: only the paused types
    ]
    assert {s["seconds"] for s in silences} == {7200}  # until the pause ends

    resumed = as_json(cli("resume", "crm.%", "--json"))
    assert resumed["silences_ended"] == paused["silences"]
    active = conn.execute(
        "SELECT count(*) AS n FROM outbox_monitor.silences WHERE expired_at IS NULL"
    ).fetchone()["n"]
    assert active == 0


def test_a_controls_file_with_out_of_range_or_loose_values_is_refused_by_field(cli, tmp_path):
    path = tmp_path / "controls.yml"
    path.write_text(
        "version: 2\n"
        "controls:\n"
        '  - event_type: "crm.%"\n'
        "    concurrency: 3000000000\n"
        '  - event_type: "sms.%"\n'
        "    concurrency: true\n"
        '  - event_type: "mail.%"\n'
        "    rate: {per_second: 1.0e12}\n"
        '  - event_type: "a\\0b"\n'
    )
    result = cli("controls", "apply", str(path), "--dry-run")
    assert result.exit_code == 2, result.output
    out = result.output
    assert f"{path}: version: " in out
    assert 'controls[0] "crm.%": concurrency: ' in out and "1000000" in out
    assert 'controls[1] "sms.%": concurrency: ' in out
    assert 'controls[2] "mail.%": rate.per_second: ' in out
    assert "controls[3]" in out and "control characters" in out


def test_a_pause_of_a_file_control_silences_no_longer_than_its_override(
    cli, conn, tmp_path, monkeypatch
):
    rules = tmp_path / "alerts.yml"
    rules.write_text(SILENCE_RULES)
    monkeypatch.setenv("OUTBOX_MONITOR_RULES", str(rules))
    controls = tmp_path / "controls.yml"
    controls.write_text('controls:\n  - {event_type: "crm.%", concurrency: 5}\n')
    as_json(cli("controls", "apply", str(controls), "--json"))
    paused = as_json(cli("pause", "crm.%", "--silence", "--json"))  # no until: the override's
    spans = conn.execute(
        "SELECT DISTINCT extract(epoch FROM ends_at - now())::int / 60 AS minutes"
        " FROM outbox_monitor.silences"
    ).fetchall()
    assert paused["expires_at"] is not None
    assert [s["minutes"] for s in spans] == [60]  # the override's hour, not a day


def test_a_filter_of_many_4_byte_characters_is_refused_before_the_database(cli, conn):
    """A hostile pass of issue 29: 700 emoji (2,800 bytes, under 1,000 characters) reached the
    controls' unique index and failed there ("index row size … exceeds … 2704")."""
    wide = "\U0001f4e6" * 700 + "%"
    result = cli("pause", wide, "--reason", "test")
    assert result.exit_code == 1, result.output
    assert "at most 2,000 bytes in UTF-8 (this one 2,801: 701 characters" in result.output
    assert "index row size" not in result.output
    held = conn.execute("SELECT count(*) AS n FROM outbox_monitor.controls").fetchone()["n"]
    assert held == 0
