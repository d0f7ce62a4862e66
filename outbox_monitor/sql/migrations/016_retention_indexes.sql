-- Retention of the product's own tables (issue 17 item 5): the scheduler's retention job
-- deletes, in batches oldest first, notifications delivered longer ago than
-- OUTBOX_MONITOR_ALERT_HISTORY_RETENTION (maintenance.prune_own_tables). The table had no
-- index on its time: each batch would read every notification. The audit log (at), the alert
-- transitions (at) have theirs; the breaker transitions are few (two per breaker episode).
-- The table is the product's own and written only by the scheduler (never by the workers):
-- built inside init-db's transaction, it blocks only the scheduler's writes, for the build.
CREATE INDEX notifications_created_at_idx ON outbox_monitor.notifications (created_at);
