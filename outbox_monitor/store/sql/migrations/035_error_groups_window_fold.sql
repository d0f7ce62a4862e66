-- refresh_error_groups reads its new dead letters through failed_window (issue 32 item 1).
--
-- init-db's done_at, failed_at and clock_skew gave way to done_window and failed_window, keyed
-- on greatest(processed_at, created_at) with both instants included (store/indexes.py): a
-- statement reads them only when it states a bound on that expression. The refresh's search
-- for the failed rows not yet cached since the newest one counted (processed_at >= $1) states
-- greatest(processed_at, created_at) >= $1 beside it, which that bound implies, so the search
-- stays a range of the index instead of a read of every dead letter. Changed in place, by
-- replacing only that text in the function's current definition (the replacement must match,
-- or the migration fails), as migration 024 did: whatever else a migration changed stays.

DO $migration$
DECLARE
    old_text text;
    old_where text := $old$WHERE o.status = 'failed' AND o.processed_at >= $1$old$;
    new_where text := $new$WHERE o.status = 'failed' AND greatest(o.processed_at, o.created_at) >= $1
                  AND o.processed_at >= $1$new$;
BEGIN
    old_text := pg_get_functiondef(
        'outbox_monitor.refresh_error_groups(regclass, integer)'::regprocedure);
    IF strpos(old_text, old_where) = 0 THEN
        RAISE EXCEPTION 'migration 035: refresh_error_groups has no %', old_where;
    END IF;
    EXECUTE replace(old_text, old_where, new_where);
END
$migration$;
