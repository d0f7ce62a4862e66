-- The window's finished rows per event type as the scheduler's sampler last read them (issue
-- 32 item 3): beside its backlog pass (migration 031), each event type's latency P95, rows
-- processed and finished rows created in the window (named query finished_by_event_type, every
-- event type) and the window they were read over, in seconds. The Overview's table by event
-- type takes its P95 and rates from here while the snapshot is fresh and of the page's window,
-- and says how old they are; NULL when the sampler found more event types than it keeps
-- (figures.backlog.FINISHED_SAMPLE_MAX_TYPES): the page then reads them itself. status --json
-- and the alerts never read it.
ALTER TABLE outbox_monitor.backlog_snapshots
    ADD COLUMN finished jsonb,
    ADD COLUMN finished_window double precision;
