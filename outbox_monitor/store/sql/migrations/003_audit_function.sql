-- Audit rows cannot be forged (issue 10 item 11): they are written only through
-- outbox_monitor.record_audit, which runs as the schema's owner (SECURITY DEFINER, its
-- search_path pinned), stamps the row with the database's clock_timestamp() (the time of
-- the call: now(), the caller's transaction start, would let a login back-date a row by
-- holding a transaction open) and checks every field. A run's rows share one actor and
-- one action: a run_id that already has rows of another actor or action is refused, so
-- no one can append rows to someone else's run. No other role keeps INSERT, UPDATE, DELETE
-- or TRUNCATE on the audit table; EXECUTE is granted to the operator role by
-- `outbox-monitor init-db --print-grants`, to no one else (not PUBLIC).

CREATE FUNCTION outbox_monitor.record_audit(
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
        (run_id, at, actor, action, table_name, filter, affected_count, affected_ids)
    VALUES (p_run_id, clock_timestamp(), p_actor, p_action, p_table_name, p_filter, p_affected_count,
            p_affected_ids)
    RETURNING id INTO v_id;
    RETURN v_id;
END
$$;

COMMENT ON FUNCTION outbox_monitor.record_audit(uuid, text, text, text, jsonb, integer, bigint[])
    IS 'The only writer of outbox_monitor.audit_log: stamps clock_timestamp(), checks the '
       'fields, keeps a run to one actor and one action.';

-- Only the owner keeps the right to execute it and to write the table, whatever grants
-- (to PUBLIC, or ALTER DEFAULT PRIVILEGES of an earlier --print-grants) gave before:
-- re-run the new `init-db --print-grants` output to give the operator role EXECUTE.
REVOKE ALL ON FUNCTION
    outbox_monitor.record_audit(uuid, text, text, text, jsonb, integer, bigint[]) FROM PUBLIC;
DO $$
DECLARE
    v_grantee text;
BEGIN
    FOR v_grantee IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_proc p, aclexplode(p.proacl) a
        WHERE p.oid = 'outbox_monitor.record_audit(uuid, text, text, text, jsonb, integer, bigint[])'::regprocedure
          AND a.grantee <> 0 AND a.grantee <> p.proowner
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION outbox_monitor.record_audit(uuid, text, text, '
                       'text, jsonb, integer, bigint[]) FROM %s', v_grantee);
    END LOOP;
    FOR v_grantee IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'outbox_monitor.audit_log'::regclass
          AND a.grantee <> 0 AND a.grantee <> c.relowner
          AND a.privilege_type IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE')
    LOOP
        EXECUTE format('REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON outbox_monitor.audit_log '
                       'FROM %s', v_grantee);
    END LOOP;
    FOR v_grantee IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'outbox_monitor.audit_log_id_seq'::regclass
          AND a.grantee <> 0 AND a.grantee <> c.relowner
          AND a.privilege_type IN ('USAGE', 'UPDATE')
    LOOP
        EXECUTE format('REVOKE USAGE, UPDATE ON SEQUENCE outbox_monitor.audit_log_id_seq '
                       'FROM %s', v_grantee);
    END LOOP;
END
$$;
