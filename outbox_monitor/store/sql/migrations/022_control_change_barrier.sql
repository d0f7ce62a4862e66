-- A control change is a barrier; the token bucket's clock is read under its lock (SPEC
-- section 5, issue 29 items 9 and 10).
--
-- change_lock_key(p_table)  the advisory lock key of p_table's control changes, one bigint:
--                     0x6f6d6366 ('omcf') in the high 32 bits, the table's oid in the low ones,
--                     so pg_locks shows it as classid 1869439846, objid = the table's oid.
--                     Stable while the table exists; a claim and a change name the table by
--                     the same regclass, so they meet on the same key.
-- claim               migration 009's, with one statement first: it TRIES the change lock in
--                     shared mode (pg_try_advisory_xact_lock_shared) and, when a change holds
--                     it or awaits it exclusively, returns no row at once (a claim never
--                     waits; a change takes milliseconds and workers poll again). It holds
--                     the lock until its transaction ends, so every row it hands out is
--                     committed before a change can take the lock. Then it reads the
--                     controls: under READ COMMITTED each statement of the function sees
--                     every change committed before it. The rest of the body is 009's
--                     unchanged (a migration before this one that changed claim's body must
--                     carry that change here too).
-- control_barrier(p_table, p_wait_seconds)
--                     called first in a control change's transaction: takes the change lock
--                     exclusively, waiting at most p_wait_seconds (lock_timeout) for the
--                     claims in flight; true when taken (held until the change commits: no
--                     claim hands out a row in between), false at the bound (the change goes
--                     on; the caller says that claims still running may hand out rows it
--                     forbids). The caller's statement_timeout must exceed p_wait_seconds.
-- claim_grants        migration 008's, but the clock is read again after the state row is
--                     locked, and refilled_at never moves back (greatest): 008 read it before
--                     locking, so a claim that locked after a later one moved refilled_at
--                     back and the next refill credited the same span twice (302 rows handed
--                     out where B + R*T allowed 301.36).
--
-- Any login that can connect may take any advisory lock: one holding this key exclusively
-- stops the claims of that outbox (they return no row) until it lets go; docs/security.md
-- says how to see it (pg_locks) and end it.

CREATE FUNCTION outbox_monitor.change_lock_key(p_table regclass)
RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (x'6f6d6366'::bigint << 32) | p_table::oid::bigint
$$;

CREATE FUNCTION outbox_monitor.control_barrier(p_table regclass, p_wait_seconds double precision)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    previous text := current_setting('lock_timeout');
    reached boolean := true;
BEGIN
    PERFORM set_config('lock_timeout',
                       greatest(1, round(p_wait_seconds * 1000))::bigint::text || 'ms', true);
    BEGIN
        PERFORM pg_advisory_xact_lock(outbox_monitor.change_lock_key(p_table));
    EXCEPTION WHEN lock_not_available THEN
        reached := false;
    END;
    PERFORM set_config('lock_timeout', previous, true);
    RETURN reached;
END
$$;

CREATE OR REPLACE FUNCTION outbox_monitor.claim(p_table regclass, p_worker text,
                                                p_limit integer DEFAULT 50)
RETURNS TABLE (
    id bigint, event_type text, aggregate_type text, aggregate_id text, event_key text,
    payload jsonb, attempts integer, created_at timestamptz
) LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    g record;
    blocked_exact text[] := '{}';
    blocked_like text[] := '{}';
    filters text[] := '{}';
    remaining integer[] := '{}';
    taken bigint[] := '{}';
    cand record;
    processing integer;
    processing_types text[];
    processing_counts integer[];
    grant_now integer;
    fits boolean;
    skipped boolean;
    by_type boolean;        -- pending_types_index(p_table), looked up once something is blocked
    pending_types text[];   -- the event types of pending rows (loose index scan), read once
    allowed text[];         -- those no blocked filter matches
BEGIN
    IF NOT pg_try_advisory_xact_lock_shared(outbox_monitor.change_lock_key(p_table)) THEN
        RETURN;  -- a control change holds or awaits the outbox's change lock: no row now
    END IF;
    IF NOT EXISTS (SELECT 1 FROM outbox_monitor.controls c WHERE c.outbox = p_table) THEN
        RETURN QUERY EXECUTE format(
            'WITH due AS (
                 SELECT o.id FROM %1$s o
                 WHERE o.status = ''pending'' AND o.available_at <= now()
                 ORDER BY o.created_at
                 LIMIT $2
                 FOR UPDATE SKIP LOCKED)
             UPDATE %1$s o
                SET status = ''processing'', locked_at = now(), locked_by = $1
               FROM due
              WHERE o.id = due.id
             RETURNING o.id, o.event_type, o.aggregate_type, o.aggregate_id, o.event_key,
                       o.payload, o.attempts, o.created_at', p_table)
        USING p_worker, p_limit;
        RETURN;
    END IF;

    FOR g IN SELECT * FROM outbox_monitor.claim_grants(p_table) LOOP
        grant_now := CASE WHEN g.refused THEN 0 ELSE g.tokens END;
        IF NOT g.refused AND g.concurrency_limit IS NOT NULL THEN
            IF processing_types IS NULL THEN  -- once per claim, for every limit
                EXECUTE format('SELECT coalesce(array_agg(p.event_type), ''{}''),
                                       coalesce(array_agg(p.n), ''{}'')
                                  FROM (SELECT o.event_type, count(*)::integer AS n FROM %s o
                                         WHERE o.status = ''processing''
                                         GROUP BY o.event_type) AS p', p_table)
                   INTO processing_types, processing_counts;
            END IF;
            processing := 0;
            FOR j IN 1 .. cardinality(processing_types) LOOP
                IF outbox_monitor.type_matches(processing_types[j], g.event_type_filter) THEN
                    processing := processing + processing_counts[j];
                END IF;
            END LOOP;
            grant_now := least(grant_now, g.concurrency_limit - processing);
        END IF;
        IF g.probe AND NOT g.refused THEN
            grant_now := least(grant_now, 1);
        END IF;
        IF grant_now IS NOT NULL AND grant_now <= 0 THEN
            IF strpos(g.event_type_filter, '%') > 0 THEN
                blocked_like := blocked_like || replace(replace(g.event_type_filter, '\', '\\'), '_', '\_');
            ELSE
                blocked_exact := blocked_exact || g.event_type_filter;
            END IF;
        ELSIF grant_now IS NOT NULL OR g.probe THEN
            filters := filters || g.event_type_filter;
            remaining := remaining || grant_now;
        END IF;
    END LOOP;

    -- Rounds: each takes due rows in created_at order while their limited controls have
    -- headroom; a control that runs out is blocked for the next round. At most one round
    -- more than there are limited controls.
    LOOP
        EXIT WHEN cardinality(taken) >= p_limit;
        skipped := false;
        IF pending_types IS NULL AND cardinality(blocked_exact) + cardinality(blocked_like) > 0 THEN
            by_type := coalesce(by_type, outbox_monitor.pending_types_index(p_table));
            IF by_type THEN
                EXECUTE format(
                    'WITH RECURSIVE types AS (
                         (SELECT o.event_type FROM %1$s o
                           WHERE o.status = ''pending'' AND o.event_type IS NOT NULL
                           ORDER BY o.event_type LIMIT 1)
                         UNION ALL
                         SELECT (SELECT o.event_type FROM %1$s o
                                  WHERE o.status = ''pending'' AND o.event_type > types.event_type
                                  ORDER BY o.event_type LIMIT 1)
                           FROM types WHERE types.event_type IS NOT NULL)
                     SELECT coalesce(array_agg(t.event_type), ''{}'')
                       FROM (SELECT types.event_type FROM types
                              WHERE types.event_type IS NOT NULL LIMIT 1001) AS t', p_table)
                   INTO pending_types;
                IF cardinality(pending_types) > 1000 THEN
                    -- so many types that probing each could cost more than the held rows:
                    -- 008's scan (the recursion stopped at the 1,001st)
                    by_type := false;
                    pending_types := NULL;
                END IF;
            END IF;
        END IF;
        IF pending_types IS NOT NULL THEN
            allowed := ARRAY(SELECT t FROM unnest(pending_types) AS t
                              WHERE NOT (t = ANY(blocked_exact) OR t LIKE ANY(blocked_like)));
            EXIT WHEN cardinality(allowed) = 0;  -- every pending row is held
        END IF;
        FOR cand IN EXECUTE format(
                'SELECT o.id, o.event_type FROM %s o
                  WHERE o.status = ''pending'' AND o.available_at <= now()
                        AND NOT (o.id = ANY($1))
                        AND %s
                  ORDER BY o.created_at
                  LIMIT $4
                  FOR UPDATE SKIP LOCKED',
                p_table,
                CASE WHEN allowed IS NULL
                     THEN 'NOT (o.event_type = ANY($2) OR o.event_type LIKE ANY($3))'
                     ELSE 'o.event_type = ANY($5)' END)
            USING taken, blocked_exact, blocked_like, p_limit - cardinality(taken), allowed LOOP
            fits := true;
            FOR j IN 1 .. cardinality(filters) LOOP
                IF outbox_monitor.type_matches(cand.event_type, filters[j])
                   AND remaining[j] IS NOT NULL AND remaining[j] <= 0 THEN
                    fits := false;
                END IF;
            END LOOP;
            IF NOT fits THEN
                skipped := true;
                CONTINUE;
            END IF;
            taken := taken || cand.id;
            FOR j IN 1 .. cardinality(filters) LOOP
                IF outbox_monitor.type_matches(cand.event_type, filters[j]) THEN
                    IF remaining[j] IS NOT NULL THEN
                        remaining[j] := remaining[j] - 1;
                    END IF;
                    IF remaining[j] IS NOT NULL AND remaining[j] <= 0 THEN
                        IF strpos(filters[j], '%') > 0 THEN
                            blocked_like := blocked_like
                                || replace(replace(filters[j], '\', '\\'), '_', '\_');
                        ELSE
                            blocked_exact := blocked_exact || filters[j];
                        END IF;
                    END IF;
                END IF;
            END LOOP;
        END LOOP;
        -- no row was refused for want of headroom: every due row was seen or taken
        EXIT WHEN NOT skipped;
    END LOOP;

    RETURN QUERY EXECUTE format(
        'UPDATE %1$s o
            SET status = ''processing'', locked_at = now(), locked_by = $1
          WHERE o.id = ANY($2)
         RETURNING o.id, o.event_type, o.aggregate_type, o.aggregate_id, o.event_key,
                   o.payload, o.attempts, o.created_at', p_table)
    USING p_worker, taken;
    IF cardinality(filters) > 0 AND cardinality(taken) > 0 THEN
        PERFORM outbox_monitor.claim_consume(p_table, taken);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION outbox_monitor.claim_grants(p_table regclass)
RETURNS TABLE (event_type_filter text, refused boolean, tokens integer,
               concurrency_limit integer, probe boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    c record;
    s outbox_monitor.control_state;
    clock timestamptz := clock_timestamp();  -- a pause's until; read again under the lock
BEGIN
    PERFORM outbox_monitor.require_claimer(p_table);
    IF NOT outbox_monitor.flow_table_ok(p_table) THEN
        RAISE WARNING 'flow control ignored on %: the table must be owned by the owner of the '
                      'outbox_monitor schema (run init-db as its owner)', p_table;
        RETURN;  -- the claim hands out rows as with no control rather than stop every type
    END IF;
    FOR c IN SELECT * FROM outbox_monitor.effective_controls e WHERE e.outbox = p_table LOOP
        event_type_filter := c.event_type_filter;
        concurrency_limit := c.concurrency_limit;
        tokens := NULL;
        probe := false;
        refused := false;
        IF c.paused AND (c.paused_until IS NULL OR c.paused_until > clock) THEN
            refused := true;  -- a pause needs no state
            RETURN NEXT;
            CONTINUE;
        END IF;
        SELECT * INTO s FROM outbox_monitor.control_state cs
         WHERE cs.outbox = p_table AND cs.event_type_filter = c.event_type_filter;
        IF FOUND AND (c.concurrency_limit IS NOT NULL OR c.rate_per_second IS NOT NULL
                      OR (c.breaker AND s.breaker_state <> 'closed')) THEN
            -- a limit or a breaker's transition is decided under the state row's lock; a
            -- closed breaker alone is only read (ack and fail open it)
            SELECT * INTO s FROM outbox_monitor.control_state cs
             WHERE cs.outbox = p_table AND cs.event_type_filter = c.event_type_filter
             FOR UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                refused := true;  -- held by another claim: grant 0, at once
                RETURN NEXT;
                CONTINUE;
            END IF;
            clock := clock_timestamp();  -- under the lock: no later claim read an earlier one
        ELSIF NOT FOUND THEN
            -- not created yet (a control written by hand): create it, used from the next claim
            INSERT INTO outbox_monitor.control_state AS cs (outbox, event_type_filter, tokens)
            VALUES (p_table, c.event_type_filter, c.burst)
            ON CONFLICT DO NOTHING;
            refused := true;
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF c.breaker AND s.breaker_state = 'open'
           AND clock >= s.since + make_interval(secs => s.cooldown_seconds) THEN
            UPDATE outbox_monitor.control_state cs
               SET breaker_state = 'half_open', since = clock, probe_id = NULL, probe_at = NULL
             WHERE cs.outbox = p_table AND cs.event_type_filter = c.event_type_filter;
            s.breaker_state := 'half_open';
            s.probe_id := NULL;
        ELSIF c.breaker AND s.breaker_state = 'half_open' AND s.probe_id IS NOT NULL
              AND s.probe_at < clock - make_interval(secs => c.probe_timeout_seconds) THEN
            -- the probe was neither acked nor failed within the lock timeout: re-open, doubled
            UPDATE outbox_monitor.control_state cs
               SET breaker_state = 'open', since = clock, probe_id = NULL, probe_at = NULL,
                   cooldown_seconds = least(900, 2 * cs.cooldown_seconds)
             WHERE cs.outbox = p_table AND cs.event_type_filter = c.event_type_filter;
            s.breaker_state := 'open';
        END IF;
        IF c.breaker AND s.breaker_state = 'open' THEN
            refused := true;
        ELSIF c.breaker AND s.breaker_state = 'half_open' THEN
            IF s.probe_id IS NULL THEN
                probe := true;
            ELSE
                refused := true;
            END IF;
        END IF;
        IF c.rate_per_second IS NOT NULL THEN
            s.tokens := least(c.burst::double precision,
                              coalesce(s.tokens, c.burst) + c.rate_per_second
                              * greatest(0, extract(epoch FROM clock - s.refilled_at)));
            UPDATE outbox_monitor.control_state cs
               SET tokens = s.tokens, refilled_at = greatest(s.refilled_at, clock)
             WHERE cs.outbox = p_table AND cs.event_type_filter = c.event_type_filter;
            tokens := floor(s.tokens)::integer;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
