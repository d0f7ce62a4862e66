-- Our indexes accept every row the users' table accepts (issue 29 item 1). A btree entry holds
-- at most 2,704 bytes and the users' table takes an event type of any length: the indexes
-- init-db built on the whole event_type refused a publish (pending_by_type, with
-- --flow-control), a worker's permanent fail() and a reap to the dead letters (dead_letters),
-- and the error groups' cache (its primary key held the whole type) refused to count such a
-- dead letter, so every refresh of the table's groups failed. init-db now builds the indexes
-- by type on left(event_type, 200) under new names (store.indexes: failed_by_type,
-- pending_types; the old ones retired), and this migration follows:
--
-- outbox_monitor.pending_types_index(p_table): whether p_table has a valid btree led by
--                     left(event_type, 200) (init-db's pending_types), in the column's
--                     collation and the default operator class, that holds its pending rows
--                     (no predicate, or status = 'pending' AND event_type IS NOT NULL).
-- outbox_monitor.claim: its loose index scan lists the pending types' prefixes
--                     (left(event_type, 200)); a prefix shorter than 200 characters is the
--                     whole type, judged as before; a prefix of 200 is allowed and each of its
--                     rows rechecked against the blocked filters by its whole type. The
--                     candidates keep the blocked filters' exact recheck.
-- outbox_monitor.error_groups: keyed by md5(event_type) instead of the type itself (a unique
--                     index; refresh_error_groups' ON CONFLICT names it).
--
-- The claim and refresh_error_groups are changed in place, by replacing only the text of the
-- index predicates in their current definitions (each replacement must match, or the
-- migration fails), so that whatever else a migration of this release changed in them stays.

CREATE OR REPLACE FUNCTION outbox_monitor.pending_types_index(p_table regclass)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
           SELECT FROM pg_index AS i
             JOIN pg_class AS ic ON ic.oid = i.indexrelid
             JOIN pg_am AS am ON am.oid = ic.relam
             JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attname = 'event_type'
             JOIN pg_opclass AS opc ON opc.oid = i.indclass[0]
            WHERE i.indrelid = p_table AND i.indisvalid AND i.indkey[0] = 0
                  AND pg_get_indexdef(i.indexrelid, 1, false) IN (
                      '"left"(event_type, 200)', '"left"((event_type)::text, 200)')
                  AND am.amname = 'btree' AND opc.opcdefault
                  AND i.indcollation[0] = a.attcollation
                  AND (i.indpred IS NULL
                       OR pg_get_expr(i.indpred, i.indrelid) IN (
                          '((status = ''pending''::text) AND (event_type IS NOT NULL))',
                          '(((status)::text = ''pending''::text) AND (event_type IS NOT NULL))')))
$$;

DO $migration$
DECLARE
    old_text text;
    new_text text;
    edits text[][] := ARRAY[
        -- claim: the loose index scan walks left(event_type, 200)
        [$old$(SELECT o.event_type FROM %1$s o
                           WHERE o.status = ''pending'' AND o.event_type IS NOT NULL
                           ORDER BY o.event_type LIMIT 1)$old$,
         $new$(SELECT left(o.event_type, 200) AS event_type FROM %1$s o
                           WHERE o.status = ''pending'' AND o.event_type IS NOT NULL
                           ORDER BY left(o.event_type, 200) LIMIT 1)$new$],
        [$old$SELECT (SELECT o.event_type FROM %1$s o
                                  WHERE o.status = ''pending'' AND o.event_type > types.event_type
                                  ORDER BY o.event_type LIMIT 1)$old$,
         $new$SELECT (SELECT left(o.event_type, 200) FROM %1$s o
                                  WHERE o.status = ''pending'' AND o.event_type IS NOT NULL
                                        AND left(o.event_type, 200) > types.event_type
                                  ORDER BY left(o.event_type, 200) LIMIT 1)$new$],
        -- claim: a prefix of 200 characters may stand for several types, blocked or not
        [$old$WHERE NOT (t = ANY(blocked_exact) OR t LIKE ANY(blocked_like)));$old$,
         $new$WHERE char_length(t) >= 200
                                    OR NOT (t = ANY(blocked_exact) OR t LIKE ANY(blocked_like)));$new$],
        [$old$ELSE 'o.event_type = ANY($5)' END)$old$,
         $new$ELSE 'left(o.event_type, 200) = ANY($5) AND o.event_type IS NOT NULL
                               AND NOT (o.event_type = ANY($2) OR o.event_type LIKE ANY($3))' END)$new$]];
    i integer;
BEGIN
    old_text := pg_get_functiondef('outbox_monitor.claim(regclass, text, integer)'::regprocedure);
    new_text := old_text;
    FOR i IN 1 .. array_length(edits, 1) LOOP
        IF strpos(new_text, edits[i][1]) = 0 THEN
            RAISE EXCEPTION 'migration 024: outbox_monitor.claim has no %', edits[i][1];
        END IF;
        new_text := replace(new_text, edits[i][1], edits[i][2]);
    END LOOP;
    EXECUTE new_text;

    old_text := pg_get_functiondef(
        'outbox_monitor.refresh_error_groups(regclass, integer)'::regprocedure);
    IF strpos(old_text, 'ON CONFLICT (table_oid, event_type, fingerprint_md5)') = 0 THEN
        RAISE EXCEPTION 'migration 024: refresh_error_groups has no ON CONFLICT on the type';
    END IF;
    EXECUTE replace(old_text, 'ON CONFLICT (table_oid, event_type, fingerprint_md5)',
                    'ON CONFLICT (table_oid, md5(event_type), fingerprint_md5)');
END
$migration$;

ALTER TABLE outbox_monitor.error_groups DROP CONSTRAINT error_groups_pkey;
CREATE UNIQUE INDEX error_groups_key
    ON outbox_monitor.error_groups (table_oid, md5(event_type), fingerprint_md5);
