"""The Alerts page says when a receiver keeps failing (AppTest, real Postgres): a signed
webhook refusing a message for good (HTTP 403 from a local receiver on 127.0.0.1)."""

import uuid
from pathlib import Path

import pytest
import streamlit as st
from psycopg.types.json import Jsonb
from rendered import plain

from outbox_monitor.alerts.receivers import transports_for
from outbox_monitor.alerts.rules_file import RULES_ENV, load_rules
from outbox_monitor.alerts.sender import deliver_due
from tests.receiver_fakes import FakeWebhook

SECRET = "whsec-ui-0123456789"
RULES = """
version: 1
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL}
  hook: {type: webhook, url_env: HOOK_URL, secret_env: HOOK_SECRET}
rules:
  - {name: backlog, metric: queue_depth, op: ">", threshold: 2, route: hook}
"""


@pytest.fixture
def webhook():
    fake = FakeWebhook(SECRET)
    yield fake
    fake.close()


def test_a_receiver_refusing_for_good_shows_a_red_banner(
    open_page, environment, tmp_path: Path, db, conn, webhook
):
    path = tmp_path / "alerts.yml"
    path.write_text(RULES)
    environment.setenv(RULES_ENV, str(path))
    ruleset = load_rules(path)
    env = {"HOOK_URL": webhook.url, "HOOK_SECRET": SECRET, "SLACK_WEBHOOK_URL": webhook.url}
    conn.execute(
        "INSERT INTO outbox_monitor.notifications (dedupe_key, rule, instance, kind, route,"
        " evaluation_id, payload) VALUES ('backlog||1|firing', 'backlog', '', 'firing', 'hook',"
        " %s, %s)",
        (str(uuid.uuid4()), Jsonb({"summary": "Backlog: 3 rows due", "episode": 7})),
    )
    at = open_page("alerts")
    assert not at.exception
    assert not [e for e in at.error if "Receiver" in plain(e.value)]  # nothing failed yet

    webhook.fail_next(1, 403, '{"error": "token revoked"}')
    counts = deliver_due(db, ruleset, transports=transports_for(ruleset, env), env=env)
    assert counts["failed"] == 1

    st.cache_data.clear()  # the page's reads are cached for a few seconds
    at = open_page("alerts")
    assert not at.exception
    [banner] = [plain(e.value) for e in at.error if "Receiver" in plain(e.value)]
    assert banner == (
        "**Receiver hook (webhook) keeps failing** — its last message was refused for good (not "
        "retried). Last error: webhook route hook: the receiver refused the message (HTTP 403, "
        'never retried): {"error": "token revoked"}. The other receivers are told '
        "(receiver-failing)."
    )
