"""Redaction on the pages (AppTest): the Events list, detail and timeline, the operator's
audited reveal, and the Dead letters page. Local mode: the dashboard identity is an admin
(``ui-test``); the viewer's refusal is tested on ``events.reveal_payload`` itself
(tests/integration/test_payload_privacy.py)."""

import json

from conftest import ACTOR

from outbox_monitor.figures import error_grouping
from outbox_monitor.privacy.value_detectors import REDACTED
from tests.privacy_samples import ERROR, ERROR_SHOWN, EXPECTED, PAYLOAD, RAW

R = REDACTED
TEXT_ELEMENTS = (
    "code",
    "markdown",
    "caption",
    "text",
    "error",
    "warning",
    "info",
    "success",
    "title",
    "header",
    "subheader",
)


def everything_shown(at) -> str:
    """The text of every element a person can read on the page, tables included."""
    parts = [str(e.value) for kind in TEXT_ELEMENTS for e in getattr(at, kind)]
    parts += [str(cell) for e in at.dataframe for cell in e.value.to_numpy().ravel()]
    parts += [str(option) for box in at.selectbox for option in box.options]
    parts += [str(option) for box in at.multiselect for option in box.options]
    return "\n".join(parts)


def payload_shown(at) -> object:
    [payload] = [json.loads(c.value) for c in at.code if c.language == "json"]
    return payload


def audit_rows(conn) -> list[dict]:
    return conn.execute("SELECT * FROM outbox_monitor.audit_log ORDER BY id").fetchall()


def test_events_page_shows_payload_and_errors_redacted(open_page, rows, conn):
    row_id = rows.add(
        status="failed", processed_ago=30, attempts=3, payload=PAYLOAD, last_error=ERROR
    )

    at = open_page("events", id=str(row_id))

    assert not at.exception
    assert list(at.dataframe(key="events.table").value["last_error"]) == [ERROR_SHOWN]
    assert payload_shown(at) == EXPECTED
    assert [c.value for c in at.code if c.language != "json"] == [ERROR_SHOWN]
    assert list(at.dataframe[-1].value["last_error"]) == [ERROR_SHOWN]  # the timeline
    shown = everything_shown(at)
    assert not any(raw in shown for raw in RAW)
    [csv_button] = [b for b in at.get("download_button") if b.proto.label == "Download CSV"]
    assert not csv_button.proto.disabled
    assert audit_rows(conn) == []  # looking is not revealing


def test_an_operator_reveals_the_raw_payload_once_audited(open_page, rows, conn):
    row_id = rows.add(payload=PAYLOAD, last_error=ERROR)
    other = rows.add(payload={"token": "other"})

    at = open_page("events", id=str(row_id))
    at.button(key="events.reveal").click().run()

    assert not at.exception
    assert payload_shown(at) == PAYLOAD
    assert ERROR in [c.value for c in at.code]
    assert any(ACTOR in c.value and "audit row" in c.value for c in at.caption)
    [audit] = audit_rows(conn)
    assert (audit["actor"], audit["action"], audit["affected_ids"]) == (ACTOR, "reveal", [row_id])

    at.run()  # a rerun keeps showing the reveal without auditing it again
    assert payload_shown(at) == PAYLOAD
    assert len(audit_rows(conn)) == 1

    at.button(key="events.hide").click().run()
    assert payload_shown(at) == EXPECTED
    assert not any(raw in everything_shown(at) for raw in RAW)

    at.button(key="events.reveal").click().run()
    at.text_input(key="id").set_value(str(other)).run()  # another event: redacted again
    assert payload_shown(at) == {"token": R}
    assert len(audit_rows(conn)) == 2


def test_dead_letters_page_shows_errors_redacted(open_page, rows, db):
    for ago in (30, 20):
        rows.add(
            event_type="payment.captured",
            status="failed",
            attempts=10,
            processed_ago=ago,
            last_error=ERROR,
        )
    [group] = error_grouping.error_groups(db)

    at = open_page("dead_letters", error_group=group["group_id"])

    assert not at.exception
    groups_table = at.dataframe[0].value
    assert list(groups_table["sample_error"]) == [ERROR_SHOWN]
    assert list(at.dataframe[1].value["last_error"]) == [ERROR_SHOWN] * 2
    at.button(key="dead_letters.replay.preview_button").click().run()
    shown = everything_shown(at)
    assert shown.count(ERROR_SHOWN) == 5  # group sample, 2 rows, 2 rows of the preview
    assert not any(raw in shown for raw in RAW)


def test_a_cut_payload_is_redacted_and_its_download_follows_the_reveal(open_page, rows):
    # jsonb orders keys by length: the 256 KiB head ends inside the token's value
    row_id = rows.add(payload={"blob": "z" * 262_000, "token": "t" * 1000})

    at = open_page("events", id=str(row_id))

    [head] = [c.value for c in at.code if c.language == "json"]
    assert head.endswith(f'"token": "{R}"') and "tt" not in head
    [download] = [b.proto.label for b in at.get("download_button") if "payload" in b.proto.label]
    assert download == "Download full payload (256.9 KiB, redacted)"

    at.button(key="events.reveal").click().run()

    [head] = [c.value for c in at.code if c.language == "json"]
    assert len(head) == 262_144 and head.endswith("t" * 100)
    [download] = [b.proto.label for b in at.get("download_button") if "payload" in b.proto.label]
    assert download == "Download full payload (256.9 KiB, raw)"
    assert not at.exception


# a card number and an address across the tables' 200-character cut: cut first, they would no
# longer be recognised ("4111 1111 1" is no card, "gina@exam" no address) and be shown
STRADDLING = (
    "x" * 185 + " card 4111 1111 1111 1111 declined",
    "y" * 190 + " to gina@example.com bounced",
)
STRADDLING_RAW = ("4111", "gina", "exam")


def test_a_secret_across_the_tables_cut_is_redacted_before_the_cut(open_page, rows, db):
    ids = [
        rows.add_failed(event_type="payment.captured", last_error=error, aggregate=("order", "7"))
        for error in STRADDLING
    ]
    expected = {
        str(ids[0]): ("x" * 185 + f" card {R}")[:200],
        str(ids[1]): ("y" * 190 + f" to {R}")[:200],
    }

    at = open_page("events", id=str(ids[0]))
    assert not at.exception
    listed = at.dataframe(key="events.table").value
    assert dict(zip(listed["id"], listed["last_error"], strict=True)) == expected
    timeline = at.dataframe[-1].value  # the aggregate's events
    assert sorted(timeline["last_error"]) == sorted(expected.values())
    shown = everything_shown(at)
    assert not any(raw in shown for raw in STRADDLING_RAW)

    groups = error_grouping.error_groups(db)
    for group in groups:
        at = open_page("dead_letters", error_group=group["group_id"])
        assert not at.exception
        at.button(key="dead_letters.replay.preview_button").click().run()
        shown = everything_shown(at)
        assert not any(raw in shown for raw in STRADDLING_RAW), group["group_id"]
