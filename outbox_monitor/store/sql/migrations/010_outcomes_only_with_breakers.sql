-- ack and fail look for breakers only while a breaker exists (SPEC section 5). Migration 008
-- made them run a second statement after their UPDATE, looking for a breaker of the row's
-- event type: with no control at all, that cost every ack about 9 % (50 acks 1.085 [1.003,
-- 1.118] of migration 001's, benchmarks/flow_control.py), over the 5 % that a feature not in
-- use may cost the workers. Folding the check into the dynamic UPDATE made acks 36 % slower
-- (a subquery in a dynamic statement is planned at every call).
--
-- So while no row of outbox_monitor.controls has breaker = true (any outbox, layer or expiry:
-- the test is kept blunt), ack and fail have migration 001's bodies; while one does, 008's,
-- which log outcomes. 008's are correct in every case and 001's are only a shortcut, so
-- wherever this migration cannot be sure, it installs 008's.
--
-- The four bodies   each lives once, in a function of its own: ack_plain and fail_plain
--                   (migration 001's, verbatim), ack_logging_outcomes and
--                   fail_logging_outcomes (migration 008's, verbatim). They are templates,
--                   never called (EXECUTE revoked from PUBLIC): the switch copies the source
--                   (pg_proc.prosrc) of the one wanted into ack or fail. Copied, not called:
--                   ack calling another PL/pgSQL function would put a second call on every
--                   ack, the kind of cost this migration removes. Functions rather than text
--                   in a table, because PL/pgSQL checks them when they are created and \df+
--                   shows them where a reader looks. A later migration that changes ack or
--                   fail replaces its templates, then fires the switch (as the end of this one
--                   does).
-- The switch        statement triggers on controls (insert, update, delete, truncate), so
--                   that every writer moves it: the product, `controls apply` and an
--                   operator's plain SQL. Their function runs as the schema's owner, who owns
--                   ack and fail; CREATE OR REPLACE keeps their signature, defaults, owner and
--                   grants (the statement is built from ack's and fail's own arguments and
--                   result, pg_get_function_arguments and pg_get_function_result). It
--                   1. locks outbox_monitor.outcome_logging_lock in EXCLUSIVE mode until the
--                      transaction ends, so that two transactions never replace one function
--                      at once ("tuple concurrently updated") and each decides after the
--                      previous one committed: without it, one deleting the last breaker while
--                      another writes one could leave the plain bodies behind both. A table
--                      lock, not an advisory one: any login may take any advisory lock and
--                      hold it, and so stop every control change (a pause among them); that
--                      table grants no privilege that can take a lock conflicting with
--                      EXCLUSIVE (SELECT takes ACCESS SHARE only). The BEFORE trigger takes it
--                      before the statement locks any controls row, so that a writer waiting
--                      for it holds no row another writer may need next (two writers updating
--                      two rows in opposite orders would otherwise deadlock, where without
--                      the switch the second would simply wait for the first);
--                   2. then reads whether a breaker exists. Under READ COMMITTED that statement
--                      sees every transaction that committed before it and this one's own rows;
--                      a breaker written by a transaction still open is that transaction's to
--                      install: its own trigger waits for the lock. Under REPEATABLE READ or
--                      SERIALIZABLE the snapshot can be older than the lock and miss a breaker
--                      (or a body) committed since: the logging bodies are installed, whatever
--                      it sees, until the next change under READ COMMITTED;
--                   3. replaces ack or fail only when its source is not the one wanted, so
--                      editing controls causes no DDL, no new row in pg_proc and no
--                      recompiling in the workers' sessions. The installed source is the state:
--                      nothing else to keep in step with it.
-- Sessions          a session that compiled ack keeps no stale copy past the swap's commit:
--                   PL/pgSQL recompiles when the function's pg_proc row changed, which a
--                   session sees from its next transaction on (a transaction already open
--                   may keep the body it had until it ends).

CREATE FUNCTION outbox_monitor.ack_plain(p_table regclass, p_id bigint, p_worker text)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    changed integer;
BEGIN
    EXECUTE format(
        'UPDATE %s SET status = ''done'', processed_at = now(), locked_at = NULL,
                locked_by = NULL, last_error = NULL
          WHERE id = $1 AND status = ''processing'' AND locked_by = $2', p_table)
    USING p_id, p_worker;
    GET DIAGNOSTICS changed = ROW_COUNT;
    RETURN changed = 1;
END
$$;

CREATE FUNCTION outbox_monitor.fail_plain(
    p_table regclass, p_id bigint, p_worker text, p_error text,
    p_permanent boolean DEFAULT false, p_max_attempts integer DEFAULT 10,
    p_ledger regclass DEFAULT NULL, p_ledger_action text DEFAULT NULL)
RETURNS text LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    new_status text;
BEGIN
    EXECUTE format(
        'WITH failed AS (
             UPDATE %1$s SET
                 attempts = attempts + 1,
                 status = CASE WHEN $4 OR attempts + 1 >= $5 THEN ''failed'' ELSE ''pending'' END,
                 available_at = CASE WHEN $4 OR attempts + 1 >= $5 THEN available_at
                                     ELSE now() + outbox_monitor.backoff_delay(attempts + 1) END,
                 processed_at = CASE WHEN $4 OR attempts + 1 >= $5 THEN now() ELSE NULL END,
                 last_error = left($3, 2000),
                 locked_at = NULL, locked_by = NULL
              WHERE id = $1 AND status = ''processing'' AND locked_by = $2
              RETURNING status, event_key)
         %2$s
         SELECT status FROM failed',
        p_table,
        CASE WHEN p_ledger IS NULL OR p_ledger_action IS NULL THEN ''
             ELSE format(', forgotten AS (DELETE FROM %s l USING failed
                          WHERE l.event_key = failed.event_key AND l.action = $6)', p_ledger)
        END)
    INTO new_status
    USING p_id, p_worker, p_error, p_permanent, p_max_attempts, p_ledger_action;
    RETURN new_status;
END
$$;

CREATE FUNCTION outbox_monitor.ack_logging_outcomes(p_table regclass, p_id bigint,
                                                    p_worker text)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    acked_type text;
BEGIN
    EXECUTE format(
        'UPDATE %s SET status = ''done'', processed_at = now(), locked_at = NULL,
                locked_by = NULL, last_error = NULL
          WHERE id = $1 AND status = ''processing'' AND locked_by = $2
         RETURNING event_type', p_table)
    INTO acked_type
    USING p_id, p_worker;
    IF acked_type IS NULL THEN
        RETURN false;
    END IF;
    -- Static SQL (its plan cached per session): an index probe of the few control rows.
    -- Folding it into the UPDATE above made every ack 36 % slower: a dynamic statement is
    -- planned at each call, and a subquery in it costs its planning every time.
    IF EXISTS (SELECT FROM outbox_monitor.controls c
                WHERE c.outbox = p_table AND c.breaker
                      AND outbox_monitor.type_matches(acked_type, c.event_type_filter)) THEN
        PERFORM outbox_monitor.record_outcome(p_table, p_id, acked_type, 'ack');
    END IF;
    RETURN true;
END
$$;

CREATE FUNCTION outbox_monitor.fail_logging_outcomes(
    p_table regclass, p_id bigint, p_worker text, p_error text,
    p_permanent boolean DEFAULT false, p_max_attempts integer DEFAULT 10,
    p_ledger regclass DEFAULT NULL, p_ledger_action text DEFAULT NULL)
RETURNS text LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    new_status text;
    failed_type text;
BEGIN
    EXECUTE format(
        'WITH failed AS (
             UPDATE %1$s SET
                 attempts = attempts + 1,
                 status = CASE WHEN $4 OR attempts + 1 >= $5 THEN ''failed'' ELSE ''pending'' END,
                 available_at = CASE WHEN $4 OR attempts + 1 >= $5 THEN available_at
                                     ELSE now() + outbox_monitor.backoff_delay(attempts + 1) END,
                 processed_at = CASE WHEN $4 OR attempts + 1 >= $5 THEN now() ELSE NULL END,
                 last_error = left($3, 2000),
                 locked_at = NULL, locked_by = NULL
              WHERE id = $1 AND status = ''processing'' AND locked_by = $2
              RETURNING status, event_key, event_type)
         %2$s
         SELECT status, event_type FROM failed',
        p_table,
        CASE WHEN p_ledger IS NULL OR p_ledger_action IS NULL THEN ''
             ELSE format(', forgotten AS (DELETE FROM %s l USING failed
                          WHERE l.event_key = failed.event_key AND l.action = $6)', p_ledger)
        END)
    INTO new_status, failed_type
    USING p_id, p_worker, p_error, p_permanent, p_max_attempts, p_ledger_action;
    IF new_status IS NOT NULL
       AND EXISTS (SELECT FROM outbox_monitor.controls c
                    WHERE c.outbox = p_table AND c.breaker
                          AND outbox_monitor.type_matches(failed_type, c.event_type_filter)) THEN
        PERFORM outbox_monitor.record_outcome(
            p_table, p_id, failed_type,
            CASE WHEN p_permanent THEN 'permanent' ELSE 'transient' END);
    END IF;
    RETURN new_status;
END
$$;

-- Templates, not transitions: a worker calls ack and fail.
REVOKE ALL ON FUNCTION outbox_monitor.ack_plain(regclass, bigint, text),
    outbox_monitor.fail_plain(regclass, bigint, text, text, boolean, integer, regclass, text),
    outbox_monitor.ack_logging_outcomes(regclass, bigint, text),
    outbox_monitor.fail_logging_outcomes(regclass, bigint, text, text, boolean, integer,
                                         regclass, text)
    FROM PUBLIC;

-- The switch's lock (see the top of this file): no row, no privilege granted on it.
CREATE TABLE outbox_monitor.outcome_logging_lock ();
REVOKE ALL ON outbox_monitor.outcome_logging_lock FROM PUBLIC;

-- The switch (see the top of this file): ack and fail get the logging bodies while a breaker
-- exists or the transaction is not READ COMMITTED, else the plain ones; each is replaced only
-- when its source is not the one wanted. Before the statement, only the lock. It refuses to
-- run as a trigger of any other table: a login with EXECUTE on every function of the schema
-- (the viewer's grants) could otherwise fire it from a temporary table of its own and hold
-- the lock.
CREATE FUNCTION outbox_monitor.sync_outcome_logging()
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
               AND target.proname IN ('ack', 'fail')
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

-- Called only by the triggers (a trigger fires whatever the writer's EXECUTE privileges). The
-- viewer's grants give EXECUTE on every function of the schema back: hence its TG_RELID check.
REVOKE ALL ON FUNCTION outbox_monitor.sync_outcome_logging() FROM PUBLIC;

CREATE TRIGGER controls_lock_outcome_logging
BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON outbox_monitor.controls
FOR EACH STATEMENT EXECUTE FUNCTION outbox_monitor.sync_outcome_logging();

CREATE TRIGGER controls_sync_outcome_logging
AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON outbox_monitor.controls
FOR EACH STATEMENT EXECUTE FUNCTION outbox_monitor.sync_outcome_logging();

-- Switch once now: a database with breakers keeps 008's bodies, one without gets 001's. A
-- statement trigger fires even when its statement changes no row.
UPDATE outbox_monitor.controls SET breaker = breaker WHERE false;
