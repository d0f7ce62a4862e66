-- Alert state per outbox (issue 16 item 3): two outboxes of a fleet file in ONE database
-- (two tables) keep their rule instances, transitions and notifications apart. The column
-- `outbox` holds the outbox's name in the fleet file (OUTBOX_MONITOR_OUTBOXES); '' for the
-- single outbox of the OUTBOX_MONITOR_* settings, so the rows of every existing
-- installation keep their keys (a fleet of one without a file is unchanged). Each outbox's
-- evaluator and sender (its leader: the lease is per table) read and write only its rows.
--
-- The keys stay unique as before ((rule, instance), dedupe_key): a fleet file's outbox
-- stores its instance keys scoped by it (`outbox=orders` or `outbox=orders,event_type=...`,
-- alerts.outbox_scope.scoped_instance), so its dedupe keys differ from another outbox's, and
-- a scheduler of the previous release still running during a rolling upgrade keeps writing
-- with its ON CONFLICT clauses. Adding a column with a constant default rewrites no row.
--
-- Silences stay shared by the database's outboxes: a silence without an `outbox` matcher
-- covers every outbox whose instances match it (a fleet file's instances carry the label
-- `outbox`).
ALTER TABLE outbox_monitor.alert_instances ADD COLUMN outbox text NOT NULL DEFAULT '';
ALTER TABLE outbox_monitor.alert_transitions ADD COLUMN outbox text NOT NULL DEFAULT '';
ALTER TABLE outbox_monitor.notifications ADD COLUMN outbox text NOT NULL DEFAULT '';
