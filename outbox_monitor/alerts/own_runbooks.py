"""The scheduler's own alerts (database-unreachable, alerting-stalled, replica-lag,
writes-failing, receiver-failing, alertmanager-unreachable), a rule's evaluation error and
Prometheus' sampler-stalled, described once: what each means, where to look first, its likely
causes, the fix, when it is over — and, for those that page, their ``runbook`` steps (as a
rule's ``runbook:``: static text, at most ``rule_values.MAX_RUNBOOK_LENGTH`` characters,
numbered steps).

The steps go into each alert's payload (its ``runbook``: ``outage.direct_row``, which
``write_health`` shares, ``stall``, ``replica_lag``, ``receiver_health``,
``alertmanager_health``), so their Slack message shows them as a rule's runbook is shown
(``notification_text.runbook_section``: escaped for mrkdwn, clipped); the docs' "When the
scheduler pages" page is generated from this module (``cli.when_paged.scheduler_page``,
``make reference``).
"""

from dataclasses import dataclass

from outbox_monitor.alerts.rule_values import check_runbook
from outbox_monitor.alerts.rules import steps_of


@dataclass(frozen=True)
class OwnAlert:
    """One alert the product raises about itself, its drill in Markdown.

    Attributes:
        name: the heading and the alert's rule name in its messages (``outage.RULE_NAME`` …).
        means, first_look, causes, fix, over: the drill's paragraphs.
        runbook: numbered steps shown in its Slack message (``None``: it has none of its own —
            a rule's evaluation error shows that rule's steps).
    """

    name: str
    means: str
    first_look: str
    causes: str
    fix: str
    over: str
    runbook: str | None = None


OWN_ALERTS: tuple[OwnAlert, ...] = (
    OwnAlert(
        name="database-unreachable",
        means="""The leading scheduler cannot reach the database it watches for longer than
one evaluation interval — or the database *hangs* (accepts connections, answers nothing) for
longer than the hang threshold (the largest of 3 statement timeouts, 2 evaluation intervals and
5 s). No rule is evaluated and nothing else is sent meanwhile. Posted straight to Slack by the
process that was leader (its `host:pid` named), once per outage ("the database hangs" for a
hang) — or by a scheduler (re)started during the outage, which starts anyway: no lease can say
who leads then, so each replica started in it posts its own.""",
        first_look="""The message's last error (libpq's reason: refused, timeout, password, too
many connections). `outbox-monitor status` from the scheduler's host; the dashboard's banner;
`outbox_monitor_up 0` on `/metrics`; with a fleet, `/healthz` names the outbox.""",
        causes="""The database restarts, fails over, or is down; the network between the
scheduler and the database; a changed password; `max_connections` exhausted; a frozen
server.""",
        fix="""On the database side. The scheduler needs nothing: its jobs reconnect with
backoff and carry on when the database answers (a restart would not help: a scheduler started
during the outage waits for the database the same way, its `/healthz` 200 with "database
unreachable: …"). After a failover, point `OUTBOX_MONITOR_DSN` (and
`OUTBOX_MONITOR_PRIMARY_DSN`) at the new primary and restart.""",
        over=""""outbox-monitor reaches the database … again": the resolve, queued when the
database answers and sent by whichever scheduler leads then.""",
        runbook="""\
1. Read the message's last error: refused (down or restarting), timeout (network, frozen
   server), password (a changed secret), too many connections (max_connections).
2. From the scheduler's host run `outbox-monitor status`: it fails with the same reason, or
   answers (then the scheduler's own network or DSN differs).
3. Fix the database side: start it, wait for its restart, free connections, restore the
   password. Do not restart the scheduler: it reconnects with backoff by itself.
4. After a failover point OUTBOX_MONITOR_DSN (and OUTBOX_MONITOR_PRIMARY_DSN) at the new primary
   and restart the scheduler.
5. Over when the resolve "reaches the database again" arrives; rules are evaluated again from
   then.
""",
    ),
    OwnAlert(
        name="alerting-stalled",
        means="""No alert evaluation has completed for more than 3 evaluation intervals: no
rule is evaluated and no other alert is sent. Noticed by every scheduler (not only the leader),
sent straight to Slack once per episode per route.""",
        first_look="""The message's *Cause* (the lease: who holds it, its term, when it was
renewed or expired). `/metrics`: `outbox_monitor_alerting_stalled 1`,
`outbox_monitor_last_evaluation_age_seconds`. The schedulers' logs: one ERROR
`alerting is stalled: …` per episode. The Overview and Alerts pages show a red banner. The
lease: `SELECT * FROM outbox_monitor.leader_leases;`.""",
        causes="""The leader is hung (stopped, swapping, frozen inside a write transaction); a
stranger process with the scheduler's login holds the lease without evaluating; every
evaluation fails or never ends (the log says why).""",
        fix="""A hung leader is replaced by a follower once its lease expires (5–15 s), and
fenced: it writes nothing more when it wakes. One frozen *inside* a write transaction keeps its
lease row locked until Postgres ends that session: end it with
`SELECT pg_terminate_backend(<the lease's backend pid>);` (and set
`idle_in_transaction_session_timeout` on the scheduler's login). Stop a stranger holding the
lease; give the scheduler login to the schedulers only. Run two schedulers: a single one that
is frozen cannot tell anyone (alert on `up`/`absent()` in Prometheus).""",
        over="""An evaluation completes: the resolve "Alert evaluation of … has resumed" names
the new holder.""",
        runbook="""\
1. Read the message's Cause: who holds the lease, its term, when it was last renewed.
2. Look at the lease: `SELECT * FROM outbox_monitor.leader_leases;` and the holder's session in
   pg_stat_activity.
3. A hung leader is replaced by a follower when its lease expires (5-15 s); one frozen inside a
   write transaction keeps the lease row locked: end that session with `SELECT
   pg_terminate_backend(PID);` (the lease's backend pid).
4. A process that is not a scheduler holds the lease with the scheduler's login: stop it, and
   give that login to the schedulers only.
5. Every evaluation fails: the schedulers' log says why (ERROR "alerting is stalled"); fix what
   it names.
6. Over when an evaluation completes: the resolve "Alert evaluation has resumed" names the new
   holder.
""",
    ),
    OwnAlert(
        name="replica-lag",
        means="""`OUTBOX_MONITOR_DSN` is a hot standby whose replay lags more than
`OUTBOX_MONITOR_MAX_REPLICA_LAG` (60 s), confirmed by a second reading: the leader evaluates no
rule and records no sample until it catches up, so no alert fires or resolves on stale figures.
One message per route per episode.""",
        first_look="""The banner on every dashboard page (the lag, yellow over the limit);
`/healthz` ("200 ok: rules not evaluated: replica lags …"); `outbox_monitor_replica_lag_seconds`
and `outbox_monitor_evaluation_skipped 1` on `/metrics`.""",
        causes="""Replay paused on the standby; a long query on the standby holding replay
(`max_standby_streaming_delay`); WAL arriving faster than the standby replays; the standby cut
off from its primary.""",
        fix="""On the standby: `SELECT pg_is_wal_replay_paused();` and
`SELECT pg_wal_replay_resume();` when paused; `pg_stat_wal_receiver` when it is cut off; cancel
the query holding replay. When the standby cannot catch up soon, point `OUTBOX_MONITOR_DSN` at
the primary and restart the scheduler ([Read replicas](deploy.md#read-replicas)).""",
        over="""The lag is back under the limit: one resolve per route, and evaluation goes
on.""",
        runbook="""\
1. On the standby: `SELECT pg_is_wal_replay_paused();` and, when it is paused, `SELECT
   pg_wal_replay_resume();`.
2. Cut off from its primary? `SELECT * FROM pg_stat_wal_receiver;` shows no streaming: fix the
   replication connection.
3. A long query on the standby holds replay (max_standby_streaming_delay): cancel it.
4. It cannot catch up soon: point OUTBOX_MONITOR_DSN at the primary and restart the scheduler;
   rules are evaluated from the primary meanwhile.
5. Over when the lag is back under OUTBOX_MONITOR_MAX_REPLICA_LAG: the resolve arrives and
   evaluation goes on.
""",
    ),
    OwnAlert(
        name="writes-failing",
        means="""The database answers reads but refuses the leader's writes — a full disk
(SQLSTATE 53100), another exhausted resource (class 53), an I/O error (class 58), a server
turned read-only (25006) — for 3 evaluation intervals: no sample, alert state, notification or
lease stamp is stored. The notification outbox cannot carry it, so the leader of the moment the
writes began to fail posts it straight to Slack, once per route, and its resolve when the
writes succeed again; nothing while database-unreachable fires.""",
        first_look="""The message's error (the SQLSTATE and its text). The red banner "The
scheduler cannot write" on the Overview and Alerts pages; `outbox_monitor_writes_failing 1` on
`/metrics`; the `/healthz` notice; the scheduler's ERROR log line when the writes began to
fail.""",
        causes="""The database's disk is full (WAL or data); the server was turned read-only
(`default_transaction_read_only`, a promoted standby's old primary); an I/O error; another
resource exhausted (shared memory, locks).""",
        fix="""On the database side: free or grow the disk (old WAL kept by a replication
slot is a common cause: `pg_replication_slots`), turn the server writable again, fix the
storage. The scheduler needs nothing: its jobs write again once the database takes them.""",
        over="""The writes succeed again (a completed evaluation proves it): one resolve per
route that got the alert.""",
        runbook="""\
1. Read the message's error: 53100 is a full disk, 25006 a read-only server, class 58 an I/O
   error, class 53 another exhausted resource.
2. Full disk: free or grow it; old WAL kept by a replication slot is a common cause (`SELECT
   slot_name, active, restart_lsn FROM pg_replication_slots;`): drop a slot nobody uses.
3. Read-only: `SHOW default_transaction_read_only;` and `SELECT pg_is_in_recovery();`; point
   OUTBOX_MONITOR_PRIMARY_DSN at the writable primary after a failover.
4. The scheduler needs no restart: its jobs write again once the database takes them.
5. Over when the writes succeed again: one resolve per route.
""",
    ),
    OwnAlert(
        name="receiver-failing",
        means="""A receiver of `alerts.yml` (a Slack route, PagerDuty, a signed webhook) keeps
failing: its oldest undelivered message was tried 3 times without being taken (down, 429, 5xx,
no answer, an error body), or its newest message was refused for good (a 400, a revoked
webhook). Its alerts wait, in order (or were refused). Sent by the leader's sender through
every *other* receiver that is not failing, one per route; with no other receiver, only the
Alerts page, the log and `/metrics` say it.""",
        first_look="""**Alerts**: the red banner naming the route, its type, since when, the
messages waiting and the last error; `outbox_monitor_receiver_failing{route,type} 1` and
`outbox_monitor_receiver_undelivered` on `/metrics`; the scheduler's ERROR line.""",
        causes="""The receiver's service is down or rate limits; a revoked or rotated secret
(a routing key, a webhook URL, the HMAC secret, the Slack token); a proxy or firewall between
the scheduler and the receiver.""",
        fix="""On the receiver's side, or the variable the route names (then restart the
scheduler). `outbox-monitor alerts test --route <name>` sends one message and prints the
receiver's answer. Nothing needs replaying: the waiting messages are delivered in order once it
takes them (a message refused for good is not sent again).""",
        over="""A message of the route is delivered: the resolve through the other
receivers, the banner gone.""",
        runbook="""\
1. Read the alert's last error: refused or timed out (the receiver or the network), 401/403
   (a revoked or rotated secret), 429 (rate limited: it waits and retries), 400 (refused for
   good).
2. Run `outbox-monitor alerts test --route <name>` from the scheduler's host: it prints the
   receiver's answer.
3. A secret: export the new value in the variable the route names and restart the scheduler.
4. Nothing needs replaying: the waiting messages go out in order once the receiver takes them.
5. Over when the resolve arrives and the Alerts page's banner is gone.
""",
    ),
    OwnAlert(
        name="alertmanager-unreachable",
        means="""An Alertmanager of a `type: alertmanager` route has refused every post of the
leading scheduler for 3 evaluation intervals (down, an HTTP error, no answer within 5 s). The
alerts it already holds end there 4 intervals after the last post that worked, and Alertmanager
sends their resolves: its receivers are told the alerts ended when they did not. One message
per other route per episode (instance `url=<the URL>`); with Alertmanager as the only receiver,
only the Alerts page, the log and `/metrics` say it.""",
        first_look="""**Alerts**: the red line naming the URL, the error and since when; the
scheduler's WARNING lines (`alertmanager <url>: posting … failed: …`);
`outbox_monitor_alertmanager_post_failures_total{url}` rising and
`outbox_monitor_alertmanager_last_success_timestamp_seconds{url}` stopped; `/healthz` ("ok:
alertmanager <url> failing since …").""",
        causes="""Alertmanager restarting or down; a wrong URL or port in `alertmanager_urls`
(or its variable); a route prefix (`--web.route-prefix`) missing from the URL (HTTP 404); a
proxy in front refusing the credentials (401/403); the network between the two.""",
        fix="""On the Alertmanager side, or the URL in `alerts.yml` (then restart the
scheduler). `outbox-monitor alerts test --route <name>` posts a test alert to each URL of the
route and names the one that refuses it. Nothing needs replaying: the next post after it
recovers carries every firing alert again.""",
        over="""A post to it works again: one resolve per route, the red line gone.""",
        runbook="""\
1. Read the error: refused or timed out (Alertmanager down or restarting), 404 (a
   --web.route-prefix missing from the URL), 401/403 (a proxy refusing the credentials).
2. Run `outbox-monitor alerts test --route <name>`: it posts a test alert to each URL of the
   route and names the one that refuses it.
3. Fix Alertmanager, or the URL in alerts.yml (or its variable) and restart the scheduler.
4. Nothing needs replaying: the next post that works carries every firing alert again.
5. Over when the resolve arrives and the Alerts page's red line is gone.
""",
    ),
    OwnAlert(
        name="A rule's evaluation error",
        means="""A rule could not be evaluated ("⚠️ EVALUATION ERROR · rule"): its query
failed or timed out, or the rule cannot be computed (a `predict` shorter than the samples
need). The other rules carry on. Its message shows that rule's own `runbook:` steps.""",
        first_look="""**Alerts**: the rule's state table shows the instance in `error` with the
error and its hint; the scheduler's log has the same line.""",
        causes="""The statement timeout (`OUTBOX_MONITOR_STATEMENT_TIMEOUT`, 5 s) on a big
table without the recommended indexes; a missing grant (the hint names it and the role to
join); a migration not applied after an upgrade; a rule the samples cannot serve.""",
        fix="""What the hint says: `outbox-monitor init-db` (indexes, migrations); the grants
of `outbox-monitor init-db --print-grants`; the rule in `alerts.yml`, checked with
`outbox-monitor alerts validate` and tried with `outbox-monitor check --json`.""",
        over="""The next evaluation succeeds: "RESOLVED".""",
    ),
    OwnAlert(
        name="sampler-stalled (Prometheus only)",
        means="""`deploy/prometheus/rules.yml` only: no scheduler recorded a sample for 5
minutes (`outbox_monitor_sampler_lag_seconds` over 300 s, for 5 minutes). The history charts
and forecasts go stale.""",
        first_look="""Each replica's `/healthz` (its `last_error`) and `outbox_monitor_leader`:
is any scheduler the leader? Their logs.""",
        causes="""No scheduler runs or leads; the sampler's statements fail (a timeout, a
grant).""",
        fix="""Start a scheduler; fix what `last_error` names.""",
        over="""A sample is recorded: the lag falls under 300 s and Prometheus resolves
it.""",
    ),
)
"""Every alert of the page, in its order."""

_BY_NAME = {alert.name: alert for alert in OWN_ALERTS}


def steps(name: str) -> list[str]:
    """The runbook steps of the own alert ``name`` (``OwnAlert.name``, e.g.
    ``outage.RULE_NAME``), each one line without its number, as a payload's ``runbook``
    holds them; ``[]`` for an alert without steps.

    Raises:
        KeyError: no own alert has that name.
    """
    runbook = _BY_NAME[name].runbook
    return list(steps_of(check_runbook(runbook))) if runbook is not None else []
