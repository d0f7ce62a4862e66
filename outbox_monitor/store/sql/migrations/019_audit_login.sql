-- The audit log tells who really did what (issue 29 item 2, SPEC section 4).
--
-- Every audit row records the database login that wrote it (session_user: inside a SECURITY
-- DEFINER function current_user is the owner, session_user stays the login that connected)
-- and the client address (inet_client_addr(): NULL over a Unix socket; behind a pooler, the
-- pooler's), beside the person the caller names (a claim). Rows written before this
-- migration keep NULL in both.
--
-- record_audit becomes internal: only the functions init-db creates for each outbox table
-- (store/audited_writers.py: reap, replay, prune, reveal, ... of that table alone) call it,
-- running as the schema's owner; no login may execute it, the operator's included, so no
-- one can write an audit row of a change that did not happen. The outbox, the controls and
-- the silences are changed by the operator login only through those functions.

ALTER TABLE outbox_monitor.audit_log
    ADD COLUMN db_login text,
    ADD COLUMN client_addr inet;

CREATE OR REPLACE FUNCTION outbox_monitor.record_audit(
    p_run_id         uuid,
    p_actor          text,
    p_action         text,
    p_table_name     text,
    p_filter         jsonb,
    p_affected_count integer,
    p_affected_ids   bigint[]
) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id bigint;
    v_other record;
BEGIN
    IF p_run_id IS NULL THEN
        RAISE EXCEPTION 'audit row: run_id is missing' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- One line of printable text, as access.normalise_actor makes it: no C0/C1 control
    -- characters, line or paragraph separators, bidirectional overrides or isolates.
    IF p_actor IS NULL OR btrim(p_actor) = '' OR length(p_actor) > 200
       OR p_actor <> btrim(p_actor)
       OR p_actor ~ '[\x01-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]'
    THEN
        RAISE EXCEPTION 'audit row: actor must be 1 to 200 characters of one line of '
                        'printable text without leading or trailing spaces, got %',
                        coalesce(to_json(left(p_actor, 220))::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_action IS NULL OR length(p_action) > 40 OR p_action !~ '^[a-z]+([ _][a-z]+)*$' THEN
        RAISE EXCEPTION 'audit row: action must be lower-case words (reap, replay, prune, '
                        'silence, expire silence, reveal ...), got %',
                        coalesce(to_json(left(p_action, 60))::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_table_name IS NULL OR p_table_name = '' OR length(p_table_name) > 255
       OR p_table_name ~ '[\x01-\x1f\x7f-\x9f]'
    THEN
        RAISE EXCEPTION 'audit row: table_name must be a schema-qualified table name'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_filter IS NULL OR jsonb_typeof(p_filter) <> 'object' THEN
        RAISE EXCEPTION 'audit row: filter must be a JSON object'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_affected_ids IS NULL OR cardinality(p_affected_ids) > 1000 THEN
        RAISE EXCEPTION 'audit row: affected_ids must be an array of at most 1000 ids'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_affected_count IS NULL OR p_affected_count < cardinality(p_affected_ids) THEN
        RAISE EXCEPTION 'audit row: affected_count (%) must count at least the % ids given',
                        p_affected_count, cardinality(p_affected_ids)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Two callers of one run_id wait for each other, so the check below sees the rows of
    -- the first (a run's own batches run one after another: they never wait).
    PERFORM pg_advisory_xact_lock(hashtextextended('outbox_monitor.audit_run:' || p_run_id, 0));
    SELECT actor, action INTO v_other
    FROM outbox_monitor.audit_log
    WHERE run_id = p_run_id AND (actor <> p_actor OR action <> p_action)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'audit row: run_id % belongs to another run (% by %), not % by %',
                        p_run_id, to_json(v_other.action)::text, to_json(v_other.actor)::text,
                        to_json(p_action)::text, to_json(p_actor)::text
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'every run gets a new run_id; rows of one run share actor and action';
    END IF;
    INSERT INTO outbox_monitor.audit_log
        (run_id, at, actor, action, table_name, filter, affected_count, affected_ids,
         db_login, client_addr)
    VALUES (p_run_id, clock_timestamp(), p_actor, p_action, p_table_name, p_filter, p_affected_count,
            p_affected_ids, session_user, inet_client_addr())
    RETURNING id INTO v_id;
    RETURN v_id;
END
$$;

COMMENT ON FUNCTION outbox_monitor.record_audit(uuid, text, text, text, jsonb, integer, bigint[])
    IS 'Internal: the only writer of outbox_monitor.audit_log, called by the audited writers '
       'of each outbox table (init-db); stamps clock_timestamp(), session_user and '
       'inet_client_addr(), checks the fields, keeps a run to one actor and one action.';

-- Nobody but the owner executes it any more: not PUBLIC, not the operator role an earlier
-- `init-db --print-grants` gave EXECUTE.
REVOKE ALL ON FUNCTION
    outbox_monitor.record_audit(uuid, text, text, text, jsonb, integer, bigint[]) FROM PUBLIC;
DO $$
DECLARE
    v_grantee text;
    v_grantor text;
BEGIN
    FOR v_grantee IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
        WHERE p.oid = 'outbox_monitor.record_audit(uuid, text, text, text, jsonb, integer, bigint[])'::pg_catalog.regprocedure
          AND a.grantee <> 0 AND a.grantee <> p.proowner
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION outbox_monitor.record_audit(uuid, '
                                  'text, text, text, jsonb, integer, bigint[]) FROM %s', v_grantee);
    END LOOP;
    -- Earlier grants gave the viewer EXECUTE on every function created later in the schema
    -- (ALTER DEFAULT PRIVILEGES): a writer created by init-db would have been callable by
    -- the read-only login. Those default privileges are taken back; --print-grants now
    -- grants each function by name.
    FOR v_grantor, v_grantee IN
        SELECT DISTINCT d.defaclrole::regrole::text, a.grantee::regrole::text
        FROM pg_catalog.pg_default_acl d, pg_catalog.aclexplode(d.defaclacl) a
        WHERE d.defaclnamespace = 'outbox_monitor'::regnamespace AND d.defaclobjtype = 'f'
          AND a.grantee <> 0 AND a.privilege_type = 'EXECUTE'
    LOOP
        BEGIN
            EXECUTE pg_catalog.format('ALTER DEFAULT PRIVILEGES FOR ROLE %s IN SCHEMA '
                                      'outbox_monitor REVOKE EXECUTE ON FUNCTIONS FROM %s',
                                      v_grantor, v_grantee);
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE WARNING 'default EXECUTE of % on new functions of outbox_monitor not taken '
                          'back (%): run the new `init-db --print-grants` output as %',
                          v_grantee, SQLERRM, v_grantor;
        END;
    END LOOP;
END
$$;
