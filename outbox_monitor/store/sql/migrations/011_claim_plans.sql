-- Claim health (issue 14 item 2): what the scheduler records about the workers' claim.
--
-- claim_plans: one row per EXPLAIN (FORMAT JSON, never ANALYZE) of the claim's inner
-- selection, per statement, every OUTBOX_MONITOR_CLAIM_PLAN_INTERVAL:
--   statement          'users_claim' (the SPEC section 1 SELECT as users write it) or
--                      'shared_claim' (the candidate SELECT of outbox_monitor.claim)
--   shape              node types and index names, outermost first ("Limit > Index Scan
--                      (integration_outbox_created_at_idx)")
--   total_cost         the planner's estimated total cost (its own units, not time)
--   plan_rows          the planner's estimated rows
--   walks_non_pending  the plan reads rows of other statuses: a scan of an index whose
--                      leading column is not status (without a status = 'pending'
--                      predicate), a Filter on status, or a sequential scan
--   reasons            why, one sentence each (empty when it does not)
-- claim_statement_samples: the workers' real cost, when pg_stat_statements is readable:
-- cumulative calls and total execution time of the claim's and ack's statements, per kind
-- ('shared_claim', 'users_claim', 'shared_ack', 'users_ack'); calls per minute are the
-- difference between two samples.
-- Both keep the samples' retention (OUTBOX_MONITOR_SAMPLE_RETENTION), pruned by the job.
CREATE TABLE outbox_monitor.claim_plans (
    table_name        text NOT NULL,
    statement         text NOT NULL,
    sampled_at        timestamptz NOT NULL DEFAULT now(),
    shape             text NOT NULL,
    total_cost        double precision NOT NULL,
    plan_rows         double precision NOT NULL,
    walks_non_pending boolean NOT NULL,
    reasons           text[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (table_name, statement, sampled_at)
);

CREATE TABLE outbox_monitor.claim_statement_samples (
    table_name    text NOT NULL,
    kind          text NOT NULL,
    sampled_at    timestamptz NOT NULL DEFAULT now(),
    calls         bigint NOT NULL,
    total_exec_ms double precision NOT NULL,
    PRIMARY KEY (table_name, kind, sampled_at)
);
