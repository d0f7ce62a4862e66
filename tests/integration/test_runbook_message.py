"""A rule's runbook and its instants in Slack, end to end (issue 30 items 7 and 10): the
scheduler evaluates a rule with ``runbook:`` steps on real rows, and the message the local
Slack sink receives carries the steps after the instance, escaped for mrkdwn, and its since
and sent instants in Slack's date formatting (each reader's own time zone, UTC as the
fallback)."""

import re
from datetime import UTC, datetime

from outbox_monitor.alerts.rules_file import load_rules
from tests.alerting import (
    LOADED_DEADLINE,
    messages_after,
    notifications,
    rules_file,
    running_scheduler,
)

RULES = """
version: 1
defaults: {interval: 1s, for: 0s, keep_firing_for: 0s}
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL, repeat_interval: 1h}
rules:
  - name: stuck-lock
    metric: stuck_locks
    op: ">"
    threshold: 0
    route: oncall
    runbook: |
      1. Open Actions → Reap stuck locks <!channel> & <https://evil.example|here>.
      2. Reap: `outbox-monitor reap --dry-run`,
         then `--yes`.
      3. Over when no stuck row is left.
"""
DATE = re.compile(r"<!date\^(\d+)\^\{date_short_pretty\} \{time\}\|([^>]+)>")


def test_the_slack_message_carries_the_runbook_steps_escaped_and_slack_dates(
    db, rows, conn, slack_sink, tmp_path
):
    ruleset = load_rules(rules_file(tmp_path, RULES))
    rows.add(status="processing", created_ago=3600, locked_ago=3600)  # stuck: 1 h > 15 min

    with running_scheduler(db, ruleset=ruleset, sink=slack_sink):
        [message] = messages_after(slack_sink, 1, timeout=LOADED_DEADLINE)

    sections = [b["text"]["text"] for b in message["blocks"] if b["type"] == "section"]
    assert len(sections) == 2  # the instance, then its rule's runbook
    assert sections[1] == (
        "📋 *Runbook · stuck-lock*\n"
        "1. Open Actions → Reap stuck locks &lt;!channel&gt; &amp; "
        "&lt;https://evil.example|here&gt;.\n"
        "2. Reap: `outbox-monitor reap --dry-run`, then `--yes`.\n"
        "3. Over when no stuck row is left."
    )
    # the instance's since: the notification's own instant, as a Slack date token
    [firing] = notifications(conn, "stuck-lock")
    since = datetime.fromisoformat(firing["payload"]["since"]).astimezone(UTC)
    found = DATE.search(sections[0].split(" · since ", 1)[1])
    assert found and int(found.group(1)) == int(since.timestamp())
    assert found.group(2) == since.strftime("%Y-%m-%d %H:%M:%S UTC")
    footer = message["blocks"][-1]["elements"][0]["text"]
    sent = DATE.search(footer)
    assert sent and footer.startswith("outbox-monitor · route oncall · sent <!date^")
    assert 0 <= int(sent.group(1)) - int(since.timestamp()) <= LOADED_DEADLINE
    assert firing["payload"]["runbook"] == [
        "Open Actions → Reap stuck locks <!channel> & <https://evil.example|here>.",
        "Reap: `outbox-monitor reap --dry-run`, then `--yes`.",
        "Over when no stuck row is left.",
    ]
