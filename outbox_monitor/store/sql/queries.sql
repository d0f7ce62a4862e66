-- Every query of outbox-monitor, as named blocks: "-- name: <name>", one description line,
-- then the statement. Placeholders in braces are psycopg.sql fragments filled by
-- outbox_monitor.queries: {table} and {ledger} are sql.Identifier, {and_filters} is a
-- list of parameterised conditions, each starting with AND. Values are %(named)s params.


-- ===================================================================== schema, init-db

-- name: create_outbox_table
-- SPEC section 1 outbox table with the indexes users have; run only when the table is absent. {keys} are PRIMARY KEY (id), UNIQUE (event_key) and {partitioning} empty; or, for an outbox partitioned by range of created_at (demo/partitioned.py: tests and benchmarks), keys holding created_at and PARTITION BY RANGE (created_at).
CREATE TABLE IF NOT EXISTS {table} (
    id             bigserial,
    event_type     text NOT NULL,
    aggregate_type text NOT NULL,
    aggregate_id   text NOT NULL,
    event_key      text NOT NULL,
    payload        jsonb NOT NULL,
    status         text NOT NULL DEFAULT 'pending',
    attempts       integer NOT NULL DEFAULT 0,
    available_at   timestamptz NOT NULL DEFAULT now(),
    locked_at      timestamptz,
    locked_by      text,
    last_error     text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    processed_at   timestamptz,
    {keys}
) {partitioning};
CREATE INDEX IF NOT EXISTS {claim_index} ON {table} (status, available_at, created_at);
CREATE INDEX IF NOT EXISTS {aggregate_index} ON {table} (aggregate_type, aggregate_id, created_at);

-- name: create_ledger_table
-- SPEC section 1 idempotency ledger; run only when the table is absent.
CREATE TABLE IF NOT EXISTS {ledger} (
    id         bigserial PRIMARY KEY,
    event_key  text NOT NULL,
    action     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (event_key, action)
);

-- name: create_index_done_at
-- Recommended: done rows by processed_at, created_at included (latency, processed and created
-- per minute, their series): a window is an index-only range. Keyed on processed_at alone, so
-- an ack's key (now(), later than every other) goes to the rightmost leaf, which btree's fast
-- path reaches without a descent; partial to status = 'done', so the publish, the claim, a
-- retry and a dead-letter write no entry (benchmarks/RESULTS.md, issue 32). Outside a
-- transaction.
-- Every create_index_* block: {concurrently} is CONCURRENTLY on an ordinary table (or one
-- partition), and empty with {only} ONLY on a partitioned table, whose index is then built
-- partition by partition (schema._create_partitioned_index); elsewhere {only} is empty.
CREATE INDEX {concurrently} IF NOT EXISTS {index} ON {only} {table} (processed_at)
INCLUDE (created_at) WHERE status = 'done';

-- name: create_index_failed_at
-- Recommended: dead letters by processed_at, the time of failure, created_at included
-- (failures in window, created per minute, replay by time): partial to status = 'failed', so
-- only a dead-letter writes an entry, on the rightmost leaf as create_index_done_at's.
-- Outside a transaction.
CREATE INDEX {concurrently} IF NOT EXISTS {index} ON {only} {table} (processed_at)
INCLUDE (created_at) WHERE status = 'failed';

-- name: create_index_failed_by_type
-- Recommended: dead letters by the first 200 characters of event_type and attempts, for retry
-- pressure without reading the heap of every dead letter. Partial to status = 'failed'. Keyed
-- on a prefix (filters.EVENT_TYPE_KEY_CHARS), so that it accepts every event type the table
-- does; a query by type states left(event_type, 200) and the exact condition (filters.Where,
-- keyed).
-- Outside a transaction.
CREATE INDEX {concurrently} IF NOT EXISTS {index} ON {only} {table} (left(event_type, 200), attempts)
WHERE status = 'failed';

-- name: create_index_pending_types
-- With init-db --flow-control: pending rows by the first 200 characters of event_type, so that
-- a claim under flow control (migrations 009, 024) reads no row a pause or an open breaker
-- holds (SPEC section 5). Partial to status = 'pending': the claim's UPDATE to 'processing' and
-- the ack write no entry; a publish and a retry write one. event_type IS NOT NULL holds for
-- every row (a NOT NULL column) but no users' claim states it, so the planner cannot give the
-- users' claim this index; the shared claim states it. Keyed on a prefix
-- (filters.EVENT_TYPE_KEY_CHARS): it accepts every event type the table does. Outside a
-- transaction.
CREATE INDEX {concurrently} IF NOT EXISTS {index} ON {only} {table} (left(event_type, 200), available_at, created_at)
WHERE status = 'pending' AND event_type IS NOT NULL;

-- name: create_index_clock_skew
-- Recommended: the rare done/failed rows whose processed_at is missing or before created_at
-- (clock skew), so that "created in window" stays exact without an index on created_at over
-- every row (which the claim would walk: benchmarks/RESULTS.md). Outside a transaction.
CREATE INDEX {concurrently} IF NOT EXISTS {index} ON {only} {table} (created_at)
WHERE status IN ('done', 'failed') AND (processed_at IS NULL OR processed_at < created_at);

-- name: comment_recommended_index
-- Marks an index init-db created, so that a later release can tell its own indexes apart.
COMMENT ON INDEX {index} IS 'outbox-monitor recommended index, created by init-db';

-- name: retired_index_present
-- Whether the table has a btree of this name on exactly these key columns and the
-- %(included)s columns (INCLUDE, in order; often none), not unique, without expression, and
-- with one of the %(predicates)s (as pg_get_expr prints
-- them) or, when that list is empty, none: an index an earlier init-db created. Postgres
-- names CREATE INDEX ON t (created_at) the same, so one without predicate only where an init-db
-- of a release that created them ran (migrations up to 005 applied before 006, in an earlier
-- run): on a first install such an index is the users' own.
SELECT (cardinality(%(predicates)s::text[]) > 0 OR EXISTS (
    SELECT 1 FROM outbox_monitor.schema_migrations AS early
    WHERE early.version <= 5
      AND early.applied_at < (SELECT coalesce(max(late.applied_at), 'infinity')
                              FROM outbox_monitor.schema_migrations AS late
                              WHERE late.version = 6)
)) AND EXISTS (
    SELECT 1
    FROM pg_index ix
    JOIN pg_class t ON t.oid = ix.indrelid
    JOIN pg_namespace n ON n.oid = t.relnamespace
    JOIN pg_class i ON i.oid = ix.indexrelid
    JOIN pg_am am ON am.oid = i.relam
    WHERE n.nspname = %(schema)s AND t.relname = %(table)s AND i.relname = %(name)s
      AND am.amname = 'btree' AND NOT ix.indisunique
      AND CASE WHEN cardinality(%(predicates)s::text[]) = 0 THEN ix.indpred IS NULL
               ELSE pg_get_expr(ix.indpred, ix.indrelid) = ANY(%(predicates)s::text[]) END
      AND ix.indexprs IS NULL AND ix.indnkeyatts = cardinality(%(columns)s::text[])
      AND ARRAY(SELECT a.attname::text
                FROM unnest(ix.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
                JOIN pg_attribute a ON a.attrelid = ix.indrelid AND a.attnum = k.attnum
                ORDER BY k.ord) = %(columns)s::text[] || %(included)s::text[]
) AS present;

-- name: set_lock_timeout
-- The lock timeout in milliseconds ('0': none) of this session, or with %(local)s of this transaction only: DDL on the outbox waits at most that long for its lock (db.lock_timeout).
SELECT set_config('lock_timeout', %(milliseconds)s, %(local)s);

-- name: drop_index
-- Drops one index ({index} is schema-qualified): one an earlier init-db created, or a
-- partition's index left invalid by an interrupted init-db. Outside a transaction;
-- CONCURRENTLY takes no lock that the workers' claims or acks would queue behind.
DROP INDEX CONCURRENTLY IF EXISTS {index};

-- name: outbox_shape
-- The outbox table's shape (schema.TableShape): whether it is partitioned; for a partitioned table its strategy (r range, l list, h hash), its partition key's columns (NULL when the key holds an expression) and whether it has a default partition; and whether a valid unique index has exactly event_key and created_at as its key columns (publish's arbiter on a partitioned table, SPEC section 1).
SELECT c.relkind = 'p' AS partitioned,
       p.partstrat::text AS strategy,
       CASE WHEN p.partrelid IS NOT NULL AND p.partexprs IS NULL THEN ARRAY(
           SELECT a.attname::text
           FROM unnest(p.partattrs::int2[]) WITH ORDINALITY AS k(attnum, ord)
           JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
           ORDER BY k.ord) END AS key_columns,
       coalesce(p.partdefid, 0) <> 0 AS has_default,
       EXISTS (
           SELECT FROM pg_index ix
           WHERE ix.indrelid = c.oid AND ix.indisunique AND ix.indisvalid
                 AND ix.indpred IS NULL AND ix.indexprs IS NULL AND ix.indnkeyatts = 2
                 AND ARRAY(SELECT a.attname::text
                           FROM unnest(ix.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
                           JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
                           WHERE k.ord <= ix.indnkeyatts
                           ORDER BY a.attname) = ARRAY['created_at', 'event_key']
       ) AS event_key_unique
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_partitioned_table p ON p.partrelid = c.oid
WHERE n.nspname = %(schema)s AND c.relname = %(name)s AND c.relkind IN ('r', 'p');

-- name: partition_tree
-- The tables under a partitioned table (%(table_regclass)s), parents before their children: each one's schema and name, whether it is a leaf, and its parent's schema and name.
SELECT n.nspname AS schema, c.relname AS name, t.isleaf AS leaf,
       pn.nspname AS parent_schema, pc.relname AS parent_name
FROM pg_partition_tree(%(table_regclass)s::regclass) AS t
JOIN pg_class c ON c.oid = t.relid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_class pc ON pc.oid = t.parentrelid
JOIN pg_namespace pn ON pn.oid = pc.relnamespace
WHERE t.level > 0 AND c.relkind IN ('r', 'p')
ORDER BY t.level, n.nspname, c.relname;

-- name: index_valid
-- Whether the index named %(name)s on the outbox table is valid (NULL: there is none); an interrupted CREATE INDEX CONCURRENTLY leaves an invalid one, which IF NOT EXISTS would keep for ever.
SELECT (SELECT x.indisvalid FROM pg_index x
        JOIN pg_class ci ON ci.oid = x.indexrelid
        WHERE x.indrelid = %(table_regclass)s::regclass AND ci.relname = %(name)s) AS valid;

-- name: partition_index
-- One partition's part of a partitioned index: the name of its index attached to %(parent_index)s (a regclass text), if any, and whether that one is valid; else whether an index named %(name)s exists on the partition (an interrupted init-db's) and whether it is valid.
SELECT (SELECT ci.relname FROM pg_inherits i
        JOIN pg_index x ON x.indexrelid = i.inhrelid
        JOIN pg_class ci ON ci.oid = i.inhrelid
        WHERE i.inhparent = %(parent_index)s::regclass
              AND x.indrelid = %(partition)s::regclass) AS attached,
       (SELECT x.indisvalid FROM pg_inherits i
        JOIN pg_index x ON x.indexrelid = i.inhrelid
        WHERE i.inhparent = %(parent_index)s::regclass
              AND x.indrelid = %(partition)s::regclass) AS attached_valid,
       (SELECT x.indisvalid FROM pg_index x
        JOIN pg_class ci ON ci.oid = x.indexrelid
        WHERE x.indrelid = %(partition)s::regclass AND ci.relname = %(name)s) AS named_valid;

-- name: attach_index
-- Attaches a partition's index to its parent's index ({child_index}, {parent_index}: schema-qualified); a no-op when it is attached already. The parent's index becomes valid when its last partition's index is attached. Locks the partition's index and table briefly: under a lock timeout.
ALTER INDEX {parent_index} ATTACH PARTITION {child_index};

-- name: table_exists
-- Whether a relation of this schema and name exists.
SELECT EXISTS (
    SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = %(schema)s AND c.relname = %(name)s AND c.relkind IN ('r', 'p')
) AS exists;

-- name: table_columns
-- Column names and types of one table, to check it against SPEC section 1.
SELECT column_name, data_type
FROM information_schema.columns
WHERE table_schema = %(schema)s AND table_name = %(name)s
ORDER BY ordinal_position;

-- name: table_indexes
-- Every valid index of one table with its key columns in order.
SELECT i.relname AS index_name, array_agg(a.attname::text ORDER BY k.ord) AS columns
FROM pg_index ix
JOIN pg_class t ON t.oid = ix.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
JOIN pg_class i ON i.oid = ix.indexrelid
CROSS JOIN LATERAL unnest(ix.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum
WHERE n.nspname = %(schema)s AND t.relname = %(name)s AND ix.indisvalid
GROUP BY i.relname;

-- name: monitor_schema_version
-- The newest applied migration of the outbox_monitor schema (run only once it exists).
SELECT max(version) AS version FROM outbox_monitor.schema_migrations;

-- name: lock_migrations
-- Serialises concurrent init-db runs for the length of the transaction.
SELECT pg_advisory_xact_lock(hashtext('outbox_monitor.migrations'));

-- name: try_lock_index_builder
-- Session lock so that only one init-db builds indexes; true when taken.
SELECT pg_try_advisory_lock(hashtext('outbox_monitor.index_builder')) AS locked;

-- name: unlock_index_builder
-- Releases the index builder's session lock.
SELECT pg_advisory_unlock(hashtext('outbox_monitor.index_builder')) AS unlocked;

-- name: create_monitor_schema
-- The product's own schema and its migration ledger.
CREATE SCHEMA IF NOT EXISTS outbox_monitor;
CREATE TABLE IF NOT EXISTS outbox_monitor.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: record_migration
-- Marks one migration applied.
INSERT INTO outbox_monitor.schema_migrations (version, name) VALUES (%(version)s, %(name)s);


-- ===================================================================== worker API (SPEC section 1)

-- name: publish
-- Insert one event; a duplicate event_key inserts nothing and returns no row. {conflict_target} is (event_key), or empty on a partitioned table, whose unique index is (event_key, created_at) (SPEC section 1).
INSERT INTO {table} (event_type, aggregate_type, aggregate_id, event_key, payload, available_at)
VALUES (%(event_type)s, %(aggregate_type)s, %(aggregate_id)s, %(event_key)s, %(payload)s,
        coalesce(%(available_at)s::timestamptz, now()))
ON CONFLICT {conflict_target} DO NOTHING
RETURNING id;

-- name: table_partitioned
-- Whether the table %(table_regclass)s is partitioned (publish's conflict target).
SELECT relkind = 'p' AS partitioned FROM pg_class WHERE oid = %(table_regclass)s::regclass;

-- name: claim
-- Claim up to %(limit)s due rows for one worker (the shared SQL function).
SELECT * FROM outbox_monitor.claim(%(table_regclass)s::regclass, %(worker)s, %(limit)s);

-- name: ack
-- Acknowledge one claimed row; false when the worker no longer holds the claim.
SELECT outbox_monitor.ack(%(table_regclass)s::regclass, %(id)s, %(worker)s) AS acked;

-- name: ack_many
-- Acknowledge the claimed rows %(ids)s of one finished batch in one call; returns the ids acked (a row not held by the worker, or whose recording failed, is not among them).
SELECT outbox_monitor.ack_many(%(table_regclass)s::regclass, %(ids)s::bigint[], %(worker)s) AS acked;

-- name: fail
-- Record one failed attempt (retry with backoff or dead-letter), the shared SQL function.
SELECT outbox_monitor.fail(%(table_regclass)s::regclass, %(id)s, %(worker)s, %(error)s,
                           %(permanent)s, %(max_attempts)s,
                           %(ledger_regclass)s::regclass, %(ledger_action)s) AS status;

-- name: ledger_insert
-- Take the idempotency-ledger slot of one effect; no row back when it is already taken.
INSERT INTO {ledger} (event_key, action) VALUES (%(event_key)s, %(action)s)
ON CONFLICT (event_key, action) DO NOTHING
RETURNING id;


-- ===================================================================== figures (SPEC section 2)

-- name: db_now
-- The database clock, the only "now" of every figure.
SELECT now() AS now;

-- name: queue_depth
-- Rows due now: pending and available_at <= now().
SELECT count(*) AS value FROM {table}
WHERE status = 'pending' AND available_at <= now() {and_filters};

-- name: pending_total
-- All pending rows, due or waiting in backoff.
SELECT count(*) AS value FROM {table} WHERE status = 'pending' {and_filters};

-- name: scheduled_retries
-- Pending rows not yet due (available_at in the future).
SELECT count(*) AS value FROM {table}
WHERE status = 'pending' AND available_at > now() {and_filters};

-- name: retrying
-- Pending rows with attempts > 0: waiting for or due for another try after a failure.
SELECT count(*) AS value FROM {table}
WHERE status = 'pending' AND attempts > 0 {and_filters};

-- name: oldest_pending_age
-- Seconds since the oldest pending row was created; NULL when none is pending.
-- OFFSET 0 fences the subquery: a (created_at) index of the users' own would otherwise let
-- min() walk it from the oldest row through every done row (benchmarks/RESULTS.md).
SELECT extract(epoch FROM now() - min(created_at))::float8 AS value
FROM (SELECT created_at FROM {table} WHERE status = 'pending' {and_filters} OFFSET 0) AS pending;

-- name: processing
-- Rows currently claimed by a worker.
SELECT count(*) AS value FROM {table} WHERE status = 'processing' {and_filters};

-- name: stuck_locks
-- Claimed rows locked longer than the lock timeout, or with no lock time at all (orphans).
SELECT count(*) AS value FROM {table}
WHERE status = 'processing'
      AND (locked_at < now() - make_interval(secs => %(lock_timeout)s) OR locked_at IS NULL)
      {and_filters};

-- name: latency_percentiles
-- Continuous P50/P95/P99 of processed_at - created_at over done rows processed in the window.
SELECT percentile_cont(0.50) WITHIN GROUP (ORDER BY d) AS p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY d) AS p95,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY d) AS p99
FROM (
    SELECT greatest(extract(epoch FROM processed_at - created_at)::float8, 0) AS d
    FROM {table}
    WHERE status = 'done' AND processed_at > now() - make_interval(secs => %(window)s)
          AND processed_at <= now() {and_filters}
) AS done_rows;

-- name: processed_in_window
-- Done rows with processed_at in the window.
SELECT count(*) AS value FROM {table}
WHERE status = 'done' AND processed_at > now() - make_interval(secs => %(window)s)
      AND processed_at <= now() {and_filters};

-- name: created_open_in_window
-- Rows with created_at in the window (SPEC section 2 throughput) are counted in disjoint parts
-- so that no index on created_at over every row is needed. This block: the rows not finished
-- (the users' claim index); backlog_pass counts the same per event type, as a FILTER.
SELECT count(*) AS value FROM {table}
WHERE status IN ('pending', 'processing')
      AND created_at > now() - make_interval(secs => %(window)s) AND created_at <= now()
      {and_filters};

-- name: created_finished_in_window
-- The rest of created_open_in_window's count: finished rows processed in the window (a
-- finished row is processed after it is created), and the finished rows processed before they
-- were created or never (clock skew, its own index).
-- Done and failed rows are counted apart: each is a range of its own recommended index
-- (done_at, failed_at); "status IN ('done', 'failed')" would imply neither's predicate.
SELECT (
    SELECT count(*) FROM {table}
    WHERE status = 'done' AND processed_at > now() - make_interval(secs => %(window)s)
          AND created_at > now() - make_interval(secs => %(window)s) AND created_at <= now()
          {and_filters}
) + (
    SELECT count(*) FROM {table}
    WHERE status = 'failed' AND processed_at > now() - make_interval(secs => %(window)s)
          AND created_at > now() - make_interval(secs => %(window)s) AND created_at <= now()
          {and_filters}
) + (
    SELECT count(*) FROM {table}
    WHERE status IN ('done', 'failed') AND (processed_at IS NULL OR processed_at < created_at)
          AND (processed_at IS NULL OR processed_at <= now() - make_interval(secs => %(window)s))
          AND created_at > now() - make_interval(secs => %(window)s) AND created_at <= now()
          {and_filters}
) AS value;

-- name: created_open_by_event_type
-- Per event type of %(event_types)s (exact names), the open rows created in the window: what
-- created_open_in_window counts for one type, for all of them in one statement (the Overview's
-- table by event type when its window is not the backlog snapshot's: one pass over the
-- backlog's rows created in the window).
SELECT event_type, count(*) AS created_open_in_window FROM {table}
WHERE status IN ('pending', 'processing')
      AND created_at > now() - make_interval(secs => %(window)s) AND created_at <= now()
      AND event_type = ANY(%(event_types)s)
GROUP BY event_type;

-- name: finished_by_event_type
-- Per event type of %(event_types)s (exact names; NULL: every event type), what latency_percentiles (its P95),
-- processed_in_window and created_finished_in_window count for one type, for all of them in
-- one statement: each branch reads the rows of one part of created_finished_in_window through
-- the same index, and each figure keeps its own predicate as a FILTER (latency and processed:
-- done rows processed in the window; created: finished rows created in the window).
SELECT event_type,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY d) FILTER (WHERE done_in_window) AS p95,
       count(*) FILTER (WHERE done_in_window) AS processed,
       count(*) FILTER (WHERE created_in_window) AS created_finished
FROM (
    SELECT event_type, greatest(extract(epoch FROM processed_at - created_at)::float8, 0) AS d,
           processed_at <= now() AS done_in_window,
           created_at > now() - make_interval(secs => %(window)s) AND created_at <= now()
               AS created_in_window
    FROM {table}
    WHERE status = 'done' AND processed_at > now() - make_interval(secs => %(window)s)
          AND (%(event_types)s::text[] IS NULL OR event_type = ANY(%(event_types)s))
    UNION ALL
    SELECT event_type, NULL, false, true
    FROM {table}
    WHERE status = 'failed' AND processed_at > now() - make_interval(secs => %(window)s)
          AND created_at > now() - make_interval(secs => %(window)s) AND created_at <= now()
          AND (%(event_types)s::text[] IS NULL OR event_type = ANY(%(event_types)s))
    UNION ALL
    SELECT event_type, NULL, false, true
    FROM {table}
    WHERE status IN ('done', 'failed') AND (processed_at IS NULL OR processed_at < created_at)
          AND (processed_at IS NULL OR processed_at <= now() - make_interval(secs => %(window)s))
          AND created_at > now() - make_interval(secs => %(window)s) AND created_at <= now()
          AND (%(event_types)s::text[] IS NULL OR event_type = ANY(%(event_types)s))
) AS finished
GROUP BY event_type;

-- name: failed_by_event_type
-- Rows dead-lettered (failed) with processed_at, the time of failure, in the window.
SELECT event_type, count(*) AS failed FROM {table}
WHERE status = 'failed' AND processed_at > now() - make_interval(secs => %(window)s)
      AND processed_at <= now() {and_filters}
GROUP BY event_type
ORDER BY failed DESC, event_type;

-- name: backlog_pass
-- The backlog (pending and processing rows) in ONE pass, grouped by event type and attempts:
-- per group the backlog figures of SPEC section 2 of its rows (queue depth, pending total,
-- scheduled retries, processing, stuck locks, the oldest pending row's created_at), its open
-- rows created in the window (throughput's open part), and the workers' liveness parts (the
-- oldest due row's available_at, the newest claim, the newest retry: over pending rows with
-- attempts > 0, available_at minus the longest backoff of the group's attempts,
-- backoff_base * 1.1 as backoff_delay's jitter is at most a tenth, not after now). The same
-- predicates as the single figures' blocks, each a FILTER; the groups add up to every backlog
-- figure, to the backlog part of retry pressure and to each event type's row
-- (metrics.BacklogPass). Reading attempts and locked_at visits each backlog row's heap tuple.
SELECT event_type, attempts, now() AS now, count(*) AS rows,
       count(*) FILTER (WHERE status = 'pending' AND available_at <= now()) AS queue_depth,
       count(*) FILTER (WHERE status = 'pending') AS pending_total,
       count(*) FILTER (WHERE status = 'pending' AND available_at > now()) AS scheduled_retries,
       count(*) FILTER (WHERE status = 'processing') AS processing,
       count(*) FILTER (
           WHERE status = 'processing'
                 AND (locked_at < now() - make_interval(secs => %(lock_timeout)s)
                      OR locked_at IS NULL)
       ) AS stuck_locks,
       min(created_at) FILTER (WHERE status = 'pending') AS oldest_pending_at,
       count(*) FILTER (
           WHERE created_at > now() - make_interval(secs => %(window)s)
             AND created_at <= now()) AS created_open_in_window,
       min(available_at) FILTER (WHERE status = 'pending' AND available_at <= now()) AS due_since,
       max(locked_at) FILTER (WHERE status = 'processing') AS newest_claim,
       max(available_at - outbox_monitor.backoff_base(attempts) * 1.1) FILTER (
           WHERE status = 'pending' AND attempts > 0
             AND available_at - outbox_monitor.backoff_base(attempts) * 1.1 <= now()
       ) AS newest_retry
FROM {table}
WHERE status IN ('pending', 'processing') {and_filters}
GROUP BY event_type, attempts
ORDER BY event_type, attempts;

-- name: backlog_snapshot_upsert
-- The sampler's pass over the backlog (backlog_pass's groups, every event type; instants as ISO text) as this table's one snapshot, replaced at each sample (migration 031), with the window of its groups' open rows created in the window (migration 035), and the window's finished rows per event type and that window in seconds (migration 033; NULL: not kept).
INSERT INTO outbox_monitor.backlog_snapshots AS s
    (table_name, sampled_at, groups, backlog_window, finished, finished_window)
VALUES (%(table_name)s, %(sampled_at)s, %(groups)s, %(backlog_window)s, %(finished)s,
        %(finished_window)s)
ON CONFLICT (table_name) DO UPDATE SET sampled_at = excluded.sampled_at, groups = excluded.groups,
    backlog_window = excluded.backlog_window, finished = excluded.finished,
    finished_window = excluded.finished_window;

-- name: backlog_snapshot
-- This table's last sampled backlog (migration 031) when it is at most %(max_age)s seconds old: its instant, its age, the backlog rows of every event type, and its groups matching the event-type filter ({and_filters}, on event_type), with backlog_pass's columns and the window of their created_open_in_window (migration 035); the window's finished rows per event type and that window (migration 033). No row when there is no such snapshot.
SELECT s.sampled_at, extract(epoch FROM now() - s.sampled_at)::float8 AS age_seconds,
       s.backlog_window, s.finished, s.finished_window,
       (SELECT coalesce(sum((a ->> 'rows')::bigint), 0) FROM jsonb_array_elements(s.groups) AS a)
           AS backlog_rows,
       coalesce((
           SELECT jsonb_agg(to_jsonb(g) ORDER BY g.event_type, g.attempts)
           FROM jsonb_to_recordset(s.groups) AS g(
               event_type text, attempts integer, rows bigint, queue_depth bigint,
               pending_total bigint, scheduled_retries bigint, processing bigint,
               stuck_locks bigint, oldest_pending_at timestamptz, created_open_in_window bigint,
               due_since timestamptz, newest_claim timestamptz, newest_retry timestamptz)
           WHERE true {and_filters}), '[]'::jsonb) AS groups
FROM outbox_monitor.backlog_snapshots AS s
WHERE s.table_name = %(table_name)s
  AND s.sampled_at >= now() - make_interval(secs => %(max_age)s);

-- name: attempts_at_least
-- Rows not yet done with attempts >= %(attempts)s, in the two parts of attempts_histogram.
SELECT (
    SELECT count(*) FROM {table}
    WHERE status = 'failed' AND attempts >= %(attempts)s {and_filters}
) + (
    SELECT count(*) FROM {table}
    WHERE status IN ('pending', 'processing') AND attempts >= %(attempts)s {and_filters}
) AS value;

-- name: failed_in_window
-- Rows dead-lettered with processed_at in the window, counted without their event types (index-only on the recommended index when unfiltered).
SELECT count(*) AS value FROM {table}
WHERE status = 'failed' AND processed_at > now() - make_interval(secs => %(window)s)
      AND processed_at <= now() {and_filters};

-- name: count_estimate
-- The planner's estimate of the rows the read statement {rows} returns: EXPLAIN plans it without running it (the dashboard's estimate above its cap, SPEC section 2).
EXPLAIN (FORMAT JSON) {rows};

-- name: dead_letter_rows
-- The failed rows, one id each: what the dashboard counts up to its cap or estimates (dead letters, a replay's preview).
SELECT id FROM {table} WHERE status = 'failed' {and_filters}

-- name: count_capped
-- How many rows the read statement {rows} returns, counted up to %(cap)s + 1 only.
SELECT count(*) AS value FROM ({rows} LIMIT %(cap)s + 1) AS capped;

-- name: attempts_histogram_dead_letters
-- Failed rows counted by attempts (the dead-letter part of attempts_histogram), index-only.
SELECT attempts, count(*) AS rows FROM {table}
WHERE status = 'failed' {and_filters}
GROUP BY attempts
ORDER BY attempts;

-- name: attempts_dead_letters_sample
-- Failed rows by attempts in a sample of %(percent)s % of the table's pages, the same pages at every call (the dashboard's estimate of attempts_histogram_dead_letters).
SELECT attempts, count(*) AS rows
FROM {table} TABLESAMPLE SYSTEM (%(percent)s) REPEATABLE (0)
WHERE status = 'failed' {and_filters}
GROUP BY attempts
ORDER BY attempts;

-- name: table_pages
-- Pages of 8 kB (block_size) the outbox table has now, those of all its partitions for a partitioned table, at least 1.
SELECT greatest(coalesce((SELECT sum(pg_relation_size(t.relid))::bigint
                          FROM pg_partition_tree(%(table_regclass)s::regclass) AS t),
                         pg_relation_size(%(table_regclass)s::regclass))
                / current_setting('block_size')::bigint, 1) AS pages;

-- name: error_groups_refresh
-- Bring the cached error groups of the outbox table up to date (migration 006); false when more than %(batch)s rows had to be normalised: call again.
SELECT outbox_monitor.refresh_error_groups(%(table_regclass)s::regclass, %(batch)s) AS done;

-- name: error_groups
-- The cached error groups of the outbox table, biggest first, each with the last_error of its largest id as sample (read after error_groups_refresh).
-- groups_total and failed_total count every matching group and its rows, not only the %(limit)s listed (the window is taken before the LIMIT).
SELECT g.group_id, g.event_type, g.fingerprint, g.failed, g.first_seen, g.last_seen,
       s.last_error AS sample_error, g.groups_total, g.failed_total
FROM (
    SELECT group_id, event_type, fingerprint, failed, first_seen, last_seen, sample_id,
           count(*) OVER () AS groups_total, sum(failed) OVER ()::bigint AS failed_total
    FROM outbox_monitor.error_groups
    WHERE table_oid = %(table_regclass)s::regclass {and_filters}
    ORDER BY failed DESC, last_seen DESC
    LIMIT %(limit)s
) AS g
LEFT JOIN LATERAL (SELECT o.last_error FROM {table} AS o WHERE o.id = g.sample_id) AS s ON true
ORDER BY g.failed DESC, g.last_seen DESC;

-- name: error_groups_exact
-- Failed rows grouped by event_type and normalised last_error, every row normalised now (for a login that may not run error_groups_refresh).
-- groups_total and failed_total as in error_groups: every group, not only the %(limit)s listed.
-- The fingerprint is computed once per row; the sample is fetched after grouping.
SELECT left(md5(event_type || ':' || fingerprint), 12) AS group_id,
       grouped.event_type, fingerprint, failed, first_seen, last_seen,
       s.last_error AS sample_error, groups_total, failed_total
FROM (
    SELECT event_type, fingerprint, count(*) AS failed, min(processed_at) AS first_seen,
           max(processed_at) AS last_seen, max(id) AS sample_id,
           count(*) OVER () AS groups_total, sum(count(*)) OVER ()::bigint AS failed_total
    FROM (
        SELECT id, event_type, processed_at,
               outbox_monitor.normalize_error(last_error) AS fingerprint
        FROM {table}
        WHERE status = 'failed' {and_filters}
        OFFSET 0
    ) AS failed_rows
    GROUP BY event_type, fingerprint
    ORDER BY failed DESC, last_seen DESC
    LIMIT %(limit)s
) AS grouped
LEFT JOIN LATERAL (SELECT o.last_error FROM {table} AS o WHERE o.id = grouped.sample_id) AS s
    ON true
ORDER BY failed DESC, last_seen DESC;

-- name: retry_error_groups
-- Retrying rows (pending, attempts > 0) grouped by event_type and normalised last_error exactly as error_groups_exact groups the failed ones (same fingerprint, same group id), biggest first, at most %(limit)s: every retrying row normalised now (for a login that may not run retry_error_groups_refresh).
-- The fingerprint is computed once per row; the sample (the group's largest id) is fetched after grouping. groups_total and retrying_total count every matching group and its rows, not only the %(limit)s listed.
SELECT left(md5(event_type || ':' || fingerprint), 12) AS group_id,
       grouped.event_type, fingerprint, retrying, due_now, oldest_created_at, last_due_at,
       s.last_error AS sample_error, groups_total, retrying_total
FROM (
    SELECT event_type, fingerprint, count(*) AS retrying,
           count(*) FILTER (WHERE available_at <= now()) AS due_now,
           min(created_at) AS oldest_created_at, max(available_at) AS last_due_at,
           max(id) AS sample_id,
           count(*) OVER () AS groups_total, sum(count(*)) OVER ()::bigint AS retrying_total
    FROM (
        SELECT id, event_type, created_at, available_at,
               outbox_monitor.normalize_error(last_error) AS fingerprint
        FROM {table}
        WHERE status = 'pending' AND attempts > 0 {and_filters}
        OFFSET 0
    ) AS retrying_rows
    GROUP BY event_type, fingerprint
    ORDER BY retrying DESC, last_due_at DESC, event_type, fingerprint
    LIMIT %(limit)s
) AS grouped
LEFT JOIN LATERAL (
    SELECT left(o.last_error, 2000) AS last_error FROM {table} AS o WHERE o.id = grouped.sample_id
) AS s ON true
ORDER BY retrying DESC, last_due_at DESC, event_type, fingerprint;

-- name: retry_error_groups_refresh
-- Bring the outbox table's retry error groups up to date (migration 026): the cached fingerprints of its retrying rows and the groups' counts. With max_age above zero it returns at once when the counts are younger than max_age or another session is counting them. done false when more than %(batch)s rows had to be normalised (call again); normalised and forgotten: rows normalised, cached rows no longer retrying; refreshed_at: when the counts were taken (NULL: never); counted: by this call.
SELECT done, normalised, forgotten, refreshed_at, counted
FROM outbox_monitor.refresh_retry_error_groups(
    %(table_regclass)s::regclass, %(batch)s, make_interval(secs => %(max_age_seconds)s));

-- name: retry_error_groups_cached
-- The retry_error_groups rows as the last refresh counted them (migration 026; refreshed_at says when): one row per group from the counts table, never the outbox's backlog; only the sample of each listed group (its largest id when counted) is read from the outbox table, by id, and shown while its error is still of the group (else the group's fingerprint: the row failed again otherwise, or left).
-- groups_total and retrying_total count every matching group and its rows, not only the %(limit)s listed; counted_at: when the counts read were taken (read with them: a count committed meanwhile carries its own time).
SELECT left(md5(n.event_type || ':' || n.fingerprint), 12) AS group_id, n.event_type,
       n.fingerprint, n.retrying, n.due_now, n.oldest_created_at, n.last_due_at,
       s.last_error AS sample_error, n.groups_total, n.retrying_total,
       (SELECT r.refreshed_at FROM outbox_monitor.retry_error_groups_refreshed AS r
        WHERE r.table_oid = %(table_regclass)s::regclass) AS counted_at
FROM (
    SELECT g.event_type, t.fingerprint, g.retrying, g.due_now, g.oldest_created_at,
           g.last_due_at, g.sample_id,
           count(*) OVER () AS groups_total, sum(g.retrying) OVER ()::bigint AS retrying_total
    FROM outbox_monitor.retry_error_group_counts AS g
    JOIN outbox_monitor.retry_fingerprint_texts AS t
      ON t.table_oid = g.table_oid AND t.fingerprint_md5 = g.fingerprint_md5
    WHERE g.table_oid = %(table_regclass)s::regclass {and_filters}
    ORDER BY g.retrying DESC, g.last_due_at DESC, g.event_type, t.fingerprint
    LIMIT %(limit)s
) AS n
LEFT JOIN LATERAL (
    SELECT coalesce(max(left(o.last_error, 2000)), n.fingerprint) AS last_error
    FROM {table} AS o
    WHERE o.id = n.sample_id AND outbox_monitor.normalize_error(o.last_error) = n.fingerprint
) AS s ON true
ORDER BY n.retrying DESC, n.last_due_at DESC, n.event_type, n.fingerprint;

-- name: retry_error_groups_counted_at
-- When the outbox table's retry error groups were last counted (migration 026), for a reader whose own count failed; no row: never counted.
SELECT refreshed_at FROM outbox_monitor.retry_error_groups_refreshed
WHERE table_oid = %(table_regclass)s::regclass;

-- name: throughput_series
-- Rows created, processed (done) and dead-lettered per time bucket over the window; the
-- created rows in the disjoint parts of created_open_in_window and created_finished_in_window (done and failed apart, as there).
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
    WHERE status = 'done' AND processed_at > now() - make_interval(secs => %(window)s)
          AND created_at > now() - make_interval(secs => %(window)s) {and_filters}
    UNION ALL
    SELECT date_bin(make_interval(secs => %(bucket)s), created_at, timestamptz '2000-01-01'),
           'created'
    FROM {table}
    WHERE status = 'failed' AND processed_at > now() - make_interval(secs => %(window)s)
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
           'processed'
    FROM {table}
    WHERE status = 'done'
          AND processed_at > now() - make_interval(secs => %(window)s) {and_filters}
    UNION ALL
    SELECT date_bin(make_interval(secs => %(bucket)s), processed_at, timestamptz '2000-01-01'),
           'dead-lettered'
    FROM {table}
    WHERE status = 'failed'
          AND processed_at > now() - make_interval(secs => %(window)s) {and_filters}
) AS events
GROUP BY bucket, kind
ORDER BY bucket, kind;

-- name: latency_series
-- P50/P95 latency of done rows per processed_at bucket over the window.
SELECT date_bin(make_interval(secs => %(bucket)s), processed_at, timestamptz '2000-01-01')
           AS bucket,
       percentile_cont(0.50) WITHIN GROUP (
           ORDER BY greatest(extract(epoch FROM processed_at - created_at)::float8, 0)) AS p50,
       percentile_cont(0.95) WITHIN GROUP (
           ORDER BY greatest(extract(epoch FROM processed_at - created_at)::float8, 0)) AS p95
FROM {table}
WHERE status = 'done' AND processed_at > now() - make_interval(secs => %(window)s)
      {and_filters}
GROUP BY 1
ORDER BY 1;


-- ===================================================================== read replicas

-- name: replica_status
-- Whether the server is a hot standby in recovery, and its replay lag in seconds: 0 on a primary and when everything received is replayed while the WAL receiver streams (an idle primary is no lag; a standby cut off from its primary has replayed all it received too, but what it shows grows stale: no WAL receiver, or one not streaming, is not 0; a status hidden from a role without pg_read_all_stats counts as streaming), else the age of the last replayed transaction; NULL when none was replayed yet.
SELECT pg_is_in_recovery() AS in_recovery,
       pg_last_wal_receive_lsn()::text AS receive_lsn,
       pg_last_wal_replay_lsn()::text AS replay_lsn,
       pg_last_xact_replay_timestamp() AS replayed_at,
       CASE
           WHEN NOT pg_is_in_recovery() THEN 0.0
           WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn()
                AND EXISTS (SELECT FROM pg_stat_wal_receiver AS w
                            WHERE coalesce(w.status, 'streaming') = 'streaming') THEN 0.0
           ELSE greatest(0.0, extract(epoch FROM now() - pg_last_xact_replay_timestamp()))
       END::float8 AS lag_seconds;


-- ===================================================================== samples (sampler)

-- name: sample_insert
-- Record one sample of the headline figures and of the table's health.
INSERT INTO outbox_monitor.samples (
    table_name, queue_depth, pending_total, scheduled_retries, retrying, processing,
    stuck_locks, failed_in_window, oldest_pending_age_seconds, latency_p50_seconds,
    latency_p95_seconds, dead_tuples, live_tuples, table_bytes, indexes_bytes,
    xmin_horizon_age_seconds)
VALUES (%(table_name)s, %(queue_depth)s, %(pending_total)s, %(scheduled_retries)s,
        %(retrying)s, %(processing)s, %(stuck_locks)s, %(failed_in_window)s,
        %(oldest_pending_age_seconds)s, %(latency_p50_seconds)s, %(latency_p95_seconds)s,
        %(dead_tuples)s, %(live_tuples)s, %(table_bytes)s, %(indexes_bytes)s,
        %(xmin_horizon_age_seconds)s)
RETURNING sampled_at;

-- name: samples_prune
-- Delete up to %(batch)s samples older than the retention, oldest first through the primary key (by ctid: = ANY(ARRAY(...)) is a TID scan), so that a pass after the retention was lowered stays under the statement timeout; the rest goes at the next passes.
DELETE FROM outbox_monitor.samples
WHERE ctid = ANY(ARRAY(SELECT ctid FROM outbox_monitor.samples
                       WHERE table_name = %(table_name)s
                         AND sampled_at < now() - make_interval(secs => %(retention)s)
                       ORDER BY sampled_at
                       LIMIT %(batch)s));

-- name: samples_series
-- Samples of one table over the window, oldest first.
SELECT sampled_at, queue_depth, pending_total, scheduled_retries, retrying, processing,
       stuck_locks, failed_in_window, oldest_pending_age_seconds, latency_p50_seconds, latency_p95_seconds,
       dead_tuples, live_tuples, table_bytes, indexes_bytes, xmin_horizon_age_seconds
FROM outbox_monitor.samples
WHERE table_name = %(table_name)s
  AND sampled_at > now() - make_interval(secs => %(window)s)
ORDER BY sampled_at;

-- name: event_type_sample_insert
-- Record the per-event-type rows of one sample (migration 014), at the headline sample's instant: %(rows)s is a JSON array of objects with the columns' names.
INSERT INTO outbox_monitor.event_type_samples (
    table_name, sampled_at, event_type, queue_depth, oldest_pending_age_seconds,
    latency_p95_seconds, failed_in_window, retrying)
SELECT %(table_name)s, %(sampled_at)s, r.event_type, r.queue_depth,
       r.oldest_pending_age_seconds, r.latency_p95_seconds, r.failed_in_window, r.retrying
FROM jsonb_to_recordset(%(rows)s::jsonb) AS r(
    event_type text, queue_depth bigint, oldest_pending_age_seconds double precision,
    latency_p95_seconds double precision, failed_in_window bigint, retrying bigint);

-- name: event_type_samples_prune
-- Delete up to %(batch)s per-event-type samples older than the retention (the samples' own), oldest first through the primary key, by ctid as samples_prune.
DELETE FROM outbox_monitor.event_type_samples
WHERE ctid = ANY(ARRAY(SELECT ctid FROM outbox_monitor.event_type_samples
                       WHERE table_name = %(table_name)s
                         AND sampled_at < now() - make_interval(secs => %(retention)s)
                       ORDER BY sampled_at
                       LIMIT %(batch)s));

-- name: event_type_samples_series
-- Per-event-type samples of one table over the window for the event types %(event_types)s ('other' included when named), oldest first.
SELECT sampled_at, event_type, queue_depth, oldest_pending_age_seconds, latency_p95_seconds,
       failed_in_window, retrying
FROM outbox_monitor.event_type_samples
WHERE table_name = %(table_name)s
  AND sampled_at > now() - make_interval(secs => %(window)s)
  AND event_type = ANY(%(event_types)s::text[])
ORDER BY sampled_at, event_type;

-- name: event_type_samples_names
-- The event types with per-event-type samples of one table over the window, the most recently sampled first (the "split by event type" choices).
SELECT event_type FROM outbox_monitor.event_type_samples
WHERE table_name = %(table_name)s
  AND sampled_at > now() - make_interval(secs => %(window)s)
GROUP BY event_type
ORDER BY max(sampled_at) DESC, max(queue_depth) DESC, event_type
LIMIT %(limit)s;

-- name: known_event_types
-- The event types known without reading the outbox's history, for the check of the dashboard's event-type filter (issue 30 item 7): the planner's statistics of the outbox's event_type column (pg_stats: most common values and histogram bounds, a catalog read; a partitioned outbox's inherited ones), the types of the pending and processing rows (the claim index: the backlog only), those of the per-event-type samples over the window (migration 014's primary key, without 'other') and, when %(dead_letters)s (the recommended failed_by_type index is there), the dead letters' types, keyed on their first 200 characters: a skip scan of that index, one probe per type. At most %(limit)s, in order.
WITH RECURSIVE failed_types AS (
    (SELECT left(event_type, 200) AS event_type FROM {table}
     WHERE %(dead_letters)s AND status = 'failed' AND event_type IS NOT NULL
     ORDER BY left(event_type, 200) LIMIT 1)
    UNION ALL
    SELECT (SELECT left(o.event_type, 200) FROM {table} AS o
            WHERE o.status = 'failed' AND o.event_type IS NOT NULL
              AND left(o.event_type, 200) > f.event_type
            ORDER BY left(o.event_type, 200) LIMIT 1)
    FROM failed_types AS f
    WHERE f.event_type IS NOT NULL
)
SELECT event_type FROM (
    SELECT unnest(s.most_common_vals::text::text[]) AS event_type
    FROM pg_catalog.pg_stats AS s
    WHERE s.schemaname = %(schema)s AND s.tablename = %(table)s AND s.attname = 'event_type'
    UNION
    SELECT unnest(s.histogram_bounds::text::text[])
    FROM pg_catalog.pg_stats AS s
    WHERE s.schemaname = %(schema)s AND s.tablename = %(table)s AND s.attname = 'event_type'
    UNION
    SELECT event_type FROM {table} WHERE status IN ('pending', 'processing')
    UNION
    SELECT event_type FROM outbox_monitor.event_type_samples
    WHERE table_name = %(table_name)s
      AND sampled_at > now() - make_interval(secs => %(window)s)
      AND event_type <> %(other)s
    UNION
    SELECT event_type FROM failed_types
) AS known
WHERE event_type IS NOT NULL
ORDER BY event_type
LIMIT %(limit)s;


-- ===================================================================== table health (issue 14)
-- Catalog and statistics views only: none of these reads a row of the outbox table.

-- name: health_table
-- The outbox table's live and dead tuples, last (auto)vacuum and (auto)analyze, autovacuum setting and threshold and sizes, summed over its partitions when it is partitioned (the leaves of pg_partition_tree, which lists no plain table). A leaf never vacuumed nor analyzed (reltuples -1, PostgreSQL 14+) counts 0 tuples in the threshold, as autovacuum itself does (tuples_counted false then).
WITH leaves AS (
    SELECT t.relid, greatest(c.reltuples, 0) AS reltuples, c.reltuples >= 0 AS counted,
           (SELECT o.option_value FROM pg_options_to_table(c.reloptions) AS o
            WHERE o.option_name = 'autovacuum_enabled') AS enabled,
           (SELECT o.option_value FROM pg_options_to_table(c.reloptions) AS o
            WHERE o.option_name = 'autovacuum_vacuum_threshold') AS vacuum_threshold,
           (SELECT o.option_value FROM pg_options_to_table(c.reloptions) AS o
            WHERE o.option_name = 'autovacuum_vacuum_scale_factor') AS vacuum_scale_factor
    FROM (SELECT p.relid FROM pg_partition_tree(%(table_regclass)s::regclass) AS p
          WHERE p.isleaf
          UNION
          SELECT %(table_regclass)s::regclass::oid) AS t
    JOIN pg_class AS c ON c.oid = t.relid
    WHERE c.relkind <> 'p'
)
SELECT now() AS now,
       count(*) AS partitions,
       count(s.relid) AS with_statistics,
       coalesce(sum(s.n_live_tup), 0)::bigint AS live_tuples,
       coalesce(sum(s.n_dead_tup), 0)::bigint AS dead_tuples,
       coalesce(sum(s.n_mod_since_analyze), 0)::bigint AS modified_since_analyze,
       max(s.last_vacuum) AS last_vacuum,
       max(s.last_autovacuum) AS last_autovacuum,
       max(s.last_analyze) AS last_analyze,
       max(s.last_autoanalyze) AS last_autoanalyze,
       coalesce(sum(s.vacuum_count), 0)::bigint AS vacuum_count,
       coalesce(sum(s.autovacuum_count), 0)::bigint AS autovacuum_count,
       coalesce(bool_and(current_setting('autovacuum')::boolean
                         AND coalesce(l.enabled::boolean, true)), true) AS autovacuum_enabled,
       coalesce(sum(coalesce(l.vacuum_threshold::float8,
                             current_setting('autovacuum_vacuum_threshold')::float8)
                    + coalesce(l.vacuum_scale_factor::float8,
                               current_setting('autovacuum_vacuum_scale_factor')::float8)
                      * l.reltuples), 0)::bigint AS autovacuum_threshold,
       coalesce(bool_and(l.counted), true) AS tuples_counted,
       coalesce(sum(pg_table_size(l.relid)), 0)::bigint AS table_bytes,
       coalesce(sum(pg_indexes_size(l.relid)), 0)::bigint AS indexes_bytes,
       (SELECT greatest(d.stats_reset, pg_postmaster_start_time()) FROM pg_stat_database AS d
        WHERE d.datname = current_database()) AS statistics_since
FROM leaves AS l
LEFT JOIN pg_stat_user_tables AS s ON s.relid = l.relid;

-- name: health_indexes
-- The outbox table's indexes, largest first: size (of every partition's part when partitioned) and index scans since statistics began (NULL for a partitioned index).
SELECT c.relname AS index,
       CASE WHEN c.relkind = 'I'
            THEN (SELECT coalesce(sum(pg_relation_size(t.relid)), 0)
                  FROM pg_partition_tree(i.indexrelid) AS t)
            ELSE pg_relation_size(i.indexrelid) END::bigint AS bytes,
       s.idx_scan AS scans,
       i.indisunique AS is_unique,
       i.indisvalid AS is_valid
FROM pg_index AS i
JOIN pg_class AS c ON c.oid = i.indexrelid
LEFT JOIN pg_stat_user_indexes AS s ON s.indexrelid = i.indexrelid
WHERE i.indrelid = %(table_regclass)s::regclass
ORDER BY bytes DESC, c.relname;

-- name: health_vacuum_progress
-- Vacuums running in this database now (pg_stat_progress_vacuum), the outbox's first; relid and phase are NULL for a vacuum this role may not see (another role's, without pg_read_all_stats). Running time by the clock (clock_timestamp), not by this statement's start: a vacuum that began after it would read negative.
SELECT p.pid,
       p.relid IS NULL AS hidden,
       p.relid = %(table_regclass)s::regclass
           OR p.relid IN (SELECT t.relid FROM pg_partition_tree(%(table_regclass)s::regclass) AS t)
           AS on_outbox,
       p.relid::regclass::text AS relation,
       p.phase,
       p.heap_blks_total, p.heap_blks_scanned, p.heap_blks_vacuumed, p.index_vacuum_count,
       a.backend_type = 'autovacuum worker' AS automatic,
       extract(epoch FROM greatest(clock_timestamp() - a.xact_start, interval '0'))::float8
           AS running_seconds
FROM pg_stat_progress_vacuum AS p
LEFT JOIN pg_stat_activity AS a ON a.pid = p.pid
WHERE p.datname = current_database()
ORDER BY on_outbox DESC NULLS LAST, p.pid;

-- name: horizon_visibility
-- Whether this role sees every session's state, start and query (a member of pg_read_all_stats, which pg_monitor holds), its name, and how many sessions of other roles in this database it cannot see (the server's own processes, autovacuum's, have no role: not counted).
SELECT pg_has_role('pg_read_all_stats', 'USAGE') AS sees_all,
       current_user AS role,
       (SELECT count(*) FROM pg_stat_activity AS a
        WHERE a.datname = current_database() AND a.backend_type IS NULL
          AND a.usesysid IS NOT NULL) AS hidden_sessions;

-- name: horizon_sessions
-- Up to %(limit)s sessions that hold this database's xmin horizon (backend_xid or backend_xmin set) or sit idle in a transaction, oldest xid first, with the reading's now(); vacuums (ignored by the horizon), this session, parallel workers (their leader is listed) and the server's own processes (no role: autovacuum's workers and launcher, whose backend_type a role without pg_read_all_stats cannot see) left out. Since PostgreSQL 14 a session of another database holds no horizon here, a walsender (no database) may. Another role's session without pg_read_all_stats shows only its pid, role, application and xids (hidden).
SELECT a.pid,
       a.usename AS role,
       a.application_name AS application,
       host(a.client_addr) AS client,
       a.state,
       a.backend_type IS NULL AS hidden,
       CASE WHEN a.backend_type IS NOT NULL THEN left(a.query, 1000) END AS query,
       a.backend_xid::text AS xid,
       a.backend_xmin::text AS xmin,
       greatest(age(a.backend_xid), age(a.backend_xmin)) AS xid_age,
       a.backend_start,
       a.xact_start,
       a.query_start,
       now() AS now,
       format('SELECT pg_terminate_backend(%%s);', a.pid) AS command
FROM pg_stat_activity AS a
WHERE a.pid <> pg_backend_pid()
  AND (a.datname = current_database() OR (a.datid IS NULL AND a.backend_xmin IS NOT NULL))
  AND (a.backend_xid IS NOT NULL OR a.backend_xmin IS NOT NULL
       OR a.state IN ('idle in transaction', 'idle in transaction (aborted)'))
  AND a.usesysid IS NOT NULL
  AND a.leader_pid IS NULL
  AND a.pid NOT IN (SELECT v.pid FROM pg_stat_progress_vacuum AS v)
ORDER BY xid_age DESC NULLS LAST, a.xact_start NULLS LAST, a.pid
LIMIT %(limit)s;

-- name: horizon_prepared_transactions
-- Prepared transactions (two-phase commit) of this database, oldest first: each holds the xmin horizon until COMMIT PREPARED or ROLLBACK PREPARED.
SELECT p.gid,
       p.owner AS role,
       p.transaction::text AS xid,
       age(p.transaction) AS xid_age,
       p.prepared AS since,
       extract(epoch FROM now() - p.prepared)::float8 AS held_seconds,
       format('ROLLBACK PREPARED %%L;', p.gid) AS command
FROM pg_prepared_xacts AS p
WHERE p.database = current_database()
ORDER BY p.prepared, p.gid;

-- name: horizon_replication_slots
-- Replication slots, oldest xmin first: xmin holds back vacuum in every database, catalog_xmin only the system catalogs'; each keeps the WAL from its restart_lsn. An active slot is dropped once its consumer stops.
SELECT s.slot_name AS slot,
       s.slot_type AS type,
       s.database,
       s.active,
       s.active_pid,
       s.xmin::text AS xmin,
       age(s.xmin) AS xid_age,
       s.catalog_xmin::text AS catalog_xmin,
       age(s.catalog_xmin) AS catalog_xid_age,
       pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
                            ELSE pg_current_wal_lsn() END, s.restart_lsn)::bigint
           AS retained_wal_bytes,
       s.wal_status,
       CASE WHEN NOT s.active THEN format('SELECT pg_drop_replication_slot(%%L);', s.slot_name)
       END AS command
FROM pg_replication_slots AS s
ORDER BY age(s.xmin) DESC NULLS LAST, age(s.catalog_xmin) DESC NULLS LAST, s.slot_name;


-- ===================================================================== events (browsing)

-- name: events_page
-- One page of events, newest id first, keyset-paginated; never selects payload.
SELECT id, event_type, aggregate_type, aggregate_id, event_key, status, attempts,
       available_at, locked_at, locked_by, left(last_error, 2000) AS last_error,
       created_at, processed_at
FROM {table}
WHERE true {and_filters}
ORDER BY id DESC
LIMIT %(limit)s;

-- name: event_rows
-- The events a search matches, one id each: what the Events page counts up to its cap (count_capped).
SELECT id FROM {table} WHERE true {and_filters}

-- name: event_detail
-- One event with its payload when it is at most %(max_payload_bytes)s bytes as text.
SELECT id, event_type, aggregate_type, aggregate_id, event_key, status, attempts,
       available_at, locked_at, locked_by, last_error, created_at, processed_at,
       octet_length(payload::text) AS payload_bytes,
       CASE WHEN octet_length(payload::text) <= %(max_payload_bytes)s
            THEN jsonb_pretty(payload) END AS payload_pretty
FROM {table}
WHERE id = %(id)s;

-- name: event_payload
-- The whole payload of one event as JSON text (for download).
SELECT payload::text AS payload FROM {table} WHERE id = %(id)s;

-- name: aggregate_timeline
-- Every event of one aggregate, oldest first.
SELECT id, event_type, event_key, status, attempts, created_at, processed_at,
       left(last_error, 2000) AS last_error
FROM {table}
WHERE aggregate_type = %(aggregate_type)s AND aggregate_id = %(aggregate_id)s
ORDER BY created_at, id
LIMIT %(limit)s;

-- name: event_payload_head
-- The first %(chars)s characters of one event's payload as JSON text, for a truncated view.
SELECT left(payload::text, %(chars)s) AS head FROM {table} WHERE id = %(id)s;

-- name: failed_rows
-- Dead-lettered rows matching the filters with their error group, newest id first; no payload.
SELECT id, event_type, aggregate_type, aggregate_id, event_key, attempts, created_at,
       processed_at, left(last_error, 2000) AS last_error,
       outbox_monitor.error_group(event_type, last_error) AS group_id
FROM {table}
WHERE status = 'failed' {and_filters}
ORDER BY id DESC
LIMIT %(limit)s;

-- name: payload_search_page
-- One keyset page of the events created in [since, until) whose payload matches {and_filters} (containment or a key path, payload_search.py), newest first by (created_at, id); no payload selected, no trailing semicolon (EXPLAINed as count_estimate's {rows}).
SELECT id, event_type, aggregate_type, aggregate_id, event_key, status, attempts,
       available_at, locked_at, locked_by, left(last_error, 2000) AS last_error,
       created_at, processed_at
FROM {table}
WHERE created_at >= %(since)s AND created_at < %(until)s {and_filters}
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s

-- name: payload_search_indexes
-- The valid indexes without predicate of the outbox table and of its partitions (at any depth): name, access method and leading key as Postgres prints it ("payload" for a column, "(payload #>> '{a,b}'::text[])" for an expression): which of them can serve a payload search.
SELECT c.relname AS index_name, am.amname AS method,
       pg_get_indexdef(i.indexrelid, 1, true) AS leading_key
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_am am ON am.oid = c.relam
WHERE i.indisvalid AND i.indpred IS NULL
  AND i.indrelid IN (SELECT %(table_regclass)s::regclass::oid
                     UNION ALL
                     SELECT p.relid FROM pg_partition_tree(%(table_regclass)s::regclass) AS p)
ORDER BY c.relname;

-- name: payload_index_containment
-- Advice only, shown and never run (payload_search.py): a GIN index with jsonb_path_ops (smaller than jsonb_ops; serves @> only) for containment searches.
CREATE INDEX CONCURRENTLY {index} ON {table} USING gin (payload jsonb_path_ops);

-- name: payload_index_path
-- Advice only, shown and never run (payload_search.py): a btree on one key path's text, then created_at, for equality on that path within a time range.
CREATE INDEX CONCURRENTLY {index} ON {table} ((payload #>> {path}), created_at);


-- ===================================================================== actions (SPEC section 4)

-- name: reap_preview
-- How many processing rows hold a lock older than the lock timeout or none (orphans), and the largest id.
SELECT count(*) AS matched, max(id) AS max_id FROM {table}
WHERE status = 'processing'
      AND (locked_at < now() - make_interval(secs => %(lock_timeout)s) OR locked_at IS NULL)
      {and_filters};

-- name: reap_sample
-- The stuck rows with the oldest locks (orphans, with no lock time, first), for the preview.
SELECT id, event_type, event_key, locked_by, locked_at, attempts,
       extract(epoch FROM now() - locked_at)::float8 AS lock_age_seconds
FROM {table}
WHERE status = 'processing'
      AND (locked_at < now() - make_interval(secs => %(lock_timeout)s) OR locked_at IS NULL)
      {and_filters}
ORDER BY locked_at NULLS FIRST, id
LIMIT %(limit)s;

-- name: reap_batch
-- Reap up to %(batch)s stuck rows (orphans included) with id in (after_id, max_id], through the outbox's audited reap function ({writer}, store/audited_writers.py): back to pending as one more attempt, or failed at the maximum, the guard repeated in its UPDATE, each reaped row a transient failure for the table's breakers, its audit row in this transaction.
WITH picked AS (
    SELECT id FROM {table}
    WHERE status = 'processing'
          AND (locked_at < now() - make_interval(secs => %(lock_timeout)s) OR locked_at IS NULL)
          AND id > %(after_id)s AND id <= %(max_id)s {and_filters}
    ORDER BY id
    LIMIT %(batch)s
)
SELECT (SELECT max(id) FROM picked) AS last_picked_id, w.ids, w.dead_lettered
FROM {writer}(
    p_run_id => %(run_id)s, p_actor => %(actor)s, p_filter => %(filter)s,
    p_ids => ARRAY(SELECT id FROM picked ORDER BY id),
    p_lock_timeout => %(lock_timeout)s, p_max_attempts => %(max_attempts)s,
    p_audit_empty => %(audit_empty)s) AS w;

-- name: replay_preview
-- How many failed rows match the replay filter, and the largest id.
SELECT count(*) AS matched, max(id) AS max_id FROM {table}
WHERE status = 'failed' {and_filters};

-- name: replay_sample
-- The newest failed rows matching the replay filter, for the preview.
SELECT id, event_type, event_key, attempts, processed_at, left(last_error, 2000) AS last_error
FROM {table}
WHERE status = 'failed' {and_filters}
ORDER BY id DESC
LIMIT %(limit)s;

-- name: replay_batch
-- Replay up to %(batch)s failed rows with id in (after_id, max_id], through the outbox's audited replay function ({writer}): back to pending, attempts reset, due now; last_error kept; only rows still failed change; its audit row in this transaction.
WITH picked AS (
    SELECT id FROM {table}
    WHERE status = 'failed' AND id > %(after_id)s AND id <= %(max_id)s {and_filters}
    ORDER BY id
    LIMIT %(batch)s
)
SELECT (SELECT max(id) FROM picked) AS last_picked_id, w.ids, 0 AS dead_lettered
FROM {writer}(
    p_run_id => %(run_id)s, p_actor => %(actor)s, p_filter => %(filter)s,
    p_ids => ARRAY(SELECT id FROM picked ORDER BY id), p_t0 => NULL, p_before => 0,
    p_rate => NULL, p_audit_empty => %(audit_empty)s) AS w;

-- name: replay_drip_batch
-- Drip replay (SPEC section 5): up to %(batch)s failed rows with id <= max_id after the keyset (after_created_at, after_id), in (created_at, id) order, through the outbox's audited replay function ({writer}), which locks them; the k-th row of the run (k = before + its number here) becomes due at t0 + (k - 1) / rate seconds, t0 the start of the run's first batch.
WITH picked AS (
    SELECT id, created_at FROM {table}
    WHERE status = 'failed' AND id <= %(max_id)s
          AND (created_at, id) > (coalesce(%(after_created_at)s::timestamptz, '-infinity'),
                                  %(after_id)s::bigint)
          {and_filters}
    ORDER BY created_at, id
    LIMIT %(batch)s
)
SELECT (SELECT id FROM picked ORDER BY created_at DESC, id DESC LIMIT 1) AS last_picked_id,
       (SELECT max(created_at) FROM picked) AS last_picked_created_at,
       w.t0, w.ids, 0 AS dead_lettered
FROM {writer}(
    p_run_id => %(run_id)s, p_actor => %(actor)s, p_filter => %(filter)s,
    p_ids => ARRAY(SELECT id FROM picked), p_t0 => %(t0)s::timestamptz,
    p_before => %(before)s, p_rate => %(rate)s::float8,
    p_audit_empty => %(audit_empty)s) AS w;

-- name: replay_superseded
-- The condition (used inside a filter on the unaliased outbox table) that a row's aggregate already has a later event, any type, with status done: later created_at, id breaking ties; served by the users' index (aggregate_type, aggregate_id, created_at).
EXISTS (
    SELECT 1 FROM {table} AS later
    WHERE later.aggregate_type = {table}.aggregate_type
          AND later.aggregate_id = {table}.aggregate_id
          AND later.created_at >= {table}.created_at
          AND (later.created_at, later.id) > ({table}.created_at, {table}.id)
          AND later.status = 'done'
)

-- name: replay_superseded_by_event_type
-- Failed rows of the replay filter whose aggregate already has a later done event ({superseded}: replay_superseded), counted per event type.
SELECT event_type, count(*) AS rows FROM {table}
WHERE status = 'failed' {and_filters} AND {superseded}
GROUP BY event_type
ORDER BY event_type;

-- name: prune_preview
-- Rows of one terminal status processed before the cutoff, and the largest id.
SELECT count(*) AS matched, max(id) AS max_id FROM {table}
WHERE status = %(status)s AND processed_at < now() - make_interval(secs => %(older_than)s)
      {and_filters};

-- name: prune_rows
-- The rows of one terminal status processed before the cutoff, one id each (the dashboard's capped preview).
SELECT id FROM {table}
WHERE status = %(status)s AND processed_at < now() - make_interval(secs => %(older_than)s)
      {and_filters}

-- name: preview_capped
-- A dashboard preview of the rows of {rows}, read up to %(cap)s + 1 of them: their number, and, when that is at most the cap (nothing was cut), their largest id.
SELECT count(*) AS matched, max(id) AS max_id FROM ({rows} LIMIT %(cap)s + 1) AS capped;

-- name: max_id
-- The largest id of the rows of {rows}, exact (a dashboard preview's id ceiling, SPEC section 4, when it estimates the count): the planner walks the primary key back to the newest matching row.
SELECT max(id) AS max_id FROM ({rows}) AS matched;

-- name: prune_sample
-- The oldest rows a prune would delete, for the preview.
SELECT id, event_type, event_key, status, processed_at FROM {table}
WHERE status = %(status)s AND processed_at < now() - make_interval(secs => %(older_than)s)
      {and_filters}
ORDER BY processed_at, id
LIMIT %(limit)s;

-- name: prune_batch
-- Delete up to %(batch)s rows of one terminal status older than the cutoff, id in (after_id, max_id], through the outbox's audited prune function ({writer}): pending and processing rows can never match; its audit row in this transaction.
WITH picked AS (
    SELECT id FROM {table}
    WHERE status = %(status)s AND processed_at < now() - make_interval(secs => %(older_than)s)
          AND status IN ('done', 'failed')
          AND id > %(after_id)s AND id <= %(max_id)s {and_filters}
    ORDER BY id
    LIMIT %(batch)s
)
SELECT (SELECT max(id) FROM picked) AS last_picked_id, w.ids, 0 AS dead_lettered
FROM {writer}(
    p_run_id => %(run_id)s, p_actor => %(actor)s, p_filter => %(filter)s,
    p_ids => ARRAY(SELECT id FROM picked ORDER BY id), p_status => %(status)s,
    p_older_than => %(older_than)s, p_audit_empty => %(audit_empty)s) AS w;

-- name: prune_partitions
-- The partitions a prune may detach whole (actions/partitions.py): the ordinary tables attached directly to the partitioned outbox, not its default partition, whose range on created_at ends at least %(older_than)s seconds ago (the shortest retention), or whose detach an earlier prune left pending; each with its bounds (NULL for MINVALUE or MAXVALUE) and whether this login owns it and the outbox (DETACH and DROP need the owner).
SELECT schema, name, detach_pending, lower, upper, owned
FROM (
    SELECT n.nspname AS schema, c.relname AS name, i.inhdetachpending AS detach_pending,
           substring(b.bound FROM '^FOR VALUES FROM \((?:''([^'']*)''|MINVALUE)\) TO ')::timestamptz
               AS lower,
           substring(b.bound FROM ' TO \((?:''([^'']*)''|MAXVALUE)\)$')::timestamptz AS upper,
           pg_has_role(current_user, c.relowner, 'USAGE')
               AND pg_has_role(current_user, parent.relowner, 'USAGE') AS owned
    FROM pg_inherits i
    JOIN pg_class parent ON parent.oid = i.inhparent
    JOIN pg_class c ON c.oid = i.inhrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS bound) AS b
    WHERE i.inhparent = %(table_regclass)s::regclass AND c.relkind = 'r'
          AND b.bound <> 'DEFAULT'
) AS partitions
WHERE detach_pending OR upper <= now() - make_interval(secs => %(older_than)s)
ORDER BY lower NULLS FIRST, name;

-- name: prune_partition_rows
-- The rows of one partition: all of them, those a prune deletes (done processed before now() - %(done_older_than)s s, failed before now() - %(failed_older_than)s s, under the filter {and_filters}; a NULL age deletes none of that status), the largest id and the first %(limit)s ids. {source} is the outbox with {in_range} the partition's range on created_at (partition pruning reads that partition only, with the outbox's privileges), or the partition itself with {in_range} empty. Each count is index-only on a partition of the recommended indexes with all-visible pages.
SELECT (SELECT count(*) FROM {source} WHERE true {in_range}) AS rows,
       (SELECT count(*) FROM {source}
        WHERE status = 'done'
              AND processed_at < now() - make_interval(secs => %(done_older_than)s)
              {in_range} {and_filters}) AS done,
       (SELECT count(*) FROM {source}
        WHERE status = 'failed'
              AND processed_at < now() - make_interval(secs => %(failed_older_than)s)
              {in_range} {and_filters}) AS failed,
       (SELECT max(id) FROM {source} WHERE true {in_range}) AS max_id,
       ARRAY(SELECT id FROM {source} WHERE true {in_range} ORDER BY id LIMIT %(limit)s)
           AS first_ids;

-- name: detach_partition
-- Detaches one partition ({partition}) from the outbox; {concurrently} is CONCURRENTLY (outside a transaction, two of its own; Postgres refuses it while the outbox has a default partition) or empty (ACCESS EXCLUSIVE on the outbox for the moment of the catalog change). Under a lock timeout.
ALTER TABLE {table} DETACH PARTITION {partition} {concurrently};

-- name: finalize_detach
-- Completes a DETACH CONCURRENTLY whose second transaction was interrupted (the partition is detach-pending: queries of the outbox no longer read it). Outside a transaction, under a lock timeout.
ALTER TABLE {table} DETACH PARTITION {partition} FINALIZE;

-- name: detach_pending
-- Whether the partition %(partition)s (a regclass text) of the outbox is being detached (a DETACH CONCURRENTLY interrupted after its first transaction); NULL when it is attached to no table.
SELECT (SELECT i.inhdetachpending FROM pg_inherits i
        WHERE i.inhrelid = %(partition)s::regclass
              AND i.inhparent = %(table_regclass)s::regclass) AS pending;

-- name: attach_partition
-- Attaches a detached partition back, with the range it had ({lower}, {upper}: literals, or MINVALUE and MAXVALUE): a prune whose final check found rows changed since its first. Under a lock timeout.
ALTER TABLE {table} ATTACH PARTITION {partition} FOR VALUES FROM ({lower}) TO ({upper});

-- name: lock_detached_partition
-- Locks a detached partition for its final check, its audit row and its drop, in one transaction (no statement of the outbox reads it any more).
LOCK TABLE {partition} IN ACCESS EXCLUSIVE MODE;

-- name: drop_detached_partition
-- Drops a detached partition whose every row the prune deletes, in the transaction of its audit row.
DROP TABLE {partition};

-- name: try_lock_partition_pruner
-- Session lock so that one prune at a time detaches partitions of this outbox; true when taken.
SELECT pg_try_advisory_lock(
    hashtextextended('outbox_monitor.prune_partitions:' || %(table_regclass)s::regclass::oid, 0)
) AS locked;

-- name: unlock_partition_pruner
-- Releases the partition pruner's session lock.
SELECT pg_advisory_unlock(
    hashtextextended('outbox_monitor.prune_partitions:' || %(table_regclass)s::regclass::oid, 0)
) AS unlocked;

-- name: audit_note
-- The audit row of a read that changes nothing (a payload reveal, an operator's payload search), through the outbox's audited note function ({writer}: reads only, its table fixed); returns its id.
SELECT {writer}(
    p_run_id => %(run_id)s, p_actor => %(actor)s, p_action => %(action)s,
    p_filter => %(filter)s, p_ids => %(affected_ids)s) AS id;

-- name: audit_record
-- One audit row through the internal writer of the audit log (migration 003, 019): callable only by its owner (the role that ran init-db), for a partition a prune detached and dropped as that owner; returns its id.
SELECT outbox_monitor.record_audit(
    p_run_id => %(run_id)s, p_actor => %(actor)s, p_action => %(action)s,
    p_table_name => %(table_name)s, p_filter => %(filter)s,
    p_affected_count => %(affected_count)s, p_affected_ids => %(affected_ids)s) AS id;

-- name: audit_refused
-- A rate-limited `refused` audit row (who, this outbox, the action refused) through the outbox's refusal function ({writer}); NULL when the rate limit folded it into an earlier row.
SELECT {writer}(p_actor => %(actor)s, p_refused_action => %(refused_action)s) AS id;

-- name: audit_refused_count
-- How many `refused` audit rows this outbox table (%(table_name)s) got in the last hour (the scheduler's /metrics), through audit_log_at_idx.
SELECT count(*) AS refused FROM outbox_monitor.audit_log
WHERE at > now() - interval '1 hour' AND action = 'refused' AND table_name = %(table_name)s;

-- name: audit_recent
-- The newest audit rows of the outbox table (the outboxes of one database keep apart).
SELECT id, run_id, at, actor, action, table_name, filter, affected_count,
       cardinality(affected_ids) AS ids_recorded, affected_ids[1:20] AS first_ids,
       db_login, client_addr::text AS client_addr
FROM outbox_monitor.audit_log
WHERE table_name = %(table_name)s
ORDER BY at DESC, id DESC
LIMIT %(limit)s;


-- name: replay_outcome
-- Where the rows of one replay run are now (SPEC section 4 run id): its ids from the audit rows (up to 1,000 per row; a replay batch holds at most that many), counted by current status; gone = no longer in the table (pruned).
WITH runs AS (
    SELECT affected_ids, affected_count, at FROM outbox_monitor.audit_log
    WHERE run_id = %(run_id)s::uuid AND action = 'replay' AND table_name = %(table_name)s
), replayed AS (
    SELECT DISTINCT unnest(affected_ids) AS id FROM runs
)
SELECT (SELECT coalesce(sum(affected_count), 0) FROM runs)::bigint AS replayed,
       (SELECT coalesce(sum(cardinality(affected_ids)), 0) FROM runs)::bigint AS recorded,
       (SELECT min(at) FROM runs) AS at,
       count(o.id) FILTER (WHERE o.status = 'done') AS done,
       count(o.id) FILTER (WHERE o.status = 'failed') AS failed,
       count(o.id) FILTER (WHERE o.status = 'pending') AS pending,
       count(o.id) FILTER (WHERE o.status = 'processing') AS processing,
       count(*) FILTER (WHERE r.id IS NOT NULL AND o.id IS NULL) AS gone
FROM replayed AS r
LEFT JOIN {table} AS o ON o.id = r.id;

-- name: replay_outcome_groups
-- The rows of one replay run that failed again, by error group (SPEC section 2), biggest first, with the last_error of the largest id as sample.
WITH replayed AS (
    SELECT DISTINCT unnest(affected_ids) AS id FROM outbox_monitor.audit_log
    WHERE run_id = %(run_id)s::uuid AND action = 'replay' AND table_name = %(table_name)s
), grouped AS (
    SELECT outbox_monitor.error_group(o.event_type, o.last_error) AS group_id, o.event_type,
           count(*) AS rows, max(o.id) AS sample_id
    FROM replayed AS r JOIN {table} AS o ON o.id = r.id
    WHERE o.status = 'failed'
    GROUP BY 1, 2
)
SELECT g.group_id, g.event_type, g.rows, left(s.last_error, 2000) AS sample_error
FROM grouped AS g
LEFT JOIN {table} AS s ON s.id = g.sample_id
ORDER BY g.rows DESC, g.group_id;

-- name: replay_runs_recent
-- The newest replay runs of the outbox table: run id, first batch time, actor, filter and rows replayed.
SELECT run_id::text AS run_id, min(at) AS at, min(actor) AS actor,
       (array_agg(filter ORDER BY id))[1] AS filter, sum(affected_count)::bigint AS replayed
FROM outbox_monitor.audit_log
WHERE action = 'replay' AND table_name = %(table_name)s
      AND (%(error_group)s::text IS NULL OR filter ->> 'error_group' = %(error_group)s)
GROUP BY run_id
HAVING sum(affected_count) > 0
ORDER BY min(at) DESC
LIMIT %(limit)s;

-- ===================================================================== flow control (SPEC section 5)

-- name: control_rows
-- The control rows of the table (of one filter unless %(event_type_filter)s is null), both layers (file, ui), with whether each is in force by its expiry; {lock} is FOR UPDATE for a change, else empty.
SELECT c.id, c.event_type_filter, c.layer, c.paused, c.paused_until, c.pause_reason,
       c.concurrency_limit, c.rate_per_second, c.burst, c.breaker, c.breaker_window_seconds,
       c.breaker_min_attempts, c.breaker_ratio, c.breaker_cooldown_seconds,
       c.probe_timeout_seconds, c.expires_at, c.updated_at, c.updated_by,
       (c.expires_at IS NULL OR c.expires_at > clock_timestamp()) AS unexpired
FROM outbox_monitor.controls c
WHERE c.outbox = %(table_regclass)s::regclass
      AND (%(event_type_filter)s::text IS NULL OR c.event_type_filter = %(event_type_filter)s)
ORDER BY c.event_type_filter, c.layer
{lock};

-- name: flow_table_ok
-- Whether flow control can work on the table: a permanent table owned by the owner of the outbox_monitor schema (migration 008).
SELECT outbox_monitor.flow_table_ok(%(table_regclass)s::regclass) AS ok;

-- name: controls_lock
-- The table's controls lock, held to the end of the transaction: changes of one table's controls run one at a time (the audited controls writer takes it too).
SELECT pg_advisory_xact_lock(
    hashtextextended('outbox_monitor.controls:' || (%(table_regclass)s::regclass::oid)::text, 0));

-- name: controls_save
-- Changes of the table's control rows (%(changes)s: a JSON array of filter, layer and the row's settings, or null to delete it) and their audit row, through the outbox's audited controls writer ({writer}); returns the audit row's id.
SELECT {writer}(p_run_id => %(run_id)s, p_actor => %(actor)s, p_action => %(action)s,
                p_filter => %(filter)s, p_changes => %(changes)s) AS id;

-- name: claims_read_held_rows
-- Whether a claim of the table reads every row flow control holds: no index of the table lets it skip them (migration 009's pending_types_index; init-db --flow-control creates one).
SELECT NOT outbox_monitor.pending_types_index(%(table_regclass)s::regclass) AS reads;

-- name: control_states
-- Each control in force with its state now: the pause in force, the bucket refilled to now (not written), the breaker (an open one's next probe: its opening plus its current cool-down, and the seconds until then), and the processing rows it matches.
SELECT e.event_type_filter, e.layer, e.paused, e.paused_until, e.pause_reason,
       e.concurrency_limit, e.rate_per_second, e.burst, e.breaker, e.breaker_window_seconds,
       e.breaker_min_attempts, e.breaker_ratio, e.breaker_cooldown_seconds,
       e.probe_timeout_seconds, e.expires_at, e.updated_at, e.updated_by,
       e.paused AND (e.paused_until IS NULL OR e.paused_until > clock_timestamp()) AS pause_in_force,
       clock_timestamp() AS now,
       CASE WHEN e.rate_per_second IS NOT NULL THEN
           least(e.burst::float8, coalesce(s.tokens, e.burst) + e.rate_per_second
                 * greatest(0, extract(epoch FROM clock_timestamp() - s.refilled_at)))
       END AS tokens,
       CASE WHEN e.breaker THEN coalesce(s.breaker_state, 'closed') END AS breaker_state,
       s.since AS breaker_since, s.probe_id, s.probe_at,
       CASE WHEN e.breaker AND s.breaker_state <> 'closed' THEN s.cooldown_seconds
       END AS cooldown_seconds,
       CASE WHEN e.breaker AND s.breaker_state = 'open' THEN
           s.since + make_interval(secs => s.cooldown_seconds)
       END AS next_probe_at,
       CASE WHEN e.breaker AND s.breaker_state = 'open' THEN
           extract(epoch FROM s.since + make_interval(secs => s.cooldown_seconds)
                              - clock_timestamp())::float8
       END AS next_probe_in_seconds,
       CASE WHEN e.concurrency_limit IS NOT NULL THEN
           (SELECT count(*) FROM {table} o
             WHERE o.status = 'processing'
                   AND outbox_monitor.type_matches(o.event_type, e.event_type_filter))
       END AS processing
FROM outbox_monitor.effective_controls e
LEFT JOIN outbox_monitor.control_state s USING (outbox, event_type_filter)
WHERE e.outbox = %(table_regclass)s::regclass
ORDER BY e.event_type_filter;

-- name: due_by_event_type
-- Due rows (queue depth, SPEC section 2) per event type: what a control holds or throttles.
SELECT event_type, count(*) AS due
FROM {table}
WHERE status = 'pending' AND available_at <= now()
GROUP BY event_type
ORDER BY event_type;

-- name: pending_by_event_type
-- Every event type with pending or processing rows: pending, due (SPEC section 2 queue depth) and processing rows each; one pass over the claim index's pending and processing rows (the Controls page).
SELECT event_type,
       count(*) FILTER (WHERE status = 'pending') AS pending,
       count(*) FILTER (WHERE status = 'pending' AND available_at <= now()) AS due,
       count(*) FILTER (WHERE status = 'processing') AS processing
FROM {table}
WHERE status IN ('pending', 'processing')
GROUP BY event_type
ORDER BY event_type;

-- name: breaker_transitions_recent
-- The newest breaker transitions of the table.
SELECT id, event_type_filter, transition, at, outcomes, failures, cooldown_seconds
FROM outbox_monitor.breaker_transitions
WHERE outbox = %(table_regclass)s::regclass
ORDER BY id DESC
LIMIT %(limit)s;

-- ===================================================================== incident timeline (issue 15 item 5)
-- Each block reads one source of the timeline between %(since)s and %(until)s (inclusive),
-- newest first, at most %(limit)s rows: a source failing alone leaves the others shown.

-- name: timeline_alert_transitions
-- Alert transitions that page people (to firing or error, and their resolve: back to inactive from firing or error), newest first (index alert_transitions_at_idx).
SELECT id, rule, instance, from_state, to_state, value, at, detail
FROM outbox_monitor.alert_transitions
WHERE at >= %(since)s AND at <= %(until)s AND outbox = %(outbox)s
  AND (to_state IN ('firing', 'error') OR (to_state = 'inactive' AND from_state IN ('firing', 'error')))
ORDER BY at DESC, id DESC
LIMIT %(limit)s;

-- name: timeline_audit
-- Audited changes of the outbox table (actions, silences, controls, reveals, searches), newest first (index audit_log_at_idx).
SELECT id, run_id, at, actor, action, filter, affected_count
FROM outbox_monitor.audit_log
WHERE at >= %(since)s AND at <= %(until)s AND table_name = %(table_name)s
ORDER BY at DESC, id DESC
LIMIT %(limit)s;

-- name: timeline_error_groups
-- Error groups of the outbox table first seen in the range (the cache of migration 006, one row per group), newest first (index error_groups_first_seen_idx, migration 015).
SELECT group_id, event_type, fingerprint, failed, first_seen
FROM outbox_monitor.error_groups
WHERE table_oid = %(table_regclass)s::regclass
  AND first_seen >= %(since)s AND first_seen <= %(until)s
ORDER BY first_seen DESC, group_id DESC
LIMIT %(limit)s;

-- name: timeline_breaker_transitions
-- Breaker transitions (opened, closed) of the outbox table, newest first (index breaker_transitions_at_idx, migration 015).
SELECT id, event_type_filter, transition, at, outcomes, failures, cooldown_seconds
FROM outbox_monitor.breaker_transitions
WHERE outbox = %(table_regclass)s::regclass AND at >= %(since)s AND at <= %(until)s
ORDER BY at DESC, id DESC
LIMIT %(limit)s;

-- ===================================================================== claim health (issue 14 item 2)

-- name: claim_plan_users_claim
-- The plan of the claim's inner selection as users write it (SPEC section 1), without FOR UPDATE so a read role may plan it; planned, never run (no ANALYZE).
EXPLAIN (FORMAT JSON)
SELECT id FROM {table}
WHERE status = 'pending' AND available_at <= now()
ORDER BY created_at
LIMIT %(limit)s;

-- name: claim_plan_shared_claim
-- The plan of outbox_monitor.claim's candidate selection with no control on the table (migration 001's statement, static in the table's own claim since migration 030), without FOR UPDATE; planned, never run.
EXPLAIN (FORMAT JSON)
SELECT o.id FROM {table} o
WHERE o.status = 'pending' AND o.available_at <= now()
ORDER BY o.created_at
LIMIT %(limit)s;

-- name: claim_plan_shared_claim_controlled
-- The plan of outbox_monitor.claim's candidate selection when the table has controls (migration 009's statement, first round, nothing taken or blocked yet), without FOR UPDATE; planned, never run.
EXPLAIN (FORMAT JSON)
SELECT o.id, o.event_type FROM {table} o
WHERE o.status = 'pending' AND o.available_at <= now()
      AND NOT (o.id = ANY(%(taken)s::bigint[]))
      AND NOT (o.event_type = ANY(%(blocked_exact)s::text[])
               OR o.event_type LIKE ANY(%(blocked_like)s::text[]))
ORDER BY o.created_at
LIMIT %(limit)s;

-- name: claim_plan_has_controls
-- Whether a flow control names this outbox table (then outbox_monitor.claim runs migration 009's candidate selection).
SELECT EXISTS (SELECT FROM outbox_monitor.controls c
               WHERE c.outbox = %(table_regclass)s::regclass) AS controlled;

-- name: claim_plan_indexes
-- The valid indexes of the outbox table and of its partitions (at any depth): name, leading key column (NULL for an expression), predicate, to tell an index of pending rows from one over every row, and the table it indexes.
SELECT c.relname AS index_name, a.attname AS leading_column,
       pg_get_expr(i.indpred, i.indrelid) AS predicate,
       t.relname AS relation
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_class t ON t.oid = i.indrelid
LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
WHERE i.indisvalid
  AND i.indrelid IN (SELECT %(table_regclass)s::regclass::oid
                     UNION ALL
                     SELECT p.relid FROM pg_partition_tree(%(table_regclass)s::regclass) AS p)
ORDER BY c.relname;

-- name: claim_plan_table_rows
-- The planner's row count of the outbox table (pg_class.reltuples; of its leaf partitions, summed, when partitioned: ANALYZE of the parent also sets the parent's reltuples to the total, which must not count twice). A relation never analyzed nor vacuumed (reltuples -1) counts its live rows by the statistics (pg_stat_all_tables.n_live_tup: inserts less deletes) instead of 0; analyzed is false then.
SELECT coalesce(sum(CASE WHEN c.reltuples >= 0 THEN c.reltuples
                         ELSE coalesce(s.n_live_tup, 0) END), 0)::bigint AS table_rows,
       coalesce(bool_and(c.reltuples >= 0), true) AS analyzed
FROM pg_class c
LEFT JOIN pg_stat_all_tables s ON s.relid = c.oid
WHERE c.relkind <> 'p'
  AND c.oid IN (SELECT %(table_regclass)s::regclass::oid
                UNION ALL
                SELECT p.relid FROM pg_partition_tree(%(table_regclass)s::regclass) AS p);

-- name: claim_plan_relation_rows
-- The planner's row count (pg_class.reltuples; before the first ANALYZE or VACUUM the live rows by the statistics, as claim_plan_table_rows) of the outbox table and of each of its leaf partitions, by name as EXPLAIN's Relation Name shows it: a scan of a small partition is no walk of the history.
SELECT c.relname AS relation,
       (CASE WHEN c.reltuples >= 0 THEN c.reltuples
             ELSE coalesce(s.n_live_tup, 0) END)::bigint AS table_rows
FROM pg_class c
LEFT JOIN pg_stat_all_tables s ON s.relid = c.oid
WHERE c.relkind <> 'p'
  AND c.oid IN (SELECT %(table_regclass)s::regclass::oid
                UNION
                SELECT p.relid FROM pg_partition_tree(%(table_regclass)s::regclass) AS p);

-- name: claim_plan_insert
-- Record one claim plan (the scheduler's claim-health job); sampled_at is the database's now().
INSERT INTO outbox_monitor.claim_plans (table_name, statement, shape, total_cost, plan_rows,
                                        walks_non_pending, reasons)
VALUES (%(table_name)s, %(statement)s, %(shape)s, %(total_cost)s, %(plan_rows)s,
        %(walks_non_pending)s, %(reasons)s)
RETURNING sampled_at;

-- name: claim_plans_recent_costs
-- The estimated total costs of the newest %(limit)s recorded plans of each of %(statements)s of a table, newest first (the cost-jump baseline; a backward walk of the primary key per statement).
SELECT s.statement,
       ARRAY(SELECT p.total_cost FROM outbox_monitor.claim_plans p
              WHERE p.table_name = %(table_name)s AND p.statement = s.statement
              ORDER BY p.sampled_at DESC
              LIMIT %(limit)s) AS costs
FROM unnest(%(statements)s::text[]) AS s(statement);

-- name: claim_plans_latest
-- The newest recorded plan of each of %(statements)s of a table, recorded within the last %(within)s seconds, with the costs recorded before it, newest first (its cost-jump baseline): what the claim's plan was last judged, without planning it again (a backward walk of the primary key per statement).
SELECT s.statement, l.sampled_at, l.total_cost, l.walks_non_pending, l.reasons,
       ARRAY(SELECT p.total_cost FROM outbox_monitor.claim_plans p
              WHERE p.table_name = %(table_name)s AND p.statement = s.statement
                AND p.sampled_at < l.sampled_at
              ORDER BY p.sampled_at DESC
              LIMIT %(limit)s) AS earlier_costs
FROM unnest(%(statements)s::text[]) AS s(statement)
JOIN LATERAL (
    SELECT p.sampled_at, p.total_cost, p.walks_non_pending, p.reasons
    FROM outbox_monitor.claim_plans p
    WHERE p.table_name = %(table_name)s AND p.statement = s.statement
      AND p.sampled_at > now() - make_interval(secs => %(within)s)
    ORDER BY p.sampled_at DESC
    LIMIT 1
) AS l ON true;

-- name: claim_plans_series
-- Recorded claim plans of a table over the window, oldest first (the Health page's chart and table).
SELECT sampled_at, statement, shape, total_cost, plan_rows, walks_non_pending, reasons
FROM outbox_monitor.claim_plans
WHERE table_name = %(table_name)s
  AND sampled_at > now() - make_interval(secs => %(window)s)
ORDER BY sampled_at, statement;

-- name: claim_advice_indexes
-- The indexes of the outbox table and of its partitions (at any depth) as the claim advisor compares them with its proposal: name, the table it indexes, its key columns in order (NULL for an expression), its predicate, its access method, whether it is valid.
SELECT c.relname AS index_name, t.relname AS relation,
       ARRAY(SELECT a.attname::text
             FROM generate_series(0, i.indnkeyatts - 1) AS k(n)
             LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[k.n]
             ORDER BY k.n) AS columns,
       pg_get_expr(i.indpred, i.indrelid) AS predicate, am.amname AS method,
       i.indisvalid AS valid
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_class t ON t.oid = i.indrelid
JOIN pg_am am ON am.oid = c.relam
WHERE i.indrelid IN (SELECT %(table_regclass)s::regclass::oid
                     UNION ALL
                     SELECT p.relid FROM pg_partition_tree(%(table_regclass)s::regclass) AS p)
ORDER BY c.relname;

-- name: claim_advice_name_taken
-- Whether a relation of the schema-qualified name %(name)s exists (the proposed index's name must be free: IF NOT EXISTS would silently keep another index of that name).
SELECT to_regclass(%(name)s) IS NOT NULL AS taken;

-- name: claim_advice_hypopg
-- Where HypoPG is installed in this database (its schema, to call its functions by qualified name) and its version; no row when it is not. The advisor never creates the extension.
SELECT n.nspname AS schema, e.extversion AS version
FROM pg_extension e
JOIN pg_namespace n ON n.oid = e.extnamespace
WHERE e.extname = 'hypopg';

-- name: claim_advice_create_index
-- The index the claim advisor proposes (printed for people, never run by the product; without a name and CONCURRENTLY, given to HypoPG as a hypothetical index). {concurrently}, {index}, {only} and {where} each empty or a space and its words: CONCURRENTLY, the name, ONLY (a partitioned parent, as init-db builds), the predicate (health.claim_proposals.PENDING_PREDICATE).
CREATE INDEX{concurrently}{index} ON{only} {table} ({columns}){where};

-- name: claim_advice_hypothetical_index
-- Create a hypothetical index (HypoPG: held in this session's memory, seen by plain EXPLAIN, never built, gone when the session ends) from a CREATE INDEX statement; its id and HypoPG's estimate of its size in bytes. {create}, {size}: HypoPG's functions, schema-qualified.
SELECT h.indexrelid, {size}(h.indexrelid)::bigint AS bytes
FROM {create}(%(statement)s) AS h;

-- name: claim_plans_prune
-- Delete recorded claim plans and statement samples of a table older than the retention.
WITH plans AS (
    DELETE FROM outbox_monitor.claim_plans
    WHERE table_name = %(table_name)s
      AND sampled_at < now() - make_interval(secs => %(retention)s)
    RETURNING 1),
statements AS (
    DELETE FROM outbox_monitor.claim_statement_samples
    WHERE table_name = %(table_name)s
      AND sampled_at < now() - make_interval(secs => %(retention)s)
    RETURNING 1)
SELECT (SELECT count(*) FROM plans) + (SELECT count(*) FROM statements) AS pruned;

-- name: claim_statements_extension
-- Whether pg_stat_statements is installed in this database (its schema), whether this login may read other roles' statements (pg_read_all_stats), and the server version.
SELECT n.nspname AS schema,
       current_setting('server_version_num')::integer AS server_version,
       (pg_has_role(current_user, 'pg_read_all_stats', 'USAGE')
        OR (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = current_user)) AS readable
FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
WHERE e.extname = 'pg_stat_statements';

-- name: claim_statements_read
-- The claim's and ack's top-level statements of this database in pg_stat_statements ({statements}), summed by kind: the shared functions' calls and the users' SQL shapes (SPEC section 1) on this table.
SELECT m.kind, sum(m.calls)::bigint AS calls, sum(m.total_exec_time) AS total_exec_ms,
       max(m.max_exec_time) AS max_exec_ms, count(*)::integer AS statements
FROM (SELECT s.calls, s.total_exec_time, s.max_exec_time,
             CASE
                 WHEN s.query ILIKE %(shared_claim)s THEN 'shared_claim'
                 WHEN s.query ILIKE %(shared_ack)s THEN 'shared_ack'
                 WHEN s.query ILIKE %(own_schema)s THEN NULL
                 WHEN s.query ~* %(users_claim)s AND s.query ~* %(table_pattern)s
                      THEN 'users_claim'
                 WHEN s.query ~* %(users_ack)s AND s.query !~* %(not_ack)s THEN 'users_ack'
             END AS kind
        FROM {statements} s
       WHERE s.toplevel
         AND s.dbid = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
     ) AS m
WHERE m.kind IS NOT NULL
GROUP BY m.kind
ORDER BY m.kind;

-- name: claim_statement_insert
-- Record one pg_stat_statements reading of one kind of statement (cumulative calls and execution time).
INSERT INTO outbox_monitor.claim_statement_samples (table_name, kind, calls, total_exec_ms)
VALUES (%(table_name)s, %(kind)s, %(calls)s, %(total_exec_ms)s);

-- name: claim_statements_previous
-- The newest recorded reading of each kind of statement of a table, with its age in seconds (the baseline of calls per minute).
SELECT DISTINCT ON (kind) kind, calls, total_exec_ms,
       extract(epoch FROM now() - sampled_at)::double precision AS age_seconds
FROM outbox_monitor.claim_statement_samples
WHERE table_name = %(table_name)s
ORDER BY kind, sampled_at DESC;

-- ===================================================================== workers (issue 15 item 7)
-- The outbox's processing rows through the users' claim index (status, available_at,
-- created_at), led by status; done and failed rows through the recommended done_at and
-- failed_at indexes.

-- name: workers_in_hand
-- Each locked_by's processing rows now (SPEC section 1; NULL: orphans nobody owns): how many, how many stuck (SPEC section 2: locked before now - lock timeout, or no lock time), the newest and oldest locked_at and the newest %(ids)s ids; processing rows only, the workers holding most first.
SELECT locked_by,
       count(*) AS rows_in_hand,
       count(*) FILTER (WHERE locked_at < now() - make_interval(secs => %(lock_timeout)s)
                           OR locked_at IS NULL) AS stuck,
       max(locked_at) AS newest_claim,
       min(locked_at) AS oldest_claim,
       (array_agg(id ORDER BY locked_at DESC NULLS LAST, id DESC))[1:%(ids)s] AS ids
FROM {table}
WHERE status = 'processing'
GROUP BY locked_by
ORDER BY count(*) DESC, locked_by NULLS LAST
LIMIT %(limit)s;

-- name: workers_newest_outcome
-- The workers' newest outcome: max processed_at of done, of failed rows (one step of done_at, of failed_at, newest first); the rest of their liveness comes from the backlog pass (backlog_pass).
SELECT now() AS now,
       greatest((SELECT max(processed_at) FROM {table} WHERE status = 'done'),
                (SELECT max(processed_at) FROM {table} WHERE status = 'failed'))
           AS newest_outcome;

-- name: workers_rows_by_id
-- What became of the rows a worker held at the sampler's last pass: status, locked_by, processed_at and available_at now (moved past the pass when the row was retried, reaped or replayed since), by primary key (a pruned row is absent).
SELECT id, status, locked_by, processed_at, available_at FROM {table} WHERE id = ANY(%(ids)s::bigint[]);

-- name: workers_seen_hands
-- The ids each worker of this table held at the sampler's last pass, and that pass's instant (updated_at); workers that held nothing then are not read (nothing of theirs to follow).
SELECT locked_by, ids_in_hand, updated_at FROM outbox_monitor.workers_seen
WHERE table_name = %(table_name)s AND cardinality(ids_in_hand) > 0;

-- name: workers_seen_upsert
-- One worker at one sampler pass (%(seen_at)s: the database's now read before its rows in hand): what it holds now, the newest claim, ack and dead-letter seen, and what became of the rows it let go of since the last pass (added to its counts).
INSERT INTO outbox_monitor.workers_seen AS w (
    table_name, locked_by, rows_in_hand, stuck, ids_in_hand, first_seen, last_seen,
    last_claim_at, last_ack_at, last_fail_at, acks_seen, dead_lettered_seen, returned_seen,
    updated_at)
VALUES (%(table_name)s, %(locked_by)s, %(rows_in_hand)s, %(stuck)s, %(ids)s::bigint[],
        %(seen_at)s, %(seen_at)s, %(newest_claim)s, %(last_ack)s, %(last_fail)s, %(acked)s,
        %(dead_lettered)s, %(returned)s, %(seen_at)s)
ON CONFLICT (table_name, locked_by) DO UPDATE SET
    rows_in_hand = excluded.rows_in_hand,
    stuck = excluded.stuck,
    ids_in_hand = excluded.ids_in_hand,
    last_seen = CASE WHEN excluded.rows_in_hand > 0 THEN excluded.last_seen ELSE w.last_seen END,
    last_claim_at = greatest(w.last_claim_at, excluded.last_claim_at),
    last_ack_at = greatest(w.last_ack_at, excluded.last_ack_at),
    last_fail_at = greatest(w.last_fail_at, excluded.last_fail_at),
    acks_seen = w.acks_seen + excluded.acks_seen,
    dead_lettered_seen = w.dead_lettered_seen + excluded.dead_lettered_seen,
    returned_seen = w.returned_seen + excluded.returned_seen,
    updated_at = excluded.updated_at;

-- name: workers_seen_prune
-- Forget the workers of this table holding nothing, not seen holding rows for the retention.
DELETE FROM outbox_monitor.workers_seen
WHERE table_name = %(table_name)s AND rows_in_hand = 0
  AND last_seen < now() - make_interval(secs => %(retention)s);

-- name: workers_seen_list
-- What the sampler has seen of the workers of this table, at most %(limit)s: those of %(in_hand)s (holding rows now) first, then those seen holding rows last; each row with how many workers the table holds in all (seen_total).
SELECT locked_by, rows_in_hand, stuck, first_seen, last_seen, last_claim_at, last_ack_at,
       acks_seen, dead_lettered_seen, returned_seen, updated_at, count(*) OVER () AS seen_total
FROM outbox_monitor.workers_seen
WHERE table_name = %(table_name)s
ORDER BY locked_by = ANY(%(in_hand)s::text[]) DESC, last_seen DESC, locked_by
LIMIT %(limit)s;

-- name: workers_seen_of
-- What the sampler saw of the workers %(names)s (locked_by as it keys them) of this table: the evidence the automatic reaper shows of a stuck row's holder (SPEC section 4).
SELECT locked_by, last_seen, last_claim_at, last_ack_at, last_fail_at
FROM outbox_monitor.workers_seen
WHERE table_name = %(table_name)s AND locked_by = ANY(%(names)s::text[]);


-- ===================================================================== a partitioned outbox (demo/partitioned.py: tests, benchmarks)

-- name: partitioned_outbox_partition
-- One range partition {partition} of {table}: created_at from {lower} up to {upper} (literals).
CREATE TABLE {partition} PARTITION OF {table} FOR VALUES FROM ({lower}) TO ({upper});

-- name: partitioned_outbox_default
-- The default partition {partition} of {table}: every row no range holds.
CREATE TABLE {partition} PARTITION OF {table} DEFAULT;


-- ===================================================================== simulator (demo traffic)

-- name: simulate_backoff_schedule
-- The base retry delay (seconds) of each attempt number, from the shared SQL function.
SELECT n AS attempts, extract(epoch FROM outbox_monitor.backoff_base(n))::float8 AS seconds
FROM generate_series(1, %(max_attempts)s) AS n
ORDER BY n;

-- name: simulate_backfill_copy
-- Stream simulated history into the outbox (binary COPY, oldest first: ids follow created_at).
COPY {table} (event_type, aggregate_type, aggregate_id, event_key, payload, status, attempts,
              available_at, locked_at, locked_by, last_error, created_at, processed_at)
FROM STDIN (FORMAT BINARY);

-- name: simulate_backfill_samples
-- Bulk insert of the samples the sampler would have recorded during the simulated history.
INSERT INTO outbox_monitor.samples (
    table_name, sampled_at, queue_depth, pending_total, scheduled_retries, processing,
    stuck_locks, failed_in_window, oldest_pending_age_seconds, latency_p50_seconds,
    latency_p95_seconds)
SELECT %(table_name)s, now() + make_interval(secs => s.sampled_in), s.queue_depth,
       s.pending_total, s.scheduled_retries, s.processing, s.stuck_locks, s.failed_in_window,
       s.oldest_pending_age_seconds, s.latency_p50_seconds, s.latency_p95_seconds
FROM unnest(%(sampled_in)s::float8[], %(queue_depth)s::bigint[],
            %(pending_total)s::bigint[], %(scheduled_retries)s::bigint[],
            %(processing)s::bigint[], %(stuck_locks)s::bigint[], %(failed_in_window)s::bigint[],
            %(oldest_pending_age_seconds)s::float8[], %(latency_p50_seconds)s::float8[],
            %(latency_p95_seconds)s::float8[])
     AS s(sampled_in, queue_depth, pending_total, scheduled_retries, processing, stuck_locks,
          failed_in_window, oldest_pending_age_seconds, latency_p50_seconds,
          latency_p95_seconds)
ON CONFLICT (table_name, sampled_at) DO NOTHING;


-- ===================================================================== alerts: evaluator

-- name: alert_instance_ensure
-- Create a rule instance's state row (inactive) of an outbox if it does not exist yet.
INSERT INTO outbox_monitor.alert_instances (outbox, rule, instance, labels)
VALUES (%(outbox)s, %(rule)s, %(instance)s, %(labels)s)
ON CONFLICT (rule, instance) DO NOTHING;

-- name: alert_instance_lock
-- One instance's state row, locked for this transaction (a second evaluator waits, then sees it).
SELECT rule, instance, labels, state, value, threshold, pending_since, firing_since,
       cleared_since, last_evaluated_at, last_notified_at, firing_seq, error, episode_id
FROM outbox_monitor.alert_instances
WHERE outbox = %(outbox)s AND rule = %(rule)s AND instance = %(instance)s
FOR UPDATE;

-- name: alert_instance_update
-- Store an instance's state after one evaluation step.
UPDATE outbox_monitor.alert_instances
SET labels = %(labels)s, state = %(state)s, value = %(value)s, threshold = %(threshold)s,
    pending_since = %(pending_since)s, firing_since = %(firing_since)s,
    cleared_since = %(cleared_since)s, last_evaluated_at = %(last_evaluated_at)s,
    last_notified_at = %(last_notified_at)s, firing_seq = %(firing_seq)s, error = %(error)s,
    episode_id = %(episode_id)s
WHERE outbox = %(outbox)s AND rule = %(rule)s AND instance = %(instance)s;

-- name: alert_instances_of_rule
-- The instances a rule has state for (to find those its measurement no longer reports).
SELECT instance, state FROM outbox_monitor.alert_instances
WHERE outbox = %(outbox)s AND rule = %(rule)s
ORDER BY instance;

-- name: alert_instances_of_removed_rules
-- Instances not inactive whose rule is no longer in the rule file.
SELECT rule, instance FROM outbox_monitor.alert_instances
WHERE outbox = %(outbox)s AND state <> 'inactive' AND NOT (rule = ANY(%(rules)s))
ORDER BY rule, instance;

-- name: alert_instances_firing
-- The instances of an outbox firing now among the rules given, with their labels: the sources that may inhibit others at the start of a pass (issue 31 item 4).
SELECT rule, instance, labels FROM outbox_monitor.alert_instances
WHERE outbox = %(outbox)s AND state = 'firing' AND rule = ANY(%(rules)s)
ORDER BY rule, instance;

-- name: alert_instance_inhibit
-- Store what inhibits an instance now (NULL: nothing), in its evaluation's transaction; no write when unchanged (migration 027).
UPDATE outbox_monitor.alert_instances SET inhibited_by = %(inhibited_by)s
WHERE outbox = %(outbox)s AND rule = %(rule)s AND instance = %(instance)s
  AND inhibited_by IS DISTINCT FROM %(inhibited_by)s;

-- name: alert_instances_inhibited
-- The instances of an outbox marked inhibited, with what inhibits each and their state (the Alerts page's mark; the evaluator writes only a mark that changes).
SELECT rule, instance, state, inhibited_by FROM outbox_monitor.alert_instances
WHERE outbox = %(outbox)s AND inhibited_by IS NOT NULL
ORDER BY rule, instance;

-- name: alert_transition_insert
-- Record one state transition of a rule instance; its id (an episode's id when it starts one).
INSERT INTO outbox_monitor.alert_transitions
    (outbox, rule, instance, from_state, to_state, value, at, detail)
VALUES (%(outbox)s, %(rule)s, %(instance)s, %(from_state)s, %(to_state)s, %(value)s, %(at)s,
        %(detail)s)
RETURNING id;

-- name: notification_insert
-- Queue one notification of an outbox (same transaction as its transition); a known dedupe_key is skipped.
INSERT INTO outbox_monitor.notifications
    (outbox, dedupe_key, rule, instance, kind, route, evaluation_id, payload, silenced, status,
     available_at, created_at)
VALUES (%(outbox)s, %(dedupe_key)s, %(rule)s, %(instance)s, %(kind)s, %(route)s,
        %(evaluation_id)s, %(payload)s, %(silenced)s, %(status)s, %(now)s, %(now)s)
ON CONFLICT (dedupe_key) DO NOTHING
RETURNING id;

-- name: notification_count_repeats
-- How many repeat notifications one firing episode has had (its dedupe keys share a prefix).
SELECT count(*)::int AS repeats
FROM outbox_monitor.notifications
WHERE outbox = %(outbox)s AND rule = %(rule)s AND instance = %(instance)s AND kind = 'repeat'
  AND starts_with(dedupe_key, %(prefix)s);

-- name: notification_by_key
-- One notification by its dedupe key (route and payload of an episode's first message).
SELECT id, route, payload, status, slack_channel, slack_ts
FROM outbox_monitor.notifications WHERE outbox = %(outbox)s AND dedupe_key = %(dedupe_key)s;

-- name: notification_record_sent
-- Store a notification that was posted outside the outbox (database outage), as sent.
INSERT INTO outbox_monitor.notifications
    (outbox, dedupe_key, rule, instance, kind, route, payload, status, attempts, available_at,
     created_at, sent_at, slack_channel, slack_ts)
VALUES (%(outbox)s, %(dedupe_key)s, %(rule)s, %(instance)s, %(kind)s, %(route)s, %(payload)s,
        'sent', %(attempts)s, %(created_at)s, %(created_at)s, %(sent_at)s, %(slack_channel)s,
        %(slack_ts)s)
ON CONFLICT (dedupe_key) DO NOTHING
RETURNING id;

-- name: notification_record_test
-- Store a test message (alerts test, the Alerts page button) after posting it, through the function of migration 005 (sent or failed, never pending, so the sender never posts it again; it makes the dedupe key and stamps now()); returns its id.
SELECT outbox_monitor.record_test_notification(
    p_route => %(route)s, p_payload => %(payload)s, p_status => %(status)s,
    p_last_status => %(last_status)s, p_last_error => %(last_error)s,
    p_slack_channel => %(slack_channel)s, p_slack_ts => %(slack_ts)s) AS id;

-- name: alert_instances_list
-- Every rule instance of an outbox with its state, value and the time of its last transition (Alerts page).
SELECT i.rule, i.instance, i.labels, i.state, i.value, i.threshold, i.pending_since,
       i.firing_since, i.cleared_since, i.last_evaluated_at, i.last_notified_at, i.firing_seq,
       i.error, t.at AS changed_at
FROM outbox_monitor.alert_instances AS i
LEFT JOIN LATERAL (
    SELECT at FROM outbox_monitor.alert_transitions AS t
    WHERE t.outbox = i.outbox AND t.rule = i.rule AND t.instance = i.instance
    ORDER BY t.id DESC LIMIT 1
) AS t ON true
WHERE i.outbox = %(outbox)s
ORDER BY i.rule, i.instance;

-- name: alertmanager_instances
-- What an alertmanager receiver posts (issue 31 item 1): the instances of an outbox firing or in
-- error now, and those whose episode ended (firing or error -> inactive) at or after %(since)s,
-- with their episode's start (the transition that started it) and the time of that resolve.
SELECT i.rule, i.instance, i.labels, i.state, i.value, i.error, i.episode_id, i.firing_seq,
       coalesce(e.at, i.firing_since, i.last_evaluated_at) AS started_at,
       CASE WHEN i.state IN ('firing', 'error') THEN NULL ELSE r.at END AS resolved_at
FROM outbox_monitor.alert_instances AS i
LEFT JOIN outbox_monitor.alert_transitions AS e ON e.id = i.episode_id
LEFT JOIN LATERAL (
    SELECT at FROM outbox_monitor.alert_transitions AS t
    WHERE t.outbox = i.outbox AND t.rule = i.rule AND t.instance = i.instance
      AND t.to_state = 'inactive' AND t.from_state IN ('firing', 'error') AND t.at >= %(since)s
    ORDER BY t.id DESC LIMIT 1
) AS r ON true
WHERE i.outbox = %(outbox)s AND (i.state IN ('firing', 'error') OR r.at IS NOT NULL)
ORDER BY i.rule, i.instance;

-- name: alert_instances_firing_count
-- Rule instances of one outbox (migration 017's key) firing now, and those in error (the fleet
-- page's row of an outbox).
SELECT count(*) FILTER (WHERE state = 'firing')::int AS firing,
       count(*) FILTER (WHERE state = 'error')::int AS errors
FROM outbox_monitor.alert_instances
WHERE outbox = %(outbox)s;

-- name: alert_transitions_recent
-- The newest transitions of an outbox first.
SELECT id, rule, instance, from_state, to_state, value, at, detail
FROM outbox_monitor.alert_transitions
WHERE outbox = %(outbox)s
ORDER BY id DESC
LIMIT %(limit)s;

-- name: notifications_recent
-- The newest notifications of an outbox first (test messages of every outbox: they have none), with their delivery outcome.
SELECT id, dedupe_key, rule, instance, kind, route, evaluation_id, payload, silenced, status,
       attempts, available_at, last_error, last_status, created_at, sent_at, slack_channel,
       slack_ts
FROM outbox_monitor.notifications
WHERE outbox = %(outbox)s OR kind = 'test'
ORDER BY id DESC
LIMIT %(limit)s;


-- ===================================================================== alerts: silences

-- name: silence_insert
-- Create a silence through the outbox's audited silence writer ({writer}), its audit row in the same transaction; returns its id.
SELECT id, starts_at, ends_at
FROM {writer}(p_actor => %(created_by)s, p_matchers => %(matchers)s, p_starts_at => %(starts_at)s,
              p_ends_at => %(ends_at)s, p_comment => %(comment)s, p_filter => %(filter)s);

-- name: episode_acknowledged
-- Whether a firing episode (its transition id) was acknowledged (migration 028): the evaluator queues no repeat of it.
SELECT EXISTS (
    SELECT 1 FROM outbox_monitor.alert_acks WHERE episode_id = %(episode)s
) AS acked;

-- name: acknowledgements_of_outbox
-- The acknowledgement of each instance's current episode of this outbox (the Alerts page): rule, instance as stored, who, when, the Slack ids.
SELECT i.rule, i.instance, a.episode_id, a.acked_by, a.acked_at, a.slack_team_id, a.slack_user_id
FROM outbox_monitor.alert_instances AS i
JOIN outbox_monitor.alert_acks AS a ON a.episode_id = i.episode_id
WHERE i.outbox = %(outbox)s AND i.state IN ('firing', 'error')
ORDER BY a.acked_at DESC;

-- name: acknowledge_episode
-- Acknowledge one firing episode through the outbox's audited acknowledge writer ({writer}), its audit row in the same transaction; inserted is false when it was acknowledged before (by acked_by).
SELECT episode_id, acked_by, acked_at, inserted
FROM {writer}(p_actor => %(actor)s, p_episode => %(episode)s, p_rule => %(rule)s,
              p_instance => %(instance)s, p_team => %(team)s, p_user => %(user)s,
              p_filter => %(filter)s);

-- name: slack_press_claim
-- Record a Slack button press in the replay cache (migration 028) and drop the entries older than %(keep_seconds)s; no row returned: (team_id, action_ts) was seen before, a replay.
WITH expired AS (
    DELETE FROM outbox_monitor.slack_action_requests
    WHERE received_at < now() - make_interval(secs => %(keep_seconds)s)
)
INSERT INTO outbox_monitor.slack_action_requests (team_id, action_ts)
VALUES (%(team_id)s, %(action_ts)s)
ON CONFLICT (team_id, action_ts) DO NOTHING
RETURNING team_id, action_ts;

-- name: slack_press_notification
-- The notification a Slack button names (its id), of this outbox, with its instance's state now: outbox, dedupe key, rule, instance as stored, kind, route, payload (its episode), the message's channel and ts, the instance's state, current episode and labels.
SELECT n.id, n.outbox, n.dedupe_key, n.rule, n.instance, n.kind, n.route, n.payload,
       n.slack_channel, n.slack_ts, i.state, i.episode_id AS current_episode, i.labels
FROM outbox_monitor.notifications AS n
LEFT JOIN outbox_monitor.alert_instances AS i
       ON i.outbox = n.outbox AND i.rule = n.rule AND i.instance = n.instance
WHERE n.id = %(id)s AND n.outbox = %(outbox)s;

-- name: silence_expire
-- End a silence now (kept for history) through the outbox's audited writer ({writer}), its audit row in the same transaction; returns nothing when it had already ended.
SELECT id, matchers, expired_at
FROM {writer}(p_actor => %(actor)s, p_id => %(id)s, p_now => %(now)s);

-- name: silences_active
-- Silences in force at an instant: started, not ended, not expired.
SELECT id, matchers, starts_at, ends_at, comment, created_by, created_at, expired_at
FROM outbox_monitor.silences
WHERE starts_at <= %(now)s AND ends_at > %(now)s AND expired_at IS NULL
ORDER BY id;

-- name: silences_all
-- Every silence of an outbox (its matcher named by label equal to outbox, '' for none), those in force now first, each part newest first, with whether it is in force now.
-- Filtered before the LIMIT, so other outboxes' silences never push an outbox's own out; silences_total and active_total count every silence of the outbox, not only the %(limit)s listed.
SELECT id, matchers, starts_at, ends_at, comment, created_by, created_at, expired_at, active,
       count(*) OVER () AS silences_total, count(*) FILTER (WHERE active) OVER () AS active_total
FROM (
    SELECT id, matchers, starts_at, ends_at, comment, created_by, created_at, expired_at,
           (starts_at <= now() AND ends_at > now() AND expired_at IS NULL) AS active
    FROM outbox_monitor.silences
    WHERE COALESCE(matchers ->> %(label)s::text, '') = %(outbox)s
) AS own
ORDER BY active DESC, id DESC
LIMIT %(limit)s;


-- ===================================================================== alerts: leader

-- name: lease_ensure
-- Create the lease row of an outbox table held by this session if there is none; returns its term (nothing when a row exists).
INSERT INTO outbox_monitor.leader_leases (table_name, holder, holder_pid, term, expires_at)
VALUES (%(table_name)s, %(holder)s, pg_backend_pid(), 1, now() + make_interval(secs => %(ttl)s))
ON CONFLICT (table_name) DO NOTHING
RETURNING term;

-- name: lease_take
-- Take the lease over when it expired or its holder's backend is gone; returns the new term (nothing when it is held).
-- Only a takeable lease is locked: FOR UPDATE then waits for the old leader's fenced
-- transactions (FOR KEY SHARE) to end, so none of them commits after the takeover, and
-- the condition is checked again on the row as they left it.
WITH takeable AS (
    SELECT table_name FROM outbox_monitor.leader_leases AS l
    WHERE table_name = %(table_name)s
      AND (l.expires_at <= now()
           OR NOT EXISTS (SELECT 1 FROM pg_stat_activity AS a WHERE a.pid = l.holder_pid))
    FOR UPDATE
)
UPDATE outbox_monitor.leader_leases AS l
SET holder = %(holder)s, holder_pid = pg_backend_pid(), term = l.term + 1, acquired_at = now(),
    renewed_at = now(), expires_at = now() + make_interval(secs => %(ttl)s)
FROM takeable
WHERE l.table_name = takeable.table_name
  AND (l.expires_at <= now()
       OR NOT EXISTS (SELECT 1 FROM pg_stat_activity AS a WHERE a.pid = l.holder_pid))
RETURNING l.term;

-- name: lease_renew
-- Extend the lease this session holds in %(term)s; nothing when it was taken over.
UPDATE outbox_monitor.leader_leases
SET renewed_at = now(), expires_at = now() + make_interval(secs => %(ttl)s)
WHERE table_name = %(table_name)s AND term = %(term)s AND holder_pid = pg_backend_pid()
RETURNING term;

-- name: lease_release
-- Give the lease back (it expires now), if this session still holds it in %(term)s.
UPDATE outbox_monitor.leader_leases
SET expires_at = now()
WHERE table_name = %(table_name)s AND term = %(term)s AND holder_pid = pg_backend_pid()
RETURNING term;

-- name: lease_fence
-- The lease's current term, locked (FOR KEY SHARE) until the calling write transaction ends.
SELECT term FROM outbox_monitor.leader_leases WHERE table_name = %(table_name)s FOR KEY SHARE;

-- name: lease_record_evaluation
-- Stamp the end of a completed evaluation pass (database clock) if the lease is still in %(term)s.
UPDATE outbox_monitor.leader_leases
SET evaluated_at = now()
WHERE table_name = %(table_name)s AND term = %(term)s
RETURNING evaluated_at;

-- name: lease_status
-- The lease of an outbox table (columns NULL when no scheduler ever took it), with the database's now and whether its holder's backend is connected.
SELECT now() AS now, l.holder, l.holder_pid, l.term, l.acquired_at, l.renewed_at, l.expires_at,
       l.evaluated_at,
       EXISTS (SELECT 1 FROM pg_stat_activity AS a WHERE a.pid = l.holder_pid) AS holder_connected
FROM (SELECT 1) AS one
LEFT JOIN outbox_monitor.leader_leases AS l ON l.table_name = %(table_name)s;

-- name: lease_mark_application
-- Rename the lease connection's session (application_name; writes nothing): the leader's mark while its writes fail (issue 29 item 7).
SELECT set_config('application_name', %(name)s, false);

-- name: scheduler_writes_failing
-- Scheduler lease connections of this database marked as failing to write (their application_name, issue 29 item 7), with the oldest mark's session start.
SELECT count(*)::int AS processes, min(backend_start) AS since
FROM pg_stat_activity
WHERE datname = current_database() AND application_name = %(name)s;

-- name: replica_heartbeat
-- Record this replica's heartbeat in its fleet (its connection's backend pid, expiring after %(ttl)s s, the leases it holds) and forget the fleet's expired replicas.
WITH forgotten AS (
    DELETE FROM outbox_monitor.scheduler_replicas
    WHERE fleet = %(fleet)s AND expires_at <= now() AND replica <> %(replica)s
)
INSERT INTO outbox_monitor.scheduler_replicas (fleet, replica, backend_pid, expires_at, leases)
VALUES (%(fleet)s, %(replica)s, pg_backend_pid(), now() + make_interval(secs => %(ttl)s),
        %(leases)s)
ON CONFLICT (fleet, replica) DO UPDATE
SET backend_pid = excluded.backend_pid, heartbeat_at = now(), expires_at = excluded.expires_at,
    leases = excluded.leases;

-- name: replica_count
-- The live replicas of a fleet: heartbeat not expired and its connection's backend still there.
SELECT count(*) AS replicas
FROM outbox_monitor.scheduler_replicas AS r
WHERE r.fleet = %(fleet)s AND r.expires_at > now()
  AND EXISTS (SELECT 1 FROM pg_stat_activity AS a WHERE a.pid = r.backend_pid);

-- name: replica_leave
-- Remove this replica's row (a graceful stop: the others count one fewer at once).
DELETE FROM outbox_monitor.scheduler_replicas WHERE fleet = %(fleet)s AND replica = %(replica)s;

-- name: replica_registry_check
-- Whether the registry database can hold heartbeats: a primary with migration 018's table.
SELECT pg_is_in_recovery() AS in_recovery,
       to_regclass('outbox_monitor.scheduler_replicas') IS NOT NULL AS has_table;

-- name: own_alert_open_instances
-- The instances of one of the scheduler's own alerts (alertmanager-unreachable) whose last transition entered 'error': the open episodes, with their start and detail.
SELECT instance, at, detail
FROM (
    SELECT DISTINCT ON (instance) instance, to_state, at, detail
    FROM outbox_monitor.alert_transitions
    WHERE outbox = %(outbox)s AND rule = %(rule)s
    ORDER BY instance, id DESC
) AS last
WHERE to_state = 'error'
ORDER BY instance;

-- name: open_error_notifications
-- A scheduler alert's notifications (alerting-stalled, replica-lag: one per route and episode) whose resolve is not queued yet.
SELECT e.id, e.dedupe_key, e.route, e.payload
FROM outbox_monitor.notifications AS e
WHERE e.outbox = %(outbox)s AND e.rule = %(rule)s AND e.instance = %(instance)s
  AND e.kind = 'error'
  AND NOT EXISTS (
      SELECT 1 FROM outbox_monitor.notifications AS r
      WHERE r.outbox = e.outbox
        AND r.dedupe_key = left(e.dedupe_key, -length('error')) || 'resolved')
ORDER BY e.id;


-- ===================================================================== alerts: measure

-- name: alert_event_types
-- Event types with rows relevant to a figure (one alert instance each), filtered by the rule.
SELECT event_type FROM {table}
WHERE cardinality(%(open_statuses)s::text[]) > 0 AND status = ANY(%(open_statuses)s::text[])
      {and_filters}
UNION
SELECT event_type FROM {table}
WHERE cardinality(%(closed_statuses)s::text[]) > 0 AND status = ANY(%(closed_statuses)s::text[])
      AND processed_at > now() - make_interval(secs => %(window)s) AND processed_at <= now()
      {and_filters}
UNION
SELECT event_type FROM {table}
WHERE %(created)s AND created_at > now() - make_interval(secs => %(window)s)
      AND created_at <= now() {and_filters}
ORDER BY event_type
LIMIT %(limit)s;


-- ===================================================================== alerts: sender

-- name: sender_pending_notifications
-- Pending, unsilenced notifications of an outbox in id order; the sender groups them per route.
-- With the instance's state now (instance_state, instance_cleared_since, instance_firing_seq): a
-- firing line sent late says that keep_firing_for holds it open.
SELECT n.id, n.dedupe_key, n.rule, n.instance, n.kind, n.route, n.evaluation_id, n.payload,
       n.attempts, n.available_at, n.created_at, i.state AS instance_state,
       i.cleared_since AS instance_cleared_since, i.firing_seq AS instance_firing_seq
FROM outbox_monitor.notifications n
LEFT JOIN outbox_monitor.alert_instances i
       ON i.outbox = n.outbox AND i.rule = n.rule AND i.instance = n.instance
WHERE n.status = 'pending' AND NOT n.silenced AND n.outbox = %(outbox)s
ORDER BY n.id
LIMIT %(limit)s;

-- name: sender_pending_notifications_of_rule
-- Pending, unsilenced notifications of one rule in id order (the alerting-stalled alert's direct delivery).
-- With the instance's state now, as sender_pending_notifications.
SELECT n.id, n.dedupe_key, n.rule, n.instance, n.kind, n.route, n.evaluation_id, n.payload,
       n.attempts, n.available_at, n.created_at, i.state AS instance_state,
       i.cleared_since AS instance_cleared_since, i.firing_seq AS instance_firing_seq
FROM outbox_monitor.notifications n
LEFT JOIN outbox_monitor.alert_instances i
       ON i.outbox = n.outbox AND i.rule = n.rule AND i.instance = n.instance
WHERE n.status = 'pending' AND NOT n.silenced AND n.outbox = %(outbox)s AND n.rule = %(rule)s
ORDER BY n.id
LIMIT %(limit)s;

-- name: sender_lock_notifications
-- Lock the rows of one message for its delivery; rows another sender holds are skipped.
SELECT id, status, available_at
FROM outbox_monitor.notifications
WHERE id = ANY(%(ids)s)
ORDER BY id
FOR UPDATE SKIP LOCKED;

-- name: sender_mark_sent
-- Record a delivered message on its rows: sent, when (sender's clock), where (bot), outcome.
UPDATE outbox_monitor.notifications
SET status = 'sent', sent_at = %(now)s, attempts = attempts + 1, last_status = %(status)s,
    last_error = %(error)s, slack_channel = %(channel)s, slack_ts = %(ts)s
WHERE id = ANY(%(ids)s);

-- name: sender_mark_retry
-- Record a 429 or transient failure: the rows stay pending until %(available_at)s.
UPDATE outbox_monitor.notifications
SET attempts = attempts + 1, available_at = %(available_at)s, last_status = %(status)s,
    last_error = %(error)s
WHERE id = ANY(%(ids)s);

-- name: sender_mark_failed
-- Record a permanent failure: the rows are not retried.
UPDATE outbox_monitor.notifications
SET status = 'failed', attempts = attempts + 1, last_status = %(status)s,
    last_error = %(error)s
WHERE id = ANY(%(ids)s);

-- name: sender_mark_suppressed
-- Suppress pending rows that must not be sent (a resolve on a send_resolved: false route).
UPDATE outbox_monitor.notifications
SET status = 'suppressed', last_error = %(reason)s
WHERE id = ANY(%(ids)s) AND status = 'pending';

-- name: sender_episode_original
-- The posted message (bot: channel, ts) of a firing episode on a route: its first sent row.
SELECT id, slack_channel, slack_ts
FROM outbox_monitor.notifications
WHERE outbox = %(outbox)s AND route = %(route)s AND rule = %(rule)s AND instance = %(instance)s
  AND kind IN ('firing', 'error') AND status = 'sent' AND slack_ts IS NOT NULL
  AND id < %(id)s AND starts_with(dedupe_key, %(episode)s)
ORDER BY id
LIMIT 1;

-- name: sender_thread_notifications
-- Every sent row of one posted message's thread (its lines, then their errors and resolves),
-- with the instance's state now, as sender_pending_notifications, and who acknowledged the
-- row's episode (migration 028; NULL: nobody).
SELECT n.id, n.dedupe_key, n.rule, n.instance, n.kind, n.payload, i.state AS instance_state,
       i.cleared_since AS instance_cleared_since, i.firing_seq AS instance_firing_seq,
       a.acked_by
FROM outbox_monitor.notifications n
LEFT JOIN outbox_monitor.alert_instances i
       ON i.outbox = n.outbox AND i.rule = n.rule AND i.instance = n.instance
LEFT JOIN outbox_monitor.alert_acks a ON a.episode_id::text = n.payload ->> 'episode'
WHERE n.slack_channel = %(channel)s AND n.slack_ts = %(ts)s AND n.status = 'sent'
ORDER BY n.id;


-- name: alert_groups_of_route
-- The state of a grouped route's groups (migration 029, alerts/grouping.py) by their keys: when each is due.
SELECT group_key, episode, open, seq, last_sent_at
FROM outbox_monitor.alert_groups
WHERE outbox = %(outbox)s AND route = %(route)s AND group_key = ANY(%(keys)s);

-- name: alert_group_open
-- The open episode of one group (a Slack Acknowledge of an instance in it acknowledges the group's PagerDuty incident).
SELECT episode
FROM outbox_monitor.alert_groups
WHERE outbox = %(outbox)s AND route = %(route)s AND group_key = %(group_key)s AND open;

-- name: alert_group_ensure
-- A group's row, made on its first notification (closed, episode 0); one already there is kept.
INSERT INTO outbox_monitor.alert_groups (outbox, route, group_key, labels)
VALUES (%(outbox)s, %(route)s, %(group_key)s, %(labels)s)
ON CONFLICT (outbox, route, group_key) DO NOTHING;

-- name: alert_group_lock
-- Lock a group's state for one of its messages (the sender's transaction).
SELECT group_key, labels, episode, open, seq, members, first_sent_at, last_sent_at,
       slack_channel, slack_ts
FROM outbox_monitor.alert_groups
WHERE outbox = %(outbox)s AND route = %(route)s AND group_key = %(group_key)s
FOR UPDATE;

-- name: alert_group_record
-- Record a group's message, in the transaction that marks its notifications sent: its episode, whether it is still open, the messages sent, the instances as told, when, and its Slack card.
UPDATE outbox_monitor.alert_groups
SET episode = %(episode)s, open = %(open)s, seq = %(seq)s, members = %(members)s,
    first_sent_at = coalesce(%(first_sent_at)s, first_sent_at), last_sent_at = %(now)s,
    slack_channel = %(slack_channel)s, slack_ts = %(slack_ts)s
WHERE outbox = %(outbox)s AND route = %(route)s AND group_key = %(group_key)s;

-- ===================================================================== alerts: receiver health (issue 31)

-- name: receiver_health
-- Each route's delivery over an outbox's notifications (alerts/receiver_health.py): its undelivered unsilenced rows, the most attempts of one, the oldest tried one (failing_id, failing_since) and its error; its newest finished row since %(since)s (sent or failed) and that row's error. Pending rows through notifications_due_idx; finished ones through notifications_created_at_idx.
WITH pending AS (
    SELECT route, count(*)::int AS undelivered, max(attempts)::int AS attempts,
           min(id) FILTER (WHERE attempts > 0) AS failing_id,
           min(created_at) FILTER (WHERE attempts > 0) AS failing_since
    FROM outbox_monitor.notifications
    WHERE status = 'pending' AND NOT silenced AND outbox = %(outbox)s
    GROUP BY route
), finished AS (
    SELECT DISTINCT ON (route) route, id, status
    FROM outbox_monitor.notifications
    WHERE status IN ('sent', 'failed') AND outbox = %(outbox)s AND created_at > %(since)s
    ORDER BY route, id DESC
)
SELECT coalesce(p.route, f.route) AS route, coalesce(p.undelivered, 0) AS undelivered,
       coalesce(p.attempts, 0) AS attempts, p.failing_id, p.failing_since,
       f.status AS last_outcome, f.id AS last_id,
       (SELECT n.last_error FROM outbox_monitor.notifications n
        WHERE n.id = coalesce(p.failing_id, f.id)) AS last_error
FROM pending p FULL JOIN finished f ON f.route = p.route
ORDER BY 1;

-- ===================================================================== exporter (Prometheus)

-- name: exporter_event_types_matching
-- Which of %(names)s match any SPEC section 2 event-type filter in %(patterns)s (LIKE-escaped as filters.Where does).
SELECT name FROM unnest(%(names)s::text[]) AS name
WHERE name LIKE ANY(%(patterns)s::text[])
ORDER BY name;

-- name: exporter_sampler_lag
-- Seconds from the newest sample of this outbox table to now; NULL when there is none.
SELECT extract(epoch FROM now() - max(sampled_at))::float8 AS lag_seconds
FROM outbox_monitor.samples
WHERE table_name = %(table_name)s;


-- ===================================================================== audited writers (issue 29 item 2)

-- name: install_worker_functions
-- The worker functions of the outbox %(table_regclass)s (claim, ack, fail, ack_many with static, plan-cached statements; migration 030), registered, and the shared entry points' dispatchers regenerated; run by init-db as the table's owner.
SELECT outbox_monitor.install_worker_functions(%(table_regclass)s::regclass);

-- name: earlier_writer_grantees
-- An earlier release's audited writer of this table under its earlier name, %(signature)s
-- (store/audited_writers.py earlier_writer_name): the roles other than its owner that may
-- execute it (PUBLIC's grant is not moved: the writers are revoked from PUBLIC), and those of
-- them granted it WITH GRANT OPTION; no row when it is absent or its comment, %(comment)s,
-- names another table.
SELECT coalesce(array_agg(r.rolname ORDER BY r.rolname) FILTER (WHERE r.rolname IS NOT NULL),
                '{{}}') AS grantees,
       coalesce(array_agg(r.rolname) FILTER (WHERE r.rolname IS NOT NULL AND a.is_grantable),
                '{{}}') AS grantable
FROM pg_proc AS p
LEFT JOIN LATERAL aclexplode(p.proacl) AS a
       ON a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner
LEFT JOIN pg_roles AS r ON r.oid = a.grantee
WHERE p.oid = to_regprocedure(%(signature)s)
      AND obj_description(p.oid, 'pg_proc') = %(comment)s
GROUP BY p.oid;

-- name: grant_audited_writer
-- The grant an earlier writer of the table had, on its writer under the new name: {writer}
-- with its argument types, {role} a role, {option} WITH GRANT OPTION when it had that.
GRANT EXECUTE ON FUNCTION {writer} TO {role}{option};

-- name: drop_earlier_writer
-- An earlier release's writer of the table, its grants moved ({writer} with its argument types).
DROP FUNCTION {writer};

-- name: audited_writers
-- The functions through which the operator login changes one outbox table and writes its audit rows, created by init-db for {table} (store/audited_writers.py): each SECURITY DEFINER with its search_path pinned, the table fixed in its body (no table parameter: it would lend the owner's rights on any table it owns), its audit row written by record_audit in the same transaction; EXECUTE revoked from PUBLIC here, granted to the operator role by --print-grants.
CREATE OR REPLACE FUNCTION {reap}(
    p_run_id uuid, p_actor text, p_filter jsonb, p_ids bigint[],
    p_lock_timeout double precision, p_max_attempts integer, p_audit_empty boolean)
RETURNS TABLE (ids bigint[], dead_lettered bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_ids bigint[];
    v_dead bigint;
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) > 100000 OR p_lock_timeout IS NULL
       OR NOT p_lock_timeout >= 0 OR p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        RAISE EXCEPTION 'reap: up to 100000 ids, a lock timeout of at least 0 s and at least '
                        '1 attempt are needed' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    WITH changed AS (
        UPDATE {table} AS o SET
            attempts = o.attempts + 1,
            status = CASE WHEN o.attempts + 1 >= p_max_attempts THEN 'failed' ELSE 'pending' END,
            available_at = CASE WHEN o.attempts + 1 >= p_max_attempts THEN o.available_at
                                ELSE pg_catalog.now() END,
            processed_at = CASE WHEN o.attempts + 1 >= p_max_attempts THEN pg_catalog.now() END,
            last_error = pg_catalog.left(
                'lock expired: claimed by ' || coalesce(o.locked_by, 'unknown')
                || coalesce(' at ' || o.locked_at::text || ', not acked within '
                            || p_lock_timeout::text || ' s',
                            ' with no lock time (locked_at null: an orphan)'), 2000),
            locked_at = NULL,
            locked_by = NULL
        WHERE o.id = ANY(p_ids) AND o.status = 'processing'
              AND (o.locked_at < pg_catalog.now() - pg_catalog.make_interval(secs => p_lock_timeout)
                   OR o.locked_at IS NULL)
        RETURNING o.id, o.status
    )
    SELECT coalesce(pg_catalog.array_agg(c.id ORDER BY c.id), ARRAY[]::bigint[]),
           pg_catalog.count(*) FILTER (WHERE c.status = 'failed')
    INTO v_ids, v_dead
    FROM changed AS c;
    -- each reaped row is a transient failure for the table's circuit breakers (SPEC section 5)
    -- (listed for record_outcome, which counts a login's outcomes only where it may claim:
    -- migration 020)
    IF cardinality(v_ids) > 0 AND EXISTS (
        SELECT FROM outbox_monitor.controls AS k WHERE k.outbox = {regclass}::regclass AND k.breaker
    ) THEN
        INSERT INTO outbox_monitor.writer_outcomes (xid, outbox, id)
        SELECT pg_catalog.pg_current_xact_id(), {regclass}::regclass::oid, r.id
        FROM pg_catalog.unnest(v_ids) AS r(id);
        PERFORM outbox_monitor.record_outcome({regclass}::regclass, o.id, o.event_type, 'transient')
        FROM {table} AS o WHERE o.id = ANY(v_ids);
        DELETE FROM outbox_monitor.writer_outcomes AS w
        WHERE w.xid = pg_catalog.pg_current_xact_id();
    END IF;
    IF cardinality(v_ids) > 0 OR p_audit_empty THEN
        PERFORM outbox_monitor.record_audit(p_run_id, p_actor, 'reap', {table_name}, p_filter,
                                            cardinality(v_ids), v_ids[1:1000]);
    END IF;
    RETURN QUERY SELECT v_ids, v_dead;
END
$fn$;
REVOKE ALL ON FUNCTION {reap}(uuid, text, jsonb, bigint[], double precision, integer, boolean)
    FROM PUBLIC;
COMMENT ON FUNCTION {reap}(uuid, text, jsonb, bigint[], double precision, integer, boolean)
    IS {reap_comment};

CREATE OR REPLACE FUNCTION {replay}(
    p_run_id uuid, p_actor text, p_filter jsonb, p_ids bigint[],
    p_t0 timestamptz, p_before bigint, p_rate double precision, p_audit_empty boolean)
RETURNS TABLE (ids bigint[], t0 timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_ids bigint[];
    v_t0 timestamptz := coalesce(p_t0, pg_catalog.now());
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) > 1000 OR p_before IS NULL OR p_before < 0
       OR NOT coalesce(p_rate, 1) > 0 THEN
        RAISE EXCEPTION 'replay: up to 1000 ids, rows before of at least 0 and a rate above 0 '
                        'are needed' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_rate IS NULL THEN
        WITH changed AS (
            UPDATE {table} AS o SET
                status = 'pending', attempts = 0, available_at = pg_catalog.now(),
                processed_at = NULL, locked_at = NULL, locked_by = NULL
            WHERE o.id = ANY(p_ids) AND o.status = 'failed'
            RETURNING o.id
        )
        SELECT coalesce(pg_catalog.array_agg(c.id ORDER BY c.id), ARRAY[]::bigint[])
        INTO v_ids FROM changed AS c;
    ELSE
        -- drip (SPEC section 5): the k-th row of the run, in (created_at, id) order, is due at
        -- t0 + (k - 1) / rate seconds
        WITH picked AS (
            SELECT o.id, o.created_at FROM {table} AS o
            WHERE o.id = ANY(p_ids) AND o.status = 'failed'
            ORDER BY o.created_at, o.id
            FOR UPDATE
        ), numbered AS (
            SELECT p.id, pg_catalog.row_number() OVER (ORDER BY p.created_at, p.id) AS n
            FROM picked AS p
        ), changed AS (
            UPDATE {table} AS o SET
                status = 'pending', attempts = 0,
                available_at = v_t0 + pg_catalog.make_interval(
                    secs => (p_before + numbered.n - 1) / p_rate),
                processed_at = NULL, locked_at = NULL, locked_by = NULL
            FROM numbered
            WHERE o.id = numbered.id AND o.status = 'failed'
            RETURNING o.id
        )
        SELECT coalesce(pg_catalog.array_agg(c.id ORDER BY c.id), ARRAY[]::bigint[])
        INTO v_ids FROM changed AS c;
    END IF;
    IF cardinality(v_ids) > 0 OR p_audit_empty THEN
        PERFORM outbox_monitor.record_audit(p_run_id, p_actor, 'replay', {table_name}, p_filter,
                                            cardinality(v_ids), v_ids[1:1000]);
    END IF;
    RETURN QUERY SELECT v_ids, v_t0;
END
$fn$;
REVOKE ALL ON FUNCTION {replay}(uuid, text, jsonb, bigint[], timestamptz, bigint,
    double precision, boolean) FROM PUBLIC;
COMMENT ON FUNCTION {replay}(uuid, text, jsonb, bigint[], timestamptz, bigint,
    double precision, boolean) IS {replay_comment};

CREATE OR REPLACE FUNCTION {prune}(
    p_run_id uuid, p_actor text, p_filter jsonb, p_ids bigint[],
    p_status text, p_older_than double precision, p_audit_empty boolean)
RETURNS TABLE (ids bigint[])
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_ids bigint[];
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) > 100000 OR p_status IS NULL
       OR p_status NOT IN ('done', 'failed') OR p_older_than IS NULL OR NOT p_older_than >= 0 THEN
        RAISE EXCEPTION 'prune: up to 100000 ids, status done or failed and an age of at '
                        'least 0 s are needed' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    WITH changed AS (
        DELETE FROM {table} AS o
        WHERE o.id = ANY(p_ids) AND o.status = p_status AND o.status IN ('done', 'failed')
              AND o.processed_at < pg_catalog.now() - pg_catalog.make_interval(secs => p_older_than)
        RETURNING o.id
    )
    SELECT coalesce(pg_catalog.array_agg(c.id ORDER BY c.id), ARRAY[]::bigint[])
    INTO v_ids FROM changed AS c;
    IF cardinality(v_ids) > 0 OR p_audit_empty THEN
        PERFORM outbox_monitor.record_audit(p_run_id, p_actor, 'prune', {table_name}, p_filter,
                                            cardinality(v_ids), v_ids[1:1000]);
    END IF;
    RETURN QUERY SELECT v_ids;
END
$fn$;
REVOKE ALL ON FUNCTION {prune}(uuid, text, jsonb, bigint[], text, double precision, boolean)
    FROM PUBLIC;
COMMENT ON FUNCTION {prune}(uuid, text, jsonb, bigint[], text, double precision, boolean)
    IS {prune_comment};

CREATE OR REPLACE FUNCTION {note}(
    p_run_id uuid, p_actor text, p_action text, p_filter jsonb, p_ids bigint[])
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    -- reads only: the login that may call this may read the rows anyway (SELECT), so the
    -- row says what it read; a change is audited only by the function that makes it
    IF p_action IS NULL OR p_action NOT IN ('reveal', 'payload search') THEN
        RAISE EXCEPTION 'audit note: only a read (reveal, payload search) is noted here, '
                        'a change is audited by the function that makes it, got %',
                        coalesce(pg_catalog.to_json(pg_catalog.left(p_action, 60))::text, 'NULL')
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF p_ids IS NULL THEN
        RAISE EXCEPTION 'audit note: ids are needed' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN outbox_monitor.record_audit(p_run_id, p_actor, p_action, {table_name}, p_filter,
                                       cardinality(p_ids), p_ids[1:1000]);
END
$fn$;
REVOKE ALL ON FUNCTION {note}(uuid, text, text, jsonb, bigint[]) FROM PUBLIC;
COMMENT ON FUNCTION {note}(uuid, text, text, jsonb, bigint[]) IS {note_comment};

CREATE OR REPLACE FUNCTION {refused}(p_actor text, p_refused_action text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF p_refused_action IS NULL OR pg_catalog.length(p_refused_action) > 40
       OR p_refused_action !~ '^[a-z]+([ _][a-z]+)*$' THEN
        RAISE EXCEPTION 'refused: the action refused must be lower-case words, got %',
                        coalesce(pg_catalog.to_json(pg_catalog.left(p_refused_action, 60))::text,
                                 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- rate limit: one row per person and action refused a minute, 30 a minute per outbox;
    -- callers of one outbox wait for each other so the counts below are exact
    PERFORM pg_catalog.pg_advisory_xact_lock(
        pg_catalog.hashtextextended('outbox_monitor.refused:' || {table_name}, 0));
    IF EXISTS (
        SELECT FROM outbox_monitor.audit_log AS a
        WHERE a.at > pg_catalog.clock_timestamp() - interval '1 minute'
              AND a.action = 'refused' AND a.table_name = {table_name}
              AND a.actor = p_actor AND a.filter ->> 'action' = p_refused_action
    ) OR (
        SELECT pg_catalog.count(*) FROM outbox_monitor.audit_log AS a
        WHERE a.at > pg_catalog.clock_timestamp() - interval '1 minute'
              AND a.action = 'refused' AND a.table_name = {table_name}
    ) >= 30 THEN
        RETURN NULL;
    END IF;
    RETURN outbox_monitor.record_audit(pg_catalog.gen_random_uuid(), p_actor, 'refused',
                                       {table_name},
                                       pg_catalog.jsonb_build_object('action', p_refused_action),
                                       0, ARRAY[]::bigint[]);
END
$fn$;
REVOKE ALL ON FUNCTION {refused}(text, text) FROM PUBLIC;
COMMENT ON FUNCTION {refused}(text, text) IS {refused_comment};

CREATE OR REPLACE FUNCTION {silence}(
    p_actor text, p_matchers jsonb, p_starts_at timestamptz, p_ends_at timestamptz,
    p_comment text, p_filter jsonb)
RETURNS TABLE (id bigint, starts_at timestamptz, ends_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_row record;
BEGIN
    INSERT INTO outbox_monitor.silences AS s (matchers, starts_at, ends_at, comment, created_by)
    VALUES (p_matchers, p_starts_at, p_ends_at, p_comment, p_actor)
    RETURNING s.id, s.starts_at, s.ends_at INTO v_row;
    PERFORM outbox_monitor.record_audit(pg_catalog.gen_random_uuid(), p_actor, 'silence',
                                        {table_name}, p_filter, 1, ARRAY[v_row.id]::bigint[]);
    RETURN QUERY SELECT v_row.id::bigint, v_row.starts_at, v_row.ends_at;
END
$fn$;
REVOKE ALL ON FUNCTION {silence}(text, jsonb, timestamptz, timestamptz, text, jsonb) FROM PUBLIC;
COMMENT ON FUNCTION {silence}(text, jsonb, timestamptz, timestamptz, text, jsonb)
    IS {silence_comment};

CREATE OR REPLACE FUNCTION {expire_silence}(p_actor text, p_id bigint, p_now timestamptz)
RETURNS TABLE (id bigint, matchers jsonb, expired_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_row record;
BEGIN
    UPDATE outbox_monitor.silences AS s
    SET expired_at = p_now
    WHERE s.id = p_id AND s.expired_at IS NULL AND s.ends_at > p_now
    RETURNING s.id, s.matchers, s.expired_at INTO v_row;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM outbox_monitor.record_audit(
        pg_catalog.gen_random_uuid(), p_actor, 'expire silence', {table_name},
        pg_catalog.jsonb_build_object('id', p_id, 'matchers', v_row.matchers), 1,
        ARRAY[v_row.id]::bigint[]);
    RETURN QUERY SELECT v_row.id::bigint, v_row.matchers, v_row.expired_at;
END
$fn$;
REVOKE ALL ON FUNCTION {expire_silence}(text, bigint, timestamptz) FROM PUBLIC;
COMMENT ON FUNCTION {expire_silence}(text, bigint, timestamptz) IS {expire_silence_comment};

CREATE OR REPLACE FUNCTION {acknowledge}(
    p_actor text, p_episode bigint, p_rule text, p_instance text, p_team text, p_user text,
    p_filter jsonb)
RETURNS TABLE (episode_id bigint, acked_by text, acked_at timestamptz, inserted boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_inserted boolean;
BEGIN
    INSERT INTO outbox_monitor.alert_acks AS a
        (episode_id, rule, instance, acked_by, slack_team_id, slack_user_id)
    VALUES (p_episode, p_rule, p_instance, p_actor, p_team, p_user)
    ON CONFLICT (episode_id) DO NOTHING;
    v_inserted := FOUND;
    IF v_inserted THEN
        PERFORM outbox_monitor.record_audit(pg_catalog.gen_random_uuid(), p_actor,
                                            'acknowledge', {table_name}, p_filter, 1,
                                            ARRAY[p_episode]::bigint[]);
    END IF;
    RETURN QUERY SELECT a.episode_id, a.acked_by, a.acked_at, v_inserted
                 FROM outbox_monitor.alert_acks AS a WHERE a.episode_id = p_episode;
END
$fn$;
REVOKE ALL ON FUNCTION {acknowledge}(text, bigint, text, text, text, text, jsonb) FROM PUBLIC;
COMMENT ON FUNCTION {acknowledge}(text, bigint, text, text, text, text, jsonb)
    IS {acknowledge_comment};

CREATE OR REPLACE FUNCTION {controls}(
    p_run_id uuid, p_actor text, p_action text, p_filter jsonb, p_changes jsonb)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_change jsonb;
    v_layer text;
    v_type text;
    v_row outbox_monitor.controls;
BEGIN
    IF p_action IS NULL
       OR p_action NOT IN ('pause', 'resume', 'limit', 'breaker', 'clear control', 'apply controls')
    THEN
        RAISE EXCEPTION 'controls: the action must be a change of controls (pause, resume, '
                        'limit, breaker, clear control, apply controls), got %',
                        coalesce(pg_catalog.to_json(pg_catalog.left(p_action, 60))::text, 'NULL')
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF p_changes IS NULL OR pg_catalog.jsonb_typeof(p_changes) <> 'array' THEN
        RAISE EXCEPTION 'controls: the changes must be a JSON array'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- one change of this table's controls at a time (flow.rows.lock takes it first)
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended(
        'outbox_monitor.controls:' || ({regclass}::regclass::oid)::text, 0));
    FOR v_change IN SELECT c.value FROM pg_catalog.jsonb_array_elements(p_changes) AS c LOOP
        v_layer := v_change ->> 'layer';
        v_type := v_change ->> 'event_type_filter';
        IF v_layer IS NULL OR v_layer NOT IN ('ui', 'file') OR v_type IS NULL OR v_type = '' THEN
            RAISE EXCEPTION 'controls: each change names a filter and a layer (ui or file)'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF pg_catalog.jsonb_typeof(v_change -> 'row') IS DISTINCT FROM 'object' THEN
            DELETE FROM outbox_monitor.controls AS k
            WHERE k.outbox = {regclass}::regclass AND k.event_type_filter = v_type
                  AND k.layer = v_layer;
            CONTINUE;
        END IF;
        v_row := pg_catalog.jsonb_populate_record(NULL::outbox_monitor.controls, v_change -> 'row');
        INSERT INTO outbox_monitor.controls AS c (
            outbox, event_type_filter, layer, paused, paused_until, pause_reason,
            concurrency_limit, rate_per_second, burst, breaker, breaker_window_seconds,
            breaker_min_attempts, breaker_ratio, breaker_cooldown_seconds,
            probe_timeout_seconds, expires_at, updated_by)
        VALUES ({regclass}::regclass, v_type, v_layer, v_row.paused, v_row.paused_until,
                v_row.pause_reason, v_row.concurrency_limit, v_row.rate_per_second, v_row.burst,
                v_row.breaker, v_row.breaker_window_seconds, v_row.breaker_min_attempts,
                v_row.breaker_ratio, v_row.breaker_cooldown_seconds, v_row.probe_timeout_seconds,
                v_row.expires_at, p_actor)
        ON CONFLICT (outbox, event_type_filter, layer) DO UPDATE SET
            paused = EXCLUDED.paused, paused_until = EXCLUDED.paused_until,
            pause_reason = EXCLUDED.pause_reason, concurrency_limit = EXCLUDED.concurrency_limit,
            rate_per_second = EXCLUDED.rate_per_second, burst = EXCLUDED.burst,
            breaker = EXCLUDED.breaker, breaker_window_seconds = EXCLUDED.breaker_window_seconds,
            breaker_min_attempts = EXCLUDED.breaker_min_attempts,
            breaker_ratio = EXCLUDED.breaker_ratio,
            breaker_cooldown_seconds = EXCLUDED.breaker_cooldown_seconds,
            probe_timeout_seconds = EXCLUDED.probe_timeout_seconds,
            expires_at = EXCLUDED.expires_at, updated_at = pg_catalog.now(),
            updated_by = EXCLUDED.updated_by;
        INSERT INTO outbox_monitor.control_state AS s (outbox, event_type_filter, tokens)
        VALUES ({regclass}::regclass, v_type, v_row.burst)
        ON CONFLICT (outbox, event_type_filter) DO UPDATE SET
            tokens = CASE WHEN EXCLUDED.tokens IS NULL THEN NULL
                          ELSE least(coalesce(s.tokens, EXCLUDED.tokens), EXCLUDED.tokens)
                     END,
            breaker_state = CASE WHEN v_row.breaker THEN s.breaker_state ELSE 'closed' END,
            probe_id = CASE WHEN v_row.breaker THEN s.probe_id END,
            probe_at = CASE WHEN v_row.breaker THEN s.probe_at END;
    END LOOP;
    RETURN outbox_monitor.record_audit(p_run_id, p_actor, p_action, {table_name}, p_filter, 0,
                                       ARRAY[]::bigint[]);
END
$fn$;
REVOKE ALL ON FUNCTION {controls}(uuid, text, text, jsonb, jsonb) FROM PUBLIC;
COMMENT ON FUNCTION {controls}(uuid, text, text, jsonb, jsonb) IS {controls_comment};

-- ===================================================================== access: database roles (issue 4)

-- name: grants
-- The least-privilege roles of outbox-monitor's processes, printed by init-db --print-grants.
-- outbox-monitor's database roles, printed by `outbox-monitor init-db --print-grants`
-- for the outbox table {table}. Run it as the role that ran init-db
-- (owner of the outbox table and of the outbox_monitor schema), with CREATEROLE.
-- Idempotent: after an upgrade, run the new version's output again.
-- viewer: every dashboard page, `status`, `check`, action previews (OUTBOX_MONITOR_DSN)
DO $$ BEGIN CREATE ROLE {viewer} NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
GRANT USAGE ON SCHEMA {outbox_schema} TO {viewer};
GRANT SELECT ON {table} TO {viewer};
GRANT USAGE ON SCHEMA outbox_monitor TO {viewer};
GRANT SELECT ON ALL TABLES IN SCHEMA outbox_monitor TO {viewer};
ALTER DEFAULT PRIVILEGES IN SCHEMA outbox_monitor GRANT SELECT ON TABLES TO {viewer};
-- no function is granted to the viewer wholesale (earlier grants did, and gave it every
-- function created later): the functions that read keep PUBLIC's EXECUTE, a function that
-- writes is REVOKEd from PUBLIC and granted by name to the role whose job it is
ALTER DEFAULT PRIVILEGES IN SCHEMA outbox_monitor REVOKE EXECUTE ON FUNCTIONS FROM {viewer};
-- the error groups' cache (migration 006) is written only through this function, which
-- stores what it computes from the outbox table (no INSERT on the cache: a planted row
-- would mislabel dead letters); without it the dashboard normalises every dead letter
GRANT EXECUTE ON FUNCTION outbox_monitor.refresh_error_groups(regclass, integer) TO {viewer};
-- the retry error groups' cache and counts (migrations 025, 026) likewise
GRANT EXECUTE ON FUNCTION outbox_monitor.refresh_retry_error_groups(regclass, integer,
    interval) TO {viewer};
-- and no function that writes: not the audit log's internal writer (its owner's alone),
-- the writers of test messages and of the outbox's audited changes (the operator's), the
-- audit log's retention (the scheduler's), nor the controls' trigger
REVOKE EXECUTE ON FUNCTION outbox_monitor.record_audit(uuid, text, text, text, jsonb,
    integer, bigint[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION outbox_monitor.record_audit(uuid, text, text, text, jsonb,
    integer, bigint[]) FROM {viewer};
REVOKE EXECUTE ON FUNCTION outbox_monitor.record_test_notification(text, jsonb, text,
    integer, text, text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION outbox_monitor.record_test_notification(text, jsonb, text,
    integer, text, text, text) FROM {viewer};
REVOKE EXECUTE ON FUNCTION outbox_monitor.prune_audit_log(text, double precision, integer)
    FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION outbox_monitor.prune_audit_log(text, double precision, integer)
    FROM {viewer};
REVOKE EXECUTE ON FUNCTION outbox_monitor.sync_outcome_logging() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION outbox_monitor.sync_outcome_logging() FROM {viewer};
-- the audited writers of {table} (created by init-db; store/audited_writers.py)
{writers_from_public}
{writers_from_viewer}
-- viewer: the Health page (xmin horizon holders, running vacuums) sees another role's session
-- only as pid, role, application and xids without pg_read_all_stats, which pg_monitor holds
-- (read-only statistics). Granting it takes CREATEROLE up to PostgreSQL 15, from 16 a
-- superuser or ADMIN OPTION on pg_monitor: refused, this says so in a WARNING and the rest
-- runs; the page and `status` then say what is hidden.
DO $$ BEGIN GRANT pg_monitor TO {viewer};
EXCEPTION WHEN insufficient_privilege THEN RAISE WARNING 'pg_monitor not granted (%): as a superuser, run GRANT pg_monitor TO {viewer};', SQLERRM;
END $$;
-- scheduler: samples, alert state and notifications; never the outbox (its optional
-- auto-reap and auto-prune act as an operator: grant its login both roles)
DO $$ BEGIN CREATE ROLE {scheduler} NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
GRANT {viewer} TO {scheduler};
GRANT INSERT, DELETE ON outbox_monitor.samples, outbox_monitor.event_type_samples
    TO {scheduler};
-- the claim's recorded plans and the workers' statement costs (migration 011);
-- those costs need pg_stat_statements and, to see the workers' statements, membership in
-- pg_read_all_stats: GRANT pg_read_all_stats TO <the scheduler's and viewer's logins>
GRANT INSERT, DELETE ON outbox_monitor.claim_plans, outbox_monitor.claim_statement_samples
    TO {scheduler};
-- what the sampler saw of each worker (migration 013): one row per worker, updated each pass
GRANT INSERT, UPDATE, DELETE ON outbox_monitor.workers_seen TO {scheduler};
-- the backlog as the sampler last read it (migration 031): one row per outbox table, replaced
GRANT INSERT, UPDATE ON outbox_monitor.backlog_snapshots TO {scheduler};
GRANT INSERT, UPDATE ON outbox_monitor.alert_instances, outbox_monitor.notifications TO {scheduler};
GRANT INSERT ON outbox_monitor.alert_transitions TO {scheduler};
-- the retention of its own tables (migration 016): alert history and the breakers' log
-- past their retention; audit rows only through this function (no DELETE on audit_log)
GRANT DELETE ON outbox_monitor.alert_transitions, outbox_monitor.notifications,
    outbox_monitor.breaker_transitions TO {scheduler};
GRANT EXECUTE ON FUNCTION outbox_monitor.prune_audit_log(text, double precision, integer)
    TO {scheduler};
GRANT INSERT, UPDATE ON outbox_monitor.leader_leases TO {scheduler};
-- the replicas' registry (migration 018): each scheduler's heartbeat, the expired ones removed
GRANT INSERT, UPDATE, DELETE ON outbox_monitor.scheduler_replicas TO {scheduler};
-- the state of each alert group (migration 029), written by the sender
GRANT INSERT, UPDATE ON outbox_monitor.alert_groups TO {scheduler};
GRANT USAGE ON SEQUENCE outbox_monitor.alert_transitions_id_seq,
    outbox_monitor.notifications_id_seq TO {scheduler};
-- operator: reap, replay, prune, silences, payload reveals, each audited
-- (OUTBOX_MONITOR_ACTIONS_DSN)
DO $$ BEGIN CREATE ROLE {operator} NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
GRANT {viewer} TO {operator};
-- the outbox is changed only through its audited writers (no UPDATE, DELETE or INSERT on
-- it, none on the audit log): each changes rows under the SPEC section 4 guard and writes
-- the audit row, with the database login and the client address, in the same transaction
REVOKE UPDATE, DELETE, INSERT, TRUNCATE ON {table} FROM {operator};
REVOKE EXECUTE ON FUNCTION outbox_monitor.record_audit(uuid, text, text, text, jsonb,
    integer, bigint[]) FROM {operator};
{writers_to_operator}
-- Slack button presses (migration 028): the replay cache, written by the listener with
-- this login; acknowledgements only through the audited writer above
GRANT INSERT, DELETE ON outbox_monitor.slack_action_requests TO {operator};
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON outbox_monitor.alert_acks FROM {operator};
-- silences only through the audited writers above (none on the table itself)
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON outbox_monitor.silences FROM {operator};
REVOKE USAGE ON SEQUENCE outbox_monitor.silences_id_seq FROM {operator};
-- operator: the "send test alert" message is recorded through this function, which
-- writes only a sent or failed test message (no INSERT on notifications: a forged row
-- could be posted to Slack or suppress a real alert)
GRANT EXECUTE ON FUNCTION outbox_monitor.record_test_notification(text, jsonb, text,
    integer, text, text, text) TO {operator};
-- operator: flow control (SPEC section 5): pause, limits and breakers per event type
-- only through the audited controls writer above (none on the tables themselves)
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON outbox_monitor.controls,
    outbox_monitor.control_state FROM {operator};
REVOKE USAGE ON SEQUENCE outbox_monitor.controls_id_seq FROM {operator};
-- Not granted: INSERT on the outbox (your application's) and the idempotency ledger
-- {ledger} (your workers').
-- Logins, one per DSN (give them passwords), for example:
--   CREATE ROLE monitor_read LOGIN IN ROLE {viewer};          -- OUTBOX_MONITOR_DSN
--   CREATE ROLE monitor_actions LOGIN IN ROLE {operator};     -- OUTBOX_MONITOR_ACTIONS_DSN
--   CREATE ROLE monitor_scheduler LOGIN IN ROLE {scheduler};  -- the scheduler's DSN

-- name: missing_table_privileges
-- Which of %(privileges)s the current role lacks on the relation %(schema)s.%(name)s.
SELECT coalesce(array_agg(p.privilege ORDER BY p.ord), ARRAY[]::text[]) AS missing
FROM unnest(%(privileges)s::text[]) WITH ORDINALITY AS p(privilege, ord)
WHERE NOT has_table_privilege(format('%%I.%%I', %(schema)s::text, %(name)s::text), p.privilege);

-- name: relation_schemas
-- The schemas holding a relation named %(name)s of one of %(kinds)s (pg_class.relkind).
SELECT n.nspname AS schema
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = %(name)s AND c.relkind::text = ANY(%(kinds)s::text[])
ORDER BY n.nspname;

-- name: borrow_session
-- A connection of a caller's pool: its statement_timeout and client_encoding (read first), then ours (%(timeout)s, UTF8) for the session.
WITH saved AS MATERIALIZED (
    SELECT current_setting('statement_timeout') AS timeout,
           current_setting('client_encoding') AS encoding
)
SELECT timeout, encoding,
       set_config('statement_timeout', %(timeout)s, false) AS our_timeout,
       set_config('client_encoding', 'UTF8', false) AS our_encoding
FROM saved;

-- name: return_session
-- A connection given back to a caller's pool: its own statement_timeout and client_encoding again.
SELECT set_config('statement_timeout', %(timeout)s, false) AS timeout,
       set_config('client_encoding', %(encoding)s, false) AS encoding;

-- name: outbox_select_probe
-- Read nothing from the outbox table: fails with the privilege (SELECT, schema USAGE) the role lacks.
SELECT FROM {table} LIMIT 0;


-- ===================================================================== payload privacy (issue 4)

-- name: events_export
-- Events matching the filters with the whole last_error and payload (JSON text), newest id first, for the CSV export.
SELECT id, event_type, aggregate_type, aggregate_id, event_key, status, attempts,
       created_at, available_at, locked_at, locked_by, processed_at, last_error,
       payload::text AS payload
FROM {table}
WHERE true {and_filters}
ORDER BY id DESC
LIMIT %(limit)s;

-- name: event_reveal
-- One event's raw payload (whole JSON text, and indented when at most %(max_payload_bytes)s bytes) and last_error, for an audited reveal.
SELECT id, payload::text AS payload, octet_length(payload::text) AS payload_bytes,
       CASE WHEN octet_length(payload::text) <= %(max_payload_bytes)s
            THEN jsonb_pretty(payload) END AS payload_pretty,
       last_error
FROM {table}
WHERE id = %(id)s;

-- ===================================================================== uninstall

-- name: uninstall_indexes
-- The indexes of the outbox table %(table)s (text; none when absent) named %(names)s, each with whether it carries init-db's comment (comment_recommended_index: a recommended index it created, not one of the users' own of the same name) and whether it is partitioned (dropped without CONCURRENTLY).
SELECT i.relname AS index_name, i.relkind = 'I' AS partitioned,
       obj_description(i.oid, 'pg_class') IS NOT DISTINCT FROM
           'outbox-monitor recommended index, created by init-db' AS created_by_init_db
FROM pg_index ix
JOIN pg_class i ON i.oid = ix.indexrelid
WHERE ix.indrelid = to_regclass(%(table)s)
  AND i.relname = ANY(%(names)s)
ORDER BY 1;

-- name: uninstall_schema_tables
-- The tables of the outbox_monitor schema with their total size in bytes, largest first (none when the schema is absent).
SELECT c.relname AS table_name, pg_total_relation_size(c.oid) AS bytes
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'outbox_monitor' AND c.relkind IN ('r', 'p')
ORDER BY 2 DESC, 1;

-- name: uninstall_schema_functions
-- How many functions the outbox_monitor schema holds.
SELECT count(*) AS functions
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = 'outbox_monitor';

-- name: uninstall_outside_dependents
-- Objects outside the outbox_monitor schema that depend on one of its tables, functions or types (a user's view, trigger, foreign key, default or function): DROP SCHEMA ... CASCADE would drop them too, so uninstall refuses while there is one. Each described by Postgres (pg_describe_object).
WITH inside AS (
    SELECT 'pg_class'::regclass AS classid, c.oid FROM pg_class c
    WHERE c.relnamespace = to_regnamespace('outbox_monitor')
    UNION ALL
    SELECT 'pg_proc'::regclass, p.oid FROM pg_proc p
    WHERE p.pronamespace = to_regnamespace('outbox_monitor')
    UNION ALL
    SELECT 'pg_type'::regclass, t.oid FROM pg_type t
    WHERE t.typnamespace = to_regnamespace('outbox_monitor')
), dependents AS (
    SELECT d.classid, d.objid, d.objsubid,
           CASE d.classid
               WHEN 'pg_class'::regclass THEN (SELECT relnamespace FROM pg_class WHERE oid = d.objid)
               WHEN 'pg_proc'::regclass THEN (SELECT pronamespace FROM pg_proc WHERE oid = d.objid)
               WHEN 'pg_type'::regclass THEN (SELECT typnamespace FROM pg_type WHERE oid = d.objid)
               WHEN 'pg_rewrite'::regclass THEN (SELECT c.relnamespace FROM pg_rewrite r
                                                 JOIN pg_class c ON c.oid = r.ev_class
                                                 WHERE r.oid = d.objid)
               WHEN 'pg_trigger'::regclass THEN (SELECT c.relnamespace FROM pg_trigger g
                                                 JOIN pg_class c ON c.oid = g.tgrelid
                                                 WHERE g.oid = d.objid)
               WHEN 'pg_constraint'::regclass THEN (SELECT connamespace FROM pg_constraint
                                                    WHERE oid = d.objid)
               WHEN 'pg_attrdef'::regclass THEN (SELECT c.relnamespace FROM pg_attrdef a
                                                 JOIN pg_class c ON c.oid = a.adrelid
                                                 WHERE a.oid = d.objid)
           END AS namespace
    FROM pg_depend d
    JOIN inside ON inside.classid = d.refclassid AND inside.oid = d.refobjid
    WHERE d.deptype = 'n'
)
SELECT DISTINCT pg_describe_object(classid, objid, objsubid) AS object
FROM dependents
WHERE namespace IS DISTINCT FROM to_regnamespace('outbox_monitor')
ORDER BY 1;

-- name: uninstall_drop_partitioned_index
-- Drops one partitioned index init-db created ({index} schema-qualified) with its partitions' indexes, in a transaction under a lock timeout (CONCURRENTLY cannot drop a partitioned index).
DROP INDEX IF EXISTS {index};

-- name: uninstall_drop_schema
-- Drops the outbox_monitor schema and everything in it (its tables, the shared functions), after uninstall_outside_dependents found nothing outside it depending on them.
DROP SCHEMA IF EXISTS outbox_monitor CASCADE;

-- ===================================================================== retention of the product's own tables

-- name: retention_audit_log
-- Delete up to %(batch)s audit rows of this outbox table (%(table_name)s) older than %(retention)s seconds (at least a day), oldest first through audit_log_at_idx, through the only other writer of the audit log (migration 016): one batch of the scheduler's retention job; the number deleted.
SELECT outbox_monitor.prune_audit_log(%(table_name)s, %(retention)s, %(batch)s) AS deleted;

-- name: retention_alert_transitions
-- Delete up to %(batch)s alert transitions older than %(retention)s seconds, oldest first through alert_transitions_at_idx (the alert history of every rule: the rules' state stays in alert_instances). The number deleted. Rows are taken by primary key through = ANY(ARRAY(...)), here and below: with IN (...) the planner hash-joined a sequential scan of the whole table.
WITH gone AS (
    DELETE FROM outbox_monitor.alert_transitions
    WHERE id = ANY(ARRAY(SELECT id FROM outbox_monitor.alert_transitions
                 WHERE at < now() - make_interval(secs => %(retention)s)
                 ORDER BY at
                 LIMIT %(batch)s))
    RETURNING 1
)
SELECT count(*) AS deleted FROM gone;

-- name: retention_notifications
-- Delete up to %(batch)s notifications created more than %(retention)s seconds ago, oldest first through notifications_created_at_idx (migration 016): never one still pending, nor one of an alert instance not inactive now (its resolve updates the posted message and threads under it), nor a scheduler alert's error whose resolve is not queued yet (open_error_notifications: an alerting-stalled or replica-lag episode still open). The number deleted.
WITH gone AS (
    DELETE FROM outbox_monitor.notifications
    WHERE id = ANY(ARRAY(SELECT n.id FROM outbox_monitor.notifications n
                 WHERE n.created_at < now() - make_interval(secs => %(retention)s)
                   AND n.status <> 'pending'
                   AND NOT EXISTS (SELECT FROM outbox_monitor.alert_instances i
                                   WHERE i.outbox = n.outbox AND i.rule = n.rule
                                     AND i.instance = n.instance AND i.state <> 'inactive')
                   AND NOT (n.kind = 'error'
                            AND NOT EXISTS (SELECT FROM outbox_monitor.alert_instances i
                                            WHERE i.outbox = n.outbox AND i.rule = n.rule
                                              AND i.instance = n.instance)
                            AND NOT EXISTS (SELECT FROM outbox_monitor.notifications r
                                            WHERE r.outbox = n.outbox
                                              AND r.dedupe_key = left(n.dedupe_key, -length('error'))
                                                                 || 'resolved'))
                 ORDER BY n.created_at
                 LIMIT %(batch)s))
    RETURNING 1
)
SELECT count(*) AS deleted FROM gone;

-- name: retention_breaker_transitions
-- Delete up to %(batch)s breaker transitions of this outbox table older than %(retention)s seconds, oldest first: the breakers' log (their state stays in control_state). The number deleted.
WITH gone AS (
    DELETE FROM outbox_monitor.breaker_transitions
    WHERE id = ANY(ARRAY(SELECT id FROM outbox_monitor.breaker_transitions
                 WHERE outbox = %(table_regclass)s::regclass
                   AND at < now() - make_interval(secs => %(retention)s)
                 ORDER BY id
                 LIMIT %(batch)s))
    RETURNING 1
)
SELECT count(*) AS deleted FROM gone;

-- name: control_barrier_statement_timeout
-- A control change's own statement_timeout until its transaction ends: %(ms)s milliseconds, above its wait for the claims in flight (control_barrier). The setting before, to restore.
SELECT current_setting('statement_timeout') AS previous,
       set_config('statement_timeout', %(ms)s, true) AS now_set;

-- name: control_barrier
-- A control change's barrier (SPEC section 5, migration 022): the outbox's change lock taken exclusively until the change commits, waiting at most %(wait_seconds)s seconds for the claims in flight. reached: false when the wait ran out (the change goes on; claims still running may hand out rows it forbids).
SELECT outbox_monitor.control_barrier(%(table_regclass)s::regclass, %(wait_seconds)s) AS reached;

-- name: statement_timeout_restore
-- Restore the transaction's statement_timeout read by control_barrier_statement_timeout.
SELECT set_config('statement_timeout', %(previous)s, true) AS now_set;

-- name: outbox_like_tables
-- Tables (ordinary or partitioned parents, never a partition) of this database that have every column of %(columns)s, as schema and name, in order: the candidates init-db and the table check name when the configured outbox table is missing (issue 29 item 11). Names from the catalog only; no row is read.
SELECT n.nspname AS schema, c.relname AS name
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
  AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'outbox_monitor')
  AND n.nspname NOT LIKE 'pg\_%%'
  AND a.attname = ANY(%(columns)s::text[])
GROUP BY n.nspname, c.relname
HAVING count(*) = cardinality(%(columns)s::text[])
ORDER BY n.nspname, c.relname;

-- name: control_lock_holders
-- The other sessions holding the outbox's change lock (migration 022's change_lock_key) when a control change's wait for it ran out: pid, mode (ShareLock: a claim in flight; ExclusiveLock: a session that took the lock itself, which stops every claim), login and application_name. Read from pg_locks and pg_stat_activity; no row is read.
SELECT l.pid, l.mode, a.usename, a.application_name
FROM pg_locks l
LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.pid <> pg_backend_pid()
  AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
  AND l.objsubid = 1
  AND l.classid::bigint = outbox_monitor.change_lock_key(%(table_regclass)s::regclass) >> 32
  AND l.objid::bigint = outbox_monitor.change_lock_key(%(table_regclass)s::regclass) & 4294967295
ORDER BY l.mode DESC, l.pid;
