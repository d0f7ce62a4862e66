-- outbox-monitor's own objects, in the schema outbox_monitor (never in the user's schema).
-- The worker transitions of SPEC section 1 live here as SQL functions, so the Python API and the
-- n8n workflows call the same code: one backoff schedule, one jitter, one dead-letter rule.

CREATE TABLE outbox_monitor.audit_log (
    id             bigserial PRIMARY KEY,
    run_id         uuid NOT NULL,
    at             timestamptz NOT NULL DEFAULT now(),
    actor          text NOT NULL,
    action         text NOT NULL,
    table_name     text NOT NULL,
    filter         jsonb NOT NULL,
    affected_count integer NOT NULL,
    affected_ids   bigint[] NOT NULL
);
CREATE INDEX audit_log_at_idx ON outbox_monitor.audit_log (at DESC);
CREATE INDEX audit_log_run_id_idx ON outbox_monitor.audit_log (run_id);

CREATE TABLE outbox_monitor.samples (
    table_name                 text NOT NULL,
    sampled_at                 timestamptz NOT NULL DEFAULT now(),
    queue_depth                bigint NOT NULL,
    pending_total              bigint NOT NULL,
    scheduled_retries          bigint NOT NULL,
    processing                 bigint NOT NULL,
    stuck_locks                bigint NOT NULL,
    failed_in_window           bigint NOT NULL,
    oldest_pending_age_seconds double precision,
    latency_p50_seconds        double precision,
    latency_p95_seconds        double precision,
    PRIMARY KEY (table_name, sampled_at)
);

-- SPEC section 1 delay schedule: the failure that makes attempts = n waits schedule[n-1].
CREATE FUNCTION outbox_monitor.backoff_base(p_attempts integer)
RETURNS interval LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN p_attempts <= 1 THEN interval '30 seconds'
        WHEN p_attempts = 2 THEN interval '2 minutes'
        WHEN p_attempts = 3 THEN interval '5 minutes'
        WHEN p_attempts = 4 THEN interval '15 minutes'
        WHEN p_attempts = 5 THEN interval '30 minutes'
        ELSE interval '1 hour'
    END
$$;

-- The base delay plus a random jitter of 0-10 % of it.
CREATE FUNCTION outbox_monitor.backoff_delay(p_attempts integer)
RETURNS interval LANGUAGE sql VOLATILE AS $$
    SELECT outbox_monitor.backoff_base(p_attempts) * (1 + random() * 0.1)
$$;

-- SPEC section 2 error fingerprint: uuids, quoted values, hex runs of >= 8 and digit runs of >= 4
-- become placeholders; 3-digit HTTP status codes stay, so a 401 and a 500 group apart.
-- A hex run has at least one letter a-f; an all-digit run is a number (<n>).
CREATE FUNCTION outbox_monitor.normalize_error(p_error text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT btrim(
        regexp_replace(
        regexp_replace(
        regexp_replace(
        regexp_replace(
            coalesce(p_error, ''),
            '[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}',
            '<uuid>', 'g'),
            '"[^"]*"|''[^'']*''', '<str>', 'g'),
            '(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}',
            '<hex>', 'g'),
            '[0-9]{4,}', '<n>', 'g'))
$$;

CREATE FUNCTION outbox_monitor.error_group(p_event_type text, p_error text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT left(md5(p_event_type || ':' || outbox_monitor.normalize_error(p_error)), 12)
$$;

-- claim: up to p_limit due rows, oldest first, FOR UPDATE SKIP LOCKED, marked processing.
CREATE FUNCTION outbox_monitor.claim(p_table regclass, p_worker text, p_limit integer DEFAULT 50)
RETURNS TABLE (
    id bigint, event_type text, aggregate_type text, aggregate_id text, event_key text,
    payload jsonb, attempts integer, created_at timestamptz
) LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN QUERY EXECUTE format(
        'WITH due AS (
             SELECT o.id FROM %1$s o
             WHERE o.status = ''pending'' AND o.available_at <= now()
             ORDER BY o.created_at
             LIMIT $2
             FOR UPDATE SKIP LOCKED)
         UPDATE %1$s o
            SET status = ''processing'', locked_at = now(), locked_by = $1
           FROM due
          WHERE o.id = due.id
         RETURNING o.id, o.event_type, o.aggregate_type, o.aggregate_id, o.event_key,
                   o.payload, o.attempts, o.created_at', p_table)
    USING p_worker, p_limit;
END
$$;

-- ack: done, processed_at = now(), locks and last_error cleared. Only the worker that
-- holds the claim may ack; returns false when the row was reaped or re-claimed meanwhile.
CREATE FUNCTION outbox_monitor.ack(p_table regclass, p_id bigint, p_worker text)
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

-- fail: one failed attempt of a claimed row. attempts + 1; a permanent error or reaching
-- p_max_attempts dead-letters (failed, processed_at = now()); otherwise back to pending
-- after backoff_delay. last_error is cut to 2000 chars. When p_ledger and p_ledger_action
-- are given, the same statement deletes the idempotency-ledger row of this effect (the
-- downstream said a definite "no", so a retry or replay may try again).
-- Returns the new status ('pending' or 'failed'), or NULL when the caller no longer
-- holds the claim (the row was reaped or re-claimed meanwhile).
CREATE FUNCTION outbox_monitor.fail(
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
