-- The scheduler replicas of a fleet (issue 16 item 5): every `outbox-monitor scheduler`
-- process heartbeats a row here, in the registry database (OUTBOX_MONITOR_REGISTRY_DSN, by
-- default the first outbox's primary), so that each knows how many replicas share the
-- fleet's outboxes and takes at most its share of their leases. Times are the database's.
--
-- fleet        which fleet (a digest of the outbox names): replicas of other fleets sharing
--              the registry database do not count
-- replica      the process (host:pid)
-- backend_pid  backend pid of its heartbeat connection: a replica whose backend is gone
--              (killed, cut off) no longer counts, before its row expires
-- leases       the leases it held at its last heartbeat (information: /metrics, logs)
CREATE TABLE outbox_monitor.scheduler_replicas (
    fleet        text NOT NULL,
    replica      text NOT NULL,
    backend_pid  integer NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    leases       integer NOT NULL DEFAULT 0,
    PRIMARY KEY (fleet, replica)
);
