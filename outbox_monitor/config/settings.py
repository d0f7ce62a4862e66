"""Settings from the environment, validated at start; every default is a named constant."""

from typing import Literal
from urllib.parse import urlsplit

from pydantic import (
    AliasChoices,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from outbox_monitor.config.values import (
    CommaList,
    OptionalSeconds,
    Seconds,
    Share,
    check_dsn,
    check_header_name,
    check_networks,
    check_oidc_secret,
    check_oidc_url,
    check_role_entries,
    interface_address,
    slack_person,
    split_table_name,
)
from outbox_monitor.errors import ConfigError
from outbox_monitor.privacy.value_detectors import check_value_detector

ENV_PREFIX = "OUTBOX_MONITOR_"
DEFAULT_TABLE = "public.integration_outbox"
DEFAULT_LEDGER_TABLE_NAME = "integration_idempotency"
DEFAULT_LOCK_TIMEOUT_SECONDS = 15 * 60.0
DEFAULT_MAX_ATTEMPTS = 10
DEFAULT_WINDOW_SECONDS = 3600.0
DEFAULT_STATEMENT_TIMEOUT_SECONDS = 5.0
MIN_TIMEOUT_SECONDS = 1.0
"""The shortest lock timeout and Slack timeout accepted: under a second every in-flight row
would count as stuck (and be reaped with auto-reap on), every Slack post would time out."""
MAX_STATEMENT_TIMEOUT_SECONDS = 2_147_483.0
"""Postgres' largest statement_timeout (2^31 - 1 ms, ≈ 24.8 days); a value under 1 ms is
sent as 1 ms (``db._connection_kwargs``), never as 0, which means no timeout."""
DEFAULT_SAMPLE_INTERVAL_SECONDS = 15.0
DEFAULT_MAX_REPLICA_LAG_SECONDS = 60.0
"""The scheduler evaluates no rule (and records no sample) from a read DSN that is a hot
standby lagging more than this (``OUTBOX_MONITOR_MAX_REPLICA_LAG``); it alerts that instead."""
DEFAULT_SAMPLE_RETENTION_SECONDS = 7 * 86400.0
DEFAULT_AUDIT_RETENTION_SECONDS = 400 * 86400.0
"""The audit log's rows of the table are kept this long (``OUTBOX_MONITOR_AUDIT_RETENTION``):
more than a year, for yearly reviews."""
DEFAULT_ALERT_HISTORY_RETENTION_SECONDS = 90 * 86400.0
"""Alert transitions and delivered notifications are kept this long
(``OUTBOX_MONITOR_ALERT_HISTORY_RETENTION``)."""
DEFAULT_BREAKER_LOG_RETENTION_SECONDS = 90 * 86400.0
"""The table's breaker transitions are kept this long (``OUTBOX_MONITOR_BREAKER_LOG_RETENTION``)."""
MIN_OWN_RETENTION_SECONDS = 86400.0
"""The retentions of the product's own logs are at least a day (a shorter one is a typo for
days, and would empty the timeline)."""
DEFAULT_CONTROL_BARRIER_SECONDS = 5.0
"""How long a control change waits for the claims already running (SPEC §5: a change is a
barrier), ``OUTBOX_MONITOR_CONTROL_BARRIER_TIMEOUT``; claims take milliseconds."""
MAX_CONTROL_BARRIER_SECONDS = 60.0
"""The longest such wait: the workers' claims return no row while a change waits."""
DEFAULT_CLAIM_PLAN_INTERVAL_SECONDS = 300.0
"""How often the scheduler EXPLAINs the workers' claim (``OUTBOX_MONITOR_CLAIM_PLAN_INTERVAL``):
planning only, ≈ 1 ms per statement (``health.claim_plan``)."""
DEFAULT_REFRESH_SECONDS = 10.0
DEFAULT_OUTAGE_RETRY_SECONDS = 30.0
"""How long a dashboard session waits after a failed connection before it connects again
(``OUTBOX_MONITOR_OUTAGE_RETRY``; ``ui/banners.py``)."""
MAX_BROWSER_TIMER_SECONDS = 86_400.0
"""The longest dashboard refresh and outage retry accepted (one day): each becomes a timer
in the browser (``st.fragment(run_every=…)``, a ``setInterval``), which overflows past
2^31 - 1 ms (≈ 24.8 days) and then fires at once, in a loop; a day is far past any useful
refresh and well inside that limit."""
DEFAULT_CLAIM_BATCH = 50
DEFAULT_DASHBOARD_URL = "http://127.0.0.1:8501"
"""The dashboard the buttons of Slack messages link to when ``OUTBOX_MONITOR_DASHBOARD_URL``
is unset."""
DEFAULT_METRICS_PORT = 9108
"""Port of the scheduler's ``/metrics`` and ``/healthz`` (0 disables the server)."""
DEFAULT_METRICS_ADDRESS = "127.0.0.1"
DEFAULT_SLACK_ACTIONS_ADDRESS = "127.0.0.1"
DEFAULT_SLACK_ACTIONS_MAX_BODY = 64 * 1024
"""Bytes of a Slack interactivity request accepted (a block_actions payload of a message of
50 blocks is ≈ 20 kB); a longer one is refused with 413 before it is read."""
DEFAULT_SLACK_ACTIONS_RESPONSE_URL = "https://hooks.slack.com/"
"""Interface of that server; ``0.0.0.0`` in a container so Prometheus can reach it."""
DEFAULT_METRICS_TOP_EVENT_TYPES = 10
"""Event types labelled one by one on ``/metrics``; the rest are summed as ``other``."""
MAX_METRICS_TOP_EVENT_TYPES = 200
DEFAULT_OVERVIEW_TOP_EVENT_TYPES = 20
"""Event types with a row of their own in the Overview's table by event type, most troubled
first; the rest share one row ``other`` (``OUTBOX_MONITOR_OVERVIEW_TOP_EVENT_TYPES``, at most
``MAX_METRICS_TOP_EVENT_TYPES``)."""
DEFAULT_METRICS_CACHE_SECONDS = 5.0
"""A scrape reuses figures computed less than this long ago (several Prometheus replicas)."""
MAX_METRICS_CACHE_SECONDS = 300.0
DEFAULT_SLACK_TIMEOUT_SECONDS = 10.0
"""Timeout of each Slack request (connect, then each read), seconds."""
DEFAULT_AUTO_REAP_MAX_ROWS = 500
"""The most rows one run of the automatic reaper takes (``OUTBOX_MONITOR_AUTO_REAP_MAX_ROWS``):
one batch of one transaction whose audit row records every id (``actions.run``: batches of
1,000, up to 1,000 ids per audit row), and at most 6,000 rows an hour at the default run
interval (lock timeout / 3 = 5 min) — far more than a crashed worker strands (an n8n
execution's batch is tens of rows), far less than a whole fleet's worth of rows handed out
again at once when every lock only looks expired (a stalled fleet, a clock step, a lock
timeout set too low)."""
MAX_AUTO_REAP_MAX_ROWS = 100_000
"""The largest row budget accepted: one run's ids travel as one array parameter."""
DEFAULT_AUTO_REAP_MAX_SHARE = 0.5
"""The most of the stuck rows one run of the automatic reaper takes
(``OUTBOX_MONITOR_AUTO_REAP_MAX_SHARE``), rounded up (one stuck row is always taken): when
many rows look stuck at once, the likelier cause is something wrong with the fleet or the
settings rather than many crashes, and half is left for a person to look at (the stuck-lock
alert fires meanwhile) before the next run, a lock timeout / 3 later. A real crash of k rows
is cleared in about log2(k) + 1 runs; set ``100%`` where a stuck row always means a dead
worker."""
MIN_AUTO_PRUNE_SECONDS = 86400.0
"""Automatic prune refuses retentions under one day (as ``actions.prune.preview_prune`` does)."""
DEFAULT_PROXY_HEADER = "X-Forwarded-Email"
DEFAULT_REDACT_KEYS = (
    "*email*",
    "*phone*",
    "card*",
    "*card_number*",
    "*cvv*",
    "*iban*",
    "*ssn*",
    "*token*",
    "*secret*",
    "*password*",
    "*auth*",
    "*api*key*",
    "*credential*",
)
"""JSON key globs (case-insensitive, any depth) whose values are redacted for viewers."""
DEFAULT_REDACT_VALUES = ("card", "email")
"""Value detectors: ``card`` (Luhn-valid 13–19 digit numbers), ``email``, or a regex."""


OIDC_FIELDS = (
    "oidc_metadata_url",
    "oidc_client_id",
    "oidc_client_secret",
    "oidc_cookie_secret",
    "oidc_redirect_url",
)
"""Settings of OIDC sign-in, written into Streamlit's ``[auth]`` secrets at start."""


class Settings(BaseSettings):
    """Everything outbox-monitor needs to know, read from ``OUTBOX_MONITOR_*`` variables.

    Durations are seconds (floats) once loaded; the environment may write ``15m``.
    ``dsn`` comes from ``OUTBOX_MONITOR_DSN``, else ``DATABASE_URL``, else ``None``,
    which lets libpq use its ``PG*`` variables.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        # A ValidationError's text must not quote a DSN or secret that was given.
        hide_input_in_errors=True,
        # each field's docstring is its description in docs/reference/configuration.md
        use_attribute_docstrings=True,
    )

    dsn: str | None = Field(
        default=None,
        validation_alias=AliasChoices("OUTBOX_MONITOR_DSN", "DATABASE_URL", "dsn"),
        repr=False,
    )
    """The database to watch (a libpq connection string or URI); unset: ``DATABASE_URL``,
    then libpq's ``PG*`` variables. May be a hot standby (read replicas)."""
    actions_dsn: str | None = Field(default=None, repr=False)
    """The login of reap, replay, prune, flow control, silences, test alerts and reveals;
    unset: ``OUTBOX_MONITOR_DSN``."""
    primary_dsn: str | None = Field(default=None, repr=False)
    """Where the scheduler writes (its lease, samples, alert state, notifications,
    auto-reap and auto-prune) when ``OUTBOX_MONITOR_DSN`` is a hot standby; unset:
    ``OUTBOX_MONITOR_DSN``."""
    registry_dsn: str | None = Field(default=None, repr=False)
    """With a fleet file: the database where scheduler replicas heartbeat to share the
    outboxes; unset: the first outbox's primary."""
    table: str = DEFAULT_TABLE
    """The outbox table, ``schema.table`` (or ``table``, in ``public``)."""
    ledger_table: str | None = None
    """The workers' idempotency ledger, ``schema.table``; unset:
    ``integration_idempotency`` beside the outbox table."""
    lock_timeout: Seconds = Field(default=DEFAULT_LOCK_TIMEOUT_SECONDS, ge=MIN_TIMEOUT_SECONDS)
    """A ``processing`` row locked longer is stuck (at least ``1s``)."""
    max_attempts: int = Field(default=DEFAULT_MAX_ATTEMPTS, ge=1, le=1000)
    """Attempts before a row is dead-lettered (a reap counts one)."""
    window: Seconds = Field(default=DEFAULT_WINDOW_SECONDS, gt=0)
    """The window of latency, throughput and failures."""
    statement_timeout: Seconds = Field(
        default=DEFAULT_STATEMENT_TIMEOUT_SECONDS, gt=0, le=MAX_STATEMENT_TIMEOUT_SECONDS
    )
    """The ``statement_timeout`` of every monitor session (rounded up to whole
    milliseconds, at least 1 ms: never 0, which Postgres reads as no timeout)."""
    sample_interval: Seconds = Field(default=DEFAULT_SAMPLE_INTERVAL_SECONDS, ge=1)
    """How often the sampler records the figures."""
    max_replica_lag: Seconds = Field(default=DEFAULT_MAX_REPLICA_LAG_SECONDS, gt=0)
    """The scheduler evaluates no rule and records no sample from a hot standby lagging
    more than this, and alerts that instead."""
    sample_retention: Seconds = Field(default=DEFAULT_SAMPLE_RETENTION_SECONDS, gt=0)
    """Samples (headline, per event type, table health), recorded claim plans and statement
    costs older than this are deleted, and workers not seen holding rows for as long are
    forgotten."""
    audit_retention: Seconds = DEFAULT_AUDIT_RETENTION_SECONDS
    """The audit log's rows of this outbox table older than this are deleted (at least
    ``1d``)."""
    alert_history_retention: Seconds = DEFAULT_ALERT_HISTORY_RETENTION_SECONDS
    """Alert transitions and delivered notifications older than this are deleted (at least
    ``1d``)."""
    breaker_log_retention: Seconds = DEFAULT_BREAKER_LOG_RETENTION_SECONDS
    """This outbox table's breaker transitions older than this are deleted (at least
    ``1d``)."""
    control_barrier_timeout: Seconds = Field(
        default=DEFAULT_CONTROL_BARRIER_SECONDS, gt=0, le=MAX_CONTROL_BARRIER_SECONDS
    )
    """How long a control change (pause, resume, limit, breaker, ``controls apply``) waits for
    the claims already running before it commits (at most ``60s``); claims started meanwhile
    hand out no row. Past it the change commits anyway and says that claims still running
    may hand out rows it forbids (they show as ``processing``)."""
    claim_plan_interval: Seconds = Field(default=DEFAULT_CLAIM_PLAN_INTERVAL_SECONDS, ge=1)
    """How often the scheduler EXPLAINs and records the workers' claim (claim health)."""
    refresh: Seconds = Field(default=DEFAULT_REFRESH_SECONDS, ge=1, le=MAX_BROWSER_TIMER_SECONDS)
    """How often the dashboard's live figures refresh (at most ``1d``: a browser timer
    overflows past ≈ 24.8 days and then fires at once, in a loop)."""
    outage_retry: Seconds = Field(
        default=DEFAULT_OUTAGE_RETRY_SECONDS, ge=1, le=MAX_BROWSER_TIMER_SECONDS
    )
    """After a failed connection, how long a dashboard session shows the failure again
    (its live refreshes, clicks and other pages) instead of connecting, so that runs never
    queue up behind connection attempts that time out; then the page tries again by itself
    ("Retry now" tries at once). At most ``1d``: a browser timer overflows past ≈ 24.8 days
    and then fires at once, in a loop."""
    actor: str | None = None
    """Who acts, in the audit log (the CLI's ``--actor``); unset: the OS user."""
    metrics_port: int = Field(default=DEFAULT_METRICS_PORT, ge=0, le=65535)
    """The port of the scheduler's ``/metrics`` and ``/healthz`` (``0``: off)."""
    metrics_address: str = DEFAULT_METRICS_ADDRESS
    """The interface of that endpoint (``0.0.0.0`` in a container, so that Prometheus
    reaches it)."""
    slack_actions_port: int = Field(default=0, ge=0, le=65535)
    """The port of the listener of Slack's button presses (Acknowledge, Silence 1 h;
    docs/slack-actions.md), beside the scheduler; ``0``: off, and the Slack messages carry
    no action buttons. Never the ``/metrics`` port. Needs ``SLACK_SIGNING_SECRET``,
    ``OUTBOX_MONITOR_ACTIONS_DSN``, ``…_SLACK_ACTIONS_TEAMS`` and ``…_SLACK_ACTIONS_PEOPLE``."""
    slack_actions_address: str = DEFAULT_SLACK_ACTIONS_ADDRESS
    """The interface of that listener (behind the HTTPS proxy that Slack's Request URL
    reaches)."""
    slack_actions_teams: CommaList = ()
    """The Slack workspaces (team ids, ``T0123ABCD``, comma-separated) whose people may press
    the buttons; a press from any other team (Slack Connect: a shared channel's other
    organisation) is refused and logged."""
    slack_actions_people: CommaList = ()
    """Who may press them: ``TEAM/USER=e-mail`` entries (``T0123ABCD/U0456EFGH=alice@example.com``),
    comma-separated; the e-mail's role is the dashboard's (``OUTBOX_MONITOR_OPERATORS``
    …, an operator at least) and is what the audit log records. Any other user is refused."""
    slack_actions_max_body: int = Field(
        default=DEFAULT_SLACK_ACTIONS_MAX_BODY, ge=1024, le=1024 * 1024
    )
    """The largest request body (bytes) the listener reads; a larger one is refused (413)."""
    slack_actions_response_url: str = DEFAULT_SLACK_ACTIONS_RESPONSE_URL
    """The start every press's ``response_url`` must have to be posted the result to (Slack's
    own: ``https://hooks.slack.com/``); a press naming another is refused."""
    metrics_top_event_types: int = Field(
        default=DEFAULT_METRICS_TOP_EVENT_TYPES, ge=1, le=MAX_METRICS_TOP_EVENT_TYPES
    )
    """Event types labelled one by one on ``/metrics``; the rest are summed as ``other``."""
    metrics_cache: Seconds = Field(default=DEFAULT_METRICS_CACHE_SECONDS, ge=0)
    """Scrapes within this reuse the last figures (several Prometheus replicas; at most
    ``5m``)."""
    overview_top_event_types: int = Field(
        default=DEFAULT_OVERVIEW_TOP_EVENT_TYPES, ge=1, le=MAX_METRICS_TOP_EVENT_TYPES
    )
    """Rows of the Overview's table by event type, most troubled first; the rest share one
    row ``other``."""
    slack_timeout: Seconds = Field(default=DEFAULT_SLACK_TIMEOUT_SECONDS, ge=MIN_TIMEOUT_SECONDS)
    """The Slack client's timeout of each request (at least ``1s``)."""
    dashboard_url: str = DEFAULT_DASHBOARD_URL
    """The base of the links in Slack messages (an http(s) URL)."""
    heartbeat_url: str | None = None
    """A dead-man's switch outside the monitor (a Healthchecks-style ping URL): the leading
    scheduler GETs it after each successful evaluation pass, never after a failed one, so
    the check alerts when the pings stop. A failed ping is logged and on ``/healthz``;
    evaluation never waits for it. With a fleet file, each outbox's evaluation pings."""
    auto_reap: bool = False
    """The leading scheduler reaps stuck locks every lock timeout / 3, at most a budget per
    run (the next two settings), the oldest locks first; the rest wait for its next run."""
    auto_reap_max_rows: int = Field(
        default=DEFAULT_AUTO_REAP_MAX_ROWS, ge=1, le=MAX_AUTO_REAP_MAX_ROWS
    )
    """The most stuck rows one run of the automatic reaper takes."""
    auto_reap_max_share: Share = Field(default=DEFAULT_AUTO_REAP_MAX_SHARE, gt=0, le=1)
    """The most of the stuck rows one run of the automatic reaper takes, rounded up: a run
    takes the smaller of the two budgets."""
    auto_prune_done: OptionalSeconds = None
    """The leading scheduler prunes done rows older than this, daily (at least ``1d``);
    unset or ``off``: never."""
    auto_prune_failed: OptionalSeconds = None
    """The same for dead letters (at least ``1d``); unset or ``off``: never."""
    auth: Literal["local", "oidc", "proxy"] = "local"
    """The dashboard's sign-in mode: ``local`` (no sign-in, loopback only), ``oidc`` or
    ``proxy``."""
    insecure_no_auth: bool = False
    """Serve ``local`` mode on a non-loopback address anyway."""
    oidc_metadata_url: str | None = None
    """The OpenID provider's ``/.well-known/openid-configuration`` (``oidc`` mode: all five
    ``OUTBOX_MONITOR_OIDC_*`` settings, or none of them)."""
    oidc_client_id: str | None = None
    """The dashboard's OIDC client id."""
    oidc_client_secret: SecretStr | None = None
    """The dashboard's OIDC client secret."""
    oidc_cookie_secret: SecretStr | None = None
    """Signs the session cookie (at least 32 random characters)."""
    oidc_redirect_url: str | None = None
    """``https://<dashboard>/oauth2callback``."""
    proxy_header: str = DEFAULT_PROXY_HEADER
    """The proxy's identity header (``proxy`` mode only)."""
    proxy_groups_header: str | None = None  # read only when set (docs/security.md)
    """The proxy's comma-separated groups header, e.g. ``X-Forwarded-Groups``; set it only
    if the proxy sets it. Unset: no groups are read."""
    trusted_proxies: CommaList = ()
    """``proxy`` mode: the networks (CIDRs, comma-separated: ``10.0.0.0/8, fd00::/8``; an
    address alone is ``/32``) whose connections' identity headers are believed, the peer
    address of the connection, never ``X-Forwarded-For``. Empty: loopback only
    (``127.0.0.0/8``, ``::1``), and the dashboard refuses to start in ``proxy`` mode on a
    non-loopback ``--address``. Set: exactly these networks (add ``127.0.0.1`` if the proxy
    also runs on this machine), none wider than ``/8`` (IPv6 ``/7``): ``0.0.0.0/0`` is
    refused."""
    admins: CommaList = ()
    """Who is an admin (an operator, and settings-like pages): comma-separated e-mails
    (``alice@example.com``), domains (``@example.com``) or claim matches
    (``groups=oncall``). The highest matching role wins; no match, no access."""
    operators: CommaList = ()
    """Who is an operator (also reap, replay, prune, flow control, silences, payload
    reveals); entries as in ``OUTBOX_MONITOR_ADMINS``."""
    viewers: CommaList = ()
    """Who is a viewer (every figure, row and alert; payloads redacted); entries as in
    ``OUTBOX_MONITOR_ADMINS``."""
    redact_keys: CommaList = DEFAULT_REDACT_KEYS
    """Payload key globs (case-insensitive, any depth) whose values viewers see as
    ``[redacted]``."""
    redact_values: CommaList = DEFAULT_REDACT_VALUES
    """Value detectors: ``card`` (Luhn-valid 13–19 digit numbers), ``email``, or regular
    expressions (a JSON array for one holding a comma)."""
    # The fleet file's outbox these settings are of (``fleet.load_fleet``); never read from
    # the environment: a fleet of one has ''.
    _fleet_outbox: str = PrivateAttr(default="")

    @field_validator("dsn", "actions_dsn", "primary_dsn", "registry_dsn")
    @classmethod
    def _check_dsn(cls, value: str | None) -> str | None:
        return check_dsn(value)

    @field_validator("metrics_address", "slack_actions_address")
    @classmethod
    def _check_metrics_address(cls, value: str) -> str:
        return interface_address(value)

    @field_validator("slack_actions_people")
    @classmethod
    def _check_slack_people(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            slack_person(entry)  # ValueError naming the entry
        return value

    @model_validator(mode="after")
    def _check_slack_actions(self) -> "Settings":
        if not self.slack_actions_port:
            return self
        if self.slack_actions_port == self.metrics_port:
            raise ValueError(
                f"OUTBOX_MONITOR_SLACK_ACTIONS_PORT: {self.slack_actions_port} is the /metrics "
                "port (OUTBOX_MONITOR_METRICS_PORT); the Slack listener needs a port of its own"
            )
        if not self.slack_actions_teams or not self.slack_actions_people:
            raise ValueError(
                "OUTBOX_MONITOR_SLACK_ACTIONS_PORT is set: set OUTBOX_MONITOR_SLACK_ACTIONS_TEAMS "
                "and OUTBOX_MONITOR_SLACK_ACTIONS_PEOPLE too (nobody could press a button)"
            )
        for entry in self.slack_actions_people:
            team = slack_person(entry)[0]
            if team not in self.slack_actions_teams:
                raise ValueError(
                    f"OUTBOX_MONITOR_SLACK_ACTIONS_PEOPLE: {entry!r} is of team {team}, which "
                    "OUTBOX_MONITOR_SLACK_ACTIONS_TEAMS does not list"
                )
        return self

    @field_validator("dashboard_url")
    @classmethod
    def _check_dashboard_url(cls, value: str) -> str:
        """The base of the links in Slack messages (read where messages are rendered,
        ``alerts.message.dashboard_base_url``): an http(s) URL, or Slack refuses them."""
        url = value.strip() or DEFAULT_DASHBOARD_URL
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query:
            raise ValueError(
                f"expected the dashboard's http(s) URL, e.g. https://monitor.example.com, "
                f"got {value!r} (the buttons of Slack messages link to it)"
            )
        return url

    @field_validator("heartbeat_url")
    @classmethod
    def _check_heartbeat_url(cls, value: str | None) -> str | None:
        """An http(s) URL (``service.heartbeat``); empty: none. Its value is never echoed:
        the path of a ping URL is its check's secret."""
        url = (value or "").strip()
        if not url:
            return None
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("expected an http(s) URL, e.g. https://hc-ping.com/<uuid>")
        return url

    @field_validator("metrics_cache")
    @classmethod
    def _check_metrics_cache(cls, value: float) -> float:
        if value > MAX_METRICS_CACHE_SECONDS:
            raise ValueError(
                f"at most {MAX_METRICS_CACHE_SECONDS:g} s (figures older than that mislead "
                f"alerts), got {value:g} s"
            )
        return value

    @field_validator("auto_prune_done", "auto_prune_failed")
    @classmethod
    def _check_auto_prune(cls, value: float | None) -> float | None:
        if value is not None and value < MIN_AUTO_PRUNE_SECONDS:
            raise ValueError(
                f"retention is written in days (e.g. 30d for done, 90d for failed); "
                f"at least 1d, got {value:g} s (leave it unset to keep rows)"
            )
        return value

    @field_validator("audit_retention", "alert_history_retention", "breaker_log_retention")
    @classmethod
    def _check_own_retention(cls, value: float) -> float:
        if value < MIN_OWN_RETENTION_SECONDS:
            raise ValueError(
                f"retention is written in days (e.g. 400d for the audit log, 90d for alert "
                f"history); at least 1d, got {value:g} s"
            )
        return value

    @field_validator("admins", "operators", "viewers")
    @classmethod
    def _check_role_entries(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return check_role_entries(value)

    @field_validator("redact_values")
    @classmethod
    def _check_redact_values(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            check_value_detector(entry)  # ValueError naming the entry
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _check_trusted_proxies(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return check_networks(value)

    @field_validator("proxy_header", "proxy_groups_header")
    @classmethod
    def _check_header(cls, value: str | None) -> str | None:
        return check_header_name(value)

    @field_validator("oidc_metadata_url", "oidc_redirect_url")
    @classmethod
    def _check_oidc_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        return check_oidc_url(value, info.field_name)

    @field_validator("oidc_cookie_secret", "oidc_client_secret")
    @classmethod
    def _check_oidc_secret(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        return check_oidc_secret(value, info.field_name)

    @model_validator(mode="after")
    def _check_oidc(self) -> "Settings":
        given = {name: getattr(self, name) is not None for name in OIDC_FIELDS}
        if any(given.values()) and not all(given.values()):
            missing = ", ".join(ENV_PREFIX + n.upper() for n, ok in given.items() if not ok)
            raise ValueError(
                f"OIDC sign-in needs all of its settings; missing {missing} (or set none "
                "of them and configure [auth] in .streamlit/secrets.toml)"
            )
        return self

    @property
    def actions_target(self) -> str | None:
        """The DSN of operator actions: ``actions_dsn``, else ``dsn`` (least privilege)."""
        return self.actions_dsn or self.dsn

    @property
    def primary_target(self) -> str | None:
        """The DSN every write of the scheduler goes through (its lease, samples, alert
        state, notifications, automatic reap and prune): ``primary_dsn``, else ``dsn``.
        ``dsn`` may then be a hot standby that serves the figures (``store.standby``)."""
        return self.primary_dsn or self.dsn

    @field_validator("table", "ledger_table")
    @classmethod
    def _check_table_name(cls, value: str | None) -> str | None:
        if value is not None:
            split_table_name(value)
        return value

    @property
    def fleet_outbox(self) -> str:
        """The name of the fleet file's outbox these settings are of; ``""`` for the single
        outbox of the ``OUTBOX_MONITOR_*`` settings. The alert state (instances, transitions,
        notifications) is keyed by it (migration 017), so two outboxes of one database keep
        theirs apart and a fleet of one keeps the keys it had before fleets."""
        return self._fleet_outbox

    def of_fleet_outbox(self, name: str) -> "Settings":
        """A copy of these settings as those of the fleet file's outbox ``name``
        (``fleet_outbox``)."""
        copy = self.model_copy()
        copy._fleet_outbox = name
        return copy

    @property
    def table_parts(self) -> tuple[str, str]:
        """``(schema, table)`` of the outbox table."""
        return split_table_name(self.table)

    @property
    def ledger_parts(self) -> tuple[str, str]:
        """``(schema, table)`` of the idempotency ledger (default: beside the outbox)."""
        if self.ledger_table:
            return split_table_name(self.ledger_table)
        return self.table_parts[0], DEFAULT_LEDGER_TABLE_NAME


def _variable_name(loc: tuple, overridden: set[str]) -> str:
    if not loc:  # a check across several settings: its message names them
        return "OUTBOX_MONITOR_*"
    field = str(loc[0])
    if field in ("OUTBOX_MONITOR_DSN", "DATABASE_URL"):
        field = "dsn"
    variable = ENV_PREFIX + field.upper()
    return f"--{field.replace('_', '-')}" if field in overridden else variable


def load_settings(**overrides: object) -> Settings:
    """Read and validate the settings.

    Args:
        **overrides: field values that win over the environment (CLI options, tests);
            ``None`` values are ignored so unset options keep the environment's value.

    Returns:
        A frozen ``Settings``.

    Raises:
        ConfigError: one line per invalid variable, naming it and what is wrong, e.g.
            ``OUTBOX_MONITOR_LOCK_TIMEOUT: expected a duration such as 90s, ... got 'abc'``
            (an override is named as its option: ``--table: ...``).
    """
    given = {key: value for key, value in overrides.items() if value is not None}
    try:
        return Settings(**given)
    except ValidationError as error:
        lines, sources = [], set()
        for problem in error.errors():
            message = problem["msg"].removeprefix("Value error, ")
            name = _variable_name(problem["loc"], set(given))
            lines.append(f"{name}: {message}")
            sources.add("option(s)" if name.startswith("--") else "environment variable(s)")
        raise ConfigError(
            "invalid configuration:\n  " + "\n  ".join(lines),
            hint=f"Fix the {' and '.join(sorted(sources, reverse=True))} above; "
            "docs/reference/configuration.md lists every setting.",
        ) from None
