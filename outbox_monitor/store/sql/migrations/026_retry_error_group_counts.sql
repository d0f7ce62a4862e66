-- The retry error groups counted by their refresh, so a page reads the groups without
-- reading the backlog (issue 30 item 1's cost: the Overview's new reads at most 5 ms at 10 M rows).
--
-- Since migration 025 every read of the retry error groups brought the cache current and
-- then grouped the retrying rows it read again: two heap passes over the backlog per
-- Overview refresh, per viewer, and one more per troubled type of the headline. Now the
-- refresh itself counts the groups, in the statement that brings the fingerprints current
-- (one heap pass), and stores them with the time they were counted:
--
-- retry_error_group_counts      per outbox table (by oid) and group (event type,
--                               fingerprint): rows retrying, due at the refresh, the oldest
--                               created_at, the latest available_at, the largest id (the
--                               sample), written whole by each refresh that finished
-- retry_error_groups_refreshed  per outbox table: when the counts were taken
-- refresh_retry_error_groups(p_table, p_batch, p_max_age)
--                               as migration 025's, plus: with p_max_age above zero it
--                               returns at once when the counts are younger than p_max_age,
--                               or when another session is refreshing them (readers never
--                               wait for each other: they read the counts there are;
--                               before the first count they wait for it and read it; a
--                               time ahead of the clock is no age); with p_max_age zero it
--                               always refreshes (status --json and alerts' messages stay
--                               exact). Returns refreshed_at too, and counted: whether
--                               this call took them. A call not done (more than p_batch
--                               rows to normalise) keeps the last counts and their texts.
--
-- A reader shows the counts' time; the scheduler's sampler refreshes them every interval,
-- so with a scheduler a page only reads them. As migration 025, nothing is written to the
-- users' table, and only through this function (SECURITY DEFINER, a permanent table of its
-- owner, a caller who may SELECT it).

CREATE TABLE outbox_monitor.retry_error_group_counts (
    table_oid         oid         NOT NULL,
    event_type        text        NOT NULL,
    fingerprint_md5   uuid        NOT NULL,
    retrying          bigint      NOT NULL,
    due_now           bigint      NOT NULL,  -- of them due when refreshed_at was taken
    oldest_created_at timestamptz NOT NULL,
    last_due_at       timestamptz NOT NULL,  -- the latest available_at
    sample_id         bigint      NOT NULL   -- the largest id of the group
);

CREATE INDEX retry_error_group_counts_table_idx
    ON outbox_monitor.retry_error_group_counts (table_oid, retrying DESC);

CREATE TABLE outbox_monitor.retry_error_groups_refreshed (
    table_oid    oid         PRIMARY KEY,
    refreshed_at timestamptz NOT NULL
);

DROP FUNCTION outbox_monitor.refresh_retry_error_groups(regclass, integer);

CREATE FUNCTION outbox_monitor.refresh_retry_error_groups(
    p_table regclass, p_batch integer, p_max_age interval,
    OUT done boolean, OUT normalised bigint, OUT forgotten bigint,
    OUT refreshed_at timestamptz, OUT counted boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_oid oid := p_table;
    v_lock bigint := hashtextextended('outbox_monitor.retry_error_groups:' || p_table::oid, 0);
BEGIN
    IF p_table IS NULL OR p_batch IS NULL OR p_batch < 1 OR p_max_age IS NULL
       OR p_max_age < interval '0' THEN
        RAISE EXCEPTION 'refresh_retry_error_groups: a table, a batch of at least 1 row and '
                        'a maximum age of at least 0 are needed'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT has_table_privilege(session_user, p_table, 'SELECT') THEN
        RAISE EXCEPTION 'permission denied for table %', p_table
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- Reading a relation runs code of its owner's choosing with this function's rights:
    -- only a permanent table of this function's own owner is read (migration 007).
    IF NOT EXISTS (
        SELECT FROM pg_class AS c
        WHERE c.oid = p_table AND c.relkind IN ('r', 'p') AND c.relpersistence <> 't'
          AND c.relowner = (SELECT r.oid FROM pg_roles AS r WHERE r.rolname = current_user)
    ) THEN
        RAISE EXCEPTION 'permission denied for table %: refresh_retry_error_groups reads only '
                        'a table owned by %, the owner of the outbox_monitor schema (run '
                        'init-db as the owner of the outbox table)', p_table, current_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;

    done := true;
    normalised := 0;
    forgotten := 0;
    counted := false;
    SELECT s.refreshed_at INTO refreshed_at
    FROM outbox_monitor.retry_error_groups_refreshed AS s WHERE s.table_oid = v_oid;
    IF p_max_age > interval '0' AND refreshed_at IS NOT NULL THEN
        -- young enough, or another session is counting them now: read what there is
        -- (a time ahead of the clock, which was set back, is no age: counted again)
        IF (clock_timestamp() - refreshed_at < p_max_age AND refreshed_at <= clock_timestamp())
           OR NOT pg_try_advisory_xact_lock(v_lock) THEN
            RETURN;
        END IF;
    ELSE
        -- never counted (nothing to read: wait for a session taking the first count), or
        -- counted now whatever their age
        PERFORM pg_advisory_xact_lock(v_lock);
    END IF;
    IF p_max_age > interval '0' THEN
        -- counted by another session while this one waited for the lock or its snapshot
        -- (readers arriving before the first count: each would count again, in turn)
        SELECT s.refreshed_at INTO refreshed_at
        FROM outbox_monitor.retry_error_groups_refreshed AS s WHERE s.table_oid = v_oid;
        IF clock_timestamp() - refreshed_at < p_max_age AND refreshed_at <= clock_timestamp()
        THEN
            RETURN;
        END IF;
    END IF;

    -- One snapshot, as migration 025: the retrying rows now beside their cached keys
    -- (grouped on the key, never joined: stale statistics after a storm would plan a nested
    -- loop over both sets), the cached rows no longer retrying forgotten, at most p_batch of
    -- the rows whose key is not cached normalised and stored. When nothing is left to
    -- normalise, the groups of every retrying row (its cached fingerprint, or the one just
    -- computed) replace this table's counts, and their time is stored.
    EXECUTE format($sql$
        WITH retrying AS MATERIALIZED (
            SELECT o.id, o.created_at, o.attempts, o.event_type, o.available_at,
                   hashtextextended(coalesce(o.last_error, ''), 0) AS error_hash
            FROM %1$s AS o
            WHERE o.status = 'pending' AND o.attempts > 0
        ), keyed AS MATERIALIZED (
            SELECT id, attempts, error_hash, max(created_at) AS created_at,
                   max(event_type) AS event_type, max(available_at) AS available_at,
                   bool_or(live) AS retrying, bool_or(NOT live) AS cached,
                   (array_agg(fingerprint_md5) FILTER (WHERE NOT live))[1] AS fingerprint_md5
            FROM (SELECT id, attempts, error_hash, created_at, event_type, available_at,
                         NULL::uuid AS fingerprint_md5, true AS live
                  FROM retrying
                  UNION ALL
                  SELECT id, attempts, error_hash, NULL, NULL, NULL, fingerprint_md5, false
                  FROM outbox_monitor.retry_fingerprints WHERE table_oid = $1) AS both_sides
            GROUP BY id, attempts, error_hash
        ), gone AS (
            SELECT id FROM keyed GROUP BY id HAVING NOT bool_or(retrying)
        ), forgotten AS (
            DELETE FROM outbox_monitor.retry_fingerprints AS c
            WHERE c.table_oid = $1 AND c.id = ANY(ARRAY(SELECT id FROM gone))
            RETURNING c.id
        ), changed AS MATERIALIZED (
            SELECT id, created_at, attempts, error_hash FROM keyed WHERE retrying AND NOT cached
        ), finished AS MATERIALIZED (
            SELECT count(*) <= $2 AS done FROM changed
        ), picked AS MATERIALIZED (
            SELECT p.id, p.attempts, p.error_hash, n.fingerprint,
                   md5(n.fingerprint)::uuid AS fingerprint_md5
            FROM (SELECT * FROM changed ORDER BY id LIMIT $2) AS p
            CROSS JOIN LATERAL (
                SELECT outbox_monitor.normalize_error(o.last_error) AS fingerprint
                FROM %1$s AS o
                WHERE o.id = p.id AND o.created_at = p.created_at
            ) AS n
        ), cached AS (
            INSERT INTO outbox_monitor.retry_fingerprints AS c
                (table_oid, id, attempts, error_hash, fingerprint_md5)
            SELECT $1, id, attempts, error_hash, fingerprint_md5 FROM picked
            ON CONFLICT (table_oid, id) DO UPDATE
            SET attempts = excluded.attempts, error_hash = excluded.error_hash,
                fingerprint_md5 = excluded.fingerprint_md5
        ), texts AS (
            INSERT INTO outbox_monitor.retry_fingerprint_texts AS t
                (table_oid, fingerprint_md5, fingerprint)
            SELECT DISTINCT ON (fingerprint_md5) $1, fingerprint_md5, fingerprint FROM picked
            ON CONFLICT (table_oid, fingerprint_md5) DO NOTHING
        ), counted AS MATERIALIZED (
            SELECT k.event_type, coalesce(k.fingerprint_md5, p.fingerprint_md5) AS fingerprint_md5,
                   count(*) AS retrying,
                   count(*) FILTER (WHERE k.available_at <= statement_timestamp()) AS due_now,
                   min(k.created_at) AS oldest_created_at, max(k.available_at) AS last_due_at,
                   max(k.id) AS sample_id
            FROM keyed AS k LEFT JOIN picked AS p ON p.id = k.id
            WHERE k.retrying AND (SELECT done FROM finished)
            GROUP BY 1, 2
        ), counts_gone AS (
            DELETE FROM outbox_monitor.retry_error_group_counts
            WHERE table_oid = $1 AND (SELECT done FROM finished)
        ), counts_new AS (
            INSERT INTO outbox_monitor.retry_error_group_counts
                (table_oid, event_type, fingerprint_md5, retrying, due_now, oldest_created_at,
                 last_due_at, sample_id)
            SELECT $1, event_type, fingerprint_md5, retrying, due_now, oldest_created_at,
                   last_due_at, sample_id
            FROM counted
        ), stamped AS (
            INSERT INTO outbox_monitor.retry_error_groups_refreshed AS s (table_oid, refreshed_at)
            SELECT $1, statement_timestamp() WHERE (SELECT done FROM finished)
            ON CONFLICT (table_oid) DO UPDATE SET refreshed_at = excluded.refreshed_at
            RETURNING s.refreshed_at
        )
        SELECT (SELECT done FROM finished), (SELECT count(*) FROM picked),
               (SELECT count(*) FROM forgotten),
               coalesce((SELECT refreshed_at FROM stamped), $3),
               EXISTS (SELECT FROM stamped)
    $sql$, p_table)
    INTO done, normalised, forgotten, refreshed_at, counted
    USING v_oid, p_batch, refreshed_at;

    -- The texts of fingerprints no cached row and no stored count has any more (a group
    -- that ended; the counts a call that was not done kept are read with their texts).
    IF forgotten > 0 OR normalised > 0 OR counted THEN
        DELETE FROM outbox_monitor.retry_fingerprint_texts AS t
        WHERE t.table_oid = v_oid
          AND NOT EXISTS (
              SELECT FROM outbox_monitor.retry_fingerprints AS c
              WHERE c.table_oid = v_oid AND c.fingerprint_md5 = t.fingerprint_md5)
          AND NOT EXISTS (
              SELECT FROM outbox_monitor.retry_error_group_counts AS g
              WHERE g.table_oid = v_oid AND g.fingerprint_md5 = t.fingerprint_md5);
    END IF;
END
$fn$;

-- Only the owner keeps the right to execute it; --print-grants gives it to the viewer role.
REVOKE ALL ON FUNCTION outbox_monitor.refresh_retry_error_groups(regclass, integer, interval)
    FROM PUBLIC;
