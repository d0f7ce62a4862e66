-- Worker function names a long table's hashed names cannot take (attack33).
--
-- Migration 032 hashed a table's worker function names when plain they were over 63 bytes or a
-- part held '__' or started or ended with '_'. A hashed name is the first 49 bytes of the plain
-- one, '__' and 12 hex digits, which is also the plain name of the table <those bytes after
-- the kind>.<those 12 hex digits>: that table's init-db replaced the long table's functions,
-- and a claim of one claimed the other's rows. A table named by 12 lowercase hex digits now
-- takes the hashed form too (as store.audited_writers.MEETS_THE_SEAM does), so that no plain
-- name is a hashed one. The prepared tables whose names change get their functions again
-- under the new names; the old names' functions are dropped first.

DO $migration$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT DISTINCT p.oid::regprocedure
               FROM outbox_monitor.worker_outboxes w
               CROSS JOIN unnest(ARRAY['claim', 'ack', 'ack_logging', 'fail', 'fail_logging',
                                       'ack_many', 'ack_many_logging']) AS k(kind)
               JOIN pg_proc p
                 ON p.pronamespace = 'outbox_monitor'::regnamespace
                    AND p.proname = outbox_monitor.worker_function_name(k.kind, w.schema_name,
                                                                        w.table_name)
              WHERE w.table_name ~ '^[0-9a-f]{12}$' LOOP
        EXECUTE format('DROP FUNCTION IF EXISTS %s', f);
    END LOOP;
END
$migration$;

-- plain only when no part holds '__', starts or ends with '_', and the table is not 12 hex
-- digits; else its first 49 bytes (whole characters), '__', the hash
CREATE OR REPLACE FUNCTION outbox_monitor.worker_function_name(p_kind text, p_schema text,
                                                               p_table text)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN octet_length(plain) <= 63 AND p_schema || '.' || p_table !~ '(__|^_|_\.|\._|_$)'
             AND p_table !~ '^[0-9a-f]{12}$'
        THEN plain
        ELSE (SELECT string_agg(s.c, '' ORDER BY s.n)
                FROM regexp_split_to_table(plain, '') WITH ORDINALITY AS s(c, n)
               WHERE octet_length(left(plain, s.n::integer)) <= 49)
             || '__' || left(md5(p_schema || '.' || p_table), 12)
    END
    FROM (SELECT p_kind || '__' || p_schema || '__' || p_table AS plain) AS name
$$;

-- the prepared tables get their functions (and the dispatchers) again under the new names
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
