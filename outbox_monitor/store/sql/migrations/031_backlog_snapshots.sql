-- The backlog as the scheduler's sampler last read it (issue 32 item 3): one row per outbox
-- table, replaced at every sample, holding the groups of its one pass over the pending and
-- processing rows (named query backlog_pass: by event type and attempts, each with its
-- backlog figures and the workers' liveness parts; instants as ISO text). Above a backlog
-- of figures.backlog.SAMPLED_ABOVE_ROWS the Overview reads this row instead of the backlog's
-- heap while it is fresh, and says how old it is; status --json and the alerts never read it.
CREATE TABLE outbox_monitor.backlog_snapshots (
    table_name text PRIMARY KEY,
    sampled_at timestamptz NOT NULL,
    groups     jsonb NOT NULL
);
