-- The table's health over time (issue 14): with the headline figures, the sampler records the
-- outbox table's live and dead tuples, its size and its indexes' size, and how long the xmin
-- horizon has been held. NULL in the samples taken before this migration (and in the demo's
-- backfilled history). Nullable columns without a default: no rewrite of the table.
ALTER TABLE outbox_monitor.samples
    ADD COLUMN dead_tuples bigint,
    ADD COLUMN live_tuples bigint,
    ADD COLUMN table_bytes bigint,
    ADD COLUMN indexes_bytes bigint,
    ADD COLUMN xmin_horizon_age_seconds double precision;
