-- The "send test alert" message is recorded without INSERT on the notification table
-- (issue 10 item 4): a role that may INSERT there could queue a pending row the sender
-- posts to Slack, or take the dedupe key of a future alert and so suppress it (the
-- evaluator's INSERT ... ON CONFLICT DO NOTHING). outbox_monitor.record_test_notification
-- runs as the schema's owner (SECURITY DEFINER, its search_path pinned) and writes only a
-- test message: kind and rule 'test', status 'sent' or 'failed' (never pending, so the
-- sender never posts it), one attempt, a dedupe key 'test|<uuid>' made here (alert keys
-- have at least three '|', so none can be taken) and the database's clock_timestamp()
-- (the time of the call, not the caller's transaction start, which a login could hold
-- open to back-date the row). EXECUTE is granted to the operator role by
-- `outbox-monitor init-db --print-grants`, to no one else (not PUBLIC).

CREATE FUNCTION outbox_monitor.record_test_notification(
    p_route         text,
    p_payload       jsonb,
    p_status        text,
    p_last_status   integer,
    p_last_error    text,
    p_slack_channel text,
    p_slack_ts      text
) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id bigint;
    v_now timestamptz := clock_timestamp();
BEGIN
    IF p_status IS NULL OR p_status NOT IN ('sent', 'failed') THEN
        RAISE EXCEPTION 'test notification: status must be sent or failed, got %',
                        coalesce(to_json(left(p_status, 40))::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_route IS NULL OR p_route = '' OR length(p_route) > 200
       OR p_route ~ '[\x01-\x1f\x7f-\x9f]'
    THEN
        RAISE EXCEPTION 'test notification: route must be a route name of the rules file '
                        '(1 to 200 printable characters)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_payload IS NULL OR jsonb_typeof(p_payload) <> 'object'
       OR octet_length(p_payload::text) > 4096
    THEN
        RAISE EXCEPTION 'test notification: payload must be a JSON object of at most 4096 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_last_status IS NOT NULL AND p_last_status NOT BETWEEN 100 AND 599 THEN
        RAISE EXCEPTION 'test notification: last_status must be an HTTP status, got %',
                        p_last_status
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO outbox_monitor.notifications
        (dedupe_key, rule, instance, kind, route, payload, status, attempts, last_status,
         last_error, available_at, created_at, sent_at, slack_channel, slack_ts)
    VALUES ('test|' || gen_random_uuid(), 'test', '', 'test', p_route, p_payload, p_status,
            1, p_last_status, left(p_last_error, 2000), v_now, v_now,
            CASE WHEN p_status = 'sent' THEN v_now END,
            left(p_slack_channel, 200), left(p_slack_ts, 100))
    RETURNING id INTO v_id;
    RETURN v_id;
END
$$;

COMMENT ON FUNCTION
    outbox_monitor.record_test_notification(text, jsonb, text, integer, text, text, text)
    IS 'Records a posted test message (sent or failed, never pending); stamps '
       'clock_timestamp().';

-- Only the owner keeps the right to execute it, whatever grants (to PUBLIC, or ALTER
-- DEFAULT PRIVILEGES of an earlier --print-grants) gave; re-run the new
-- `init-db --print-grants` output to give the operator role EXECUTE. The previous
-- version's grants gave the operator role INSERT on the notification table and USAGE on
-- its sequence: both are taken back from every role that may not also UPDATE the table
-- (the scheduler role, which queues and delivers notifications, keeps its grants).
REVOKE ALL ON FUNCTION
    outbox_monitor.record_test_notification(text, jsonb, text, integer, text, text, text)
    FROM PUBLIC;
DO $$
DECLARE
    v_grantee text;
BEGIN
    FOR v_grantee IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_proc p, aclexplode(p.proacl) a
        WHERE p.oid = 'outbox_monitor.record_test_notification(text, jsonb, text, integer, '
                      'text, text, text)'::text::regprocedure
          AND a.grantee <> 0 AND a.grantee <> p.proowner
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION outbox_monitor.record_test_notification(text, '
                       'jsonb, text, integer, text, text, text) FROM %s', v_grantee);
    END LOOP;
    FOR v_grantee IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid IN ('outbox_monitor.notifications'::regclass,
                        'outbox_monitor.notifications_id_seq'::regclass)
          AND a.grantee <> 0 AND a.grantee <> c.relowner
          AND a.privilege_type IN ('INSERT', 'USAGE')
          AND NOT EXISTS (
              SELECT FROM pg_class t, aclexplode(t.relacl) u
              WHERE t.oid = 'outbox_monitor.notifications'::regclass
                AND u.grantee = a.grantee AND u.privilege_type = 'UPDATE')
    LOOP
        EXECUTE format('REVOKE INSERT ON outbox_monitor.notifications FROM %s', v_grantee);
        EXECUTE format('REVOKE USAGE ON SEQUENCE outbox_monitor.notifications_id_seq FROM %s',
                       v_grantee);
    END LOOP;
END
$$;
