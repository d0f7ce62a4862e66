"""Slack message rendering: escaping, Slack's limits, the dashboard link, thread updates.

No database. Messages are also posted to the real local ``SlackSink``, which refuses
what Slack would refuse (over-long blocks, too many blocks, a broken payload).
"""

import json
import re
from datetime import UTC, datetime, timedelta, timezone
from urllib.request import urlopen

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.webhook import WebhookClient

from outbox_monitor.alerts.message import (
    DEFAULT_DASHBOARD_URL,
    MAX_HEADER_CHARS,
    MAX_INSTANCES,
    MAX_TEXT_CHARS,
    dashboard_base_url,
    dashboard_link,
    episode_key,
    render_notifications,
    render_test,
    render_thread_update,
)
from outbox_monitor.alerts.message_key import row_message_key
from outbox_monitor.alerts.mrkdwn import clip_mrkdwn, escape_mrkdwn, slack_date
from outbox_monitor.alerts.notification_text import MAX_SECTION_CHARS, format_value
from outbox_monitor.alerts.slack import BotTransport, WebhookTransport
from outbox_monitor.demo.slack_limits import check_blocks
from outbox_monitor.demo.slack_sink import SlackSink

NOW = datetime(2026, 3, 2, 10, 30, tzinfo=UTC)
MENTION = "<!subteam^S0123>"
DATE_TOKEN = re.compile(
    r"<!date\^\d+\^\{date_short_pretty\} \{time\}\|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC>"
)
"""Slack's date formatting of an instant, its UTC text the fallback."""
HOSTILE = "<!channel> <@U123> <https://evil.example|click> & <!here>"


def row(
    rule: str = "payment-failed",
    instance: str = "event_type=payment.captured",
    kind: str = "firing",
    seq: int = 1,
    **payload: object,
) -> dict:
    base = {
        "rule": rule,
        "severity": "critical",
        "summary": "3 payment event(s) dead-lettered in the last 15 min",
        "metric": "failed_in_window",
        "op": ">",
        "threshold": 0,
        "value": 3,
        "unit": "rows",
        "since": (NOW - timedelta(minutes=12)).isoformat(),
        "labels": {"event_type": "payment.captured", "team": "payments"},
        "offenders": [{"event_type": "payment.captured", "count": 3, "last_error": "timeout"}],
        "runbook_url": "https://runbooks.example.com/payments?step=1&mode=replay",
        "dashboard_path": "/dead_letters?event_type=payment.captured",
        "kind": kind,
    }
    base.update(payload)
    return {
        "dedupe_key": f"{rule}|{instance}|{seq}|{kind}",
        "rule": rule,
        "instance": instance,
        "kind": kind,
        "payload": base,
    }


def all_text(message) -> str:
    return message.text + "\n" + json.dumps(message.blocks, ensure_ascii=False)


def assert_within_limits(message) -> None:
    assert check_blocks(message.blocks) is None, check_blocks(message.blocks)
    assert len(message.blocks) <= 50
    header = message.blocks[0]
    assert header["type"] == "header"
    assert len(header["text"]["text"]) <= MAX_HEADER_CHARS
    for block in message.blocks:
        if block["type"] == "section":
            assert len(block["text"]["text"]) <= MAX_SECTION_CHARS
            if "accessory" in block:
                assert len(block["accessory"]["url"]) <= 3000
    assert len(message.text) <= MAX_TEXT_CHARS


@pytest.fixture
def sink():
    with SlackSink() as server:
        yield server


def test_escape_mrkdwn_turns_markup_into_entities():
    assert escape_mrkdwn("a & b <!channel> <@U1> x>y") == (
        "a &amp; b &lt;!channel&gt; &lt;@U1&gt; x&gt;y"
    )
    assert escape_mrkdwn(None) == ""


def test_firing_message_has_every_part_and_units():
    firing = row(unit="seconds", value=420, threshold=300, metric="oldest_pending_age")
    message = render_notifications(
        [firing],
        mention=MENTION,
        now=NOW,
        route="oncall",
    )
    header = message.blocks[0]["text"]["text"]
    assert header == "🔥 FIRING · critical · payment-failed"
    section = message.blocks[1]
    text = section["text"]["text"]
    assert text.startswith(MENTION + " 🔥 *payment-failed* · `event_type=payment.captured`")
    # seconds go through format_duration: 420 s → 7m 0s, 300 s → 5m 0s; op escaped.
    assert "*Value* 7m 0s vs threshold 5m 0s (&gt;)" in text
    # Slack writes the instant in each reader's own time zone; the fallback is UTC
    since = "<!date^1772446680^{date_short_pretty} {time}|2026-03-02 10:18:00 UTC>"
    assert f"since {since} (12m 0s ago)" in text
    assert '*Top offenders:* payment.captured — 3: "timeout"' in text
    assert "<https://runbooks.example.com/payments?step=1&amp;mode=replay|Runbook>" in text
    assert "_Labels:_ team=payments" in text
    assert section["accessory"]["url"] == (
        "http://127.0.0.1:8501/dead_letters?event_type=payment.captured"
    )
    assert message.text.startswith(MENTION + " 🔥 FIRING")
    assert "[FIRING] payment-failed event_type=payment.captured (critical): 7m 0s" in message.text
    key = row_message_key(firing)
    assert message.blocks[-1]["elements"][0]["text"] == (
        "outbox-monitor · route oncall · sent "
        f"<!date^1772447400^{{date_short_pretty}} {{time}}|2026-03-02 10:30:00 UTC> · key {key}"
    )
    assert message.metadata == {
        "event_type": "outbox_monitor_alert",
        "event_payload": {"message_key": key, "notification_keys": [key]},
    }
    assert message.as_payload()["metadata"] == message.metadata
    assert_within_limits(message)


def test_offenders_in_the_measure_shape_list_event_types_and_error_groups():
    offenders = [
        {"kind": "event_type", "event_type": "payment.captured", "value": 3.0},
        {"kind": "event_type", "event_type": "payment.refunded", "value": 1.0},
        {
            "kind": "error_group",
            "group_id": "7f3a",
            "event_type": "payment.captured",
            "fingerprint": "gateway timeout after <n>s",
            "failed": 12,
            "sample_error": "gateway timeout after 30s",
            "last_seen": "2026-03-02T10:29:00+00:00",
        },
    ]
    labels = {"rule": "payment-failed", "severity": "critical", "event_type": "payment.x"}
    text = render_notifications([row(offenders=offenders, labels=labels)], now=NOW).blocks[1]
    body = text["text"]["text"]
    assert "*Top offenders:* payment.captured — 3 · payment.refunded — 1\n" in body
    assert '*Error groups:* payment.captured — 12 failed: "gateway timeout after 30s"' in body
    assert "Labels" not in body  # rule, severity and event type are on the line already
    seconds = row(
        unit="seconds",
        offenders=[{"kind": "event_type", "event_type": "notification.sms", "value": 930.0}],
    )
    body = render_notifications([seconds], now=NOW).blocks[1]["text"]["text"]
    assert "*Top offenders:* notification.sms — 15m 30s" in body


def test_value_formats_per_unit():
    assert format_value(1234, "rows") == "1,234"
    assert format_value(12.25, "rows/min") == "12.2/min"
    assert format_value(5400, "seconds") == "1h 30m"
    assert format_value(None, "rows") == "no value"


def test_mention_injection_from_the_outbox_arrives_escaped(sink):
    hostile = row(
        instance=f"event_type={HOSTILE}",
        summary=f"failures in {HOSTILE}",
        labels={"event_type": HOSTILE, "team": HOSTILE},
        offenders=[{"event_type": HOSTILE, "count": 2, "last_error": HOSTILE}],
        runbook=[f"Ping {HOSTILE} then `reap`", "*bold* & _it_"],
    )
    error = row(rule="latency-slo", instance="", kind="error", error=f"relation {HOSTILE}")
    message = render_notifications([hostile, error], mention=MENTION, now=NOW)
    everything = all_text(message)
    for raw in ("<!channel>", "<@U123>", "<https://evil", "<!here>"):
        assert raw not in everything
    assert "&lt;!channel&gt;" in everything and "&lt;@U123&gt;" in everything
    assert "&lt;https://evil.example|click&gt;" in everything
    # the runbook's steps after the instances, escaped: no step can ping or link
    assert message.blocks[3]["text"]["text"] == (
        "📋 *Runbook · payment-failed*\n"
        "1. Ping &lt;!channel&gt; &lt;@U123&gt; &lt;https://evil.example|click&gt; &amp; "
        "&lt;!here&gt; then `reap`\n"
        "2. *bold* &amp; _it_"
    )
    # The only markup left: the route's mention, the runbook links from the rules and the
    # date tokens of the instants (each reader's own time zone)
    tokens = set(re.findall(r"<[^<>]*>", everything))
    dates = {token for token in tokens if DATE_TOKEN.fullmatch(token)}
    assert len(dates) == 2  # the instances' since (one instant) and the footer's sent
    assert tokens - dates == {
        MENTION,
        "<https://runbooks.example.com/payments?step=1&amp;mode=replay|Runbook>",
    }
    # The sink (like Slack) accepts it, and stores it as sent.
    WebhookTransport(sink.webhook_url, timeout=1).post(message)
    posted = sink.messages()[0]
    assert "<!channel>" not in json.dumps(posted)


def test_an_over_long_error_text_stays_within_limits(sink):
    huge = "Traceback <x> & " + "ValueError: payload & more " * 4000  # ≈ 108,000 chars
    message = render_notifications(
        [
            row(kind="error", instance="", error=huge, summary=huge),
            row(
                instance="event_type=" + "x" * 5000,
                offenders=[{"event_type": "a" * 900, "count": 1, "last_error": huge}] * 20,
                runbook_url="https://runbooks.example.com/" + "p" * 5000,
                dashboard_path="/dead_letters?event_type=" + "y" * 5000,
            ),
        ],
        mention=MENTION,
        now=NOW,
    )
    assert_within_limits(message)
    sections = [b for b in message.blocks if b["type"] == "section"]
    assert sections[0]["text"]["text"].count("…") >= 1
    assert "*Error:* Traceback &lt;x&gt; &amp; ValueError" in sections[0]["text"]["text"]
    # A URL too long for a button falls back to the view without its filter.
    assert sections[1]["accessory"]["url"] == "http://127.0.0.1:8501/dead_letters"
    delivery = BotTransport(sink.token, "#alerts", sink.api_url, timeout=1).post(message)
    assert delivery.ts == sink.messages()[0]["ts"]


def test_many_instances_are_cut_and_counted():
    rows = [row(instance=f"event_type=payment.t{i:02d}") for i in range(60)]
    message = render_notifications(rows, mention=MENTION, now=NOW)
    assert_within_limits(message)
    sections = [b for b in message.blocks if b["type"] == "section"]
    assert len(sections) == MAX_INSTANCES == 45
    note = message.blocks[-2]["elements"][0]["text"]
    assert note == "…and 15 more instance(s) not shown here: open the dashboard."
    assert note in message.text
    assert message.blocks[0]["text"]["text"] == "🔥 FIRING · 60 alerts · critical · payment-failed"
    assert len({b["accessory"]["action_id"] for b in sections}) == 45


def test_clip_mrkdwn_never_leaves_half_an_entity_or_link():
    assert clip_mrkdwn("abc &amp; def", 7) == "abc …"
    assert clip_mrkdwn("see <https://x.example/very/long|Runbook> now", 20) == "see …"
    assert clip_mrkdwn("short", 10) == "short"


def test_dashboard_link_carries_the_pre_filter_and_stays_on_the_dashboard():
    base = "https://monitor.example.com/ops/"
    assert dashboard_link(base, "/dead_letters?event_type=payment.captured&group=ab12") == (
        "https://monitor.example.com/ops/dead_letters?event_type=payment.captured&group=ab12"
    )
    # A path cannot send people elsewhere; odd values are re-encoded.
    assert dashboard_link(base, "https://evil.example/events?event_type=a b&x=<y>") == (
        "https://monitor.example.com/ops/events?event_type=a+b&x=%3Cy%3E"
    )
    assert dashboard_base_url({}) == DEFAULT_DASHBOARD_URL
    assert dashboard_base_url({"OUTBOX_MONITOR_DASHBOARD_URL": base}) == base
    message = render_notifications([row()], dashboard_url=base, now=NOW)
    assert message.blocks[1]["accessory"]["url"] == (
        "https://monitor.example.com/ops/dead_letters?event_type=payment.captured"
    )
    assert "Dashboard: https://monitor.example.com/ops/dead_letters?" in message.text


@pytest.mark.parametrize("path", ["/overview?window=1h", "/?window=1h"])
def test_dashboard_link_keeps_the_overview_path(path):
    # The Overview has its own URL; "/" (Streamlit's default page) sends there.
    view = path.split("?")[0]
    assert dashboard_link("https://monitor.example.com/ops", path) == (
        f"https://monitor.example.com/ops{view}?window=1h"
    )
    assert dashboard_link(DEFAULT_DASHBOARD_URL, None) == f"{DEFAULT_DASHBOARD_URL}/"


def test_resolved_message_has_no_mention():
    message = render_notifications(
        [row(kind="resolved", value=0)], mention=MENTION, now=NOW, route="oncall"
    )
    assert MENTION not in all_text(message)
    assert message.blocks[0]["text"]["text"] == "✅ RESOLVED · payment-failed"
    text = message.blocks[1]["text"]["text"]
    assert "*Value now* 0 vs threshold 0 (&gt;)" in text
    assert (
        "Was firing since <!date^1772446680^{date_short_pretty} {time}|2026-03-02 10:18:00 UTC>"
        in text
    )


def test_mixed_kinds_say_how_many_of_each():
    message = render_notifications(
        [row(), row(rule="backlog", instance="", kind="resolved"), row(rule="x", kind="firing")],
        now=NOW,
    )
    assert message.blocks[0]["text"]["text"] == (
        "🔔 3 alert changes · 2 firing, 1 resolved · payment-failed, backlog, x"
    )


def test_thread_update_marks_resolved_lines():
    first = row(instance="event_type=payment.captured")
    second = row(instance="event_type=payment.refunded")
    resolve_first = row(instance="event_type=payment.captured", kind="resolved", value=0)
    half = render_thread_update([first, second, resolve_first], now=NOW)
    assert half.blocks[0]["text"]["text"] == "🔥 FIRING · 1 of 2 resolved · payment-failed"
    sections = [b["text"]["text"] for b in half.blocks if b["type"] == "section"]
    assert sections[0].startswith("✅ *payment-failed* · `event_type=payment.captured` · resolved")
    assert "*Value now* 0 vs threshold 0" in sections[0]
    assert sections[1].startswith("🔥 *payment-failed* · `event_type=payment.refunded`")
    resolve_second = row(instance="event_type=payment.refunded", kind="resolved", value=0)
    done = render_thread_update([first, second, resolve_first, resolve_second], now=NOW)
    assert done.blocks[0]["text"]["text"] == "✅ RESOLVED · payment-failed"
    assert MENTION not in all_text(done)
    assert_within_limits(done)


def test_episode_key_strips_the_kind():
    assert episode_key("payment-failed|event_type=x|3|resolved") == "payment-failed|event_type=x|3|"
    assert episode_key("backlog||1|repeat-2") == "backlog||1|"


def test_test_message_names_the_route():
    message = render_test("oncall", mention=MENTION, now=NOW)
    assert message.blocks[0]["text"]["text"] == "🧪 Test alert from outbox-monitor"
    assert message.blocks[1]["text"]["text"].startswith(MENTION + " 🧪 *test*")
    assert "route oncall reaches this channel" in message.text
    assert_within_limits(message)


def test_render_needs_rows():
    with pytest.raises(ValueError, match="at least one"):
        render_notifications([])


def test_sink_speaks_the_slack_api_shape(sink):
    assert sink.api_url.endswith("/api/")
    assert WebClient(token=sink.token, base_url=sink.api_url).auth_test()["team_id"] == "T000"
    with pytest.raises(SlackApiError) as refused:
        WebClient(token="xoxb-other", base_url=sink.api_url).auth_test()
    assert refused.value.response["error"] == "invalid_auth"
    client = WebClient(token=sink.token, base_url=sink.api_url)
    posted = client.chat_postMessage(channel="#alerts", text="first")
    assert re.fullmatch(r"\d{10}\.\d{6}", posted["ts"]) and posted["channel"].startswith("C")
    client.chat_update(channel=posted["channel"], ts=posted["ts"], text="edited")
    client.chat_postMessage(channel=posted["channel"], thread_ts=posted["ts"], text="reply")
    with pytest.raises(SlackApiError) as missing:
        client.chat_update(channel=posted["channel"], ts="1.000001", text="x")
    assert missing.value.response["error"] == "message_not_found"
    too_many = [{"type": "divider"}] * 51
    with pytest.raises(SlackApiError) as invalid:
        client.chat_postMessage(channel="#alerts", text="x", blocks=too_many)
    assert invalid.value.response["error"] == "invalid_blocks"
    hook = WebhookClient(sink.webhook_url)
    assert (hook.send(text="via hook").status_code, hook.send(text="").body) == (
        200,
        "no_text",
    )
    assert WebhookClient(sink.url + "/services/nope").send(text="x").body == "no_service"
    with urlopen(sink.url + "/_sink/messages", timeout=2) as response:
        listed = json.load(response)["messages"]
    assert [(m["text"], m["edits"], m["thread_ts"]) for m in listed] == [
        ("edited", 1, None),
        ("reply", 0, posted["ts"]),
        ("via hook", 0, None),
    ]
    assert listed == sink.messages()
    assert all(r.headers.get("Authorization") in (None, "Bearer <redacted>") for r in sink.requests)


def held_row(instance_seq: int) -> dict:
    """A firing line of episode 1 whose instance (episode ``instance_seq``) is clear since
    10:27:35, 2m 25s before NOW, and stays firing for keep_firing_for 10m."""
    line = row(value=500, threshold=300, unit="seconds", firing_seq=1, keep_firing_for=600)
    cleared = NOW - timedelta(minutes=2, seconds=25)
    return line | {
        "instance_state": "firing",
        "instance_cleared_since": cleared,
        "instance_firing_seq": instance_seq,
    }


HELD = (
    "Back within the threshold, held by keep_firing_for 10m: "
    "clear since <!date^1772447255^{date_short_pretty} {time}|2026-03-02 10:27:35 UTC> (2m 25s ago)"
)


def test_a_line_held_open_by_keep_firing_for_says_so():
    # a firing message sent late and a thread's update both show the instance's state now
    assert HELD in render_notifications([held_row(1)], now=NOW).blocks[1]["text"]["text"]
    other = row(instance="event_type=payment.refunded", kind="resolved", seq=1)
    update = render_thread_update([held_row(1) | {"id": 1}, other | {"id": 2}], now=NOW)
    assert HELD in update.blocks[1]["text"]["text"]
    # a later episode of the instance is not this line's
    assert "keep_firing_for" not in all_text(render_notifications([held_row(2)], now=NOW))
    breached = held_row(1) | {"instance_cleared_since": None}
    assert "keep_firing_for" not in all_text(render_notifications([breached], now=NOW))


STEPS = ["Open Dead letters on the group", "Replay it: `outbox-monitor replay --dry-run`"]


def test_each_paging_rules_runbook_follows_its_instances_once(sink):
    rows = [
        row(runbook=STEPS),
        row(instance="event_type=payment.refunded", runbook=STEPS),
        row(rule="backlog", instance="", runbook=["Add workers"]),
        row(rule="stuck-lock", instance="", kind="resolved", runbook=["Reap"]),
        row(rule="latency-slo", instance=""),  # a rule without runbook steps
    ]
    message = render_notifications(rows, now=NOW)
    assert_within_limits(message)
    sections = [b for b in message.blocks if b["type"] == "section"]
    assert [s["text"]["text"].split("\n")[0] for s in sections[5:]] == [
        "📋 *Runbook · payment-failed*",
        "📋 *Runbook · backlog*",
    ]  # one per rule that pages; a resolve and a rule without steps have none
    assert sections[5]["text"]["text"] == (
        "📋 *Runbook · payment-failed*\n"
        "1. Open Dead letters on the group\n"
        "2. Replay it: `outbox-monitor replay --dry-run`"
    )
    assert all("accessory" not in s for s in sections[5:])  # no button of their own
    # a thread update keeps the runbook of a line still firing, not of one resolved since
    first = rows[0] | {"id": 1}
    resolve = row(kind="resolved", value=0) | {"id": 2}
    backlog = rows[2] | {"id": 3}
    update = render_thread_update([first, backlog, resolve], now=NOW)
    runbooks = [
        b["text"]["text"] for b in update.blocks if "📋" in b.get("text", {}).get("text", "")
    ]
    assert [text.split("\n")[0] for text in runbooks] == ["📋 *Runbook · backlog*"]
    WebhookTransport(sink.webhook_url, timeout=1).post(message)  # Slack-shaped: accepted


def test_runbooks_beyond_three_are_named_and_instances_make_room(sink):
    rules = [f"rule-{n}" for n in range(5)]
    rows = [
        row(rule=rule, instance=f"event_type=t{i:02d}", runbook=STEPS)
        for rule in rules
        for i in range(12)
    ]
    message = render_notifications(rows, now=NOW)
    assert_within_limits(message)
    sections = [b for b in message.blocks if b["type"] == "section"]
    runbooks = [s["text"]["text"] for s in sections if s["text"]["text"].startswith("📋")]
    assert len(sections) == MAX_INSTANCES and len(runbooks) == 3
    assert runbooks[-1].endswith("\n_Runbooks of rule-3, rule-4: on the Alerts page._")
    note = message.blocks[-2]["elements"][0]["text"]
    assert note == "…and 18 more instance(s) not shown here: open the dashboard."  # 60 − 42
    BotTransport(sink.token, "#alerts", sink.api_url, timeout=1).post(message)


def test_slack_dates_are_each_readers_time_zone_with_a_utc_fallback():
    paris = timezone(timedelta(hours=1))
    token = slack_date(datetime(2026, 3, 2, 11, 18, 0, tzinfo=paris))
    assert token == "<!date^1772446680^{date_short_pretty} {time}|2026-03-02 10:18:00 UTC>"
    assert slack_date(datetime(2026, 3, 2, 10, 18)) == token  # naive: UTC


def action_ids(message) -> list[str]:
    return [e["action_id"] for b in message.blocks if b["type"] == "actions" for e in b["elements"]]


def test_acknowledge_and_silence_buttons_only_when_slack_actions_are_on():
    firing = {**row(), "id": 41}
    assert action_ids(render_notifications([firing], now=NOW)) == []
    message = render_notifications([firing], now=NOW, actions=True)
    assert action_ids(message) == [
        "outbox-monitor:acknowledge:41",
        "outbox-monitor:silence-1h:41",
        "outbox-monitor:pause-1h:41",
    ]
    buttons = next(b for b in message.blocks if b["type"] == "actions")["elements"]
    assert [b["text"]["text"] for b in buttons] == [
        "Acknowledge",
        "Silence 1 h",
        "Pause this type 1 h",
    ]
    assert_within_limits(message)
    no_type = {**row(labels={"rule": "stuck-lock"}), "id": 42}
    assert action_ids(render_notifications([no_type], now=NOW, actions=True)) == [
        "outbox-monitor:acknowledge:42",
        "outbox-monitor:silence-1h:42",
    ]


def test_buttons_for_paging_lines_only_named_when_several_and_at_most_eight_lines():
    resolved = {**row(instance="event_type=payment.refunded", kind="resolved"), "id": 7}
    firing = {**row(), "id": 8}
    repeat = {**row(instance="event_type=payment.voided", kind="repeat"), "id": 9}
    message = render_notifications([resolved, firing, repeat], now=NOW, actions=True)
    buttons = next(b for b in message.blocks if b["type"] == "actions")["elements"]
    assert [(b["text"]["text"], b["value"]) for b in buttons] == [
        ("Acknowledge payment-failed event_type=payment.captured", "8"),
        ("Silence 1 h payment-failed event_type=payment.captured", "8"),
        ("Pause this type 1 h payment-failed event_type=payment.captured", "8"),
        ("Acknowledge payment-failed event_type=payment.voided", "9"),
        ("Silence 1 h payment-failed event_type=payment.voided", "9"),
        ("Pause this type 1 h payment-failed event_type=payment.voided", "9"),
    ]
    many = [{**row(instance=f"event_type=payment.t{i:02d}"), "id": i} for i in range(60)]
    crowded = render_notifications(many, mention=MENTION, now=NOW, actions=True)
    assert_within_limits(crowded)
    assert len(action_ids(crowded)) == 3 * 8 == 24
    assert crowded.blocks[-1]["type"] == "context"  # the footer (its key) is kept


def test_thread_update_keeps_saying_acked_until_every_line_resolved():
    first = {**row(instance="event_type=payment.captured"), "acked_by": "alice@example.com"}
    second = row(instance="event_type=payment.refunded")
    acked = render_thread_update([first, second], now=NOW)
    assert acked.blocks[0]["text"]["text"] == (
        "👀 ACKED by alice@example.com · 0 of 2 resolved · payment-failed"
    )
    resolve_second = row(instance="event_type=payment.refunded", kind="resolved", value=0)
    half = render_thread_update([first, second, resolve_second], now=NOW)
    assert half.blocks[0]["text"]["text"] == (
        "👀 ACKED by alice@example.com · 1 of 2 resolved · payment-failed"
    )
    resolve_first = {**row(kind="resolved", value=0), "acked_by": "alice@example.com"}
    done = render_thread_update([first, second, resolve_second, resolve_first], now=NOW)
    assert done.blocks[0]["text"]["text"] == "✅ RESOLVED · payment-failed"
    assert_within_limits(acked)
