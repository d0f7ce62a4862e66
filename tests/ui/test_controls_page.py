"""Controls page (SPEC §5, issue 13 item 2): pause from the page holds exactly the matching
due rows (checked with the workers' claim), resume releases them; a viewer sees the forms
disabled and the server refuses anyway; a file-owned control is read-only and a change to
it an expiring override; an alert's pause link pre-fills the form."""

import re
from datetime import UTC
from urllib.parse import parse_qsl, urlsplit

import psycopg
from click.testing import CliRunner
from psycopg.rows import dict_row
from rendered import plain

from outbox_monitor import outbox
from outbox_monitor.access import Identity, Role
from outbox_monitor.alerts.links import pause_link
from outbox_monitor.cli import main
from outbox_monitor.flow import controls as flow
from outbox_monitor.flow.controls_file import apply_controls
from outbox_monitor.flow.model import ControlSettings
from outbox_monitor.ui import access as ui_access
from outbox_monitor.ui.control_flow import ControlRequest, HoldPreview
from tests.flow import open_breaker

PAGE = "controls"
ACTOR = "ui-test"  # tests/ui/conftest.py's OUTBOX_MONITOR_ACTOR
OPERATOR = Identity("oncall@example.com", Role.operator, "cli")
VIEWER = Identity("vic@example.com", Role.viewer, "proxy")


def seed_crm(rows) -> None:
    """3 due crm.contact, 1 due crm.deal, 1 crm.deal in backoff (not due), 1 due order.paid."""
    for _ in range(3):
        rows.add(event_type="crm.contact", created_ago=120)
    rows.add(event_type="crm.deal", created_ago=60)
    rows.add(event_type="crm.deal", created_ago=60, available_ago=-600)
    rows.add(event_type="order.paid", created_ago=30)


def texts(at) -> str:
    kinds = ("markdown", "caption", "success", "info", "warning", "error")
    return "\n".join(plain(e.value) for kind in kinds for e in getattr(at, kind))


TABLES = {"event_types": "held", "controls": "owner", "preview": "due_rows"}
"""Each table of the page by a column only it has."""


def table(at, name: str) -> list[dict]:
    column = TABLES[name]
    (frame,) = [d.value for d in at.dataframe if column in d.value.columns]
    return frame.to_dict("records")


def by(records: list[dict], column: str) -> dict:
    return {r[column]: r for r in records}


def claimed_types(conn) -> list[str]:
    return sorted(row["event_type"] for row in outbox.claim(conn, "w1"))


def test_pause_from_the_page_holds_exactly_the_due_rows_and_resume_releases_them(
    open_page, rows, conn
):
    seed_crm(rows)

    at = open_page(PAGE)
    assert not at.exception
    assert "bypasses them" in texts(at)  # the bypass note, in the "What controls do" expander
    assert [e.label for e in at.expander][:1] == ["What controls do"]
    assert "init-db --flow-control" not in texts(at)  # no control yet: nothing is held
    types = by(table(at, "event_types"), "event_type")
    assert {t: (r["due"], r["pending"], r["held"]) for t, r in types.items()} == {
        "crm.contact": (3, 3, 0),
        "crm.deal": (1, 2, 0),
        "order.paid": (1, 1, 0),
    }

    at.text_input(key="controls.pause.filter").set_value("crm.%").run()
    at.text_input(key="controls.pause.reason").set_value("CRM API down").run()
    at.button(key="controls.pause.preview_button").click().run()
    assert "crm.% matches **4** due rows now, of 2 event types:" in texts(at)
    preview = table(at, "preview")
    assert {r["event_type"]: r["due_rows"] for r in preview} == {
        "crm.contact": 3,
        "crm.deal": 1,
    }
    at.button(key="controls.pause.confirm").click().run()

    assert not at.exception
    assert any(plain(s.value) == "Paused crm.%: now paused." for s in at.success)
    (control,) = table(at, "controls")
    # 3 due crm.contact + 1 due crm.deal; the crm.deal in backoff is not due, not held
    assert (control["filter"], control["state"], control["rows_held"]) == ("crm.%", "paused", 4)
    assert control["reason"] == "CRM API down"
    types = by(table(at, "event_types"), "event_type")
    assert {t: (r["held"], r["state"]) for t, r in types.items()} == {
        "crm.contact": (3, "paused"),
        "crm.deal": (1, "paused"),
        "order.paid": (0, "running"),
    }
    assert "**4** due rows held now: crm.contact 3, crm.deal 1." in texts(at)
    assert claimed_types(conn) == ["order.paid"]  # the workers' claim hands out nothing else
    # this table lacks the flow-control index: every claim reads the held rows, said once
    assert [w for w in at.warning if "init-db --flow-control" in plain(w.value)]

    at.button(key="controls.resume.preview_button").click().run()
    at.button(key="controls.resume.confirm").click().run()

    assert any(plain(s.value).startswith("Resumed crm.%: now no control") for s in at.success)
    assert "No controls: every due row is handed out." in texts(at)
    assert "No due row is held now." in texts(at)
    assert claimed_types(conn) == ["crm.contact", "crm.contact", "crm.contact", "crm.deal"]
    trail = conn.execute(
        "SELECT actor, action FROM outbox_monitor.audit_log ORDER BY id"
    ).fetchall()
    assert [(a["actor"], a["action"]) for a in trail] == [(ACTOR, "pause"), (ACTOR, "resume")]


def test_a_pause_that_stopped_waiting_for_a_claim_in_flight_says_so(
    open_page, environment, rows, dsn
):
    environment.setenv("OUTBOX_MONITOR_CONTROL_BARRIER_TIMEOUT", "0.3s")
    seed_crm(rows)
    at = open_page(PAGE)
    at.text_input(key="controls.pause.filter").set_value("crm.%").run()
    at.button(key="controls.pause.preview_button").click().run()
    with psycopg.connect(dsn, row_factory=dict_row) as in_flight:  # a claim not committed
        assert len(outbox.claim(in_flight, "slow", limit=1)) == 1
        at.button(key="controls.pause.confirm").click().run()
        in_flight.commit()

    assert not at.exception
    assert any(plain(s.value) == "Paused crm.%: now paused." for s in at.success)
    (warning,) = [plain(w.value) for w in at.warning if "still running" in plain(w.value)]
    assert warning.startswith(
        "Claims that started before this change were still running after 0.3s"
    )


def test_a_pause_for_a_duration_ends_then(open_page, rows, conn, db, dsn):
    seed_crm(rows)
    at = open_page(PAGE)
    at.text_input(key="controls.pause.filter").set_value("crm.deal").run()
    at.text_input(key="controls.pause.for").set_value("30m").run()
    at.button(key="controls.pause.preview_button").click().run()
    at.button(key="controls.pause.confirm").click().run()

    (control,) = flow.controls(db)
    found = conn.execute(
        "SELECT paused_until, extract(epoch FROM paused_until - now()) AS s, now()"
        " FROM outbox_monitor.controls"
    ).fetchone()
    assert 29 * 60 < found["s"] <= 30 * 60
    # the end in words, never an ISO string: the clock time (the date only on another UTC
    # day) and how long is left, in the table's state and settings and the CLI's listing
    until = found["paused_until"].astimezone(UTC)
    same_day = until.date() == found["now"].astimezone(UTC).date()
    clock = until.strftime("%H:%M UTC" if same_day else "%Y-%m-%d %H:%M UTC")
    said = re.compile(rf"paused until {clock} \(in (29m \d+s|30m 0s)\)")
    (row,) = table(at, "controls")
    assert said.fullmatch(row["state"]), row["state"]
    assert said.fullmatch(row["settings"]), row["settings"]
    assert said.fullmatch(control.state), control.state
    listed = CliRunner().invoke(main, ["controls"], env={"OUTBOX_MONITOR_DSN": dsn})
    assert listed.exit_code == 0, listed.output
    state, settings = listed.output.splitlines()[:2]
    assert said.search(state) and said.fullmatch(settings.strip()), listed.output


def test_a_viewer_sees_the_forms_disabled_and_the_server_refuses(
    open_page, rows, conn, monkeypatch
):
    seed_crm(rows)
    monkeypatch.setattr(ui_access, "identity", lambda settings, paths=(): VIEWER)

    at = open_page(PAGE)
    assert not at.exception
    refusal = (
        "Viewing only: changing controls needs the operator role, and vic@example.com is a viewer."
    )
    assert refusal in texts(at)
    assert at.text_input(key="controls.pause.filter").disabled
    assert at.button(key="controls.pause.preview_button").disabled

    # A confirm forged into the session (the button is disabled) reaches the server check.
    changes = {"paused": True, "paused_until": None, "pause_reason": None}
    request = ControlRequest("crm.%", "pause", changes)
    at.session_state["controls.pause.confirmed"] = HoldPreview(request, {}, False)
    at.session_state["controls.pause.filter"] = "crm.%"
    at.run()

    assert any("Not allowed" in e.value and "needs the operator role" in e.value for e in at.error)
    assert conn.execute("SELECT count(*) AS n FROM outbox_monitor.controls").fetchone()["n"] == 0
    assert len(claimed_types(conn)) == 5  # every due row still handed out


def test_a_file_owned_control_is_read_only_and_a_change_is_an_expiring_override(
    open_page, rows, conn, db
):
    seed_crm(rows)
    apply_controls(db, {"crm.%": ControlSettings(concurrency_limit=2)}, actor=OPERATOR)

    at = open_page(PAGE)
    (control,) = table(at, "controls")
    assert control["owner"] == "owned by the controls file (read-only here)"
    assert "crm.% is owned by the controls file: read-only here" in texts(at)

    at.text_input(key="controls.pause.filter").set_value("crm.%").run()
    assert "It is owned by the controls file: a change here is an override that expires." in (
        texts(at)
    )
    at.button(key="controls.pause.preview_button").click().run()
    assert "crm.% is owned by the controls file: this change is an override that expires" in (
        texts(at)
    )
    at.button(key="controls.pause.confirm").click().run()

    expires = conn.execute(
        "SELECT expires_at FROM outbox_monitor.controls WHERE layer = 'ui'"
    ).fetchone()["expires_at"]
    (control,) = table(at, "controls")
    assert control["owner"] == "operator, overriding the controls file"
    assert control["drift"] == "the file says: at most 2 processing"
    assert control["override_expires"] == expires.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert "an override of the controls file until" in texts(at)
    assert claimed_types(conn) == ["order.paid"]


def test_the_pause_link_of_an_alert_pre_fills_the_form(open_page, rows):
    seed_crm(rows)
    url = pause_link("https://ops.example.com/outbox/", "crm.%", reason="breaker opened")
    assert url == (
        "https://ops.example.com/outbox/controls?event_type=crm.%25&action=pause"
        "&reason=breaker+opened"
    )
    parts = urlsplit(url)
    assert parts.path.rsplit("/", 1)[-1] == PAGE

    at = open_page(PAGE, **dict(parse_qsl(parts.query)))

    assert not at.exception
    assert at.text_input(key="controls.pause.filter").value == "crm.%"
    assert at.text_input(key="controls.pause.reason").value == "breaker opened"
    assert "Pre-filled from the link: pause crm.%. Preview, then confirm." in texts(at)
    at.button(key="controls.pause.preview_button").click().run()
    assert "crm.% matches **4** due rows now, of 2 event types:" in texts(at)


def preview_and_confirm(at, flow_key: str) -> None:
    at.button(key=f"{flow_key}.preview_button").click().run()
    at.button(key=f"{flow_key}.confirm").click().run()
    assert not at.exception


def test_limits_set_from_the_page_then_cleared(open_page, rows, conn):
    rows.add(event_type="crm.contact", status="processing", locked_ago=5)
    for _ in range(5):
        rows.add(event_type="crm.contact", created_ago=60)

    at = open_page(PAGE)
    at.text_input(key="controls.limit.filter").set_value("crm.contact").run()
    at.number_input(key="controls.limit.concurrency").set_value(3).run()
    at.number_input(key="controls.limit.rate").set_value(2.0).run()
    preview_and_confirm(at, "controls.limit")

    assert any(
        plain(s.value) == "Limits set on crm.contact: now at most 3 processing; 2 rows/s (burst 2)."
        for s in at.success
    )
    (control,) = table(at, "controls")
    # 3 allowed − 1 processing = 2 now (the bucket holds 2 too); 5 due − 2 = 3 throttled
    assert (control["state"], control["rows_held"], control["throttled"]) == ("limited", 0, 3)
    assert len(outbox.claim(conn, "w1")) == 2

    at.number_input(key="controls.limit.concurrency").set_value(None).run()
    at.number_input(key="controls.limit.rate").set_value(None).run()
    preview_and_confirm(at, "controls.limit")
    assert "No controls: every due row is handed out." in texts(at)


def test_a_breaker_switched_on_with_its_settings_and_a_refused_cool_down(open_page, rows):
    seed_crm(rows)
    at = open_page(PAGE)
    at.text_input(key="controls.breaker.filter").set_value("crm.%").run()
    at.text_input(key="controls.breaker.cooldown").set_value("20m").run()

    assert "breaker_cooldown_seconds" in texts(at)  # refused before any preview, field named
    assert at.button(key="controls.breaker.preview_button").disabled

    at.text_input(key="controls.breaker.cooldown").set_value("45s").run()
    preview_and_confirm(at, "controls.breaker")
    (control,) = table(at, "controls")
    assert (control["state"], control["breaker"]) == ("running", "closed")
    assert control["settings"] == "breaker at 90% of ≥ 20 outcomes in 1m 0s, cool-down 45s"


def test_a_pause_offers_to_silence_the_rules_it_trips_and_resume_ends_them(
    open_page, rows, conn, tmp_path, environment
):
    seed_crm(rows)
    path = tmp_path / "alerts.yml"
    path.write_text(
        "version: 1\n"
        "routes: {oncall: {webhook_url_env: SLACK_WEBHOOK_URL}}\n"
        "rules:\n"
        "  - {name: backlog, metric: queue_depth, op: '>', threshold: 1000, route: oncall}\n"
        "  - {name: sms-late, metric: oldest_pending_age, event_type: 'sms.%', op: '>',\n"
        "     threshold: 5m, route: oncall}\n"
    )
    environment.setenv("OUTBOX_MONITOR_RULES", str(path))
    at = open_page(PAGE)
    at.text_input(key="controls.pause.filter").set_value("crm.%").run()
    offer = at.checkbox(key="controls.pause.silence")
    assert "backlog" in offer.label and "sms-late" not in offer.label  # sms.% is not paused
    assert offer.value is False  # silencing is the operator's choice
    offer.check().run()
    at.button(key="controls.pause.preview_button").click().run()
    at.button(key="controls.pause.confirm").click().run()
    assert not at.exception
    assert "Silenced until resumed: backlog (1 silences)." in texts(at)
    (silence,) = conn.execute(
        "SELECT matchers, ends_at - starts_at AS span FROM outbox_monitor.silences"
    ).fetchall()
    assert silence["matchers"] == {"rule": "backlog"}
    assert silence["span"].total_seconds() == 24 * 3600  # no until: a day at most

    at.button(key="controls.resume.preview_button").click().run()
    at.button(key="controls.resume.confirm").click().run()
    assert "Ended the pause's 1 silences." in texts(at)
    expired = conn.execute("SELECT expired_at FROM outbox_monitor.silences").fetchone()
    assert expired["expired_at"] is not None


def test_the_overview_shows_the_rows_a_pause_holds(open_page, rows, db):
    seed_crm(rows)
    flow.pause(db, "crm.%", actor=OPERATOR, reason="CRM down")
    at = open_page("overview")
    (note,) = [plain(i.value) for i in at.info if "Flow control:" in plain(i.value)]
    assert note == (
        "Flow control: **4** due rows held (crm.contact 3, crm.deal 1). "
        "They count in queue depth and oldest age."
    )
    queue = next(m for m in at.metric if m.label == "Queue depth")
    assert queue.value == "5"  # held rows are still due (SPEC §5)


def test_an_open_breaker_shows_its_cool_down_now_and_next_probe(open_page, rows, conn, db):
    """The breaker column says the cool-down now (30 s doubled twice: 2m 0s), the setting and
    when the next probe is due — not the setting alone."""
    seed_crm(rows)
    open_breaker(db, conn, "crm.%", OPERATOR)
    at = open_page(PAGE)
    breaker = by(table(at, "controls"), "filter")["crm.%"]["breaker"]
    assert breaker.startswith("open, cool-down 2m 0s now (set: 30s; each failed probe doubles it)")
    assert "next probe at" in breaker
