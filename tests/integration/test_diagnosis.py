"""What is wrong (issue 30 item 2): one test per likely cause, each built from rows (and a
control, a held session, a recorded claim plan) inserted into this test's database, checking
the whole sentence; the nothing-wrong line; the Slack message of an alert about one event
type opening with the same sentence; the Fleet page's row."""

from datetime import UTC, datetime, timedelta

import pytest

from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.sender import deliver_due
from outbox_monitor.config.fleet import Outbox
from outbox_monitor.figures.diagnosis import (
    DEAD_LETTERS_MIN_ROWS,
    MIN_TRAFFIC_SHARE,
    RETRYING_MIN_ROWS,
    WORKERS_DOWN_SECONDS,
    diagnose,
    line_for,
    line_in,
    read_evidence,
)
from outbox_monitor.figures.fleet_figures import measure_outbox
from tests.alerting import notifications
from tests.flow import control
from tests.health import idle_in_transaction, wait_until
from tests.sampler_rows import sampler_pass

HOURS = 7200  # rows two hours old: "2h 0m" whatever the seconds between insert and read


def when(rows, seconds_ago: float) -> str:
    """An instant ``seconds_ago`` before the rows' t0 as a line says it, with its age."""
    at = (rows.t0 - timedelta(seconds=seconds_ago)).astimezone(UTC)
    same_day = at.date() == rows.t0.astimezone(UTC).date()
    return at.strftime("%H:%M UTC" if same_day else "%Y-%m-%d %H:%M UTC")


def claims_recently(rows) -> None:
    """A row of another type acked 10 s ago: the workers are alive (no ``workers down``)."""
    rows.add(event_type="audit.ok", status="done", created_ago=20, processed_ago=10)


def add_done(conn, count: int, *, event_type: str = "order.paid") -> None:
    """``count`` rows of ``event_type`` created 60 s before now and done 50 s before, in one
    statement: traffic of the window that neither retries nor dead-letters."""
    conn.execute(
        """INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, event_key,
               payload, status, attempts, available_at, created_at, processed_at)
           SELECT %(event_type)s, 'order', '1', %(event_type)s || ':done:' || n, '{}', 'done',
                  1, now() - interval '60 s', now() - interval '60 s', now() - interval '50 s'
           FROM generate_series(1, %(count)s) AS n""",
        {"event_type": event_type, "count": count},
    )


def add_retrying(rows, *ages: float, error: str = "HTTP 503 from erp") -> None:
    """order.paid rows created ``ages`` seconds ago, failed twice with ``error`` and waiting
    in backoff for 10 more minutes (retrying, not due)."""
    for ago in ages:
        rows.add(
            event_type="order.paid",
            created_ago=ago,
            available_ago=-600,
            attempts=2,
            last_error=error,
        )


def open_breaker(conn, rows, seconds_ago: float) -> None:
    """A breaker on order.paid, open since ``seconds_ago`` before the rows' t0."""
    control(conn, "order.paid", breaker=True)
    conn.execute(
        "UPDATE outbox_monitor.control_state SET breaker_state = 'open',"
        " since = %s, cooldown_seconds = 900",
        (rows.t0 - timedelta(seconds=seconds_ago),),
    )


def only_line(db, **options):
    found = diagnose(read_evidence(db, **options))
    assert len(found.lines) == 1, [line.text for line in found.lines]
    return found.lines[0]


def test_nothing_wrong_says_so_in_one_line(db, rows):
    rows.add(event_type="order.paid", created_ago=10)  # due, 10 s old: within the SLO
    claims_recently(rows)

    found = diagnose(read_evidence(db))

    assert found.lines == ()
    assert found.summary == (
        "Nothing wrong: no event type has a firing alert, a pending row older than 5m, 10+ "
        "retrying rows or 10+ dead letters in the last 1h (each at least 5% of its rows "
        "created then), held rows, an open breaker, or due rows with no claim for 10m."
    )


def test_downstream_failing_names_the_retry_error_the_breaker_and_the_trend(db, rows, conn):
    for _ in range(3):
        rows.add(event_type="order.paid", created_ago=60)  # due, held by the open breaker
    add_retrying(rows, HOURS, 3600, 1800)
    add_retrying(rows, 900, error="read timeout")
    claims_recently(rows)
    open_breaker(conn, rows, 1800)
    # the type's queue depth sampled 0, 5 and 10 over the last ten minutes: +1 row/min (the
    # sampler's passes: the headline row and the type's at one instant)
    for ago, depth in ((600, 0), (300, 5), (0, 10)):
        sampler_pass(conn, ago, depth, types={"order.paid": (depth, 0)})

    line = only_line(db)

    assert line.cause == "downstream failing"
    assert line.text == (
        "order.paid — 3 waiting, 4 retrying with “HTTP 503 from erp” since "
        f"{when(rows, HOURS)} (2h 0m), oldest pending 2h 0m, breaker open, growing 1.00/min; "
        "likely cause: downstream failing (one error for 3 of 4 retrying rows) "
        "→ Controls · Events"
    )
    links = {part.text: part.path for part in line.parts if part.path}
    assert links["breaker open"] == "controls?event_type=order.paid"
    assert links["Controls"] == "controls?event_type=order.paid"
    assert links["4 retrying"] == "events?event_type=order.paid&status=pending"
    assert links["likely cause: downstream failing (one error for 3 of 4 retrying rows)"] == (
        "events?event_type=order.paid&status=pending"
    )


def test_poison_event_names_the_dead_letters_of_one_error_group(db, rows):
    for _ in range(
        DEAD_LETTERS_MIN_ROWS
    ):  # one group: quoted values, long digit runs are placeholders
        rows.add_failed(
            event_type="payment.captured",
            created_ago=HOURS + 60,
            processed_ago=HOURS,
            last_error='invalid amount "abc" for order 123456',
        )
    rows.add_failed(
        event_type="payment.captured",
        created_ago=400,
        processed_ago=300,
        last_error="HTTP 401 unauthorized",
    )
    claims_recently(rows)

    line = only_line(db, window=3 * 3600)

    assert line.cause == "poison event"
    assert line.text == (
        f"payment.captured — 11 dead-lettered in 3h since {when(rows, HOURS)} (2h 0m); "
        "likely cause: poison event (10 dead letters of one error group) → Controls · Events"
    )
    [group] = [p.path for p in line.parts if p.text.startswith("likely cause")]
    assert group.startswith("dead_letters?event_type=payment.captured&error_group=")
    assert [p.path for p in line.parts if p.text == "11 dead-lettered in 3h"] == [group]


def test_workers_down_when_due_rows_wait_with_no_claim(db, rows):
    rows.add(event_type="mail.sent", created_ago=HOURS)
    rows.add(event_type="mail.sent", created_ago=HOURS - 30)

    line = only_line(db)

    assert line.cause == "workers down"
    assert line.text == (
        f"mail.sent — 2 waiting, oldest pending 2h 0m since {when(rows, HOURS)} (2h 0m); "
        "likely cause: workers down (2 due rows, no claim for 2h 0m) → Controls · Events"
    )
    [workers] = [p.path for p in line.parts if p.text.startswith("likely cause")]
    assert workers == "workers"


def test_held_by_a_pause(db, rows, conn):
    rows.add(event_type="crm.contact", created_ago=30)
    rows.add(event_type="crm.contact", created_ago=20)
    claims_recently(rows)
    control(conn, "crm.contact", paused=True, pause_reason="CRM migration")

    line = only_line(db)

    assert line.cause == "held by flow control"
    assert line.text == (
        "crm.contact — 2 waiting, paused; likely cause: held by flow control (paused: 2 due "
        "rows held) → Controls · Events"
    )


def test_claim_degraded_from_the_newest_recorded_plan(db, rows, conn):
    rows.add(event_type="ledger.post", created_ago=HOURS)
    claims_recently(rows)
    recorded = rows.t0 - timedelta(seconds=60)
    conn.execute(
        "INSERT INTO outbox_monitor.claim_plans (table_name, statement, sampled_at, shape,"
        " total_cost, plan_rows, walks_non_pending, reasons) VALUES"
        " ('public.integration_outbox', 'shared_claim', %s, 'Limit > Seq Scan', 5000, 50, true,"
        " ARRAY['Seq Scan reads every row of integration_outbox'])",
        (recorded,),
    )

    line = only_line(db)

    assert line.cause == "claim degraded"
    assert line.text == (
        f"ledger.post — 1 waiting, oldest pending 2h 0m since {when(rows, HOURS)} (2h 0m); "
        "likely cause: claim degraded (outbox_monitor.claim() walks non-pending rows, "
        f"recorded {recorded.astimezone(UTC):%H:%M} UTC) → Controls · Events"
    )


def test_vacuum_blocked_while_a_session_holds_the_xmin_horizon(db, rows, dsn, conn):
    rows.add(event_type="report.build", created_ago=HOURS)
    claims_recently(rows)
    role = conn.execute("SELECT current_user AS role").fetchone()["role"]

    with idle_in_transaction(dsn, "diagnosis-test") as pid:
        wait_until(
            lambda: conn.execute(
                "SELECT now() - xact_start > interval '0.5 s' AS held FROM pg_stat_activity"
                " WHERE pid = %s",
                (pid,),
            ).fetchone()["held"],
            timeout=10,
            what="the session to hold the horizon 0.5 s",
        )
        line = only_line(db, horizon_held=0.5)

    assert line.cause == "vacuum blocked"
    assert line.text == (
        f"report.build — 1 waiting, oldest pending 2h 0m since {when(rows, HOURS)} (2h 0m); "
        f"likely cause: vacuum blocked (xmin horizon held past 0.5s by session pid {pid} "
        f"(diagnosis-test, idle in transaction, role {role})) → Controls · Events"
    )
    assert [p.path for p in line.parts if p.text.startswith("likely cause")] == ["health"]


def test_cause_unknown_when_no_evidence_fits(db, rows):
    rows.add(event_type="report.build", created_ago=HOURS)  # past the SLO, workers alive
    rows.add(event_type="report.build", status="processing", created_ago=3700, locked_ago=3600)
    claims_recently(rows)

    line = only_line(db)

    assert line.cause == "cause unknown"
    assert line.text == (
        f"report.build — 1 waiting, 1 stuck, oldest pending 2h 0m since {when(rows, HOURS)} "
        "(2h 0m); cause unknown → Controls · Events"
    )


def test_stuck_locks_alone_list_no_type(db, rows):
    # a crashed worker's batch: the stuck-lock alert and the Workers page say it
    for _ in range(3):
        rows.add(event_type="report.build", status="processing", created_ago=3700, locked_ago=3600)
    claims_recently(rows)

    assert diagnose(read_evidence(db)).lines == ()


def test_a_firing_alert_makes_its_type_troubled_since_it_fired(db, rows):
    rows.add(event_type="order.paid", created_ago=30)
    claims_recently(rows)
    fired = rows.t0 - timedelta(seconds=HOURS)

    line = only_line(db, firing={"order.paid": fired})

    assert line.text == (
        f"order.paid — 1 waiting since {when(rows, HOURS)} (2h 0m); cause unknown "
        "→ Controls · Events"
    )
    # an alert's message: from the evidence of every type read once per evaluation pass
    # (the type is not troubled there until the alert counts), or of that type alone
    read_once = line_in(read_evidence(db), "order.paid", firing_since=fired)
    alone = line_for(db, "order.paid", firing_since=fired)
    assert read_once is not None and alone is not None
    assert read_once.text == alone.text == line.text


RETRYING_RULES = {
    "version": 1,
    "defaults": {"interval": "30s", "for": "0s", "keep_firing_for": "0s"},
    "routes": {"oncall": {"webhook_url_env": "TEST_HOOK_URL"}},
    "rules": [
        {
            "name": "retrying",
            "metric": "retrying",
            "by": ["event_type"],
            "op": ">",
            "threshold": 0,
            "route": "oncall",
        }
    ],
}


def test_the_slack_message_of_a_per_type_alert_opens_with_the_line(
    db, rows, conn, write_rules, slack_sink
):
    add_retrying(
        rows, HOURS, *[1800] * (RETRYING_MIN_ROWS - 1), error="HTTP 503 from erp <!channel>"
    )
    claims_recently(rows)
    base = "http://dash.example:8611"
    env = {"TEST_HOOK_URL": slack_sink.webhook_url, "OUTBOX_MONITOR_DASHBOARD_URL": base}
    ruleset = write_rules(RETRYING_RULES)
    Evaluator(db, ruleset).run_once()

    [row] = notifications(conn, "retrying")
    assert deliver_due(db, ruleset, env=env)["sent"] == 1

    [message] = slack_sink.messages()
    expected = (
        "order.paid — 10 retrying with “HTTP 503 from erp &lt;!channel&gt;” since "
        f"{when(rows, HOURS)} (2h 0m), oldest pending 2h 0m; likely cause: downstream "
        "failing (one error for 10 of 10 retrying rows) → Controls · Events"
    )
    assert message["text"].splitlines()[1] == expected
    section = message["blocks"][1]["text"]["text"]
    assert section.startswith(
        f"<{base}/events?event_type=order.paid|order.paid> — "
        f"<{base}/events?event_type=order.paid&amp;status=pending|10 retrying> with "
        "“_HTTP 503 from erp &lt;!channel&gt;_” since "
    )
    assert f"<{base}/controls?event_type=order.paid|Controls>" in section
    # what the message said before follows the line
    assert section.splitlines()[1].startswith("🔥 *retrying* · `event_type=order.paid`")
    assert row["payload"]["diagnosis"][0] == {
        "text": "order.paid",
        "path": "events?event_type=order.paid",
        "kind": "event_type",
    }


def test_the_fleet_row_says_what_is_wrong(db, rows, settings):
    rows.add(event_type="mail.sent", created_ago=HOURS)
    outbox = Outbox(name="orders", labels={}, settings=settings)

    row = measure_outbox(db, outbox, window=3600)

    assert row.diagnosis is not None and row.diagnosis_problem is None
    assert row.diagnosis.summary == (
        f"mail.sent — 1 waiting, oldest pending 2h 0m since {when(rows, HOURS)} (2h 0m); "
        "likely cause: workers down (1 due row, no claim for 2h 0m) → Controls · Events"
    )


def test_line_for_one_type_reads_that_type_alone(db, rows):
    rows.add(event_type="mail.sent", created_ago=HOURS)
    rows.add(event_type="crm.contact", created_ago=HOURS)

    line = line_for(db, "crm.contact", firing_since=datetime.now(UTC))

    assert line is not None and line.event_type == "crm.contact"
    assert line.text.startswith("crm.contact — 1 waiting, oldest pending 2h 0m since ")
    # an alert about a type with no rows: the alert alone makes it troubled
    quiet = line_for(db, "nothing.here")
    assert quiet is not None
    assert quiet.text == "nothing.here — cause unknown → Controls · Events"


def test_lines_named_by_a_firing_alert_first_those_of_unknown_cause_last(db, rows):
    rows.add(event_type="report.build", status="processing", created_ago=3700, locked_ago=3600)
    rows.add(event_type="report.build", status="processing", created_ago=3700, locked_ago=3600)
    rows.add(event_type="report.build", created_ago=600)  # past the 5 min SLO
    add_retrying(rows, *[1800] * RETRYING_MIN_ROWS)  # order.paid: downstream failing
    rows.add(event_type="mail.sent", created_ago=30)
    claims_recently(rows)

    found = diagnose(read_evidence(db, firing={"mail.sent": None}))

    # the table ranks report.build first (stuck locks), the rest by queue depth and age
    assert [(line.event_type, line.cause) for line in found.lines] == [
        ("mail.sent", "cause unknown"),
        ("order.paid", "downstream failing"),
        ("report.build", "cause unknown"),
    ]


# Each threshold of "troubled" (figures/diagnosis.py), both sides, from inserted rows. The
# window's traffic is the retrying (or dead-lettered) rows plus ``done`` rows created in it.
SIGNS = {  # the rows, the cause they read and the line's clause
    "retrying": ("downstream failing", "retrying with “HTTP 503 from erp”"),
    "dead letters": ("poison event", "dead-lettered in 1h since "),
}


@pytest.mark.parametrize("sign", sorted(SIGNS))
@pytest.mark.parametrize(
    ("count", "done", "listed"),
    [
        (10, 190, True),  # 10 rows, 5 % of the 200 rows created in the window: listed
        (10, 191, False),  # 10 of 201 rows: under 5 % (a transient retry in busy traffic)
        (9, 0, False),  # 9 rows of 9 created: under the 10 rows
    ],
)
def test_retrying_rows_or_dead_letters_trouble_a_type_over_a_count_and_a_share(
    db, rows, conn, sign, count, done, listed
):
    assert RETRYING_MIN_ROWS == DEAD_LETTERS_MIN_ROWS == 10 and MIN_TRAFFIC_SHARE == 0.05
    if sign == "retrying":
        add_retrying(rows, *[240] * count)  # within the 5 min SLO
    else:
        for _ in range(count):
            rows.add_failed(event_type="order.paid", created_ago=240, processed_ago=200)
    add_done(conn, done)
    claims_recently(rows)

    found = diagnose(read_evidence(db))

    if listed:
        [line] = found.lines
        cause, clause = SIGNS[sign]
        assert line.cause == cause
        assert f"order.paid — {count} {clause}" in line.text
    else:
        assert found.lines == ()


def test_a_single_retry_error_is_not_a_failing_downstream(db, rows):
    # troubled by its age (past the SLO), one retrying row: the cause is not "downstream"
    add_retrying(rows, 600)
    claims_recently(rows)

    line = only_line(db)

    assert line.cause == "cause unknown"
    assert line.text.startswith("order.paid — 1 retrying with “HTTP 503 from erp” since ")


@pytest.mark.parametrize(("created_ago", "listed"), [(330, True), (270, False)])
def test_oldest_pending_age_troubles_a_type_past_the_slo(db, rows, created_ago, listed):
    rows.add(event_type="mail.sent", created_ago=created_ago)  # 5 min SLO: 5m 30s, 4m 30s
    claims_recently(rows)

    found = diagnose(read_evidence(db))

    assert [line.event_type for line in found.lines] == (["mail.sent"] if listed else [])


@pytest.mark.parametrize(("breaker_state", "listed"), [("open", True), ("closed", False)])
def test_a_breaker_troubles_a_type_while_open(db, rows, conn, breaker_state, listed):
    rows.add(event_type="order.paid", created_ago=30)
    claims_recently(rows)
    control(conn, "order.paid", breaker=True)
    conn.execute(
        "UPDATE outbox_monitor.control_state SET breaker_state = %s, since = now(),"
        " cooldown_seconds = 900",
        (breaker_state,),
    )

    found = diagnose(read_evidence(db))

    assert [(line.event_type, line.cause) for line in found.lines] == (
        [("order.paid", "held by flow control")] if listed else []
    )


@pytest.mark.parametrize(
    ("silent", "listed"), [(WORKERS_DOWN_SECONDS + 60, True), (WORKERS_DOWN_SECONDS - 60, False)]
)
def test_workers_down_troubles_a_type_with_due_rows_after_10_minutes(db, rows, silent, listed):
    # due since ``silent`` seconds, created 2 min ago (within the SLO); the last outcome
    # (another type's row) as long ago: no claim for ``silent`` seconds
    rows.add(event_type="mail.sent", created_ago=120, available_ago=silent)
    rows.add(event_type="audit.ok", status="done", created_ago=silent + 10, processed_ago=silent)

    found = diagnose(read_evidence(db))

    assert [(line.event_type, line.cause) for line in found.lines] == (
        [("mail.sent", "workers down")] if listed else []
    )
