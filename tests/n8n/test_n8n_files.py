"""The shipped n8n files and the demo's n8n modules without running n8n (fast; always run).

The workflows' own SQL is run here as a database role holding exactly the grants
n8n/README.md prints, so a README that forgets a grant, or a query that drifts from the
shared SQL functions, fails without n8n installed.
"""

import itertools
import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pytest

from outbox_monitor import outbox
from outbox_monitor.demo.downstream import IDEMPOTENT_PATH, LEDGER_PATH, Downstream
from outbox_monitor.demo.n8n import NUDGE_ID, POLLER_ID
from outbox_monitor.demo.n8n_credentials import (
    DOWNSTREAM_CREDENTIAL,
    POSTGRES_CREDENTIAL,
    pg_environment,
    postgres_credential,
)
from outbox_monitor.demo.n8n_install import N8N_HOME_ENV, SHIPPED_FOLDER, N8nNotFound, find_n8n
from tests.alerting import subprocess_env

README = (SHIPPED_FOLDER / "README.md").read_text()
WORKFLOWS = {
    path.stem: json.loads(path.read_text())
    for path in sorted((SHIPPED_FOLDER / "workflows").glob("*.json"))
}
CREDENTIALS = [
    json.loads(path.read_text()) for path in sorted((SHIPPED_FOLDER / "credentials").glob("*.json"))
]
_roles = itertools.count()


def nodes(workflow: str) -> dict[str, dict[str, Any]]:
    return {node["name"]: node for node in WORKFLOWS[workflow]["nodes"]}


def test_the_two_workflows_keep_their_ids_and_the_nudge_calls_the_poller():
    assert set(WORKFLOWS) == {"outbox-poller", "outbox-nudge"}
    assert WORKFLOWS["outbox-poller"]["id"] == POLLER_ID
    assert WORKFLOWS["outbox-nudge"]["id"] == NUDGE_ID
    call = nodes("outbox-nudge")["Run outbox-poller now"]["parameters"]
    assert call["workflowId"]["value"] == POLLER_ID
    assert call["options"]["waitForSubWorkflow"] is False
    webhook = nodes("outbox-nudge")["Nudge webhook"]["parameters"]
    assert (webhook["httpMethod"], webhook["path"], webhook["responseMode"]) == (
        "POST",
        "outbox-nudge",
        "onReceived",
    )


def test_credentials_are_referenced_by_name_only():
    used = {
        (kind, ref["name"], ref["id"])
        for workflow in WORKFLOWS.values()
        for node in workflow["nodes"]
        for kind, ref in node.get("credentials", {}).items()
    }
    assert used == {
        ("postgres", POSTGRES_CREDENTIAL, None),
        ("httpHeaderAuth", DOWNSTREAM_CREDENTIAL, None),
    }
    assert {(c["type"], c["name"]) for c in CREDENTIALS} == {
        ("postgres", POSTGRES_CREDENTIAL),
        ("httpHeaderAuth", DOWNSTREAM_CREDENTIAL),
    }
    assert all(
        "={{ $env." in value
        for c in CREDENTIALS
        for value in c["data"].values()
        if isinstance(value, str) and c["type"] == "httpHeaderAuth"
    )


def test_every_setting_the_files_read_is_documented_in_the_readme():
    text = json.dumps([WORKFLOWS, CREDENTIALS])
    read = set(re.findall(r"\$env\.([A-Z_0-9]+)", text)) - {"HOSTNAME"}
    settings_table = README.split("## Settings", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"`([A-Z][A-Z_0-9]+)`", settings_table))
    assert read <= documented, read - documented
    assert {"OUTBOX_POLL_SECONDS", "OUTBOX_TABLE", "OUTBOX_IDEMPOTENT_URL"} <= read


def test_the_poller_calls_the_shared_transitions_and_no_backoff_of_its_own():
    text = json.dumps([node["parameters"] for node in WORKFLOWS["outbox-poller"]["nodes"]])
    for function in ("outbox_monitor.claim(", "outbox_monitor.ack(", "outbox_monitor.fail("):
        assert function in text
    # retry timing lives in outbox_monitor.fail(): no query or expression touches it
    assert "available_at" not in text and "backoff" not in text and "random" not in text
    assert "Code" not in {
        node["type"].rsplit(".", 1)[1] for node in WORKFLOWS["outbox-poller"]["nodes"]
    }


def test_every_per_row_node_has_an_error_path():
    for name, node in nodes("outbox-poller").items():
        if node["type"] in ("n8n-nodes-base.httpRequest", "n8n-nodes-base.postgres"):
            expected = "stopWorkflow" if name == "Claim batch" else "continue"
            assert node["onError"].startswith(expected), name


def _query(workflow_node: dict[str, Any], ledger: str) -> str:
    """The node's SQL as psycopg runs it: ``$n`` → ``%(pn)s``, the ledger expression
    replaced by the table name as the Settings node computes it."""
    text = re.sub(r"\{\{[^}]*ledger_table[^}]*\}\}", ledger, workflow_node["parameters"]["query"])
    return re.sub(r"\$(\d+)", r"%(p\1)s", text)


def _readme_grants(role: str) -> str:
    block = README.split("```sql\n", 1)[1].split("```", 1)[0]
    return block.replace("n8n_worker", role)


def test_the_workflow_sql_runs_with_the_readme_grants(dsn: str):
    role = f"n8n_worker_{next(_roles)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(_readme_grants(role))
        for key in ("k1", "k2", "k3"):
            outbox.publish(
                conn,
                event_type="notification.email",
                aggregate_type="user",
                aggregate_id="7",
                event_key=key,
                payload={"to": "a@example.com"},
            )
    poller = nodes("outbox-poller")
    table, ledger = "public.integration_outbox", "public.integration_idempotency"
    worker = f"n8n-test:wf-{POLLER_ID}:exec-1"
    with psycopg.connect(dsn.replace("postgres@", f"{role}@"), autocommit=True) as w:
        claimed = w.execute(
            _query(poller["Claim batch"], ledger), {"p1": table, "p2": worker, "p3": 50}
        ).fetchall()
        assert [(row[0], row[4], row[-1]) for row in claimed] == [
            ("1", "k1", worker),
            ("2", "k2", worker),
            ("3", "k3", worker),
        ]  # ids as text
        slot = _query(poller["Take ledger slot"], ledger)
        assert w.execute(slot, {"p1": "k1", "p2": "webhook"}).fetchone() == (True,)
        assert w.execute(slot, {"p1": "k1", "p2": "webhook"}).fetchone() == (False,)
        ack = _query(poller["Ack"], ledger)
        assert w.execute(ack, {"p1": table, "p2": "1", "p3": worker}).fetchone() == (True, "1")
        assert w.execute(ack, {"p1": table, "p2": "1", "p3": worker}).fetchone() == (False, "1")
        ack_batch = _query(poller["Ack batch"], ledger)
        batch = {"p1": table, "p2": '["2", "3"]', "p3": worker}
        assert w.execute(ack_batch, batch).fetchone() == (["2", "3"],)  # ids as text
        assert w.execute(ack_batch, batch).fetchone() == ([],)  # acked: no longer held
        w.execute(  # claimed again, for the failures below
            "UPDATE integration_outbox SET status = 'processing', locked_by = %s,"
            " processed_at = NULL WHERE id IN (2, 3)",
            (worker,),
        )
        fail = _query(poller["Record failure"], ledger)
        w.execute(slot, {"p1": "k3", "p2": "webhook"})
        params = {"p1": table, "p3": worker, "p4": "HTTP 500", "p5": False, "p6": 10}
        assert w.execute(fail, {**params, "p2": "2", "p7": None, "p8": None}).fetchone() == (
            "pending",
            "2",
        )
        assert w.execute(
            fail, {**params, "p2": "3", "p4": "HTTP 401", "p5": True, "p7": ledger, "p8": "webhook"}
        ).fetchone() == ("failed", "3")
        # the dead-letter deleted its ledger slot (a definite "no"); k1's stays
        assert w.execute(f"SELECT event_key FROM {ledger}").fetchall() == [("k1",)]


def test_credentials_from_a_dsn():
    credential = postgres_credential(
        "postgresql://app:s3cret@db.internal:6543/shop?sslmode=require"
    )
    assert credential["type"] == "postgres" and credential["name"] == POSTGRES_CREDENTIAL
    assert {
        k: credential["data"][k] for k in ("host", "port", "database", "user", "password", "ssl")
    } == {
        "host": "db.internal",
        "port": 6543,
        "database": "shop",
        "user": "app",
        "password": "s3cret",
        "ssl": "require",
    }
    assert postgres_credential("host=127.0.0.1 dbname=x user=u")["data"]["ssl"] == "disable"
    assert pg_environment("postgresql://u@h:5/d") | {"PGPASSWORD": ""} == {
        "PGHOST": "h",
        "PGPORT": "5",
        "PGDATABASE": "d",
        "PGUSER": "u",
        "PGPASSWORD": "",
        "PGSSLMODE": "prefer",
    }
    with pytest.raises(Exception, match="Unix socket"):
        postgres_credential("host=/var/run/postgresql dbname=x")


def test_a_missing_n8n_says_how_to_install_it(monkeypatch, tmp_path: Path):
    monkeypatch.setenv(N8N_HOME_ENV, str(tmp_path))
    with pytest.raises(N8nNotFound) as raised:
        find_n8n()
    assert "n8n/install.sh" in raised.value.hint


def test_demo_with_n8n_missing_stops_before_starting_anything(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-m", "outbox_monitor", "demo", "--worker", "n8n"],
        env=subprocess_env("postgresql://unused@127.0.0.1:1/x", **{N8N_HOME_ENV: str(tmp_path)}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "n8n is not installed" in done.stderr and "n8n/install.sh" in done.stderr


def _post(url: str, body: dict[str, Any], **headers: str) -> int:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **headers},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_the_downstream_dedupes_by_idempotency_key_and_fails_on_cue():
    with Downstream(authorization="Bearer t") as down:
        auth = {"Authorization": "Bearer t"}
        down.script("a", "500", then="ok")
        down.script("b", then="401")
        api, hook = down.url(IDEMPOTENT_PATH), down.url(LEDGER_PATH)
        assert _post(api, {"event_key": "a"}, **auth, **{"Idempotency-Key": "a"}) == 500
        assert _post(api, {"event_key": "a"}, **auth, **{"Idempotency-Key": "a"}) == 200
        assert _post(api, {"event_key": "a"}, **auth, **{"Idempotency-Key": "a"}) == 200
        assert _post(hook, {"event_key": "b"}, **auth) == 401
        assert _post(hook, {"event_key": "b"}, **auth) == 401
        assert _post(hook, {"event_key": "c"}, **auth) == 200
        assert _post(hook, {"event_key": "c"}, **auth) == 200  # no idempotency here
        assert _post(hook, {"event_key": "d"}) == 401  # no Authorization
        down.fix()
        assert _post(hook, {"event_key": "b"}, **auth) == 200
        assert down.applied() == {
            (IDEMPOTENT_PATH, "a"): 1,
            (LEDGER_PATH, "c"): 2,
            (LEDGER_PATH, "b"): 1,
        }
        assert [r.status for r in down.requests] == [500, 200, 200, 401, 401, 200, 200, 401, 200]
