"""Slack's button presses (interactivity requests, issue 31 item 6): verify, refuse or act,
report the result through the press's ``response_url``.

A request is believed only when Slack's v0 signature over ``v0:<timestamp>:<raw body>``
matches with the signing secret (``SLACK_SIGNING_SECRET``) and its timestamp is within
5 minutes (slack-sdk's ``SignatureVerifier``: HMAC-SHA256, constant-time compare); anything
else is answered 401 and logged, and its ``response_url`` never called. A believed press is
answered 200 at once (``service.slack_listener``) and then, in order: its ``(team_id,
action_ts)`` must be new (the replay cache, ``outbox_monitor.slack_action_requests``,
shared by every scheduler of the database), its user's team on the allow-list
(``OUTBOX_MONITOR_SLACK_ACTIONS_TEAMS``), the ``(team, user)`` mapped to a person
(``OUTBOX_MONITOR_SLACK_ACTIONS_PEOPLE``) whose dashboard role is operator at least; then
the action runs with the operator's login (``OUTBOX_MONITOR_ACTIONS_DSN``), audited with the
Slack ids. Every refusal is logged and said through ``response_url``.
"""

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC
from typing import Any
from urllib.parse import parse_qs

from slack_sdk.signature import SignatureVerifier
from slack_sdk.webhook import WebhookClient

from outbox_monitor.access import Identity, Role, role_for
from outbox_monitor.alerts.acknowledge import (
    Acknowledged,
    Press,
    acknowledge,
    pause_type,
    silence_instance,
)
from outbox_monitor.alerts.grouping import open_group_key
from outbox_monitor.alerts.message import (
    ACKNOWLEDGE,
    ACTION_PREFIX,
    PAUSE,
    SILENCE,
    dashboard_base_url,
    render_thread_update,
)
from outbox_monitor.alerts.mrkdwn import plain
from outbox_monitor.alerts.outbox_scope import routes_for
from outbox_monitor.alerts.rules import RuleSet
from outbox_monitor.alerts.slack_outcomes import DeliveryError
from outbox_monitor.config.settings import Settings
from outbox_monitor.config.values import slack_person
from outbox_monitor.errors import AccessDenied, ActionRefused, ConfigError, OutboxMonitorError
from outbox_monitor.store.db import Database

log = logging.getLogger("outbox_monitor.alerts.slack_actions")

SIGNING_SECRET_ENV = "SLACK_SIGNING_SECRET"
WINDOW_SECONDS = 5 * 60
"""Slack's window: a request whose timestamp is further off is refused (slack-sdk's own)."""
REPLAY_KEEP_SECONDS = 2 * WINDOW_SECONDS
"""How long a press stays in the replay cache: past the window its timestamp refuses it."""
SILENCE_HOURS = PAUSE_HOURS = 1.0
ACTIONS = (ACKNOWLEDGE, SILENCE, PAUSE)
RESPONSE_TIMEOUT_SECONDS = 10


class Refused(Exception):
    """A believed press that is not acted on; its message is what the presser is told."""


class Replayed(Refused):
    """A press whose ``(team_id, action_ts)`` was received before."""


@dataclass(frozen=True)
class PressRequest:
    """What a block_actions payload says: the team and user (the user's own team: a Slack
    Connect user's is another organisation's), the button (action, notification id), its
    ``action_ts`` and ``response_url``."""

    team_id: str
    user_id: str
    user_team_id: str
    action: str
    notification_id: int
    action_ts: str
    response_url: str


def parse_press(body: bytes) -> PressRequest | None:
    """Read a verified request's form body (``payload=<JSON>``) as a button press.

    Returns:
        The press, or ``None`` for a button not of ours (the *Open dashboard* link buttons:
        Slack posts their clicks too; nothing to do).

    Raises:
        Refused: not a block_actions payload, an action of ours Slack's app does not have,
            or fields missing.
    """
    try:
        form = parse_qs(body.decode(), strict_parsing=True)
        payload = json.loads(form["payload"][0])
        action = payload["actions"][0]
        action_id = str(action["action_id"])
        if not action_id.startswith(ACTION_PREFIX):
            return None
        name, notification = action_id.removeprefix(ACTION_PREFIX).split(":")
        user = payload["user"]
        team_id = str(payload["team"]["id"])
        if name not in ACTIONS:
            raise ValueError(f"no action {name!r}")
        return PressRequest(
            team_id=team_id,
            user_id=str(user["id"]),
            user_team_id=str(user.get("team_id") or team_id),
            action=name,
            notification_id=int(notification),
            action_ts=str(action["action_ts"]),
            response_url=str(payload["response_url"]),
        )
    except (ValueError, KeyError, IndexError, TypeError, UnicodeDecodeError) as error:
        raise Refused(f"not a button press of outbox-monitor ({type(error).__name__})") from None


class SlackActions:
    """The checks and actions of the listener.

    Args:
        settings: the allow-list, the people, the response URLs accepted, the roles.
        db: the Database of actions (``purpose="actions"``: the operator's login).
        signing_secret: the Slack app's signing secret.
        on_acknowledged: called with ``self`` and the outcome after a new acknowledgement
            (``after_acknowledge``: the card's edit, PagerDuty); returns notes for the
            presser (what could not be done).
        clock: seconds since the epoch (the signature's window).
    """

    def __init__(
        self,
        settings: Settings,
        db: Database,
        signing_secret: str,
        *,
        on_acknowledged: Callable[["SlackActions", Acknowledged], list[str]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.db = db
        self._clock = clock
        self._verifier = SignatureVerifier(signing_secret, clock=_Clock(clock))
        self.on_acknowledged = on_acknowledged
        self.people = {
            (team, user): email
            for team, user, email in (slack_person(e) for e in settings.slack_actions_people)
        }

    @classmethod
    def from_settings(
        cls, settings: Settings, db: Database, env: Mapping[str, str], **options: Any
    ) -> "SlackActions":
        """The actions of the listener, checked at start.

        Raises:
            ConfigError: ``SLACK_SIGNING_SECRET`` or ``OUTBOX_MONITOR_ACTIONS_DSN`` is not
                set; a person of ``OUTBOX_MONITOR_SLACK_ACTIONS_PEOPLE`` has no role of
                operator or admin (named).
        """
        secret = env.get(SIGNING_SECRET_ENV, "").strip()
        if not secret:
            raise ConfigError(
                f"OUTBOX_MONITOR_SLACK_ACTIONS_PORT is set but {SIGNING_SECRET_ENV} is not",
                hint="Copy the Signing Secret of the Slack app (Basic Information) into "
                f"{SIGNING_SECRET_ENV}.",
            )
        if not settings.actions_dsn:
            raise ConfigError(
                "OUTBOX_MONITOR_SLACK_ACTIONS_PORT is set but OUTBOX_MONITOR_ACTIONS_DSN is not: "
                "the buttons act with the operator's login, never the scheduler's",
                hint="Set OUTBOX_MONITOR_ACTIONS_DSN to a login of the operator role "
                "(init-db --print-grants).",
            )
        for entry in settings.slack_actions_people:
            email = slack_person(entry)[2]
            role = role_for(settings, email)
            if role is None or role < Role.operator:
                raise ConfigError(
                    f"OUTBOX_MONITOR_SLACK_ACTIONS_PEOPLE: {entry!r}: {email} is "
                    f"{role.name if role else 'no one'} in the dashboard's roles; the buttons "
                    "need an operator",
                    hint="Add the e-mail to OUTBOX_MONITOR_OPERATORS (or _ADMINS), or remove "
                    "the entry.",
                )
        return cls(settings, db, secret, **options)

    def refusal_of_request(self, body: bytes, headers: Mapping[str, str]) -> str | None:
        """Why a request is not believed (``None``: it is Slack's, signed within the window).

        Args:
            body: the raw body, as received.
            headers: the request's headers (any case).
        """
        wanted = {k.lower(): v for k, v in headers.items()}
        timestamp = wanted.get("x-slack-request-timestamp", "")
        signature = wanted.get("x-slack-signature", "")
        if not timestamp.isdigit() or not signature:
            return "no Slack signature or timestamp"
        if abs(self._clock() - int(timestamp)) > WINDOW_SECONDS:
            return f"its timestamp is more than {WINDOW_SECONDS // 60} minutes off"
        if not self._verifier.is_valid(body, timestamp, signature):
            return "the signature does not match (another secret, or a changed body)"
        return None

    def handle(self, body: bytes, *, retry: bool = False) -> str:
        """Act on a verified press and post the result to its ``response_url``: what was
        done, ``Refused: <why>`` (a WARNING line) or ``Not done: <why>`` (the database
        down, the login without the grant, an unexpected error: an ERROR line).

        Args:
            body: the raw body.
            retry: Slack's retry of a request (``X-Slack-Retry-Num``): when its first
                delivery was received, it is logged only (the presser was told once).

        Returns:
            What the presser was told; ``""`` for a button not of ours or a retry of a
            press received (nothing posted).
        """
        try:
            press = parse_press(body)
        except Refused as refusal:
            log.warning("Slack press refused: %s", refusal)
            return str(refusal)
        if press is None:
            log.debug("a click of a link button, nothing to do")
            return ""
        who = f"{press.action} of notification {press.notification_id} by {press.user_team_id}/"
        who += f"{press.user_id} (team {press.team_id})"
        try:
            text = self._act(press)
            log.info("Slack press %s: %s", who, text)
        except Replayed as replay:
            text = f"Refused: {replay}"
            log.warning("Slack press %s refused: %s%s", who, text, " (Slack's retry)" * retry)
            if retry:
                return ""
        except (Refused, AccessDenied, ActionRefused) as refusal:
            text = f"Refused: {refusal.args[0] if refusal.args else refusal}"
            log.warning("Slack press %s refused: %s", who, text)
        except OutboxMonitorError as error:
            text = f"Not done: {error.args[0] if error.args else error}"
            log.error("Slack press %s failed: %s", who, text)
        except Exception:
            text = "Not done: an unexpected error (the monitor's log has it)"
            log.exception("Slack press %s failed", who)
        self._respond(press, text)
        return text

    def _act(self, press: PressRequest) -> str:
        if not press.response_url.startswith(self.settings.slack_actions_response_url):
            raise Refused(
                f"its response_url is not under {self.settings.slack_actions_response_url}"
            )
        claimed = self.db.fetch_one(
            "slack_press_claim",
            {
                "team_id": press.team_id,
                "action_ts": press.action_ts,
                "keep_seconds": REPLAY_KEEP_SECONDS,
            },
        )
        if claimed is None:
            raise Replayed(f"this press ({press.team_id}, {press.action_ts}) was received before")
        if press.user_team_id not in self.settings.slack_actions_teams:
            raise Refused(f"team {press.user_team_id} may not act on these alerts")
        email = self.people.get((press.user_team_id, press.user_id))
        if email is None:
            raise Refused(f"Slack user {press.user_id} is not mapped to a person of the monitor")
        role = role_for(self.settings, email)
        if role is None:
            raise Refused(f"{email} has no role in the monitor")
        who = Press(
            Identity(email, role, "slack"), press.user_team_id, press.user_id, press.notification_id
        )
        if press.action == SILENCE:
            silence, until = silence_instance(self.db, who, SILENCE_HOURS)
            return (
                f"Silenced until {until.astimezone(UTC):%H:%M} UTC by {email} (silence {silence})."
            )
        if press.action == PAUSE:
            event_type, until = pause_type(self.db, who, PAUSE_HOURS)
            return (
                f"{event_type} paused until {until.astimezone(UTC):%H:%M} UTC by {email}: its rows "
                "stay pending."
            )
        acked = acknowledge(self.db, who)
        if acked.already:
            return f"{acked.what}: acknowledged already by {acked.acked_by}."
        notes = [] if self.on_acknowledged is None else self.on_acknowledged(self, acked)
        return " ".join(
            [f"{acked.what}: acknowledged by {acked.acked_by}; no more repeats of it.", *notes]
        )

    def _respond(self, press: PressRequest, text: str) -> None:
        """Post ``text`` to the press's ``response_url`` (only one under the accepted start)."""
        if not press.response_url.startswith(self.settings.slack_actions_response_url):
            return
        try:
            answer = WebhookClient(press.response_url, timeout=RESPONSE_TIMEOUT_SECONDS).send(
                text=plain(text, 3000), response_type="ephemeral", replace_original=False
            )
            if answer.status_code != 200:
                log.warning("response_url answered %s to a press's result", answer.status_code)
        except Exception as error:
            log.warning("response_url not reached for a press's result: %s", error)


class _Clock:
    """slack-sdk's clock interface over a function of the epoch seconds."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock

    def now(self) -> float:
        return self._clock()


def after_acknowledge(
    ruleset: RuleSet | None,
    transports: Mapping[str, Any] | None,
    dashboard_url: str | None = None,
) -> Callable[[SlackActions, Acknowledged], list[str]]:
    """What follows a new acknowledgement, each failure logged and said to the presser:

    - the pressed message is edited with the route's bot transport: its lines re-rendered
      (``render_thread_update``) under "ACKED by <who>" with ``chat.update``, as a resolve
      edits it (a route without a bot token, or a message without channel and ts, is left
      as it is: an incoming webhook cannot edit);
    - every ``pagerduty`` route the alert takes (``routes_for`` of its rule's route and its
      labels) gets an ``acknowledge`` of the episode's ``dedup_key``.

    Args:
        ruleset: the rules (the alert's routes); ``None``: no PagerDuty.
        transports: ``{route: transport}`` of the scheduler (``load_alerting``); ``None``:
            nothing follows.
        dashboard_url: the links' base; default ``dashboard_base_url()``.

    Returns:
        The function ``SlackActions`` calls; it returns the notes for the presser
        ("PagerDuty route pd acknowledged.", "… not told: <why>").
    """
    built = transports or {}

    def follow(actions: SlackActions, acked: Acknowledged) -> list[str]:
        row = acked.notification
        notes = []
        try:
            _edit_card(actions, acked, built.get(row["route"]), dashboard_url)
        except Exception as error:  # the acknowledgement stands; the card stays as it was
            log.error("the Slack card of episode %s was not edited: %s", acked.episode, error)
            notes.append(f"The card was not edited: {error}.")
        rule = (
            None
            if ruleset is None
            else next((r for r in ruleset.rules if r.name == row["rule"]), None)
        )
        labels = {str(k): str(v) for k, v in (row.get("labels") or {}).items()}
        for name in [] if rule is None else routes_for(ruleset, rule.route, labels):
            transport = built.get(name)
            if getattr(transport, "kind", None) != "pagerduty":
                continue
            grouped = ruleset.routes[name] if ruleset.routes[name].group_by else None
            try:
                if grouped is not None:  # the incident is the group's (alerts.grouping)
                    key = open_group_key(actions.db, name, grouped, labels)
                    if key is None:
                        notes.append(f"PagerDuty route {name}: the group has no open incident.")
                        continue
                    transport.acknowledge(row, dedup_key=key)
                else:
                    transport.acknowledge(row)
                notes.append(f"PagerDuty route {name} acknowledged.")
            except DeliveryError as error:
                log.error(
                    "PagerDuty route %s not told of episode %s: %s", name, acked.episode, error
                )
                notes.append(f"PagerDuty route {name} not told: {error}.")
        return notes

    return follow


def _edit_card(
    actions: SlackActions, acked: Acknowledged, transport: Any, dashboard_url: str | None
) -> None:
    row = acked.notification
    channel, ts = row.get("slack_channel"), row.get("slack_ts")
    if transport is None or not transport.supports_threads or not channel or not ts:
        return
    lines = actions.db.fetch_all("sender_thread_notifications", {"channel": channel, "ts": ts})
    if lines:
        transport.update(
            channel,
            ts,
            render_thread_update(
                lines,
                dashboard_url=dashboard_url or dashboard_base_url(),
                now=acked.acked_at,
                route=row["route"],
            ),
        )
