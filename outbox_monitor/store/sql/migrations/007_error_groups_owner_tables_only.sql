-- refresh_error_groups reads only a permanent table of its own owner.
--
-- It runs as its owner (SECURITY DEFINER) and reads the relation its caller names. Reading
-- a relation runs code the relation's owner chose: a view's expressions (a temporary view
-- calling a temporary function of the caller's), row security policies, casts of the
-- columns' types. Any login allowed to call it (the viewer) could therefore run its own
-- code with the owner's rights, e.g. DELETE from the outbox. The same function, refusing
-- (insufficient_privilege) any relation that is not an ordinary or partitioned, permanent
-- table owned by the function's owner; metrics.error_groups then computes the groups
-- exactly, as for a login without EXECUTE. CREATE OR REPLACE keeps the grants.

CREATE OR REPLACE FUNCTION outbox_monitor.refresh_error_groups(p_table regclass, p_batch integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_oid oid := p_table;
    v_state outbox_monitor.error_groups_state;
    v_step record;
    v_count bigint;
    v_generation bigint;
BEGIN
    IF p_table IS NULL OR p_batch IS NULL OR p_batch < 1 THEN
        RAISE EXCEPTION 'refresh_error_groups: a table and a batch of at least 1 row are needed'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT has_table_privilege(session_user, p_table, 'SELECT') THEN
        RAISE EXCEPTION 'permission denied for table %', p_table
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- Reading a relation runs code of its owner's choosing (a view's expressions, row
    -- security policies, the casts of its columns' types) with this function's rights:
    -- only a permanent table of this function's own owner is read.
    IF NOT EXISTS (
        SELECT FROM pg_class AS c
        WHERE c.oid = p_table AND c.relkind IN ('r', 'p') AND c.relpersistence <> 't'
          AND c.relowner = (SELECT r.oid FROM pg_roles AS r WHERE r.rolname = current_user)
    ) THEN
        RAISE EXCEPTION 'permission denied for table %: refresh_error_groups reads only a '
                        'table owned by %, the owner of the outbox_monitor schema (run '
                        'init-db as the owner of the outbox table)', p_table, current_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('outbox_monitor.error_groups:' || v_oid, 0));
    SELECT * INTO v_state FROM outbox_monitor.error_groups_state WHERE table_oid = v_oid;
    IF NOT FOUND THEN
        INSERT INTO outbox_monitor.error_groups_state (table_oid, recount_step)
        VALUES (v_oid, 'forget')
        RETURNING * INTO v_state;
    END IF;

    IF v_state.recount_step IS NULL THEN
        -- One snapshot: the failed rows' count and processed_at sum, and the failed rows not
        -- cached whose processed_at is at most 5 minutes older than the newest one counted
        -- (processed_at is its transaction's start, which may commit later). When the
        -- counted rows plus those make up the table's failed rows exactly, only new dead
        -- letters arrived: normalise up to p_batch of them and add them to their groups.
        EXECUTE format($sql$
            WITH signature AS (
                SELECT count(*) AS failed,
                       coalesce(sum((date_part('epoch', processed_at) * 1000000)::bigint), 0) AS total
                FROM %1$s WHERE status = 'failed'
            ), candidates AS MATERIALIZED (
                SELECT o.id, o.event_type, o.processed_at, o.last_error
                FROM %1$s AS o
                WHERE o.status = 'failed' AND o.processed_at >= $1
                  AND NOT EXISTS (
                      SELECT FROM outbox_monitor.error_fingerprints AS c
                      WHERE c.table_oid = $2 AND c.id = o.id AND c.processed_at = o.processed_at)
            ), verdict AS MATERIALIZED (
                SELECT s.failed = $3 + (SELECT count(*) FROM candidates)
                       AND s.total = $4 + (SELECT coalesce(sum((date_part('epoch', processed_at) * 1000000)::bigint), 0)
                                                FROM candidates)
                       AS balanced
                FROM signature AS s
            ), picked AS MATERIALIZED (
                SELECT id, event_type, processed_at, error_md5, fingerprint,
                       md5(fingerprint)::uuid AS fingerprint_md5
                FROM (SELECT id, event_type, processed_at,
                             md5(coalesce(last_error, ''))::uuid AS error_md5,
                             outbox_monitor.normalize_error(last_error) AS fingerprint
                      FROM candidates
                      WHERE (SELECT balanced FROM verdict)
                      ORDER BY processed_at, id
                      LIMIT $5) AS p
            ), cached AS (
                INSERT INTO outbox_monitor.error_fingerprints AS c
                    (table_oid, id, processed_at, error_md5, fingerprint_md5)
                SELECT $2, id, processed_at, error_md5, fingerprint_md5 FROM picked
                ON CONFLICT (table_oid, id) DO UPDATE
                SET processed_at = excluded.processed_at, error_md5 = excluded.error_md5,
                    fingerprint_md5 = excluded.fingerprint_md5
            ), grouped AS (
                INSERT INTO outbox_monitor.error_groups AS g
                    (table_oid, event_type, fingerprint_md5, group_id, fingerprint, failed,
                     first_seen, last_seen, sample_id, generation)
                SELECT $2, event_type, fingerprint_md5,
                       left(md5(event_type || ':' || fingerprint), 12), fingerprint, count(*),
                       min(processed_at), max(processed_at), max(id), $6
                FROM picked
                GROUP BY event_type, fingerprint_md5, fingerprint
                ON CONFLICT (table_oid, event_type, fingerprint_md5) DO UPDATE
                SET failed = g.failed + excluded.failed,
                    first_seen = least(g.first_seen, excluded.first_seen),
                    last_seen = greatest(g.last_seen, excluded.last_seen),
                    sample_id = greatest(g.sample_id, excluded.sample_id)
            ), counted AS (
                UPDATE outbox_monitor.error_groups_state
                SET failed = failed + (SELECT count(*) FROM picked),
                    processed_sum = processed_sum
                        + (SELECT coalesce(sum((date_part('epoch', processed_at) * 1000000)::bigint), 0)
                           FROM picked),
                    newest = greatest(newest, (SELECT max(processed_at) FROM picked))
                WHERE table_oid = $2
            )
            SELECT (SELECT balanced FROM verdict) AS balanced,
                   (SELECT count(*) FROM candidates) AS candidates,
                   (SELECT count(*) FROM picked) AS picked
        $sql$, p_table)
        INTO v_step
        USING coalesce(v_state.newest - interval '5 minutes', '-infinity'), v_oid,
              v_state.failed, v_state.processed_sum, p_batch, v_state.generation;
        IF v_step.balanced THEN
            RETURN v_step.picked = v_step.candidates;
        END IF;
        v_state.recount_step := 'forget';
    END IF;

    -- Anything else (the first call, a replay, a delete, a prune, a failed row with an old
    -- processed_at) recounts, one step per call: forget the fingerprints of rows no longer
    -- failed with that processed_at; normalise the failed rows not cached with their
    -- processed_at and md5(last_error), p_batch per call; count (event types as they are).
    IF v_state.recount_step = 'forget' THEN
        EXECUTE format($sql$
            DELETE FROM outbox_monitor.error_fingerprints AS c
            WHERE c.table_oid = $1
              AND NOT EXISTS (
                  SELECT FROM %1$s AS o
                  WHERE o.id = c.id AND o.status = 'failed'
                    AND coalesce(o.processed_at, '-infinity') = c.processed_at)
        $sql$, p_table) USING v_oid;
        UPDATE outbox_monitor.error_groups_state SET recount_step = 'fill'
        WHERE table_oid = v_oid;
        RETURN false;
    END IF;
    IF v_state.recount_step = 'fill' THEN
        EXECUTE format($sql$
            INSERT INTO outbox_monitor.error_fingerprints AS c
                (table_oid, id, processed_at, error_md5, fingerprint_md5)
            SELECT $1, o.id, coalesce(o.processed_at, '-infinity'),
                   md5(coalesce(o.last_error, ''))::uuid,
                   md5(outbox_monitor.normalize_error(o.last_error))::uuid
            FROM %1$s AS o
            WHERE o.status = 'failed'
              AND NOT EXISTS (
                  SELECT FROM outbox_monitor.error_fingerprints AS f
                  WHERE f.table_oid = $1 AND f.id = o.id
                    AND f.processed_at = coalesce(o.processed_at, '-infinity')
                    AND f.error_md5 = md5(coalesce(o.last_error, ''))::uuid)
            LIMIT $2
            ON CONFLICT (table_oid, id) DO UPDATE
            SET processed_at = excluded.processed_at, error_md5 = excluded.error_md5,
                fingerprint_md5 = excluded.fingerprint_md5
        $sql$, p_table) USING v_oid, p_batch;
        GET DIAGNOSTICS v_count = ROW_COUNT;
        IF v_count < p_batch THEN
            UPDATE outbox_monitor.error_groups_state SET recount_step = 'count'
            WHERE table_oid = v_oid;
        END IF;
        RETURN false;
    END IF;

    -- Count in one snapshot: the groups and the state describe exactly the failed rows
    -- whose fingerprint is cached (a row failing meanwhile is added by the next call).
    -- A group's fingerprint text is kept, or normalised from its sample row.
    v_generation := v_state.generation + 1;
    EXECUTE format($sql$
        WITH counted AS MATERIALIZED (
            SELECT o.id, o.event_type, o.processed_at, c.fingerprint_md5
            FROM %1$s AS o
            JOIN outbox_monitor.error_fingerprints AS c
              ON c.table_oid = $1 AND c.id = o.id
             AND c.processed_at = coalesce(o.processed_at, '-infinity')
             AND c.error_md5 = md5(coalesce(o.last_error, ''))::uuid
            WHERE o.status = 'failed'
        ), grouped AS MATERIALIZED (
            SELECT event_type, fingerprint_md5, count(*) AS failed,
                   min(processed_at) AS first_seen, max(processed_at) AS last_seen,
                   max(id) AS sample_id
            FROM counted
            GROUP BY event_type, fingerprint_md5
        ), stored AS (
            INSERT INTO outbox_monitor.error_groups AS g
                (table_oid, event_type, fingerprint_md5, group_id, fingerprint, failed,
                 first_seen, last_seen, sample_id, generation)
            SELECT $1, n.event_type, n.fingerprint_md5,
                   left(md5(n.event_type || ':' || f.fingerprint), 12), f.fingerprint,
                   n.failed, n.first_seen, n.last_seen, n.sample_id, $2
            FROM grouped AS n
            CROSS JOIN LATERAL (
                SELECT coalesce(
                    (SELECT e.fingerprint FROM outbox_monitor.error_groups AS e
                     WHERE e.table_oid = $1 AND e.fingerprint_md5 = n.fingerprint_md5 LIMIT 1),
                    (SELECT outbox_monitor.normalize_error(s.last_error)
                     FROM %1$s AS s WHERE s.id = n.sample_id)) AS fingerprint
            ) AS f
            ON CONFLICT (table_oid, event_type, fingerprint_md5) DO UPDATE
            SET failed = excluded.failed, first_seen = excluded.first_seen,
                last_seen = excluded.last_seen, sample_id = excluded.sample_id,
                generation = excluded.generation
        )
        UPDATE outbox_monitor.error_groups_state
        SET failed = (SELECT count(*) FROM counted),
            processed_sum = (SELECT coalesce(sum((date_part('epoch', processed_at) * 1000000)::bigint), 0)
                             FROM counted),
            newest = (SELECT max(processed_at) FROM counted),
            generation = $2, recount_step = NULL
        WHERE table_oid = $1
    $sql$, p_table) USING v_oid, v_generation;
    DELETE FROM outbox_monitor.error_groups WHERE table_oid = v_oid AND generation <> v_generation;
    RETURN true;
END
$fn$;
