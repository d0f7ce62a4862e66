-- The audit log tells who really did what (issue 29 item 2, SPEC section 4).
--
-- Every audit row records the database login that wrote it (session_user: inside a SECURITY
-- DEFINER function current_user is the owner, session_user stays the login that connected)
-- and the client address (inet_client_addr(): NULL over a Unix socket; behind a pooler, the
-- pooler's), beside the person the caller names (a claim): the columns' defaults, so
-- record_audit (migration 003) writes them without a change. Rows written before this
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
-- Set apart from ADD COLUMN, so that the rows already there keep NULL (not the migrating
-- login). record_audit's INSERT leaves both to their defaults, taken when the row is written.
ALTER TABLE outbox_monitor.audit_log
    ALTER COLUMN db_login SET DEFAULT session_user,
    ALTER COLUMN client_addr SET DEFAULT inet_client_addr();


COMMENT ON FUNCTION outbox_monitor.record_audit(uuid, text, text, text, jsonb, integer, bigint[])
    IS 'Internal: the only writer of outbox_monitor.audit_log, called by the audited writers '
       'of each outbox table (init-db); stamps clock_timestamp() (and, by the columns'' '
       'defaults, session_user and inet_client_addr()), checks the fields, keeps a run to '
       'one actor and one action.';

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
