-- Worker function names that two tables cannot share, and ack_many's privilege error
-- (attack32).
--
-- Migration 030 named a table's worker functions <kind>__<schema>__<table> unless that was
-- over 63 bytes or a part held '__'. A part starting or ending with '_' met the separator:
-- public._x and public_.x both gave ack__public___x, so the second init-db replaced the
-- first table's functions and the dispatcher inlined the second table's statements in the
-- first table's branch (a claim of public._x claimed public_.x's rows). Such a part now takes
-- the hashed form too (md5 of "schema.table": the settings allow letters, digits and _ only,
-- so no two tables share it). The prepared tables whose names change get their functions
-- again under the new names; the old names' functions are dropped first.

DO $migration$
DECLARE
    f regprocedure;
BEGIN
    -- the old rule's names of the tables whose name changes: dropped (by their signature)
    FOR f IN SELECT DISTINCT p.oid::regprocedure
               FROM outbox_monitor.worker_outboxes w
               CROSS JOIN unnest(ARRAY['claim', 'ack', 'ack_logging', 'fail', 'fail_logging',
                                       'ack_many', 'ack_many_logging']) AS k(kind)
               JOIN pg_proc p
                 ON p.pronamespace = 'outbox_monitor'::regnamespace
                    AND p.proname = outbox_monitor.worker_function_name(k.kind, w.schema_name,
                                                                        w.table_name)
              WHERE w.schema_name ~ '(^_|_$)' OR w.table_name ~ '(^_|_$)' LOOP
        EXECUTE format('DROP FUNCTION IF EXISTS %s', f);
    END LOOP;
END
$migration$;

-- plain only when the '__' around the schema cannot be a part's own '_' (no part holds '__',
-- starts or ends with '_'); else its first 49 bytes (whole characters), '__', the hash
CREATE OR REPLACE FUNCTION outbox_monitor.worker_function_name(p_kind text, p_schema text,
                                                               p_table text)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN octet_length(plain) <= 63 AND p_schema || '.' || p_table !~ '(__|^_|_\.|\._|_$)'
        THEN plain
        ELSE (SELECT string_agg(s.c, '' ORDER BY s.n)
                FROM regexp_split_to_table(plain, '') WITH ORDINALITY AS s(c, n)
               WHERE octet_length(left(plain, s.n::integer)) <= 49)
             || '__' || left(md5(p_schema || '.' || p_table), 12)
    END
    FROM (SELECT p_kind || '__' || p_schema || '__' || p_table AS plain) AS name
$$;

-- ack_many's row-by-row path caught every error, a missing privilege too: a login that may
-- not update the outbox got an empty answer and a WARNING per row where ack raises. The
-- generator's row-by-row handler now lets insufficient_privilege through (cut from its
-- definition as it is: the marker must be found once, or the migration fails).
DO $migration$
DECLARE
    source text;
    handler constant text := E'        EXCEPTION WHEN OTHERS THEN\n'
                             '            RAISE WARNING ''row %% of %%: recording its ack failed';
BEGIN
    SELECT p.prosrc INTO source FROM pg_proc p
     WHERE p.oid = 'outbox_monitor.install_worker_functions(regclass)'::regprocedure;
    IF strpos(source, 'EXCEPTION WHEN insufficient_privilege THEN') > 0 THEN
        RETURN;  -- done already (this file run again)
    END IF;
    IF (length(source) - length(replace(source, handler, ''))) <> length(handler) THEN
        RAISE EXCEPTION 'migration 032: install_worker_functions is not migration 030''s shape';
    END IF;
    source := replace(source, handler,
                      E'        EXCEPTION WHEN insufficient_privilege THEN\n'
                      || E'            RAISE;  -- this login may not ack: said as ack says it\n'
                      || E'        WHEN OTHERS THEN\n'
                      || '            RAISE WARNING ''row %% of %%: recording its ack failed');
    EXECUTE format('CREATE OR REPLACE FUNCTION outbox_monitor.install_worker_functions('
                   'p_table regclass) RETURNS void LANGUAGE plpgsql VOLATILE AS %L', source);
END
$migration$;

-- the prepared tables get their functions (and the dispatchers) again: new names, new
-- ack_many
DO $migration$
DECLARE
    t regclass;
BEGIN
    FOR t IN SELECT w.outbox FROM outbox_monitor.worker_outboxes w
              WHERE EXISTS (SELECT FROM pg_class c WHERE c.oid = w.outbox)
              ORDER BY w.outbox::oid LOOP
        PERFORM outbox_monitor.install_worker_functions(t);
    END LOOP;
END
$migration$;
