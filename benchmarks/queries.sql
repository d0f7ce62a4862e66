-- Named SQL blocks of the benchmarks in this folder (figures.py, claim.py, error_groups.py, scale.py;
-- `-- name: x`, one `-- description` line, then SQL). Never used by the product; the
-- figures they time run the product's own blocks.

-- name: benchmark_synchronous_commit
-- Benchmark only: the seed's commit is flushed at once, so the VACUUM right after it can set
-- hint bits and mark pages all-visible (the throwaway cluster runs synchronous_commit=off).
SET synchronous_commit = on;

-- name: benchmark_setseed
-- Benchmark only: makes the session's random() repeatable, so two seeds give the same table.
SELECT setseed(%(seed)s);

-- name: benchmark_seed
-- Benchmark only: %(rows)s realistic outbox rows, id order = creation order, over %(span)s s.
INSERT INTO {table} (event_type, aggregate_type, aggregate_id, event_key, payload, status,
                     attempts, available_at, locked_at, locked_by, last_error, created_at,
                     processed_at)
SELECT event_type,
       split_part(event_type, '.', 1),
       mod(g, 200000)::text,
       event_type || ':' || g,
       jsonb_build_object('id', g, 'customer_id', mod(g, 50000),
                          'amount_cents', (r_lat * 100000)::int, 'currency', 'EUR',
                          'source', 'checkout', 'note', 'benchmark row ' || g),
       status,
       CASE status
           WHEN 'failed' THEN CASE WHEN r_x < 0.3 THEN 1 ELSE %(max_attempts)s END
           WHEN 'pending' THEN CASE WHEN r_x < 0.6 THEN 0 ELSE 1 + floor(r_lat * 5)::int END
           WHEN 'processing' THEN floor(r_lat * 3)::int
           ELSE CASE WHEN r_x < 0.03 THEN 1 + floor(r_lat * 2)::int ELSE 0 END
       END,
       CASE WHEN status = 'pending' AND r_x >= 0.6
            THEN now() + make_interval(secs => r_lat * 1800)
            ELSE created_at END,
       CASE WHEN status = 'processing'
            THEN greatest(created_at, now() - make_interval(secs =>
                     CASE WHEN r_x > 0.98 THEN 1200 + r_lat * 6000 ELSE r_lat * 60 END))
       END,
       CASE WHEN status = 'processing' THEN 'n8n-worker-' || mod(g, 3) || ':wf-outbox-poller' END,
       CASE
           WHEN status = 'failed' AND r_x < 0.15 THEN
               'HTTP 401 Unauthorized: invalid API key "sk_live_' || left(md5(g::text), 16) || '"'
           WHEN status = 'failed' AND r_x < 0.3 THEN
               'HTTP 422 Unprocessable Entity: email invalid for contact ' || (100000 + g)
           WHEN status = 'failed' AND r_lat < 0.4 THEN
               'HTTP 500 Internal Server Error from api.crm.example (request '
               || gen_random_uuid() || E')\n' || %(stack_trace)s
           WHEN status = 'failed' AND r_lat < 0.7 THEN
               'timeout after 30000 ms calling hooks.slack.com'
           WHEN status = 'failed' AND r_lat < 0.9 THEN
               'HTTP 429 Too Many Requests: retry after ' || (10 + mod(g, 50)) || ' s'
           WHEN status = 'failed' THEN 'connection reset by peer (order ' || (100000 + g) || ')'
           WHEN status = 'pending' AND r_x >= 0.6 THEN
               'HTTP 503 Service Unavailable from api.crm.example'
       END,
       created_at,
       CASE status
           WHEN 'done' THEN least(now(), created_at + make_interval(secs =>
               2 - 8 * ln(1 - r_lat) + CASE WHEN r_x < 0.03 THEN 30 + 4000 * r_x ELSE 0 END))
           WHEN 'failed' THEN created_at + make_interval(secs =>
               CASE WHEN r_x < 0.3 THEN least(3, age)
                    ELSE least(21150 * (1 + 0.1 * r_lat), age * (0.5 + 0.5 * r_lat)) END)
       END
FROM (
    SELECT g, age, created_at, r_lat, r_x,
           CASE WHEN r_type < 0.30 THEN 'order.paid'
                WHEN r_type < 0.50 THEN 'invoice.sent'
                WHEN r_type < 0.72 THEN 'notification.email'
                WHEN r_type < 0.82 THEN 'notification.slack'
                WHEN r_type < 0.94 THEN 'payment.captured'
                ELSE 'crm.contact_updated' END AS event_type,
           CASE WHEN age < %(recent)s AND r_kind < %(processing_share)s THEN 'processing'
                WHEN age < %(recent)s AND r_kind < %(processing_share)s + %(pending_share)s
                    THEN 'pending'
                WHEN r_kind >= 1 - %(failed_share)s THEN 'failed'
                ELSE 'done' END AS status
    FROM (
        SELECT g, random() AS r_kind, random() AS r_type, random() AS r_lat, random() AS r_x,
               %(span)s * (%(rows)s - g) / %(rows)s AS age,
               now() - make_interval(secs => %(span)s * (%(rows)s - g) / %(rows)s) AS created_at
        FROM generate_series(1, %(rows)s) AS g
    ) AS drawn
) AS classified;

-- name: benchmark_seed_samples
-- Benchmark only: one plausible sample every %(interval)s s over %(retention)s s.
INSERT INTO outbox_monitor.samples (
    table_name, sampled_at, queue_depth, pending_total, scheduled_retries, processing,
    stuck_locks, failed_in_window, oldest_pending_age_seconds, latency_p50_seconds,
    latency_p95_seconds)
SELECT %(table_name)s, now() - make_interval(secs => s * %(interval)s),
       depth, depth + 40, 40, (random() * 20)::bigint, 0, (random() * 5)::bigint,
       random() * 120, 7 + random(), 25 + random() * 10
FROM (SELECT s, (random() * 200)::bigint AS depth
      FROM generate_series(1, floor(%(retention)s / %(interval)s)::int) AS s) AS drawn
ON CONFLICT DO NOTHING;

-- name: benchmark_autovacuum_off
-- Benchmark only: no autovacuum during the runs; explicit VACUUMs stand for it, repeatably.
ALTER TABLE {table} SET (autovacuum_enabled = false);

-- name: benchmark_visibility
-- Benchmark only: heap pages and all-visible pages (index-only scans skip the heap on those).
SELECT relpages AS pages, relallvisible AS all_visible FROM pg_class
WHERE oid = %(table_regclass)s::regclass;

-- name: benchmark_status_counts
-- Benchmark only: rows per status (a whole-table count, for the report's data summary).
SELECT status, count(*) AS rows FROM {table} GROUP BY status ORDER BY status;

-- name: benchmark_vacuum_analyze
-- Benchmark only: vacuum (visibility map, as autovacuum keeps it) and fresh statistics.
VACUUM (ANALYZE) {table};

-- name: benchmark_checkpoint
-- Benchmark only: flush dirty buffers, so no checkpoint lands inside a timed write.
CHECKPOINT;

-- name: benchmark_vacuum
-- Benchmark only: remove the dead rows left by the rolled-back write batches.
VACUUM {table};

-- name: benchmark_explain
-- Benchmark only: run one composed read statement {query}; its plan and buffers as JSON.
EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {query}

-- name: benchmark_relation_sizes
-- Benchmark only: the outbox table and each of its indexes, with size and definition.
SELECT c.relname AS name, c.relkind = 'i' AS is_index, pg_relation_size(c.oid) AS bytes,
       CASE WHEN c.relkind = 'i' THEN pg_get_indexdef(c.oid) END AS definition
FROM pg_class c
WHERE c.oid = %(table_regclass)s::regclass
   OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = %(table_regclass)s::regclass)
ORDER BY c.relkind = 'i', c.relname;

-- name: benchmark_server
-- Benchmark only: server version and the settings that shape the plans.
SELECT version() AS version, current_setting('shared_buffers') AS shared_buffers,
       current_setting('work_mem') AS work_mem,
       current_setting('max_parallel_workers_per_gather') AS parallel_workers;

-- name: benchmark_max_id
-- Benchmark only: the largest id, to address the rows a write batch adds.
SELECT coalesce(max(id), 0) AS max_id FROM {table};

-- name: benchmark_insert_batch
-- Benchmark only: %(rows)s new pending rows as producers publish them (keys tagged %(tag)s).
INSERT INTO {table} (event_type, aggregate_type, aggregate_id, event_key, payload)
SELECT 'order.paid', 'order', mod(g, 200000)::text, 'benchmark:' || %(tag)s || ':' || g,
       jsonb_build_object('id', g, 'customer_id', mod(g, 50000), 'amount_cents', mod(g, 100000),
                          'currency', 'EUR', 'source', 'checkout', 'note', 'benchmark row ' || g)
FROM generate_series(1, %(rows)s) AS g;

-- name: benchmark_claim_batch
-- Benchmark only: claim every row above %(after_id)s at once (the claim's index writes).
UPDATE {table} SET status = 'processing', locked_at = now(), locked_by = 'benchmark'
WHERE id > %(after_id)s;

-- name: benchmark_ack_batch
-- Benchmark only: ack every row above %(after_id)s at once (the ack's index writes).
UPDATE {table} SET status = 'done', processed_at = now(), locked_at = NULL, locked_by = NULL
WHERE id > %(after_id)s;

-- name: benchmark_drop_index
-- Benchmark only: drop one index ({index} is schema-qualified) without blocking writes.
DROP INDEX CONCURRENTLY IF EXISTS {index};

-- name: benchmark_claim_ack_due
-- Benchmark only (claim.py): ack every due pending row of the seed, so the backlog is exact.
UPDATE {table} SET status = 'done', processed_at = now(), attempts = 0
WHERE status = 'pending' AND available_at <= now();

-- name: benchmark_copy_table
-- Benchmark only (claim.py): {target}, a copy of {table} with its columns, defaults, indexes
-- (the users' ones at this point) and rows.
CREATE TABLE {target} (LIKE {table} INCLUDING ALL);
INSERT INTO {target} SELECT * FROM {table};

-- name: benchmark_retired_indexes
-- Benchmark only (claim.py): the indexes init-db created before issue 11, under their names.
CREATE INDEX {created_at} ON {table} (created_at);
CREATE INDEX {status_processed_at} ON {table} (status, processed_at);

-- name: benchmark_claim_backlog
-- Benchmark only (claim.py): due pending rows %(first)s..%(last)s, created before %(anchor)s.
INSERT INTO {table} (event_type, aggregate_type, aggregate_id, event_key, payload, status,
                     available_at, created_at)
SELECT 'order.paid', 'order', mod(g, 200000)::text, 'claim-backlog:' || g,
       jsonb_build_object('id', g, 'currency', 'EUR', 'note', 'backlog row ' || g),
       'pending', %(anchor)s::timestamptz - make_interval(secs => g * 0.01),
       %(anchor)s::timestamptz - make_interval(secs => g * 0.01)
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g;

-- name: benchmark_claim_scheduled
-- Benchmark only (claim.py): pending rows %(first)s..%(last)s waiting in backoff (a retry storm
-- of one event type), created before every due row of the backlog and due in an hour or more.
INSERT INTO {table} (event_type, aggregate_type, aggregate_id, event_key, payload, status,
                     attempts, available_at, created_at, last_error)
SELECT 'payment.captured', 'payment', mod(g, 200000)::text, 'claim-scheduled:' || g,
       jsonb_build_object('id', g, 'currency', 'EUR', 'note', 'retrying row ' || g),
       'pending', 1 + mod(g, 5), now() + interval '1 hour' + make_interval(secs => g * 0.01),
       %(anchor)s::timestamptz - interval '3 hours' - make_interval(secs => g * 0.01),
       'HTTP 503 Service Unavailable: upstream payment provider timed out'
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g;

-- name: benchmark_claim_trim
-- Benchmark only (claim.py): remove the rows of %(prefix)s numbered above %(last)s.
DELETE FROM {table}
WHERE status = 'pending' AND event_key LIKE %(prefix)s || ':%%'
      AND split_part(event_key, ':', 2)::bigint > %(last)s;

-- name: benchmark_claim_users
-- Benchmark only (claim.py): the users' claim exactly as SPEC §1 writes it.
WITH due AS (
    SELECT id FROM {table}
    WHERE status = 'pending' AND available_at <= now()
    ORDER BY created_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED)
UPDATE {table} o SET status = 'processing', locked_at = now(), locked_by = %(worker)s
FROM due WHERE o.id = due.id
RETURNING o.id, o.event_type, o.aggregate_type, o.aggregate_id, o.event_key, o.payload,
          o.attempts, o.created_at;

-- name: benchmark_claim_function
-- Benchmark only (claim.py): the shared claim function installed by init-db.
SELECT * FROM outbox_monitor.claim(%(table_regclass)s::regclass, %(worker)s, %(batch)s);

-- name: benchmark_ack_claimed
-- Benchmark only (claim.py): the users' ack (SPEC section 1) of the rows %(ids)s just claimed.
UPDATE {table} SET status = 'done', processed_at = now(), locked_at = NULL, locked_by = NULL,
                   last_error = NULL
WHERE id = ANY(%(ids)s) AND status = 'processing' AND locked_by = %(worker)s;

-- name: benchmark_retry_claimed
-- Benchmark only (claim.py): the users' fail (SPEC section 1) of the rows %(ids)s just claimed, a transient error: back to pending after the backoff.
UPDATE {table} SET attempts = attempts + 1, status = 'pending',
                   available_at = now() + make_interval(secs => 2 ^ least(attempts + 1, 10)),
                   last_error = 'HTTP 503 from the downstream', locked_at = NULL, locked_by = NULL
WHERE id = ANY(%(ids)s) AND status = 'processing' AND locked_by = %(worker)s;

-- name: benchmark_publish
-- Benchmark only (claim.py): a producer publishes %(batch)s events (keys tagged %(tag)s).
INSERT INTO {table} (event_type, aggregate_type, aggregate_id, event_key, payload)
SELECT 'order.paid', 'order', g::text, 'publish:' || %(tag)s || ':' || g,
       jsonb_build_object('id', g, 'currency', 'EUR', 'note', 'published row ' || g)
FROM generate_series(1, %(batch)s) AS g
ON CONFLICT (event_key) DO NOTHING;

-- name: benchmark_error_groups_reset
-- Benchmark only (error_groups.py): an empty outbox table and an empty error-group cache.
TRUNCATE {table};
TRUNCATE outbox_monitor.error_fingerprints, outbox_monitor.error_groups,
         outbox_monitor.error_groups_state;

-- name: benchmark_error_groups_before
-- Benchmark only (error_groups.py): the error_groups block before the cache (every failed row normalised at every refresh, samples aggregated).
SELECT left(md5(event_type || ':' || fingerprint), 12) AS group_id,
       event_type,
       fingerprint,
       count(*) AS failed,
       min(processed_at) AS first_seen,
       max(processed_at) AS last_seen,
       (array_agg(last_error ORDER BY id DESC))[1] AS sample_error
FROM (
    SELECT id, event_type, last_error, processed_at,
           outbox_monitor.normalize_error(last_error) AS fingerprint
    FROM {table}
    WHERE status = 'failed' {and_filters}
    OFFSET 0
) AS failed_rows
GROUP BY 1, 2, 3
ORDER BY failed DESC, last_seen DESC
LIMIT %(limit)s;

-- name: benchmark_error_groups_new_dead_letters
-- Benchmark only (error_groups.py): %(rows)s rows dead-lettered now, half with a stack trace (keys tagged %(tag)s).
INSERT INTO {table} (event_type, aggregate_type, aggregate_id, event_key, payload, status,
                     attempts, last_error, created_at, processed_at)
SELECT 'order.paid', 'order', g::text, 'benchmark-dead:' || %(tag)s || ':' || g,
       jsonb_build_object('id', g), 'failed', 10,
       CASE WHEN mod(g, 2) = 0
            THEN 'HTTP 500 Internal Server Error from api.crm.example (request '
                 || gen_random_uuid() || E')\n' || %(stack_trace)s
            ELSE 'timeout after 30000 ms calling hooks.slack.com' END,
       now() - interval '5 seconds', now()
FROM generate_series(1, %(rows)s) AS g;

-- name: benchmark_error_groups_replay
-- Benchmark only (error_groups.py): replay the %(rows)s dead letters with the smallest ids, as actions.replay does.
UPDATE {table} SET status = 'pending', attempts = 0, available_at = now(), processed_at = NULL
WHERE id IN (SELECT id FROM {table} WHERE status = 'failed' ORDER BY id LIMIT %(rows)s);

-- name: benchmark_scale_create_database
-- Benchmark only (scale.py): one database per table size, so nothing of a size carries over.
CREATE DATABASE {database};

-- name: benchmark_scale_drop_database
-- Benchmark only (scale.py): drop a size's database once it is measured (frees its disk).
DROP DATABASE IF EXISTS {database} WITH (FORCE);

-- name: benchmark_scale_stat_statements_available
-- Benchmark only (scale.py): the server's library folder and whether pg_stat_statements is installed there.
SELECT (SELECT setting FROM pg_config WHERE name = 'PKGLIBDIR') AS pkglibdir,
       EXISTS (SELECT FROM pg_available_extensions WHERE name = 'pg_stat_statements') AS available;

-- name: benchmark_scale_alter_system
-- Benchmark only (scale.py): one server setting {setting} = {value}, read at the next restart.
ALTER SYSTEM SET {setting} = {value};

-- name: benchmark_scale_create_extension
-- Benchmark only (scale.py): pg_stat_statements' view and functions in a size's database.
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;

-- name: benchmark_scale_statements_reset
-- Benchmark only (scale.py): forget every statement's counters before one measured call.
SELECT pg_stat_statements_reset();

-- name: benchmark_scale_statements_read
-- Benchmark only (scale.py): execution and planning ms, 8 kB pages and statements of this database since the reset (the benchmark's own pg_stat_statements calls left out).
SELECT coalesce(sum(total_exec_time), 0)::float8 AS exec_ms,
       coalesce(sum(total_plan_time), 0)::float8 AS plan_ms,
       coalesce(sum(shared_blks_hit + shared_blks_read), 0)::bigint AS pages,
       coalesce(sum(calls), 0)::bigint AS statements
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query !~ 'pg_stat_statements';

-- name: benchmark_scale_vacuum
-- Benchmark only (scale.py): after rows changed status in place, as an autovacuum that caught up (index cleanup forced: PG 15 may skip it).
VACUUM (ANALYZE, INDEX_CLEANUP ON) {table};

-- name: benchmark_scale_count_failed
-- Benchmark only (scale.py): the dead letters now in the table.
SELECT count(*) AS rows FROM {table} WHERE status = 'failed';

-- name: benchmark_scale_backlog_clear
-- Benchmark only (scale.py): every pending and processing row done (processed 2-21 s after its creation), so that the next backlog is exact.
UPDATE {table}
SET status = 'done', attempts = 0, available_at = created_at, locked_at = NULL, locked_by = NULL,
    last_error = NULL,
    processed_at = least(now(), created_at + make_interval(secs => 2 + mod(id, 20)))
WHERE status IN ('pending', 'processing');

-- name: benchmark_scale_backlog_first_id
-- Benchmark only (scale.py): the id above which the newest %(candidates)s done rows lie.
SELECT coalesce(min(id), 0) AS first_id
FROM (SELECT id FROM {table} WHERE status = 'done' ORDER BY id DESC LIMIT %(candidates)s) AS newest;

-- name: benchmark_scale_backlog_set
-- Benchmark only (scale.py): %(rows)s done rows above id %(first_id)s (a hashed sample) back to not done, shaped as the seed's backlog: 13.6 % processing (0.3 % of the backlog locked 2 h ago, 0.1 % with no lock time: stuck), 34.4 % pending in backoff, the rest pending and due.
UPDATE {table} AS o
SET status = CASE WHEN chosen.u < 140 THEN 'processing' ELSE 'pending' END,
    attempts = CASE WHEN chosen.u < 140 THEN mod(chosen.u, 3)
                    WHEN chosen.u < 484 THEN 1 + mod(chosen.u, 5)
                    ELSE 0 END,
    available_at = CASE WHEN chosen.u >= 140 AND chosen.u < 484
                        THEN now() + make_interval(secs => 30 + 60 * mod(chosen.u, 30))
                        ELSE o.created_at END,
    locked_at = CASE WHEN chosen.u < 3 THEN now() - interval '2 hours'
                     WHEN chosen.u = 3 THEN NULL
                     WHEN chosen.u < 140 THEN now() - make_interval(secs => mod(chosen.u, 60))
                END,
    locked_by = CASE WHEN chosen.u < 140 THEN 'n8n-worker-' || mod(o.id, 3) || ':wf-outbox-poller'
                END,
    last_error = CASE WHEN chosen.u >= 140 AND chosen.u < 484
                      THEN 'HTTP 503 Service Unavailable from api.crm.example' END,
    processed_at = NULL
FROM (
    SELECT id, (hashint8(id + 7)::bigint + 2147483648) %% 1000 AS u
    FROM {table}
    WHERE id > %(first_id)s AND status = 'done'
    ORDER BY hashint8(id)
    LIMIT %(rows)s
) AS chosen
WHERE o.id = chosen.id;

-- name: benchmark_scale_dead_letters_keep
-- Benchmark only (scale.py): keep %(keep)s dead letters (a hashed sample); every other failed row becomes a done row (processed 2-21 s after its creation), as if it had never failed.
UPDATE {table} AS o
SET status = 'done', attempts = 0, last_error = NULL,
    processed_at = least(now(), o.created_at + make_interval(secs => 2 + mod(o.id, 20)))
FROM (SELECT id FROM {table} WHERE status = 'failed' ORDER BY hashint8(id) OFFSET %(keep)s) AS gone
WHERE o.id = gone.id;

-- name: benchmark_scale_pattern_oldest_pending_age
-- Benchmark only (scale.py): the pattern's oldest pending age, written as SPEC section 2 reads (no fence).
SELECT extract(epoch FROM now() - min(created_at))::float8 AS value
FROM {table} WHERE status = 'pending';

-- name: benchmark_scale_pattern_latency_percentiles
-- Benchmark only (scale.py): the pattern's P50/P95/P99 of the done rows processed in the window.
SELECT percentile_cont(ARRAY[0.50, 0.95, 0.99]) WITHIN GROUP (
           ORDER BY greatest(extract(epoch FROM processed_at - created_at)::float8, 0)) AS value
FROM {table}
WHERE status = 'done' AND processed_at > now() - make_interval(secs => %(window)s);

-- name: benchmark_scale_pattern_processed_in_window
-- Benchmark only (scale.py): the pattern's rows done in the window.
SELECT count(*) AS value FROM {table}
WHERE status = 'done' AND processed_at > now() - make_interval(secs => %(window)s);

-- name: benchmark_scale_pattern_created_in_window
-- Benchmark only (scale.py): the pattern's rows created in the window.
SELECT count(*) AS value FROM {table}
WHERE created_at > now() - make_interval(secs => %(window)s);

-- name: benchmark_scale_pattern_failed_by_event_type
-- Benchmark only (scale.py): the pattern's dead letters of the window by event type.
SELECT event_type, count(*) AS failed FROM {table}
WHERE status = 'failed' AND processed_at > now() - make_interval(secs => %(window)s)
GROUP BY event_type ORDER BY failed DESC;

-- name: benchmark_scale_pattern_attempts_histogram
-- Benchmark only (scale.py): the pattern's rows not done by attempts.
SELECT attempts, count(*) AS rows FROM {table}
WHERE status IN ('pending', 'processing', 'failed')
GROUP BY attempts ORDER BY attempts;

-- name: benchmark_scale_pattern_throughput_series
-- Benchmark only (scale.py): the pattern's rows created, processed and dead-lettered per bucket of the window.
SELECT date_bin(make_interval(secs => %(bucket)s), created_at, timestamptz '2000-01-01') AS bucket,
       'created' AS kind, count(*) AS rows
FROM {table} WHERE created_at > now() - make_interval(secs => %(window)s)
GROUP BY 1
UNION ALL
SELECT date_bin(make_interval(secs => %(bucket)s), processed_at, timestamptz '2000-01-01'),
       CASE status WHEN 'done' THEN 'processed' ELSE 'dead-lettered' END, count(*)
FROM {table}
WHERE status IN ('done', 'failed') AND processed_at > now() - make_interval(secs => %(window)s)
GROUP BY 1, 2
ORDER BY 1, 2;


-- ===================================================================== estimates (issue 11 item 4)

-- name: benchmark_before_created_in_window
-- Benchmark only: created_in_window of the release before issue 11 item 4 (done and failed rows in one part, which read the whole recommended index).
SELECT (
    SELECT count(*) FROM {table}
    WHERE status IN ('pending', 'processing')
          AND created_at > now() - make_interval(secs => %(window)s) AND created_at <= now()
          {and_filters}
) + (
    SELECT count(*) FROM {table}
    WHERE status IN ('done', 'failed') AND processed_at > now() - make_interval(secs => %(window)s)
          AND created_at > now() - make_interval(secs => %(window)s) AND created_at <= now()
          {and_filters}
) + (
    SELECT count(*) FROM {table}
    WHERE status IN ('done', 'failed') AND (processed_at IS NULL OR processed_at < created_at)
          AND (processed_at IS NULL OR processed_at <= now() - make_interval(secs => %(window)s))
          AND created_at > now() - make_interval(secs => %(window)s) AND created_at <= now()
          {and_filters}
) AS value;

-- name: benchmark_before_throughput_series
-- Benchmark only: throughput_series of the release before issue 11 item 4 (done and failed rows in one part, which read the whole recommended index).
SELECT bucket, kind, count(*) AS rows FROM (
    SELECT date_bin(make_interval(secs => %(bucket)s), created_at, timestamptz '2000-01-01')
               AS bucket, 'created' AS kind
    FROM {table}
    WHERE status IN ('pending', 'processing')
          AND created_at > now() - make_interval(secs => %(window)s) {and_filters}
    UNION ALL
    SELECT date_bin(make_interval(secs => %(bucket)s), created_at, timestamptz '2000-01-01'),
           'created'
    FROM {table}
    WHERE status IN ('done', 'failed') AND processed_at > now() - make_interval(secs => %(window)s)
          AND created_at > now() - make_interval(secs => %(window)s) {and_filters}
    UNION ALL
    SELECT date_bin(make_interval(secs => %(bucket)s), created_at, timestamptz '2000-01-01'),
           'created'
    FROM {table}
    WHERE status IN ('done', 'failed') AND (processed_at IS NULL OR processed_at < created_at)
          AND (processed_at IS NULL OR processed_at <= now() - make_interval(secs => %(window)s))
          AND created_at > now() - make_interval(secs => %(window)s) {and_filters}
    UNION ALL
    SELECT date_bin(make_interval(secs => %(bucket)s), processed_at, timestamptz '2000-01-01'),
           CASE status WHEN 'done' THEN 'processed' ELSE 'dead-lettered' END
    FROM {table}
    WHERE status IN ('done', 'failed')
          AND processed_at > now() - make_interval(secs => %(window)s) {and_filters}
) AS events
GROUP BY bucket, kind
ORDER BY bucket, kind;

-- name: benchmark_pg_stat_statements
-- Benchmark only: the extension that sums the server's execution time of each statement.
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;

-- name: benchmark_preload_pg_stat_statements
-- Benchmark only: load pg_stat_statements at the next start (takes effect after a restart).
ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements';

-- name: benchmark_statements_reset
-- Benchmark only: forget every statement's counters.
SELECT pg_stat_statements_reset();

-- name: benchmark_statements_ms
-- Benchmark only: the server's execution ms of every statement since the reset, but the benchmark's own (EXPLAIN included: utility statements are tracked).
SELECT coalesce(sum(total_exec_time), 0)::float8 AS ms FROM pg_stat_statements

-- name: benchmark_pgss_preload
-- Benchmark only (pages.py): load pg_stat_statements at the next start of the throwaway server.
ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements';

-- name: benchmark_pgss_create
-- Benchmark only (pages.py): the statement statistics view, once the library is loaded.
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;

-- name: benchmark_pgss_reset
-- Benchmark only (pages.py): forget the statements counted so far.
SELECT pg_stat_statements_reset() IS NULL AS reset;

-- name: benchmark_pgss_calls
-- Benchmark only (pages.py): top-level statements run since the reset, its own left out.
SELECT coalesce(sum(calls), 0) AS calls FROM pg_stat_statements
WHERE query NOT LIKE '%%pg_stat_statements%%';

-- name: benchmark_flow_baseline_schema
-- Benchmark only (flow_control.py): a schema for migration 001's claim, ack and fail ("main before flow control").
DROP SCHEMA IF EXISTS bench_baseline CASCADE;
CREATE SCHEMA bench_baseline;

-- name: benchmark_flow_due_later
-- Benchmark only (flow_control.py): the seed's rows in backoff wait a day more, so that no row but the backlog's becomes due during the run.
UPDATE {table} SET available_at = available_at + interval '1 day'
WHERE status = 'pending' AND available_at > now();

-- name: benchmark_flow_due_range
-- Benchmark only (flow_control.py): the ids of the due pending rows (the backlog, contiguous).
SELECT min(id) AS first_id, max(id) AS last_id, count(*) AS rows FROM {table}
WHERE status = 'pending' AND available_at <= now();

-- name: benchmark_flow_reset_backlog
-- Benchmark only (flow_control.py): the backlog's rows %(first_id)s..%(last_id)s due and pending again, as before a run.
UPDATE {table} SET status = 'pending', attempts = 0, available_at = created_at,
                   processed_at = NULL, locked_at = NULL, locked_by = NULL, last_error = NULL
WHERE id BETWEEN %(first_id)s AND %(last_id)s;

-- name: benchmark_flow_claim
-- Benchmark only (flow_control.py): the claim function of schema {schema} (outbox_monitor: migration 008; bench_baseline: 001).
SELECT * FROM {schema}.claim(%(table_regclass)s::regclass, %(worker)s, %(batch)s);

-- name: benchmark_flow_ack
-- Benchmark only (flow_control.py): the ack function of schema {schema}, one row.
SELECT {schema}.ack(%(table_regclass)s::regclass, %(id)s, %(worker)s) AS acked;

-- name: benchmark_flow_users_ack
-- Benchmark only (flow_control.py): the users' ack (SPEC section 1) of one row just claimed.
UPDATE {table} SET status = 'done', processed_at = now(), locked_at = NULL, locked_by = NULL,
                   last_error = NULL
WHERE id = %(id)s AND status = 'processing' AND locked_by = %(worker)s;

-- name: benchmark_flow_controls_clear
-- Benchmark only (flow_control.py): no control on the table, and no state or outcome of one.
WITH state AS (
    DELETE FROM outbox_monitor.control_state WHERE outbox = %(table_regclass)s::regclass),
outcomes AS (
    DELETE FROM outbox_monitor.control_outcomes WHERE outbox = %(table_regclass)s::regclass)
DELETE FROM outbox_monitor.controls WHERE outbox = %(table_regclass)s::regclass;

-- name: benchmark_flow_controls_define
-- Benchmark only (flow_control.py): operator controls %(controls)s (a JSON array) on the table.
INSERT INTO outbox_monitor.controls (outbox, event_type_filter, layer, paused, pause_reason,
                                     concurrency_limit, rate_per_second, burst, breaker,
                                     updated_by)
SELECT %(table_regclass)s::regclass, c.event_type_filter, 'ui', c.paused, c.pause_reason,
       c.concurrency_limit, c.rate_per_second, c.burst, c.breaker, 'benchmark'
FROM jsonb_to_recordset(%(controls)s) AS c(event_type_filter text, paused boolean,
                                            pause_reason text, concurrency_limit integer,
                                            rate_per_second double precision, burst integer,
                                            breaker boolean);

-- name: benchmark_flow_held_rows
-- Benchmark only (flow_control.py): %(rows)s pending crm.contact_updated rows created before every backlog row: due when %(due)s (a pause on crm.% holds them), else in backoff for an hour.
INSERT INTO {table} (event_type, aggregate_type, aggregate_id, event_key, payload, status,
                     attempts, available_at, created_at)
SELECT 'crm.contact_updated', 'crm', mod(g, 200000)::text, 'flow-held:' || g,
       jsonb_build_object('id', g, 'email', 'contact' || g || '@example.com',
                          'note', 'held row ' || g),
       'pending', 0,
       CASE WHEN %(due)s
            THEN %(anchor)s::timestamptz - interval '3 hours' - make_interval(secs => g * 0.01)
            ELSE now() + interval '1 hour' + make_interval(secs => g * 0.01) END,
       %(anchor)s::timestamptz - interval '3 hours' - make_interval(secs => g * 0.01)
FROM generate_series(1, %(rows)s) AS g;

-- name: benchmark_flow_auto_explain
-- Benchmark only (flow_control.py): this session logs the plan, with buffers, of every statement, nested ones too (those a function runs), to the client.
LOAD 'auto_explain';
SET auto_explain.log_min_duration = 0;
SET auto_explain.log_analyze = on;
SET auto_explain.log_buffers = on;
SET auto_explain.log_timing = on;
SET auto_explain.log_nested_statements = on;
SET auto_explain.log_format = 'json';
SET client_min_messages = 'log';

-- name: benchmark_flow_pending_types_index
-- Benchmark only (flow_control.py): the name of the outbox table's copy of init-db's pending_types index (CREATE TABLE … LIKE … INCLUDING ALL names it by its columns).
SELECT c.relname AS name
FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid
WHERE i.indrelid = %(table_regclass)s::regclass
      AND pg_get_expr(i.indpred, i.indrelid) = '((status = ''pending''::text) AND (event_type IS NOT NULL))';

-- ===================================================================== prune_partitions.py

-- name: benchmark_prune_seed_old
-- Benchmark only (prune_partitions.py): %(rows)s rows past retention, created evenly from %(lower)s to %(upper)s (the old partitions), 1 % dead-lettered, each processed a few seconds after its creation.
INSERT INTO {table} (event_type, aggregate_type, aggregate_id, event_key, payload, status,
                     attempts, last_error, created_at, processed_at)
SELECT CASE WHEN mod(g, 3) = 0 THEN 'order.paid' WHEN mod(g, 3) = 1 THEN 'invoice.sent'
            ELSE 'notification.email' END,
       'order', mod(g, 200000)::text, 'old:' || g,
       jsonb_build_object('id', g, 'customer_id', mod(g, 50000), 'amount_cents', mod(g, 99999),
                          'currency', 'EUR', 'source', 'checkout', 'note', 'benchmark row ' || g),
       CASE WHEN mod(g, 100) = 0 THEN 'failed' ELSE 'done' END,
       CASE WHEN mod(g, 100) = 0 THEN 10 ELSE 0 END,
       CASE WHEN mod(g, 100) = 0 THEN 'HTTP 500 Internal Server Error from api.crm.example' END,
       created_at, created_at + make_interval(secs => 2 + mod(g, 20))
FROM (SELECT g, %(lower)s::timestamptz + (%(upper)s::timestamptz - %(lower)s::timestamptz)
                * ((g - 1)::float8 / %(rows)s) AS created_at
      FROM generate_series(1, %(rows)s) AS g) AS s;

-- name: benchmark_prune_seed_live
-- Benchmark only (prune_partitions.py): %(rows)s rows of the last two days (the current partition), 90 % done, 10 % pending and due.
INSERT INTO {table} (event_type, aggregate_type, aggregate_id, event_key, payload, status,
                     created_at, available_at, processed_at)
SELECT 'order.paid', 'order', mod(g, 200000)::text, 'live:' || g,
       jsonb_build_object('id', g, 'note', 'live row ' || g),
       CASE WHEN mod(g, 10) = 0 THEN 'pending' ELSE 'done' END,
       now() - make_interval(secs => 172800 * (g::float8 / %(rows)s)),
       now() - make_interval(secs => 172800 * (g::float8 / %(rows)s)),
       CASE WHEN mod(g, 10) = 0 THEN NULL
            ELSE now() - make_interval(secs => 172800 * (g::float8 / %(rows)s)) + interval '3 s'
       END
FROM generate_series(1, %(rows)s) AS g;

-- name: benchmark_wal_lsn
-- Benchmark only: the server's current WAL position.
SELECT pg_current_wal_lsn() AS lsn;

-- name: benchmark_wal_since
-- Benchmark only: WAL bytes written since %(lsn)s.
SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %(lsn)s::pg_lsn)::bigint AS bytes;

-- name: benchmark_tree_size
-- Benchmark only: bytes on disk of the outbox and all its partitions, indexes included (a delete leaves them until a VACUUM reuses them; a dropped partition returns them).
SELECT coalesce(sum(pg_total_relation_size(t.relid)), 0)::bigint AS bytes
FROM pg_partition_tree(%(table_regclass)s::regclass) AS t;

-- name: benchmark_spread_event_types
-- Benchmark only (by_event_type.py): each seeded event type split into %(split)s types by id,
-- so that the table has many types (6 × split) with a backlog and dead letters each.
UPDATE {table} SET event_type = event_type || '.v' || (id %% %(split)s);

-- name: benchmark_fleet_table
-- Benchmark only (fleet_scheduler.py): one more outbox table in the database, shaped and indexed like the default one.
CREATE TABLE {table} (LIKE public.integration_outbox INCLUDING ALL);

-- name: benchmark_fleet_seed
-- Benchmark only (fleet_scheduler.py): %(rows)s rows over the last day: 80 percent done, 10 pending, 5 processing (stuck), 5 failed; five event types.
INSERT INTO {table} (event_type, aggregate_type, aggregate_id, event_key, payload, status,
                     attempts, created_at, available_at, locked_at, locked_by, processed_at,
                     last_error)
SELECT 'type.' || (mod(g, 5)), 'agg', (mod(g, 97))::text, 'seed:' || g, jsonb_build_object(),
       s.status, CASE WHEN s.status = 'failed' THEN 5 ELSE mod(g, 3) END,
       t.at, t.at, CASE WHEN s.status = 'processing' THEN t.at END,
       CASE WHEN s.status = 'processing' THEN 'worker-' || (mod(g, 4)) END,
       CASE WHEN s.status IN ('done', 'failed') THEN t.at + interval '2 seconds' END,
       CASE WHEN s.status = 'failed' THEN 'HTTP 500 from downstream ' || (mod(g, 7)) END
FROM generate_series(1, %(rows)s) AS g
CROSS JOIN LATERAL (SELECT now() - (mod(g, 1440)) * interval '1 minute' AS at) AS t
CROSS JOIN LATERAL (SELECT CASE WHEN mod(g, 20) < 16 THEN 'done' WHEN mod(g, 20) < 18 THEN 'pending'
                                WHEN mod(g, 20) = 18 THEN 'processing' ELSE 'failed' END AS status) AS s;

-- name: benchmark_fleet_connections
-- Benchmark only (fleet_scheduler.py): the connections of one application name in the cluster, by purpose.
SELECT application_name, count(*) AS connections FROM pg_stat_activity
WHERE application_name LIKE 'outbox-monitor%%' AND pid <> pg_backend_pid()
GROUP BY application_name ORDER BY application_name;

-- name: benchmark_flow_previous_schema
-- Benchmark only (flow_control.py --previous-claim): a schema for the claim of the migration before the newest one that defines it.
DROP SCHEMA IF EXISTS bench_previous CASCADE;
CREATE SCHEMA bench_previous;

-- name: benchmark_retrying_storm
-- Benchmark only (retrying.py): a retry storm: the newest %(rows)s done rows back to pending after 1-3 failures, due from 60 s ago to 4 min ahead, with the errors of 4 failing downstreams (a variable part each that normalisation replaces: numbers of 4 digits or more, quoted values, hex).
UPDATE {table} AS o
SET status = 'pending', attempts = 1 + o.id %% 3, processed_at = NULL, locked_at = NULL,
    locked_by = NULL,
    available_at = now() + make_interval(secs => (o.id %% 300) - 60),
    last_error = CASE o.id %% 4
        WHEN 0 THEN 'HTTP 503 from erp for order ' || (100000 + o.id)
        WHEN 1 THEN 'timeout after ' || (1000 + o.id %% 5000) || ' ms calling ''crm-'
                    || (o.id %% 7) || ''''
        WHEN 2 THEN 'HTTP 429 rate limited, request req_' || md5(o.id::text)
        ELSE 'connection refused for tenant ''' || (o.id %% 255) || ''''
    END
WHERE o.id IN (SELECT id FROM {table} WHERE status = 'done' ORDER BY id DESC LIMIT %(rows)s);

-- name: benchmark_retrying_churn
-- Benchmark only (retrying.py): %(rows)s retrying rows fail once more (attempts + 1, a new error text, due in 2 minutes): the rows the next refresh normalises.
UPDATE {table} AS o
SET attempts = o.attempts + 1, available_at = now() + interval '2 minutes',
    last_error = 'HTTP 503 from erp for order ' || o.id || ' (attempt ' || (o.attempts + 1) || ')'
WHERE o.id IN (SELECT id FROM {table} WHERE status = 'pending' AND attempts > 0
               ORDER BY random() LIMIT %(rows)s);

-- name: benchmark_retrying_rows
-- Benchmark only (retrying.py): the pending rows and those retrying (a report line).
SELECT count(*) AS pending, count(*) FILTER (WHERE attempts > 0) AS retrying
FROM {table} WHERE status = 'pending';

-- name: benchmark_flow_ack_many
-- Benchmark only (flow_control.py --api): the shared ack_many of one claimed batch %(ids)s.
SELECT outbox_monitor.ack_many(%(table_regclass)s::regclass, %(ids)s::bigint[], %(worker)s) AS acked;

-- name: benchmark_api_claimed_by
-- Benchmark only (flow_control.py --api): the backlog's rows %(first_id)s..%(last_id)s claimed by %(worker)s (processing), as before a run of single acks.
UPDATE {table} SET status = 'processing', locked_at = now(), locked_by = %(worker)s,
                   processed_at = NULL
WHERE id BETWEEN %(first_id)s AND %(last_id)s;

-- name: benchmark_api_claim_source
-- Benchmark only (flow_control.py --api): the body of the table's own claim function (migration 030), the baseline's source.
SELECT p.prosrc AS source
FROM pg_proc AS p
WHERE p.pronamespace = 'outbox_monitor'::regnamespace
      AND p.proname = outbox_monitor.worker_function_name('claim', %(schema)s, %(name)s);

-- name: benchmark_api_barrier_schema
-- Benchmark only (flow_control.py --api): a schema for the baseline claim (the change lock's try and the static statement, no look at the controls).
DROP SCHEMA IF EXISTS bench_barrier CASCADE;
CREATE SCHEMA bench_barrier;

-- name: benchmark_overview_top_statements
-- Benchmark only (overview.py): the statements of this database since the reset that cost most, with their buffers (the benchmark's own pg_stat_statements calls left out).
SELECT query, total_exec_time::float8 AS ms, (shared_blks_hit + shared_blks_read)::bigint AS pages
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query !~ 'pg_stat_statements'
ORDER BY total_exec_time DESC
LIMIT %(limit)s;

-- name: benchmark_design_btree
-- Benchmark only (finished_designs.py): the finished index of the releases up to issue 31, (status, processed_at) INCLUDE (created_at) of done and failed rows, as {index}.
CREATE INDEX {index} ON {table} (status, processed_at) INCLUDE (created_at)
WHERE status IN ('done', 'failed');

-- name: benchmark_design_narrow
-- Benchmark only (finished_designs.py): a narrower partial btree, (processed_at) of done and failed rows (its new keys all land on the rightmost leaf), as {index}.
CREATE INDEX {index} ON {table} (processed_at) WHERE status IN ('done', 'failed');

-- name: benchmark_design_brin
-- Benchmark only (finished_designs.py): a BRIN of processed_at over done and failed rows, {pages_per_range} heap pages per range, as {index}.
CREATE INDEX {index} ON {table} USING brin (processed_at) WITH (pages_per_range = {pages_per_range})
WHERE status IN ('done', 'failed');

-- name: benchmark_explain_write
-- Benchmark only (finished_designs.py): run one write {query}; its plan, buffers and WAL as JSON.
EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) {query}

-- name: benchmark_dead_letter_claimed
-- Benchmark only (finished_designs.py): the users' dead-letter (SPEC section 1) of the rows %(ids)s just claimed.
UPDATE {table} SET attempts = attempts + 1, status = 'failed', processed_at = now(),
                   last_error = 'HTTP 401 from the downstream', locked_at = NULL, locked_by = NULL
WHERE id = ANY(%(ids)s) AND status = 'processing' AND locked_by = %(worker)s;

-- name: benchmark_prune_oldest
-- Benchmark only (finished_designs.py): the retention job's delete of the %(rows)s oldest done rows.
DELETE FROM {table}
WHERE id IN (SELECT id FROM {table} WHERE status = 'done' ORDER BY id LIMIT %(rows)s);

-- name: benchmark_pending_due
-- Benchmark only (finished_designs.py): due pending rows.
SELECT count(*) AS rows FROM {table} WHERE status = 'pending' AND available_at <= now();

-- name: benchmark_index_bytes
-- Benchmark only (finished_designs.py): the size of the index %(name)s.
SELECT pg_relation_size(%(name)s::regclass) AS bytes;

-- name: benchmark_design_tail
-- Benchmark only (finished_designs.py): (processed_at) INCLUDE (created_at, status) of done and failed rows, as {index}: keyed on processed_at alone, so that an ack's key (now()) lands on the rightmost leaf and btree's fast path skips the descent.
CREATE INDEX {index} ON {table} (processed_at) INCLUDE (created_at, status)
WHERE status IN ('done', 'failed');

-- name: benchmark_design_tail_done
-- Benchmark only (finished_designs.py): (processed_at) INCLUDE (created_at) of done rows only, as {index}.
CREATE INDEX {index} ON {table} (processed_at) INCLUDE (created_at) WHERE status = 'done';

-- name: benchmark_window_pages
-- Benchmark only (finished_designs.py): the done rows processed in the last %(window)s s and the heap pages holding them (how scattered a window's rows are).
SELECT count(*) AS rows, count(DISTINCT (ctid::text::point)[0]) AS pages
FROM {table}
WHERE status = 'done' AND processed_at > now() - make_interval(secs => %(window)s);

-- name: benchmark_backend_pid
-- Benchmark only (finished_designs.py): this session's server process, whose CPU time /proc keeps.
SELECT pg_backend_pid() AS pid;

-- name: benchmark_presence_seed
-- Benchmark only (index_presence.py): %(rows)s rows, one every 100 ms over the last days, the
-- first %(claimed)s processing (locked by 'bench'), every 100th other one failed, the rest done
-- 2 s after their creation.
INSERT INTO {table} (event_type, aggregate_type, aggregate_id, event_key, payload, status,
                     attempts, created_at, processed_at, locked_at, locked_by)
SELECT 'order.paid', 'order', g::text, 'seed:' || g, jsonb_build_object('id', g),
       CASE WHEN g <= %(claimed)s THEN 'processing' WHEN g %% 100 = 0 THEN 'failed' ELSE 'done' END,
       CASE WHEN g %% 100 = 0 THEN 5 ELSE 0 END,
       now() - %(rows)s * interval '100 ms' + g * interval '100 ms',
       CASE WHEN g > %(claimed)s
            THEN now() - %(rows)s * interval '100 ms' + g * interval '100 ms' + interval '2 s' END,
       CASE WHEN g <= %(claimed)s THEN now() END,
       CASE WHEN g <= %(claimed)s THEN 'bench' END
FROM generate_series(1, %(rows)s) AS g;

-- name: benchmark_presence_skew_compare
-- Benchmark only (index_presence.py): clock_skew with its predicate cut to one comparison of
-- two columns (a row never finished has processed_at NULL, SPEC section 1, so it is left out
-- without naming the status; a finished row without processed_at is a NULL key of done_at or
-- failed_at).
CREATE INDEX {index} ON {table} (created_at) WHERE processed_at < created_at;
