"""The Workers page (issue 15 item 7) in AppTest: each locked_by with its rows in hand, stuck
rows, last claim and the ack the sampler inferred; orphans named; the fleet's liveness says
how long due rows have waited with no claim, and that nothing is due once they are claimed."""

import re

import streamlit as st
from rendered import plain

from outbox_monitor.figures.worker_sightings import record_workers

PAGE = "workers"
SLACK_SECONDS = 15
"""Seconds between inserting rows and the page's reading of the database's now."""


def texts(at) -> str:
    kinds = ("markdown", "caption", "success", "info", "warning", "error")
    return "\n".join(plain(e.value) for kind in kinds for e in getattr(at, kind))


def workers_table(at) -> list[dict]:
    (frame,) = [d.value for d in at.dataframe if "rows in hand" in d.value.columns]
    return frame.to_dict("records")


def test_the_page_lists_each_worker_and_the_fleets_liveness(open_page, db, rows, conn):
    acked = rows.add(status="processing", locked_by="n8n-1:wf-poller", locked_ago=40)
    rows.add(status="processing", locked_by="n8n-1:wf-poller", locked_ago=1200)  # stuck
    rows.add(status="processing", locked_by="n8n-2:wf-poller", locked_ago=30)
    rows.add(status="processing")  # an orphan
    record_workers(db)
    conn.execute(
        "UPDATE integration_outbox SET status = 'done', processed_at = %s, "
        "locked_at = NULL, locked_by = NULL WHERE id = %s",
        (rows.at(20), acked),
    )
    record_workers(db)
    due = rows.add(status="pending", created_ago=1800)

    at = open_page(PAGE)
    assert not at.exception
    assert [s.value for s in at.subheader] == ["Liveness", "Workers"]
    table = workers_table(at)
    assert [(r["worker"], r["rows in hand"], r["stuck"], r["acks seen"]) for r in table] == [
        ("n8n-1:wf-poller", 1, 1, 1),  # stuck rows first
        ("(no locked_by: orphans)", 1, 1, 0),
        ("n8n-2:wf-poller", 1, 0, 0),
    ]
    first, orphans, second = table
    assert first["oldest lock"].startswith("20m") and first["oldest lock"].endswith(" ago")
    assert re.fullmatch(r"\d+s ago", first["last claim"])  # 40 s before t0, seen by a pass
    assert re.fullmatch(r"\d+s ago", first["last ack (seen)"])  # 20 s before t0
    assert second["last ack (seen)"] == "–"  # nothing it held was seen done
    assert orphans["last seen holding"] == "–"  # no worker's: never sampled
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Due rows (not held)"] == "1"
    # the ack 20 s before t0 is the latest sign of life (claims 30 s, the due row 30 min)
    waited = re.fullmatch(r"(\d+)s", metrics["No claim while due"])
    assert waited and 20 <= int(waited.group(1)) < 20 + SLACK_SECONDS
    assert metrics["Newest claim"].endswith(" ago")
    shown = texts(at)
    assert "1 row due" in shown
    assert "Alerted by rule no-claim-while-due (> 10m 0s)" in shown
    assert "A row loses locked_by at its ack" in shown
    assert "No worker holds a row" not in shown  # the workers are listed above

    conn.execute(
        "UPDATE integration_outbox SET status = 'processing', locked_at = now(), "
        "locked_by = 'n8n-2:wf-poller' WHERE id = %s",
        (due,),
    )
    st.cache_data.clear()  # the page's read is cached for a refresh
    at = open_page(PAGE)
    assert "No row is due: the workers have nothing to claim." in texts(at)
    assert {m.label: m.value for m in at.metric}["No claim while due"] == "0.0s"


def test_an_empty_outbox_says_no_worker_is_seen(open_page):
    at = open_page(PAGE)
    assert not at.exception
    shown = texts(at)
    assert "No worker holds a row and the sampler has seen none" in shown
    assert "No row is due" in shown


def test_thousands_of_locked_by_values_list_a_hundred_those_in_hand_first(open_page, rows, conn):
    # a locked_by per execution: 3,000 workers remembered, one of them holding a row now
    # though last seen holding a day ago; hostile text in a name is a cell, never markdown
    conn.execute(
        """INSERT INTO outbox_monitor.workers_seen (table_name, locked_by, rows_in_hand, stuck,
               first_seen, last_seen, acks_seen, updated_at)
           SELECT 'public.integration_outbox', 'exec-' || lpad(g::text, 4, '0'), 0, 0,
                  now() - interval '2 days', now() - g * interval '1 second', g, now()
           FROM generate_series(1, 3000) AS g"""
    )
    busy = "**busy** <b>x</b> [a](javascript:alert(1))"
    conn.execute(
        """INSERT INTO outbox_monitor.workers_seen (table_name, locked_by, rows_in_hand, stuck,
               first_seen, last_seen, acks_seen, updated_at)
           VALUES ('public.integration_outbox', %s, 0, 0, now() - interval '3 days',
                   now() - interval '1 day', 7, now() - interval '1 day')""",
        (busy,),
    )
    rows.add(status="processing", locked_by=busy, locked_ago=10)
    at = open_page(PAGE)
    assert not at.exception
    table = workers_table(at)
    assert len(table) == 100
    assert (table[0]["worker"], table[0]["rows in hand"], table[0]["acks seen"]) == (busy, 1, 7)
    # then those seen holding rows last: exec-0001 (1 s ago) … exec-0099
    assert [r["worker"] for r in table[1:]] == [f"exec-{g:04d}" for g in range(1, 100)]
    assert "2,901 more worker(s) not listed" in texts(at)
