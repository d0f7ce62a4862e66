-- Held rows no longer make every claim read them (SPEC section 5, issue 13). A pause keeps its
-- rows pending and due for as long as it lasts, and event_type is only in the heap of the
-- users' claim index (status, available_at, created_at): 008's claim read every held row on
-- every claim (200,000 held rows: 4.5 times as long as the same claim without them). init-db
-- now recommends a partial index (event_type, available_at, created_at) WHERE status =
-- 'pending' (store.indexes.FLOW_CONTROL_INDEX, built by init-db --flow-control, proven by
-- benchmarks/claim.py against the users' claim, ack and publish). When a claim has a filter that grants 0 and the table has such an
-- index, it lists the pending event types by a loose index scan (one index probe per type),
-- drops the blocked ones, and reads due rows of the other types only: O(types + due rows it
-- may hand out), not O(held). Without the index, or with over 1,000 pending types, the claim
-- is 008's.
--
-- outbox_monitor.pending_types_index(p_table): whether p_table has a valid btree led by
--                     event_type, in the column's collation and the default operator class
--                     (so that it serves the loose scan's ORDER BY event_type and its
--                     event_type > probes: a hash index, a text_pattern_ops or COLLATE "C"
--                     one cannot, and each probe would then read every pending row), that
--                     holds its pending rows (no predicate, or init-db's status = 'pending'
--                     AND event_type IS NOT NULL, as Postgres prints it for a text or a
--                     varchar status column).

CREATE FUNCTION outbox_monitor.pending_types_index(p_table regclass)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
           SELECT FROM pg_index AS i
             JOIN pg_class AS ic ON ic.oid = i.indexrelid
             JOIN pg_am AS am ON am.oid = ic.relam
             JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
             JOIN pg_opclass AS opc ON opc.oid = i.indclass[0]
            WHERE i.indrelid = p_table AND i.indisvalid AND a.attname = 'event_type'
                  AND am.amname = 'btree' AND opc.opcdefault
                  AND i.indcollation[0] = a.attcollation
                  AND (i.indpred IS NULL
                       OR pg_get_expr(i.indpred, i.indrelid) IN (
                          '((status = ''pending''::text) AND (event_type IS NOT NULL))',
                          '(((status)::text = ''pending''::text) AND (event_type IS NOT NULL))')))
$$;

-- claim (SPEC sections 1 and 5): up to p_limit due rows, oldest first, FOR UPDATE SKIP LOCKED,
-- marked processing. With no control on p_table it is the statement of migration 001. With
-- controls, rows of a filter that grants 0 are skipped; the others are handed out while every
-- control matching them has headroom, each row consuming one unit of each. Rows of a filter
-- that grants 0 are not read when pending_types_index(p_table): the candidates are due rows of
-- the pending types no blocked filter matches.
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
