-- Leadership of the alert evaluator (issue 10, item 2): a lease row per outbox table,
-- which only the scheduler role may write (a session advisory lock could be taken by any
-- login, the read-only viewer included). Times are the database's clock.
--
-- holder       the scheduler process (host:pid) holding the lease
-- holder_pid   backend pid of its leadership connection: a follower takes over at once when
--              that backend is gone (the leader died), else when expires_at has passed
-- term         the fencing token: +1 at every takeover; the leader's evaluator and sender
--              check it (FOR KEY SHARE) in each write transaction
-- evaluated_at the end of the last completed evaluation pass (NULL: none yet); every
--              scheduler compares it with now() to tell that alerting is stalled
CREATE TABLE outbox_monitor.leader_leases (
    table_name   text PRIMARY KEY,
    holder       text NOT NULL,
    holder_pid   integer NOT NULL,
    term         bigint NOT NULL DEFAULT 1,
    acquired_at  timestamptz NOT NULL DEFAULT now(),
    renewed_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    evaluated_at timestamptz
);

-- The "alerting is stalled" episodes of a table (rule alerting-stalled), found every tick
-- by every scheduler without reading the whole notification table.
CREATE INDEX notifications_stalled_idx ON outbox_monitor.notifications (instance, id)
    WHERE rule = 'alerting-stalled';
