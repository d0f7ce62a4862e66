-- A reap through the outbox's audited writer feeds the circuit breakers whoever calls it
-- (issue 29 item 2). record_outcome counts only outcomes of a login that may claim
-- (may_claim: UPDATE on the outbox): which the operator login, changing the outbox only
-- through its audited writers, no longer has. The reap writer (running as the owner) lists
-- the rows it reaped here, in its own transaction, before it reports them; record_outcome
-- also accepts a row listed for the current transaction. No login but the owner may write
-- this table, so no caller can list a row of its own; the writer deletes its rows before it
-- returns (unlogged: nothing of it survives a crash, nor needs to).

CREATE UNLOGGED TABLE outbox_monitor.writer_outcomes (
    xid    xid8   NOT NULL,
    outbox oid    NOT NULL,
    id     bigint NOT NULL,
    PRIMARY KEY (xid, outbox, id)
);
REVOKE ALL ON outbox_monitor.writer_outcomes FROM PUBLIC;

-- record_outcome as it is, with its first check widened (the rest of its body untouched).
DO $$
DECLARE
    v_source text;
    v_check constant text := 'IF NOT outbox_monitor.may_claim(p_table) THEN';
BEGIN
    SELECT p.prosrc INTO v_source FROM pg_catalog.pg_proc p
    WHERE p.oid = 'outbox_monitor.record_outcome(regclass, bigint, text, text)'::pg_catalog.regprocedure;
    IF pg_catalog.strpos(v_source, v_check) = 0 THEN
        RAISE EXCEPTION 'migration 020: record_outcome has no may_claim check to widen';
    END IF;
    v_source := pg_catalog.replace(v_source, v_check,
        'IF NOT outbox_monitor.may_claim(p_table) AND NOT EXISTS (
        SELECT FROM outbox_monitor.writer_outcomes AS w
        WHERE w.xid = pg_catalog.pg_current_xact_id() AND w.outbox = p_table::oid
              AND w.id = p_id
    ) THEN');
    EXECUTE pg_catalog.format(
        'CREATE OR REPLACE FUNCTION outbox_monitor.record_outcome(p_table regclass, '
        'p_id bigint, p_event_type text, p_kind text) RETURNS void LANGUAGE plpgsql '
        'VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS %L', v_source);
END
$$;
