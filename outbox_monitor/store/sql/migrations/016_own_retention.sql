-- Retention of the product's own tables (issue 17 item 5): the scheduler's retention job
-- (maintenance.prune_own_tables) deletes, in batches oldest first, what is past its retention.
--
-- notifications had no index on its time: each batch would read every notification. The
-- audit log (at) and the alert transitions (at) have theirs; the breaker transitions are few
-- (two per breaker episode). The table is the product's own and written only by the
-- scheduler (never by the workers): built inside init-db's transaction, the index blocks only
-- the scheduler's writes, for the build.
CREATE INDEX notifications_created_at_idx ON outbox_monitor.notifications (created_at);

-- No role may write the audit log but through record_audit (migration 003); its retention
-- goes through this function, which deletes only rows of one table older than at least a
-- day, at most p_batch of them, oldest first. The scheduler's role gets EXECUTE
-- (init-db --print-grants), not DELETE on the table.
CREATE FUNCTION outbox_monitor.prune_audit_log(
    p_table_name        text,
    p_retention_seconds double precision,
    p_batch             integer
) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_deleted integer;
BEGIN
    IF p_retention_seconds IS NULL OR NOT p_retention_seconds >= 86400 THEN
        RAISE EXCEPTION 'audit log retention: at least one day (86400 s), got %',
            p_retention_seconds USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_batch IS NULL OR p_batch < 1 OR p_batch > 100000 THEN
        RAISE EXCEPTION 'audit log retention: a batch of 1 to 100000 rows, got %', p_batch
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    DELETE FROM outbox_monitor.audit_log
    WHERE id = ANY(ARRAY(SELECT a.id FROM outbox_monitor.audit_log a
                         WHERE a.at < now() - make_interval(secs => p_retention_seconds)
                           AND a.table_name = p_table_name
                         ORDER BY a.at
                         LIMIT p_batch));
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    RETURN v_deleted;
END
$$;
REVOKE ALL ON FUNCTION outbox_monitor.prune_audit_log(text, double precision, integer)
    FROM PUBLIC;
