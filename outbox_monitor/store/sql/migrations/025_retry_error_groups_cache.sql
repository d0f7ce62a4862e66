-- Retry error groups without normalising every retrying row at every refresh (issue 30
-- item 1), and the retrying rows in the headline samples.
--
-- SPEC section 2's retry error groups are the retrying rows (pending, attempts > 0) grouped
-- like error groups, by event type and outbox_monitor.normalize_error(last_error). A
-- retrying row changes under the workers: each failure rewrites its attempts, last_error
-- and available_at, a claim takes it out of the set. So the cache keeps no counts: it keeps
-- each retrying row's fingerprint, keyed by its id, attempts and a hash of its last_error,
-- and the readers group the retrying rows they read now (named query
-- retry_error_groups_cached) with it; only a row whose key is not cached is normalised.
-- As migration 006, it lives in the product's own schema: never a trigger or a write on
-- the users' outbox table.
--
-- retry_fingerprints       one row per retrying row seen (per outbox table, by oid): its id,
--                          attempts and hashtextextended(last_error) when normalised, and
--                          md5 of its fingerprint
-- retry_fingerprint_texts  each fingerprint's text once per outbox table
-- refresh_retry_error_groups(p_table, p_batch)
--                          brings them current in one statement: reads the table's pending
--                          rows through the users' claim index (status, available_at,
--                          created_at) and each one's heap row (attempts, last_error are in
--                          no index), forgets the rows no longer retrying, normalises at most
--                          p_batch of the retrying rows whose (id, attempts, hash) is not
--                          cached. Returns done (nothing left to normalise), normalised and
--                          forgotten. It runs as its owner (SECURITY DEFINER, as
--                          refresh_error_groups since migration 007: only a permanent table
--                          of its own owner, and only for a caller who may SELECT it);
--                          EXECUTE is granted to the viewer by `init-db --print-grants`.

CREATE TABLE outbox_monitor.retry_fingerprints (
    table_oid       oid     NOT NULL,
    id              bigint  NOT NULL,
    attempts        integer NOT NULL,
    error_hash      bigint  NOT NULL,  -- hashtextextended(coalesce(last_error, ''), 0)
    fingerprint_md5 uuid    NOT NULL,  -- md5(outbox_monitor.normalize_error(last_error))
    PRIMARY KEY (table_oid, id)
);

CREATE INDEX retry_fingerprints_fingerprint_idx
    ON outbox_monitor.retry_fingerprints (table_oid, fingerprint_md5);

CREATE TABLE outbox_monitor.retry_fingerprint_texts (
    table_oid       oid  NOT NULL,
    fingerprint_md5 uuid NOT NULL,
    fingerprint     text NOT NULL,
    PRIMARY KEY (table_oid, fingerprint_md5)
);

CREATE FUNCTION outbox_monitor.refresh_retry_error_groups(
    p_table regclass, p_batch integer,
    OUT done boolean, OUT normalised bigint, OUT forgotten bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_oid oid := p_table;
BEGIN
    IF p_table IS NULL OR p_batch IS NULL OR p_batch < 1 THEN
        RAISE EXCEPTION 'refresh_retry_error_groups: a table and a batch of at least 1 row are needed'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT has_table_privilege(session_user, p_table, 'SELECT') THEN
        RAISE EXCEPTION 'permission denied for table %', p_table
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- Reading a relation runs code of its owner's choosing (a view's expressions, row
    -- security policies, the casts of its columns' types) with this function's rights:
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
    PERFORM pg_advisory_xact_lock(
        hashtextextended('outbox_monitor.retry_error_groups:' || v_oid, 0));

    -- One snapshot: the retrying rows now, each beside its cached key, the cached rows no
    -- longer retrying (forgotten), the retrying rows whose key is not cached (changed: new,
    -- failed again, or last_error rewritten), at most p_batch of them normalised (their
    -- last_error read again by id in the same snapshot) and stored with their
    -- fingerprint's text. The two sides are matched by grouping on the key, never by a
    -- join: right after a retry storm the statistics are stale, and a join planned for a
    -- few rows (a nested loop over both sets) costs the square of the storm.
    EXECUTE format($sql$
        WITH retrying AS MATERIALIZED (
            SELECT o.id, o.created_at, o.attempts,
                   hashtextextended(coalesce(o.last_error, ''), 0) AS error_hash
            FROM %1$s AS o
            WHERE o.status = 'pending' AND o.attempts > 0
        ), keyed AS MATERIALIZED (
            SELECT id, attempts, error_hash, max(created_at) AS created_at,
                   bool_or(live) AS retrying, bool_or(NOT live) AS cached
            FROM (SELECT id, attempts, error_hash, created_at, true AS live FROM retrying
                  UNION ALL
                  SELECT id, attempts, error_hash, NULL, false
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
        )
        SELECT (SELECT count(*) FROM changed) <= $2 AS done,
               (SELECT count(*) FROM picked) AS normalised,
               (SELECT count(*) FROM forgotten) AS forgotten
    $sql$, p_table)
    INTO done, normalised, forgotten
    USING v_oid, p_batch;

    -- The texts of fingerprints no cached row has any more (a group that ended).
    IF forgotten > 0 OR normalised > 0 THEN
        DELETE FROM outbox_monitor.retry_fingerprint_texts AS t
        WHERE t.table_oid = v_oid
          AND NOT EXISTS (
              SELECT FROM outbox_monitor.retry_fingerprints AS c
              WHERE c.table_oid = v_oid AND c.fingerprint_md5 = t.fingerprint_md5);
    END IF;
END
$fn$;

-- Only the owner keeps the right to execute it; --print-grants gives it to the viewer role.
REVOKE ALL ON FUNCTION outbox_monitor.refresh_retry_error_groups(regclass, integer) FROM PUBLIC;

-- The headline samples record retrying (SPEC section 2), charted beside scheduled retries;
-- NULL in samples taken before this migration.
ALTER TABLE outbox_monitor.samples ADD COLUMN retrying bigint;
