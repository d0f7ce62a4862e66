-- History per event type (issue 15 item 2): with each headline sample, the sampler records the
-- figures of the top event types by trouble (OUTBOX_MONITOR_METRICS_TOP_EVENT_TYPES, as
-- /metrics labels them) and one row 'other' for the rest, so that the Overview's charts can
-- split by event type. sampled_at is the headline sample's, so the two tables line up.
--   queue_depth, oldest_pending_age_seconds, failed_in_window: SPEC section 2 for that type
--   (the rest: summed, the oldest age the largest); latency_p95_seconds: the type's P95 over
--   the settings' window (NULL for 'other': percentiles do not add up); retrying: pending
--   rows with attempts >= 1 (retries waiting in backoff or due again), the attempts trend.
-- Kept as long as the samples (OUTBOX_MONITOR_SAMPLE_RETENTION), pruned by the sampler.
CREATE TABLE outbox_monitor.event_type_samples (
    table_name                 text NOT NULL,
    sampled_at                 timestamptz NOT NULL,
    event_type                 text NOT NULL,
    queue_depth                bigint NOT NULL,
    oldest_pending_age_seconds double precision,
    latency_p95_seconds        double precision,
    failed_in_window           bigint NOT NULL,
    retrying                   bigint NOT NULL,
    PRIMARY KEY (table_name, sampled_at, event_type)
);
