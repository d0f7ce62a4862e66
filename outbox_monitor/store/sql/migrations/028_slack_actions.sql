-- Acting from Slack (issue 31 item 6): the acknowledgements of alert episodes and the
-- replay cache of Slack's signed button presses.
--
-- alert_acks: one row per acknowledged firing episode (the id of the transition that
-- started it, alert_instances.episode_id): the evaluator queues no repeat of an
-- acknowledged episode, its resolve and the next episode go as before. Written only through
-- the outbox's audited "acknowledge" writer (store/audited_writers.py), with the person's
-- name and the Slack ids of the press.
CREATE TABLE outbox_monitor.alert_acks (
    episode_id    bigint PRIMARY KEY,
    rule          text NOT NULL,
    instance      text NOT NULL,
    acked_by      text NOT NULL,
    slack_team_id text,
    slack_user_id text,
    acked_at      timestamptz NOT NULL DEFAULT now()
);

-- slack_action_requests: the (team_id, action_ts) of every press received in the last
-- minutes, shared by every scheduler's listener (a press replayed to another replica is
-- refused too); rows older than the signature's window are deleted as new ones come.
CREATE TABLE outbox_monitor.slack_action_requests (
    team_id     text NOT NULL,
    action_ts   text NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (team_id, action_ts)
);
CREATE INDEX slack_action_requests_received_idx
    ON outbox_monitor.slack_action_requests (received_at);
