-- Flow control (SPEC section 5): pause, concurrency limit, rate limit and circuit breaker per
-- event-type filter, obeyed by the shared claim; ack, fail and reap log the outcomes a breaker
-- counts. A claim never waits on a control: it locks each matching control's state row with
-- SKIP LOCKED, and a state row held by another claim grants it 0.
--
-- controls            one row per (outbox, event-type filter, layer). layer 'file' rows are
--                     written by `outbox-monitor controls apply` from a controls file; a
--                     'ui' row is an operator's change (dashboard or CLI). For a filter the
--                     file owns, a 'ui' row is an override that must expire (expires_at); it
--                     wins while it lasts, and apply never touches it.
-- effective_controls  the one row per (outbox, filter) in force now: an unexpired 'ui' row,
--                     else the 'file' row. A pause past its `until` is not in force: the
--                     claim compares paused_until with the clock, so it cannot outlive it.
-- control_state       per (outbox, filter): the token bucket and the breaker, locked by claims
-- control_outcomes    the breaker's window: acks and transient failures (permanent ones are
--                     the row's fault, not the downstream's, and are not logged)
-- breaker_transitions one 'opened' and one 'closed' row per episode, notified once on the
--                     channel outbox_monitor_breaker when the writing transaction commits

CREATE TABLE outbox_monitor.controls (
    id                       bigserial PRIMARY KEY,
    outbox                   regclass NOT NULL,
    event_type_filter        text NOT NULL
                             CHECK (event_type_filter <> '' AND length(event_type_filter) <= 1000),
    layer                    text NOT NULL CHECK (layer IN ('file', 'ui')),
    paused                   boolean NOT NULL DEFAULT false,
    paused_until             timestamptz,
    pause_reason             text,
    concurrency_limit        integer CHECK (concurrency_limit >= 1),
    rate_per_second          double precision
                             CHECK (rate_per_second > 0 AND rate_per_second <= 1000000),
    burst                    integer CHECK (burst >= 1 AND burst <= 1000000),
    breaker                  boolean NOT NULL DEFAULT false,
    breaker_window_seconds   double precision NOT NULL DEFAULT 60 CHECK (breaker_window_seconds > 0),
    breaker_min_attempts     integer NOT NULL DEFAULT 20 CHECK (breaker_min_attempts >= 1),
    breaker_ratio            double precision NOT NULL DEFAULT 0.9
                             CHECK (breaker_ratio > 0 AND breaker_ratio <= 1),
    breaker_cooldown_seconds double precision NOT NULL DEFAULT 30
                             CHECK (breaker_cooldown_seconds > 0 AND breaker_cooldown_seconds <= 900),
    probe_timeout_seconds    double precision NOT NULL DEFAULT 900 CHECK (probe_timeout_seconds > 0),
    expires_at               timestamptz,
    updated_at               timestamptz NOT NULL DEFAULT now(),
    updated_by               text NOT NULL,
    UNIQUE (outbox, event_type_filter, layer),
    CHECK ((rate_per_second IS NULL) = (burst IS NULL)),
    CHECK (layer = 'ui' OR expires_at IS NULL)
);

CREATE VIEW outbox_monitor.effective_controls AS
SELECT DISTINCT ON (c.outbox, c.event_type_filter) c.*
FROM outbox_monitor.controls c
WHERE c.expires_at IS NULL OR c.expires_at > clock_timestamp()
ORDER BY c.outbox, c.event_type_filter, c.layer = 'ui' DESC;

CREATE TABLE outbox_monitor.control_state (
    outbox            regclass NOT NULL,
    event_type_filter text NOT NULL,
    tokens            double precision,
    refilled_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    breaker_state     text NOT NULL DEFAULT 'closed'
                      CHECK (breaker_state IN ('closed', 'open', 'half_open')),
    since             timestamptz NOT NULL DEFAULT clock_timestamp(),
    cooldown_seconds  double precision,
    probe_id          bigint,
    probe_at          timestamptz,
    PRIMARY KEY (outbox, event_type_filter),
    -- a state that would stop every claim or hold a breaker for ever cannot be written
    CHECK (tokens IS NULL OR (tokens > -2147483648 AND tokens < 2147483648)),
    CHECK (refilled_at > '-infinity' AND refilled_at < 'infinity'),
    CHECK (since > '-infinity' AND since < 'infinity'),
    CHECK (breaker_state <> 'open'
           OR (cooldown_seconds IS NOT NULL AND cooldown_seconds BETWEEN 0 AND 900)),
    CHECK (probe_id IS NULL
           OR (probe_at IS NOT NULL AND probe_at > '-infinity' AND probe_at < 'infinity'))
);

CREATE TABLE outbox_monitor.control_outcomes (
    outbox            regclass NOT NULL,
    event_type_filter text NOT NULL,
    at                timestamptz NOT NULL DEFAULT clock_timestamp(),
    failed            boolean NOT NULL
);
CREATE INDEX control_outcomes_key_at_idx
    ON outbox_monitor.control_outcomes (outbox, event_type_filter, at);

CREATE TABLE outbox_monitor.breaker_transitions (
    id                bigserial PRIMARY KEY,
    outbox            regclass NOT NULL,
    event_type_filter text NOT NULL,
    transition        text NOT NULL CHECK (transition IN ('opened', 'closed')),
    at                timestamptz NOT NULL DEFAULT clock_timestamp(),
    outcomes          integer,
    failures          integer,
    cooldown_seconds  double precision
);
CREATE INDEX breaker_transitions_key_idx
    ON outbox_monitor.breaker_transitions (outbox, event_type_filter, id);

-- SPEC section 2 event-type filter: with % a LIKE pattern in which _ and \ are literal, else equality.
CREATE FUNCTION outbox_monitor.type_matches(p_event_type text, p_filter text)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN strpos(p_filter, '%') > 0
                THEN p_event_type LIKE replace(replace(p_filter, '\', '\\'), '_', '\_')
                ELSE p_event_type = p_filter END
$$;

-- Whether the owner-run flow-control functions may read p_table: reading a relation runs code
-- its owner chose (a view's expressions, row security policies, casts), so, as in migration 007,
-- only an ordinary or partitioned permanent table owned by the owner of the outbox_monitor
-- schema (who owns these functions: init-db runs as the table's owner). The product refuses
-- to write a control on any other table; a claim there ignores controls with a WARNING.
CREATE FUNCTION outbox_monitor.flow_table_ok(p_table regclass)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
           SELECT FROM pg_class AS c
            WHERE c.oid = p_table AND c.relkind IN ('r', 'p') AND c.relpersistence <> 't'
                  AND c.relowner = (SELECT n.nspowner FROM pg_namespace AS n
                                     WHERE n.nspname = 'outbox_monitor'))
$$;

-- Whether the login calling an owner-run flow-control function may claim from p_table: the
-- workers' UPDATE on it, or on its status column (a column grant; the viewer has neither). Without this, a read-only login could call
-- claim_grants in an open transaction and hold every state row, so that every claim of the
-- controlled event types would be granted 0.
CREATE FUNCTION outbox_monitor.may_claim(p_table regclass)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT has_table_privilege(session_user, p_table, 'UPDATE')
        OR has_column_privilege(session_user, p_table, 'status', 'UPDATE')
$$;

-- Refuse (insufficient_privilege) a login that may not claim from p_table (may_claim).
CREATE FUNCTION outbox_monitor.require_claimer(p_table regclass)
RETURNS void LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF NOT outbox_monitor.may_claim(p_table) THEN
        RAISE EXCEPTION 'permission denied for table %: claiming needs UPDATE on it', p_table
              USING ERRCODE = 'insufficient_privilege';
    END IF;
END
$$;

-- The control rows whose state a claim could lock, each with what it grants now. Runs as the
-- schema's owner (workers need no privilege on the state tables) and returns, per effective
-- control of p_table: refused (a pause in force, an open breaker, a probe out, or the state
-- row held by another claim), the whole tokens (NULL: no rate limit), the concurrency limit
-- (NULL: none; the caller counts processing rows, which it may read) and probe (a half-open
-- breaker hands out exactly one row). Moves a breaker open -> half_open after its cool-down,
-- and half_open -> open (cool-down doubled) when its probe was not resolved within
-- probe_timeout_seconds. Refills the bucket under the state row's lock.
CREATE FUNCTION outbox_monitor.claim_grants(p_table regclass)
RETURNS TABLE (event_type_filter text, refused boolean, tokens integer,
               concurrency_limit integer, probe boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    c record;
    s outbox_monitor.control_state;
    clock timestamptz := clock_timestamp();
BEGIN
    PERFORM outbox_monitor.require_claimer(p_table);
    IF NOT outbox_monitor.flow_table_ok(p_table) THEN
        RAISE WARNING 'flow control ignored on %: the table must be owned by the owner of the '
                      'outbox_monitor schema (run init-db as its owner)', p_table;
        RETURN;  -- the claim hands out rows as with no control rather than stop every type
    END IF;
    FOR c IN SELECT * FROM outbox_monitor.effective_controls e WHERE e.outbox = p_table LOOP
        event_type_filter := c.event_type_filter;
        concurrency_limit := c.concurrency_limit;
        tokens := NULL;
        probe := false;
        refused := false;
        IF c.paused AND (c.paused_until IS NULL OR c.paused_until > clock) THEN
            refused := true;  -- a pause needs no state
            RETURN NEXT;
            CONTINUE;
        END IF;
        SELECT * INTO s FROM outbox_monitor.control_state cs
         WHERE cs.outbox = p_table AND cs.event_type_filter = c.event_type_filter;
        IF FOUND AND (c.concurrency_limit IS NOT NULL OR c.rate_per_second IS NOT NULL
                      OR (c.breaker AND s.breaker_state <> 'closed')) THEN
            -- a limit or a breaker's transition is decided under the state row's lock; a
            -- closed breaker alone is only read (ack and fail open it)
            SELECT * INTO s FROM outbox_monitor.control_state cs
             WHERE cs.outbox = p_table AND cs.event_type_filter = c.event_type_filter
             FOR UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                refused := true;  -- held by another claim: grant 0, at once
                RETURN NEXT;
                CONTINUE;
            END IF;
        ELSIF NOT FOUND THEN
            -- not created yet (a control written by hand): create it, used from the next claim
            INSERT INTO outbox_monitor.control_state AS cs (outbox, event_type_filter, tokens)
            VALUES (p_table, c.event_type_filter, c.burst)
            ON CONFLICT DO NOTHING;
            refused := true;
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF c.breaker AND s.breaker_state = 'open'
           AND clock >= s.since + make_interval(secs => s.cooldown_seconds) THEN
            UPDATE outbox_monitor.control_state cs
               SET breaker_state = 'half_open', since = clock, probe_id = NULL, probe_at = NULL
             WHERE cs.outbox = p_table AND cs.event_type_filter = c.event_type_filter;
            s.breaker_state := 'half_open';
            s.probe_id := NULL;
        ELSIF c.breaker AND s.breaker_state = 'half_open' AND s.probe_id IS NOT NULL
              AND s.probe_at < clock - make_interval(secs => c.probe_timeout_seconds) THEN
            -- the probe was neither acked nor failed within the lock timeout: re-open, doubled
            UPDATE outbox_monitor.control_state cs
               SET breaker_state = 'open', since = clock, probe_id = NULL, probe_at = NULL,
                   cooldown_seconds = least(900, 2 * cs.cooldown_seconds)
             WHERE cs.outbox = p_table AND cs.event_type_filter = c.event_type_filter;
            s.breaker_state := 'open';
        END IF;
        IF c.breaker AND s.breaker_state = 'open' THEN
            refused := true;
        ELSIF c.breaker AND s.breaker_state = 'half_open' THEN
            IF s.probe_id IS NULL THEN
                probe := true;
            ELSE
                refused := true;
            END IF;
        END IF;
        IF c.rate_per_second IS NOT NULL THEN
            s.tokens := least(c.burst::double precision,
                              coalesce(s.tokens, c.burst) + c.rate_per_second
                              * greatest(0, extract(epoch FROM clock - s.refilled_at)));
            UPDATE outbox_monitor.control_state cs SET tokens = s.tokens, refilled_at = clock
             WHERE cs.outbox = p_table AND cs.event_type_filter = c.event_type_filter;
            tokens := floor(s.tokens)::integer;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

-- What a claim handed out: p_ids are the rows it just marked processing (only rows of p_table
-- that this transaction claimed count: status processing and locked_at = now(), so a caller
-- cannot drain a bucket or plant a probe with rows it did not claim). Each matching control's
-- bucket loses one token per row; a half-open breaker without a probe records one.
CREATE FUNCTION outbox_monitor.claim_consume(p_table regclass, p_ids bigint[])
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    types text[];
    ids bigint[];
BEGIN
    PERFORM outbox_monitor.require_claimer(p_table);
    IF NOT outbox_monitor.flow_table_ok(p_table) THEN
        RETURN;  -- claim_grants granted nothing there (and said so)
    END IF;
    EXECUTE format('SELECT array_agg(o.event_type ORDER BY o.id), array_agg(o.id ORDER BY o.id)
                      FROM %s o
                     WHERE o.id = ANY($1) AND o.status = ''processing'' AND o.locked_at = now()',
                   p_table)
       INTO types, ids USING p_ids;
    UPDATE outbox_monitor.control_state cs
       SET tokens = CASE WHEN cs.tokens IS NULL THEN NULL ELSE cs.tokens - m.n END,
           probe_id = CASE WHEN cs.breaker_state = 'half_open' AND cs.probe_id IS NULL
                           THEN m.first_id ELSE cs.probe_id END,
           probe_at = CASE WHEN cs.breaker_state = 'half_open' AND cs.probe_id IS NULL
                           THEN clock_timestamp() ELSE cs.probe_at END
      FROM (SELECT e.event_type_filter AS f, count(*) AS n, min(t.id) AS first_id
              FROM outbox_monitor.effective_controls e, unnest(types, ids) AS t(event_type, id)
             WHERE e.outbox = p_table
                   AND outbox_monitor.type_matches(t.event_type, e.event_type_filter)
             GROUP BY e.event_type_filter) AS m
     WHERE cs.outbox = p_table AND cs.event_type_filter = m.f
           -- only the rows this claim locked: a bucket, or a half-open breaker's probe
           AND (cs.tokens IS NOT NULL OR (cs.breaker_state = 'half_open' AND cs.probe_id IS NULL));
END
$$;

-- One outcome of a row of p_table for every breaker matching its event type: p_kind 'ack',
-- 'transient' (a retry, a dead-letter at max attempts, a reap) or 'permanent'. A probe's ack
-- closes the breaker; its transient failure re-opens it with the cool-down doubled (at most
-- 15 min); its permanent failure asks for a new probe. Otherwise acks and transient failures
-- are logged, and a transient failure of a closed breaker opens it when, over the window since
-- it last closed, outcomes >= min_attempts and failures / outcomes >= ratio.
CREATE FUNCTION outbox_monitor.record_outcome(p_table regclass, p_id bigint,
                                              p_event_type text, p_kind text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    c record;
    s outbox_monitor.control_state;
    clock timestamptz := clock_timestamp();
    n integer;
    f integer;
    current bigint;
    row_xmin bigint;
    full_xmin bigint;
BEGIN
    IF NOT outbox_monitor.may_claim(p_table) THEN
        RETURN;  -- only a login that can change the table's rows has outcomes to report
    END IF;
    IF NOT outbox_monitor.flow_table_ok(p_table) THEN
        RAISE WARNING 'circuit breakers of % ignore this outcome: the table must be owned by '
                      'the owner of the outbox_monitor schema (run init-db as its owner)', p_table;
        RETURN;
    END IF;
    -- Only an outcome this transaction wrote counts (ack, fail and reap call this right after
    -- their UPDATE), so no caller can open or close a breaker with rows it did not change.
    -- A row version we see whose xmin is still in progress can only be this transaction's
    -- (its savepoints included: a worker's ack inside one counts too).
    current := pg_current_xact_id_if_assigned()::text::bigint;
    IF current IS NULL THEN
        RETURN;  -- this transaction changed nothing
    END IF;
    EXECUTE format('SELECT o.xmin::text::bigint FROM %s o WHERE o.id = $1 AND o.event_type = $2',
                   p_table)
       INTO row_xmin USING p_id, p_event_type;
    IF row_xmin IS NULL THEN
        RETURN;
    END IF;
    -- the epoch of now, or the one before when that puts it far (over 2^31) past this
    -- transaction's id; a savepoint's id is a little newer than its transaction's
    full_xmin := (current >> 32 << 32) | row_xmin;
    IF full_xmin - current > 2147483648 THEN
        full_xmin := full_xmin - 4294967296;
    END IF;
    IF full_xmin < 3 OR pg_xact_status(full_xmin::text::xid8) IS DISTINCT FROM 'in progress' THEN
        RETURN;
    END IF;
    FOR c IN SELECT * FROM outbox_monitor.effective_controls e
              WHERE e.outbox = p_table AND e.breaker
                    AND outbox_monitor.type_matches(p_event_type, e.event_type_filter) LOOP
        SELECT * INTO s FROM outbox_monitor.control_state cs
         WHERE cs.outbox = p_table AND cs.event_type_filter = c.event_type_filter;
        IF NOT FOUND THEN
            CONTINUE;
        END IF;
        IF s.breaker_state = 'half_open' AND s.probe_id = p_id THEN
            SELECT * INTO s FROM outbox_monitor.control_state cs
             WHERE cs.outbox = p_table AND cs.event_type_filter = c.event_type_filter FOR UPDATE;
            CONTINUE WHEN s.breaker_state <> 'half_open' OR s.probe_id IS DISTINCT FROM p_id;
            IF p_kind = 'ack' THEN
                UPDATE outbox_monitor.control_state cs
                   SET breaker_state = 'closed', since = clock, probe_id = NULL, probe_at = NULL,
                       cooldown_seconds = NULL
                 WHERE cs.outbox = p_table AND cs.event_type_filter = c.event_type_filter;
                INSERT INTO outbox_monitor.breaker_transitions
                       (outbox, event_type_filter, transition, at)
                VALUES (p_table, c.event_type_filter, 'closed', clock);
                PERFORM pg_notify('outbox_monitor_breaker', json_build_object(
                    'outbox', p_table::text, 'event_type_filter', c.event_type_filter,
                    'transition', 'closed')::text);
            ELSIF p_kind = 'transient' THEN
                UPDATE outbox_monitor.control_state cs
                   SET breaker_state = 'open', since = clock, probe_id = NULL, probe_at = NULL,
                       cooldown_seconds = least(900, 2 * cs.cooldown_seconds)
                 WHERE cs.outbox = p_table AND cs.event_type_filter = c.event_type_filter;
            ELSE
                UPDATE outbox_monitor.control_state cs SET probe_id = NULL, probe_at = NULL
                 WHERE cs.outbox = p_table AND cs.event_type_filter = c.event_type_filter;
            END IF;
            CONTINUE;
        END IF;
        CONTINUE WHEN p_kind = 'permanent';
        DELETE FROM outbox_monitor.control_outcomes o
         WHERE o.outbox = p_table AND o.event_type_filter = c.event_type_filter
               AND o.at < clock - make_interval(secs => c.breaker_window_seconds);
        INSERT INTO outbox_monitor.control_outcomes (outbox, event_type_filter, at, failed)
        VALUES (p_table, c.event_type_filter, clock, p_kind = 'transient');
        CONTINUE WHEN p_kind <> 'transient' OR s.breaker_state <> 'closed';
        SELECT count(*), count(*) FILTER (WHERE o.failed) INTO n, f
          FROM outbox_monitor.control_outcomes o
         WHERE o.outbox = p_table AND o.event_type_filter = c.event_type_filter
               AND o.at > greatest(clock - make_interval(secs => c.breaker_window_seconds), s.since);
        CONTINUE WHEN n < c.breaker_min_attempts OR f < c.breaker_ratio * n;
        SELECT * INTO s FROM outbox_monitor.control_state cs
         WHERE cs.outbox = p_table AND cs.event_type_filter = c.event_type_filter FOR UPDATE;
        CONTINUE WHEN s.breaker_state <> 'closed';
        UPDATE outbox_monitor.control_state cs
           SET breaker_state = 'open', since = clock, probe_id = NULL, probe_at = NULL,
               cooldown_seconds = c.breaker_cooldown_seconds
         WHERE cs.outbox = p_table AND cs.event_type_filter = c.event_type_filter;
        INSERT INTO outbox_monitor.breaker_transitions
               (outbox, event_type_filter, transition, at, outcomes, failures, cooldown_seconds)
        VALUES (p_table, c.event_type_filter, 'opened', clock, n, f, c.breaker_cooldown_seconds);
        PERFORM pg_notify('outbox_monitor_breaker', json_build_object(
            'outbox', p_table::text, 'event_type_filter', c.event_type_filter,
            'transition', 'opened', 'outcomes', n, 'failures', f)::text);
    END LOOP;
END
$$;

-- claim (SPEC sections 1 and 5): up to p_limit due rows, oldest first, FOR UPDATE SKIP LOCKED,
-- marked processing. With no control on p_table it is the statement of migration 001. With
-- controls, rows of a filter that grants 0 are skipped; the others are handed out while every
-- control matching them has headroom, each row consuming one unit of each.
CREATE OR REPLACE FUNCTION outbox_monitor.claim(p_table regclass, p_worker text,
                                                p_limit integer DEFAULT 50)
RETURNS TABLE (
    id bigint, event_type text, aggregate_type text, aggregate_id text, event_key text,
    payload jsonb, attempts integer, created_at timestamptz
) LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    g record;
    blocked_exact text[] := '{}';
    blocked_like text[] := '{}';
    filters text[] := '{}';
    remaining integer[] := '{}';
    taken bigint[] := '{}';
    cand record;
    processing integer;
    processing_types text[];
    processing_counts integer[];
    grant_now integer;
    fits boolean;
    skipped boolean;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM outbox_monitor.controls c WHERE c.outbox = p_table) THEN
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
        RETURN;
    END IF;

    FOR g IN SELECT * FROM outbox_monitor.claim_grants(p_table) LOOP
        grant_now := CASE WHEN g.refused THEN 0 ELSE g.tokens END;
        IF NOT g.refused AND g.concurrency_limit IS NOT NULL THEN
            IF processing_types IS NULL THEN  -- once per claim, for every limit
                EXECUTE format('SELECT coalesce(array_agg(p.event_type), ''{}''),
                                       coalesce(array_agg(p.n), ''{}'')
                                  FROM (SELECT o.event_type, count(*)::integer AS n FROM %s o
                                         WHERE o.status = ''processing''
                                         GROUP BY o.event_type) AS p', p_table)
                   INTO processing_types, processing_counts;
            END IF;
            processing := 0;
            FOR j IN 1 .. cardinality(processing_types) LOOP
                IF outbox_monitor.type_matches(processing_types[j], g.event_type_filter) THEN
                    processing := processing + processing_counts[j];
                END IF;
            END LOOP;
            grant_now := least(grant_now, g.concurrency_limit - processing);
        END IF;
        IF g.probe AND NOT g.refused THEN
            grant_now := least(grant_now, 1);
        END IF;
        IF grant_now IS NOT NULL AND grant_now <= 0 THEN
            IF strpos(g.event_type_filter, '%') > 0 THEN
                blocked_like := blocked_like || replace(replace(g.event_type_filter, '\', '\\'), '_', '\_');
            ELSE
                blocked_exact := blocked_exact || g.event_type_filter;
            END IF;
        ELSIF grant_now IS NOT NULL OR g.probe THEN
            filters := filters || g.event_type_filter;
            remaining := remaining || grant_now;
        END IF;
    END LOOP;

    -- Rounds: each takes due rows in created_at order while their limited controls have
    -- headroom; a control that runs out is blocked for the next round. At most one round
    -- more than there are limited controls.
    LOOP
        EXIT WHEN cardinality(taken) >= p_limit;
        skipped := false;
        FOR cand IN EXECUTE format(
                'SELECT o.id, o.event_type FROM %s o
                  WHERE o.status = ''pending'' AND o.available_at <= now()
                        AND NOT (o.id = ANY($1))
                        AND NOT (o.event_type = ANY($2) OR o.event_type LIKE ANY($3))
                  ORDER BY o.created_at
                  LIMIT $4
                  FOR UPDATE SKIP LOCKED', p_table)
            USING taken, blocked_exact, blocked_like, p_limit - cardinality(taken) LOOP
            fits := true;
            FOR j IN 1 .. cardinality(filters) LOOP
                IF outbox_monitor.type_matches(cand.event_type, filters[j])
                   AND remaining[j] IS NOT NULL AND remaining[j] <= 0 THEN
                    fits := false;
                END IF;
            END LOOP;
            IF NOT fits THEN
                skipped := true;
                CONTINUE;
            END IF;
            taken := taken || cand.id;
            FOR j IN 1 .. cardinality(filters) LOOP
                IF outbox_monitor.type_matches(cand.event_type, filters[j]) THEN
                    IF remaining[j] IS NOT NULL THEN
                        remaining[j] := remaining[j] - 1;
                    END IF;
                    IF remaining[j] IS NOT NULL AND remaining[j] <= 0 THEN
                        IF strpos(filters[j], '%') > 0 THEN
                            blocked_like := blocked_like
                                || replace(replace(filters[j], '\', '\\'), '_', '\_');
                        ELSE
                            blocked_exact := blocked_exact || filters[j];
                        END IF;
                    END IF;
                END IF;
            END LOOP;
        END LOOP;
        -- no row was refused for want of headroom: every due row was seen or taken
        EXIT WHEN NOT skipped;
    END LOOP;

    RETURN QUERY EXECUTE format(
        'UPDATE %1$s o
            SET status = ''processing'', locked_at = now(), locked_by = $1
          WHERE o.id = ANY($2)
         RETURNING o.id, o.event_type, o.aggregate_type, o.aggregate_id, o.event_key,
                   o.payload, o.attempts, o.created_at', p_table)
    USING p_worker, taken;
    IF cardinality(filters) > 0 AND cardinality(taken) > 0 THEN
        PERFORM outbox_monitor.claim_consume(p_table, taken);
    END IF;
END
$$;

-- ack (SPEC section 1), as in migration 001, and its outcome for the breakers of its event type.
CREATE OR REPLACE FUNCTION outbox_monitor.ack(p_table regclass, p_id bigint, p_worker text)
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

-- fail (SPEC section 1), as in migration 001, and its outcome for the breakers of its event
-- type: transient unless p_permanent (a dead-letter at max attempts is transient), recorded
-- only when a breaker watches that type.
CREATE OR REPLACE FUNCTION outbox_monitor.fail(
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

-- Workers of any login read whether controls exist (the claim's and ack's fast path); the
-- state tables are written only through the functions above, which run as the owner.
GRANT SELECT ON outbox_monitor.controls TO PUBLIC;
