"""The Health page (issue 14 item 1) in AppTest: a session left idle in a transaction is named
with its application, its age and the command that ends it; dead tuples and sizes are shown;
a login without pg_monitor is told what is hidden; the Overview's health tiles link here."""

import time

import streamlit as st
from rendered import plain

from outbox_monitor.service.sampler import record_sample
from tests.health import ack_all, autovacuum_off, flush_statistics, idle_in_transaction, plain_login

PAGE = "health"
WAIT_SECONDS = 1.2


def texts(at) -> str:
    kinds = ("markdown", "caption", "success", "info", "warning", "error", "code")
    return "\n".join(plain(e.value) for kind in kinds for e in getattr(at, kind))


def holders_table(at) -> list[dict]:
    (frame,) = [d.value for d in at.dataframe if "command" in d.value.columns]
    return frame.to_dict("records")


def test_the_page_names_the_session_holding_the_horizon_and_how_to_end_it(
    open_page, dsn, db, conn, rows
):
    autovacuum_off(conn)
    ids = [rows.add(status="processing", locked_ago=5) for _ in range(8)]
    ack_all(conn, ids[:6])
    flush_statistics(conn)
    record_sample(db)
    with idle_in_transaction(dsn, "forgotten-report") as pid:
        time.sleep(WAIT_SECONDS)
        at = open_page(PAGE)
        assert not at.exception
        shown = texts(at)
        assert "The xmin horizon has been held for" in shown
        assert f"session pid {pid} (forgotten-report, idle in transaction, role postgres)" in shown
        assert f"SELECT pg_terminate_backend({pid});" in shown
        assert "outbox-monitor shows commands, it never runs them" in shown
        [holder] = [r for r in holders_table(at) if r["application"] == "forgotten-report"]
        assert holder["kind"] == "session" and holder["state"] == "idle in transaction"
        assert (
            holder["held_seconds"] != "–"
            and holder["command"] == f"SELECT pg_terminate_backend({pid});"
        )
        metrics = {m.label: m.value for m in at.metric}
        assert metrics["Dead tuples"] == "6"
        assert metrics["Dead / all tuples"] == "42.9 %"  # 6 of 14
        assert metrics["Last autovacuum"] == "never"
        assert "Autovacuum is off for this table" in shown
        assert at.get("vega_lite_chart")  # tuples over time, from the sample
    st.cache_data.clear()  # the page's reads are cached for a few seconds
    at = open_page(PAGE)
    assert "Nothing holds the xmin horizon now" in texts(at)


def test_a_login_without_pg_monitor_is_told_what_is_hidden(open_page, environment, dsn, pg_cluster):
    environment.setenv("OUTBOX_MONITOR_DSN", plain_login(pg_cluster, dsn))
    with idle_in_transaction(dsn, "superuser-report"):
        at = open_page(PAGE)
        assert not at.exception
        shown = texts(at)
        assert "session(s) of other roles are hidden" in shown and "grant pg_monitor to" in shown
        [holder] = [r for r in holders_table(at) if r["application"] == "superuser-report"]
        assert holder["state"] == "hidden" and holder["query"] == "hidden: grant pg_monitor"
        assert holder["held_seconds"] == "–"


def test_the_overview_shows_the_health_tiles_and_links_to_the_page(open_page, dsn):
    with idle_in_transaction(dsn, "forgotten-report"):
        at = open_page("overview")
        assert not at.exception
        metrics = {m.label: m for m in at.metric}
        assert metrics["Dead tuples"].value == "0"
        # its badge is the xmin-horizon-held rule's state: no scheduler has evaluated it here
        assert metrics["xmin horizon held"].delta == "state unknown"
        assert metrics["Last autovacuum"].value == "never"
        links = {link.proto.label: link.proto.page for link in at.get("page_link")}
        assert "health" in links["Open health"], links


def test_a_small_never_analyzed_table_is_said_so_with_its_live_rows(open_page, conn, rows):
    autovacuum_off(conn)  # no autoanalyze meanwhile
    for ago in range(20):
        rows.add(status="done", created_ago=1000 + ago, processed_ago=900)
    conn.execute("DROP INDEX integration_outbox_claim_idx")  # the claim scans: a small table
    flush_statistics(conn)
    at = open_page(PAGE)
    assert not at.exception
    assert (
        "The claim reads pending rows only and its cost is steady (the table holds 20 live "
        "rows by the statistics, not analyzed yet: too few for the scan to matter)."
    ) in [plain(s.value) for s in at.success]
