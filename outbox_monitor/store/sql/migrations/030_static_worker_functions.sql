-- The workers' functions run static, plan-cached statements (issue 32 item 2), and ack_many.
--
-- Until now claim, ack and fail ran their statements on the outbox through EXECUTE format(...):
-- planned at every call. An ack cost 1.45 times the same UPDATE sent by the worker (psycopg
-- prepares a statement it runs often), and claim -> ack ran at 0.46 times the users' own SQL.
-- PL/pgSQL caches the plan of a static statement per session; a static statement must name
-- its table, so init-db now writes, for each outbox table, the worker functions of that
-- table, and the shared entry points dispatch to them:
--
-- worker_outboxes     one row per outbox table prepared by init-db (its oid as regclass and
--                     its name then): the dispatchers are generated from it.
-- install_worker_functions(p_table)
--                     (re)creates p_table's functions, named as the audited writers are
--                     (worker_function_name: <kind>__<schema>__<table>, or cut with a hash
--                     past 63 bytes) - claim, ack, ack_logging, fail, fail_logging,
--                     ack_many, ack_many_logging - each with the table written into its
--                     static statements and the entry point's signature (p_table first: the
--                     controls and the change lock are keyed by it). It registers the table,
--                     regenerates the dispatchers and fires migration 010's switch. Called by
--                     init-db (store/schema.py) as the table's owner, and below for the
--                     outboxes this database already knows.
-- The dispatchers     claim (directly) and the templates ack_plain, ack_logging_outcomes,
--                     fail_plain, fail_logging_outcomes, ack_many_plain,
--                     ack_many_logging_outcomes: one branch per registered table, comparing
--                     p_table with its oid (a simple expression, no statement), holding that
--                     table's function's body inline (a nested block: no second call, which
--                     cost an ack 4 % more). claim, ack_many and fail first compare the name
--                     as regclass prints it with the one prepared (a renamed table's static
--                     statements would fail with "relation does not exist": refused first,
--                     with the fix); ack skips that look (4 % of an ack; its worker's claim
--                     was refused first, and an ack's own error names the old table). A
--                     table no branch names is refused with the fix (run init-db for it).
--                     Migration 010's switch copies the wanted template into ack, fail and,
--                     since this migration, ack_many: while no breaker exists the entry
--                     points run the plain bodies, which log no outcome.
-- claim               the per-table claim tries the change lock (migration 022) and, with no
--                     control on the table, runs migration 001's statement, static; with
--                     controls it runs claim_with_controls(p_table, ...): the controls path
--                     of the claim as migrations 022 and 024 left it, unchanged (dynamic:
--                     its cost is the controls' bookkeeping more than its planning).
-- fail                static; with p_ledger and p_ledger_action the ledger row is deleted by a
--                     second, dynamic statement in the same call (the ledger is a parameter).
-- ack_many(p_table, p_ids, p_worker)
--                     acks every row of p_ids this worker still holds, in one statement, and
--                     returns their ids (ascending); logs each acked row's breaker outcome as
--                     ack does. When that statement fails (a user's trigger refusing one
--                     row, say), it acks row by row, each in a savepoint: a row whose
--                     recording fails stays processing (for the reaper) with a WARNING
--                     naming it, the others are acked. Rows not returned were not held by
--                     this worker (reaped or re-claimed), or their recording failed.
--
-- After a dump and restore the oids differ: the dispatchers refuse every table until init-db
-- runs again (the error says so).

CREATE TABLE outbox_monitor.worker_outboxes (
    outbox       regclass PRIMARY KEY,
    schema_name  text NOT NULL,
    table_name   text NOT NULL,
    installed_at timestamptz NOT NULL DEFAULT now()
);

-- The name of one of a table's worker functions: store/audited_writers.writer_name's rule.
CREATE FUNCTION outbox_monitor.worker_function_name(p_kind text, p_schema text, p_table text)
RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    plain text := p_kind || '__' || p_schema || '__' || p_table;
    head text;
BEGIN
    IF octet_length(plain) <= 63 AND strpos(p_schema, '__') = 0 AND strpos(p_table, '__') = 0 THEN
        RETURN plain;
    END IF;
    head := left(plain, 49);
    WHILE octet_length(head) > 49 LOOP
        head := left(head, -1);
    END LOOP;
    RETURN head || '__' || left(md5(p_schema || '.' || p_table), 12);
END
$$;

-- A dispatcher's refusal: p_table has no worker functions (never prepared, or prepared
-- before a dump and restore), or was renamed since (p_prepared: the name it had).
CREATE FUNCTION outbox_monitor.worker_functions_missing(p_table regclass, p_prepared text DEFAULT NULL)
RETURNS void LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_prepared IS NOT NULL THEN
        RAISE EXCEPTION 'outbox table % was renamed since init-db prepared its worker functions (as %)', p_table, p_prepared
              USING ERRCODE = 'object_not_in_prerequisite_state',
                    HINT = format('Run outbox-monitor init-db with OUTBOX_MONITOR_TABLE=%s', p_table);
    END IF;
    RAISE EXCEPTION 'outbox table % has no worker functions: init-db has not prepared it', p_table
          USING ERRCODE = 'object_not_in_prerequisite_state',
                HINT = format('Run outbox-monitor init-db with OUTBOX_MONITOR_TABLE=%s (after a restore: again)', p_table);
END
$$;

-- claim's controls path: the current claim's body (migration 022's, as 024 edited it) without
-- its first two steps (the change lock's try and the no-control statement), cut from its
-- definition as it is (each marker must be found once, or the migration fails), so that
-- whatever an earlier migration changed in it stays. A table's claim function calls it once
-- it took the change lock and found controls.
DO $migration$
DECLARE
    source text;
    lock_try constant text := 'IF NOT pg_try_advisory_xact_lock_shared(';
    controls_path constant text := 'FOR g IN SELECT * FROM outbox_monitor.claim_grants(p_table) LOOP';
BEGIN
    SELECT p.prosrc INTO source FROM pg_proc p
     WHERE p.oid = 'outbox_monitor.claim(regclass, text, integer)'::regprocedure;
    IF strpos(source, lock_try) = 0 OR strpos(source, controls_path) = 0
       OR strpos(source, lock_try) > strpos(source, controls_path)
       OR (length(source) - length(replace(source, controls_path, ''))) <> length(controls_path) THEN
        RAISE EXCEPTION 'migration 030: outbox_monitor.claim is not migration 022''s shape';
    END IF;
    source := left(source, strpos(source, lock_try) - 1)
              || substr(source, strpos(source, controls_path));
    EXECUTE format(
        'CREATE FUNCTION outbox_monitor.claim_with_controls(p_table regclass, p_worker text,'
        '                                                   p_limit integer)'
        ' RETURNS TABLE (id bigint, event_type text, aggregate_type text, aggregate_id text,'
        '                event_key text, payload jsonb, attempts integer,'
        '                created_at timestamptz)'
        ' LANGUAGE plpgsql VOLATILE AS %L', source);
END
$migration$;

-- The entry point of a finished batch; its body is a dispatcher (below), replaced by the
-- switch like ack's.
CREATE FUNCTION outbox_monitor.ack_many(p_table regclass, p_ids bigint[], p_worker text)
RETURNS bigint[] LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM outbox_monitor.worker_functions_missing(p_table);
    RETURN NULL;
END
$$;
CREATE FUNCTION outbox_monitor.ack_many_plain(p_table regclass, p_ids bigint[], p_worker text)
RETURNS bigint[] LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM outbox_monitor.worker_functions_missing(p_table);
    RETURN NULL;
END
$$;
CREATE FUNCTION outbox_monitor.ack_many_logging_outcomes(p_table regclass, p_ids bigint[],
                                                         p_worker text)
RETURNS bigint[] LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM outbox_monitor.worker_functions_missing(p_table);
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION outbox_monitor.ack_many_plain(regclass, bigint[], text),
    outbox_monitor.ack_many_logging_outcomes(regclass, bigint[], text) FROM PUBLIC;

-- The dispatchers from worker_outboxes (rows of dropped tables deleted first), then the
-- switch, which copies the wanted templates into ack, fail and ack_many.
CREATE FUNCTION outbox_monitor.dispatch_worker_functions()
RETURNS void LANGUAGE plpgsql VOLATILE AS $gen$
DECLARE
    t record;
    d record;
    branches text;
    fname text;
    body text;
BEGIN
    DELETE FROM outbox_monitor.worker_outboxes w
     WHERE NOT EXISTS (SELECT FROM pg_class c WHERE c.oid = w.outbox);
    FOR d IN SELECT * FROM (VALUES
            ('claim', 'claim', 'p_worker text, p_limit integer DEFAULT 50',
             'TABLE (id bigint, event_type text, aggregate_type text, aggregate_id text, '
             'event_key text, payload jsonb, attempts integer, created_at timestamptz)',
             true, true),
            ('ack_plain', 'ack', 'p_id bigint, p_worker text', 'boolean', false, false),
            ('ack_logging_outcomes', 'ack_logging', 'p_id bigint, p_worker text', 'boolean',
             false, false),
            ('ack_many_plain', 'ack_many', 'p_ids bigint[], p_worker text', 'bigint[]',
             false, true),
            ('ack_many_logging_outcomes', 'ack_many_logging', 'p_ids bigint[], p_worker text',
             'bigint[]', false, true),
            ('fail_plain', 'fail',
             'p_id bigint, p_worker text, p_error text, p_permanent boolean DEFAULT false, '
             'p_max_attempts integer DEFAULT 10, p_ledger regclass DEFAULT NULL, '
             'p_ledger_action text DEFAULT NULL', 'text', false, true),
            ('fail_logging_outcomes', 'fail_logging',
             'p_id bigint, p_worker text, p_error text, p_permanent boolean DEFAULT false, '
             'p_max_attempts integer DEFAULT 10, p_ledger regclass DEFAULT NULL, '
             'p_ledger_action text DEFAULT NULL', 'text', false, true))
            AS v(dispatcher, kind, arguments, result, returns_set, checks_name) LOOP
        branches := '';
        FOR t IN SELECT w.outbox::oid AS oid, n.nspname, c.relname
                   FROM outbox_monitor.worker_outboxes w
                   JOIN pg_class c ON c.oid = w.outbox
                   JOIN pg_namespace n ON n.oid = c.relnamespace
                  ORDER BY w.outbox::oid LOOP
            fname := outbox_monitor.worker_function_name(d.kind, t.nspname, t.relname);
            SELECT p.prosrc INTO body FROM pg_proc p
             WHERE p.pronamespace = 'outbox_monitor'::regnamespace AND p.proname = fname;
            CONTINUE WHEN body IS NULL;  -- not prepared (yet): refused
            branches := branches
                || format(E'    IF p_table = %s::oid THEN\n', t.oid)
                || CASE WHEN d.checks_name THEN format(
                       E'        IF p_table::text NOT IN (%L, %L) THEN\n'
                       || E'            PERFORM outbox_monitor.worker_functions_missing(p_table, %L);\n'
                       || E'        END IF;\n',
                       quote_ident(t.relname),
                       quote_ident(t.nspname) || '.' || quote_ident(t.relname),
                       quote_ident(t.nspname) || '.' || quote_ident(t.relname))
                   ELSE '' END
                || format(E'        -- the body of outbox_monitor.%I, inline\n', fname)
                || btrim(body, E'\n ') || E';\n'
                || CASE WHEN d.returns_set THEN E'        RETURN;\n' ELSE '' END
                || E'    END IF;\n';
        END LOOP;
        EXECUTE format(
            E'CREATE OR REPLACE FUNCTION outbox_monitor.%I(p_table regclass, %s)\n'
            || E'RETURNS %s LANGUAGE plpgsql VOLATILE AS $body$\n'
            || E'BEGIN\n%s'
            || E'    PERFORM outbox_monitor.worker_functions_missing(p_table);\n'
            || E'%sEND\n$body$',
            d.dispatcher, d.arguments, d.result,
            branches, CASE WHEN d.returns_set THEN '' ELSE E'    RETURN NULL;\n' END);
    END LOOP;
    -- migration 010's switch: ack, fail and ack_many get the wanted template's new body
    UPDATE outbox_monitor.controls SET breaker = breaker WHERE false;
END
$gen$;

-- p_table's worker functions (see the top of this file), its row in worker_outboxes, then the
-- dispatchers. The functions of the name the table had when last prepared are dropped.
CREATE FUNCTION outbox_monitor.install_worker_functions(p_table regclass)
RETURNS void LANGUAGE plpgsql VOLATILE AS $gen$
DECLARE
    v_schema text;
    v_name text;
    v_table text;
    v_old record;
    v_kind text;
    v_kinds constant text[] := ARRAY['claim', 'ack', 'ack_logging', 'fail', 'fail_logging',
                                     'ack_many', 'ack_many_logging'];
    v_arguments constant text[] := ARRAY[
        'regclass, text, integer', 'regclass, bigint, text', 'regclass, bigint, text',
        'regclass, bigint, text, text, boolean, integer, regclass, text',
        'regclass, bigint, text, text, boolean, integer, regclass, text',
        'regclass, bigint[], text', 'regclass, bigint[], text'];
    f text[];  -- the function names, in v_kinds' order
BEGIN
    SELECT n.nspname, c.relname INTO v_schema, v_name
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid = p_table AND c.relkind IN ('r', 'p');
    IF NOT FOUND THEN
        RAISE EXCEPTION 'install_worker_functions: % is not a table', p_table
              USING ERRCODE = 'wrong_object_type';
    END IF;
    SELECT w.schema_name, w.table_name INTO v_old
      FROM outbox_monitor.worker_outboxes w WHERE w.outbox = p_table;
    IF FOUND AND (v_old.schema_name, v_old.table_name) IS DISTINCT FROM (v_schema, v_name) THEN
        FOR i IN 1 .. cardinality(v_kinds) LOOP
            EXECUTE format('DROP FUNCTION IF EXISTS outbox_monitor.%I(%s)',
                           outbox_monitor.worker_function_name(v_kinds[i], v_old.schema_name,
                                                               v_old.table_name),
                           v_arguments[i]);
        END LOOP;
    END IF;
    v_table := quote_ident(v_schema) || '.' || quote_ident(v_name);
    FOREACH v_kind IN ARRAY v_kinds LOOP
        f := f || outbox_monitor.worker_function_name(v_kind, v_schema, v_name);
    END LOOP;

    -- claim: migration 022's, its no-control statement static
    EXECUTE format($t$
CREATE OR REPLACE FUNCTION outbox_monitor.%2$I(p_table regclass, p_worker text, p_limit integer)
RETURNS TABLE (
    id bigint, event_type text, aggregate_type text, aggregate_id text, event_key text,
    payload jsonb, attempts integer, created_at timestamptz
) LANGUAGE plpgsql VOLATILE AS $body$
BEGIN
    IF NOT pg_try_advisory_xact_lock_shared(outbox_monitor.change_lock_key(p_table)) THEN
        RETURN;  -- a control change holds or awaits the outbox's change lock: no row now
    END IF;
    IF EXISTS (SELECT FROM outbox_monitor.controls c WHERE c.outbox = p_table) THEN
        RETURN QUERY SELECT * FROM outbox_monitor.claim_with_controls(p_table, p_worker, p_limit);
        RETURN;
    END IF;
    RETURN QUERY
    WITH due AS (
        SELECT o.id FROM %1$s o
         WHERE o.status = 'pending' AND o.available_at <= now()
         ORDER BY o.created_at
         LIMIT p_limit
         FOR UPDATE SKIP LOCKED)
    UPDATE %1$s o
       SET status = 'processing', locked_at = now(), locked_by = p_worker
      FROM due
     WHERE o.id = due.id
    RETURNING o.id, o.event_type, o.aggregate_type, o.aggregate_id, o.event_key,
              o.payload, o.attempts, o.created_at;
END
$body$$t$, v_table, f[1]);

    -- ack: migration 001's (plain) and 008's (logging its breakers' outcome)
    EXECUTE format($t$
CREATE OR REPLACE FUNCTION outbox_monitor.%2$I(p_table regclass, p_id bigint, p_worker text)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $body$
BEGIN
    UPDATE %1$s o
       SET status = 'done', processed_at = now(), locked_at = NULL, locked_by = NULL,
           last_error = NULL
     WHERE o.id = p_id AND o.status = 'processing' AND o.locked_by = p_worker;
    RETURN FOUND;
END
$body$$t$, v_table, f[2]);
    EXECUTE format($t$
CREATE OR REPLACE FUNCTION outbox_monitor.%2$I(p_table regclass, p_id bigint, p_worker text)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $body$
DECLARE
    acked_type text;
BEGIN
    UPDATE %1$s o
       SET status = 'done', processed_at = now(), locked_at = NULL, locked_by = NULL,
           last_error = NULL
     WHERE o.id = p_id AND o.status = 'processing' AND o.locked_by = p_worker
    RETURNING o.event_type INTO acked_type;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF EXISTS (SELECT FROM outbox_monitor.controls c
                WHERE c.outbox = p_table AND c.breaker
                      AND outbox_monitor.type_matches(acked_type, c.event_type_filter)) THEN
        PERFORM outbox_monitor.record_outcome(p_table, p_id, acked_type, 'ack');
    END IF;
    RETURN true;
END
$body$$t$, v_table, f[3]);

    -- fail: migration 001's (plain) and 008's (logging); the ledger's row deleted by a
    -- second statement when asked (the ledger is a parameter)
    FOR i IN 4 .. 5 LOOP
        EXECUTE format($t$
CREATE OR REPLACE FUNCTION outbox_monitor.%2$I(
    p_table regclass, p_id bigint, p_worker text, p_error text,
    p_permanent boolean DEFAULT false, p_max_attempts integer DEFAULT 10,
    p_ledger regclass DEFAULT NULL, p_ledger_action text DEFAULT NULL)
RETURNS text LANGUAGE plpgsql VOLATILE AS $body$
DECLARE
    new_status text;
    failed_key text;
    failed_type text;
BEGIN
    UPDATE %1$s o SET
        attempts = o.attempts + 1,
        status = CASE WHEN p_permanent OR o.attempts + 1 >= p_max_attempts
                      THEN 'failed' ELSE 'pending' END,
        available_at = CASE WHEN p_permanent OR o.attempts + 1 >= p_max_attempts
                            THEN o.available_at
                            ELSE now() + outbox_monitor.backoff_delay(o.attempts + 1) END,
        processed_at = CASE WHEN p_permanent OR o.attempts + 1 >= p_max_attempts
                            THEN now() ELSE NULL END,
        last_error = left(p_error, 2000),
        locked_at = NULL, locked_by = NULL
     WHERE o.id = p_id AND o.status = 'processing' AND o.locked_by = p_worker
    RETURNING o.status, o.event_key, o.event_type INTO new_status, failed_key, failed_type;
    IF new_status IS NULL THEN
        RETURN NULL;
    END IF;
    IF p_ledger IS NOT NULL AND p_ledger_action IS NOT NULL THEN
        EXECUTE format('DELETE FROM %%s l WHERE l.event_key = $1 AND l.action = $2', p_ledger)
        USING failed_key, p_ledger_action;
    END IF;
    %3$s
    RETURN new_status;
END
$body$$t$, v_table, f[i], CASE WHEN i = 4 THEN '' ELSE $log$IF EXISTS (SELECT FROM outbox_monitor.controls c
                WHERE c.outbox = p_table AND c.breaker
                      AND outbox_monitor.type_matches(failed_type, c.event_type_filter)) THEN
        PERFORM outbox_monitor.record_outcome(
            p_table, p_id, failed_type,
            CASE WHEN p_permanent THEN 'permanent' ELSE 'transient' END);
    END IF;$log$ END);
    END LOOP;

    -- ack_many: one statement; when it fails, row by row through the table's ack
    FOR i IN 6 .. 7 LOOP
        EXECUTE format($t$
CREATE OR REPLACE FUNCTION outbox_monitor.%2$I(p_table regclass, p_ids bigint[], p_worker text)
RETURNS bigint[] LANGUAGE plpgsql VOLATILE AS $body$
DECLARE
    acked bigint[];
    acked_types text[];
    one bigint;
    j bigint;
BEGIN
    BEGIN
        WITH done AS (
            UPDATE %1$s o
               SET status = 'done', processed_at = now(), locked_at = NULL, locked_by = NULL,
                   last_error = NULL
             WHERE o.id = ANY(p_ids) AND o.status = 'processing' AND o.locked_by = p_worker
            RETURNING o.id, o.event_type)
        SELECT coalesce(array_agg(done.id ORDER BY done.id), '{}'),
               coalesce(array_agg(done.event_type ORDER BY done.id), '{}')
          INTO acked, acked_types
          FROM done;
        %4$s
        RETURN acked;
    EXCEPTION WHEN OTHERS THEN
        NULL;  -- one row's recording failed (a trigger refusing it, say): row by row
    END;
    acked := '{}';
    FOR one IN SELECT DISTINCT i FROM unnest(p_ids) AS i WHERE i IS NOT NULL ORDER BY i LOOP
        BEGIN
            IF outbox_monitor.%3$I(p_table, one, p_worker) THEN
                acked := acked || one;
            END IF;
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'row %% of %%: recording its ack failed, it stays processing until a reap (%%)',
                          one, p_table, SQLERRM;
        END;
    END LOOP;
    RETURN acked;
END
$body$$t$, v_table, f[i], f[i - 4], CASE WHEN i = 6 THEN '' ELSE $log$-- one statement finds the acked rows a breaker watches; their outcomes as ack logs them
        FOR j IN SELECT a.n FROM unnest(acked_types) WITH ORDINALITY AS a(event_type, n)
                  WHERE EXISTS (SELECT FROM outbox_monitor.controls c
                                 WHERE c.outbox = p_table AND c.breaker
                                       AND outbox_monitor.type_matches(a.event_type,
                                                                       c.event_type_filter))
                  ORDER BY a.n LOOP
            PERFORM outbox_monitor.record_outcome(p_table, acked[j], acked_types[j], 'ack');
        END LOOP;$log$ END);
    END LOOP;

    FOR i IN 1 .. cardinality(v_kinds) LOOP
        EXECUTE format('COMMENT ON FUNCTION outbox_monitor.%I(%s) IS %L', f[i], v_arguments[i],
                       format('Worker %s of %s.%s (init-db; migration 030).', v_kinds[i],
                              v_schema, v_name));
    END LOOP;
    INSERT INTO outbox_monitor.worker_outboxes AS w (outbox, schema_name, table_name)
    VALUES (p_table, v_schema, v_name)
    ON CONFLICT (outbox) DO UPDATE
       SET schema_name = EXCLUDED.schema_name, table_name = EXCLUDED.table_name,
           installed_at = now();
    PERFORM outbox_monitor.dispatch_worker_functions();
END
$gen$;

-- The switch (migration 010's) also moves ack_many; otherwise as it was.
CREATE OR REPLACE FUNCTION outbox_monitor.sync_outcome_logging()
RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    -- each statement below sees what committed before it began (READ COMMITTED only)
    fresh boolean := current_setting('transaction_isolation') = 'read committed';
    logging boolean;
    f record;
BEGIN
    IF TG_RELID IS DISTINCT FROM 'outbox_monitor.controls'::regclass THEN
        RAISE EXCEPTION 'sync_outcome_logging is a trigger of outbox_monitor.controls only'
              USING ERRCODE = 'insufficient_privilege';
    END IF;
    LOCK TABLE outbox_monitor.outcome_logging_lock IN EXCLUSIVE MODE;
    IF TG_WHEN = 'BEFORE' THEN
        RETURN NULL;
    END IF;
    logging := NOT fresh OR EXISTS (SELECT FROM outbox_monitor.controls c WHERE c.breaker);
    FOR f IN
        SELECT target.oid, target.proname, template.prosrc
          FROM pg_proc AS target
          JOIN pg_proc AS template
            ON template.pronamespace = target.pronamespace
               AND template.proargtypes = target.proargtypes
               AND template.proname = target.proname
                   || CASE WHEN logging THEN '_logging_outcomes' ELSE '_plain' END
         WHERE target.pronamespace = 'outbox_monitor'::regnamespace
               AND target.proname IN ('ack', 'fail', 'ack_many')
               -- an older snapshot may show a source replaced since: then replace anyway
               AND (NOT fresh OR target.prosrc <> template.prosrc)
         ORDER BY target.proname
    LOOP
        EXECUTE format('CREATE OR REPLACE FUNCTION outbox_monitor.%I(%s) RETURNS %s
                        LANGUAGE plpgsql VOLATILE AS %L',
                       f.proname, pg_get_function_arguments(f.oid),
                       pg_get_function_result(f.oid), f.prosrc);
    END LOOP;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION outbox_monitor.sync_outcome_logging() FROM PUBLIC;

-- Only init-db (the schema's owner) prepares tables.
REVOKE ALL ON FUNCTION outbox_monitor.install_worker_functions(regclass),
    outbox_monitor.dispatch_worker_functions() FROM PUBLIC;

-- The outboxes this database already knows (flow controls, the sampler's rows) are prepared
-- now, so that their workers go on across the upgrade; init-db prepares its own table next.
DO $$
DECLARE
    t regclass;
BEGIN
    FOR t IN
        SELECT DISTINCT known.outbox
          FROM (SELECT c.outbox FROM outbox_monitor.controls c
                UNION SELECT to_regclass(s.table_name)
                        FROM (SELECT DISTINCT table_name FROM outbox_monitor.samples) AS s) AS known
          JOIN pg_class AS c ON c.oid = known.outbox AND c.relkind IN ('r', 'p')
         WHERE (SELECT count(*) FROM pg_attribute a
                 WHERE a.attrelid = known.outbox AND NOT a.attisdropped
                       AND a.attname IN ('id', 'status', 'locked_by', 'available_at')) = 4
    LOOP
        PERFORM outbox_monitor.install_worker_functions(t);
    END LOOP;
    PERFORM outbox_monitor.dispatch_worker_functions();
END
$$;
