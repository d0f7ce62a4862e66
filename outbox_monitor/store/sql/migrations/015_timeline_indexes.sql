-- The incident timeline's range reads (issue 15 item 5, timeline.py): the error groups of an
-- outbox table first seen in a range (timeline_error_groups) and its breaker transitions in
-- a range (timeline_breaker_transitions), newest first, at most the page's limit. The primary
-- key of error_groups (table_oid, event_type, fingerprint_md5) and breaker_transitions_key_idx
-- (outbox, event_type_filter, id) hold the table but not the instant: each read walked every
-- group or transition of the table (a sequential scan once they are many) and sorted them.
-- These lead with the table, then the instant, so a read is one range of the index, walked
-- backwards for newest first, and stops at the limit. Both tables are the product's own and
-- small next to the outbox (one row per error group, two per breaker episode): built inside
-- init-db's transaction, each blocks writes to its table only for the build.
CREATE INDEX error_groups_first_seen_idx
    ON outbox_monitor.error_groups (table_oid, first_seen, group_id);
CREATE INDEX breaker_transitions_at_idx
    ON outbox_monitor.breaker_transitions (outbox, at, id);
