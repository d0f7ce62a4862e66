-- Alert grouping (issue 31 item 3): the state of each group of a route with group_by, so that
-- a group's messages survive a leader's crash or failover (the next leader reads it here).
--
-- One row per (outbox, route, group): group_key is the SHA-256 of the group's labels (the
-- values of the route's group_by; labels holds them); episode counts the group's episodes
-- (from its first message to the one saying every instance resolved); open says whether the
-- episode's first message went out; seq counts the episode's messages (its message keys:
-- update-<seq>, repeat-<seq>); members holds each instance listed, as last told; the Slack
-- card (bot token) is slack_channel/slack_ts, edited as instances come and go. Written by
-- the sender in the transaction that marks the message's notifications sent.
CREATE TABLE outbox_monitor.alert_groups (
    outbox        text NOT NULL DEFAULT '',
    route         text NOT NULL,
    group_key     text NOT NULL,
    labels        jsonb NOT NULL,
    episode       integer NOT NULL DEFAULT 0,
    open          boolean NOT NULL DEFAULT false,
    seq           integer NOT NULL DEFAULT 0,
    members       jsonb NOT NULL DEFAULT '[]',
    first_sent_at timestamptz,
    last_sent_at  timestamptz,
    slack_channel text,
    slack_ts      text,
    PRIMARY KEY (outbox, route, group_key)
);
