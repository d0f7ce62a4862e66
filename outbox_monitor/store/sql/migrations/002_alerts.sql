-- Alerting state (issue 3): rule instances and their transitions, the notification outbox
-- that the Slack sender drains, and silences. All times are the database's or the
-- evaluator's injectable clock, stored as timestamptz.

-- One row per rule instance ("" for a rule without `by`, else e.g. "event_type=order.paid").
-- state: inactive | pending | firing | error. firing_seq counts firing episodes, so the
-- notification of each episode has its own dedupe key.
CREATE TABLE outbox_monitor.alert_instances (
    rule              text NOT NULL,
    instance          text NOT NULL,
    labels            jsonb NOT NULL DEFAULT '{}',
    state             text NOT NULL DEFAULT 'inactive'
                      CHECK (state IN ('inactive', 'pending', 'firing', 'error')),
    value             double precision,
    threshold         double precision,
    pending_since     timestamptz,
    firing_since      timestamptz,
    cleared_since     timestamptz,
    last_evaluated_at timestamptz,
    last_notified_at  timestamptz,
    firing_seq        integer NOT NULL DEFAULT 0,
    error             text,
    PRIMARY KEY (rule, instance)
);

CREATE TABLE outbox_monitor.alert_transitions (
    id         bigserial PRIMARY KEY,
    rule       text NOT NULL,
    instance   text NOT NULL,
    from_state text NOT NULL,
    to_state   text NOT NULL,
    value      double precision,
    at         timestamptz NOT NULL,
    detail     text
);
CREATE INDEX alert_transitions_at_idx ON outbox_monitor.alert_transitions (at DESC);

-- The notification outbox: written in the same transaction as the transition it reports,
-- deduped by (rule, instance, firing_seq, kind). The sender delivers due rows in id order
-- per route and records every outcome. slack_ts/slack_channel identify the posted message
-- (bot transport) so a resolve can chat.update it and reply in its thread.
CREATE TABLE outbox_monitor.notifications (
    id             bigserial PRIMARY KEY,
    dedupe_key     text NOT NULL UNIQUE,
    rule           text NOT NULL,
    instance       text NOT NULL,
    kind           text NOT NULL
                   CHECK (kind IN ('firing', 'resolved', 'repeat', 'error', 'test')),
    route          text NOT NULL,
    evaluation_id  uuid,
    payload        jsonb NOT NULL,
    silenced       boolean NOT NULL DEFAULT false,
    status         text NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'sent', 'suppressed', 'failed')),
    attempts       integer NOT NULL DEFAULT 0,
    available_at   timestamptz NOT NULL DEFAULT now(),
    last_error     text,
    last_status    integer,
    created_at     timestamptz NOT NULL DEFAULT now(),
    sent_at        timestamptz,
    slack_channel  text,
    slack_ts       text
);
CREATE INDEX notifications_due_idx ON outbox_monitor.notifications (status, available_at, id);

CREATE TABLE outbox_monitor.silences (
    id         bigserial PRIMARY KEY,
    matchers   jsonb NOT NULL,
    starts_at  timestamptz NOT NULL DEFAULT now(),
    ends_at    timestamptz NOT NULL,
    comment    text NOT NULL,
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expired_at timestamptz,
    CHECK (ends_at > starts_at)
);
