"""SQL taking a test database back to an older schema version, for the tests of upgrades."""

from outbox_monitor.store.queries import migration_files


def since(version: int) -> list[str]:
    """The names (``NNN_name``) of every migration from ``version`` on, as init-db reports
    the ones it applied."""
    return [f"{v:03d}_{name}" for v, name, _ in migration_files() if v >= version]


UNDO_SINCE_008 = (
    # 008–010: flow control, its claim and the switch of ack's and fail's bodies
    "DROP TABLE outbox_monitor.controls, outbox_monitor.control_state, "
    "outbox_monitor.control_outcomes, outbox_monitor.breaker_transitions, "
    "outbox_monitor.outcome_logging_lock CASCADE; "
    "DROP FUNCTION outbox_monitor.type_matches, outbox_monitor.flow_table_ok, "
    "outbox_monitor.may_claim, outbox_monitor.require_claimer, "
    "outbox_monitor.claim_grants, outbox_monitor.claim_consume, outbox_monitor.record_outcome, "
    "outbox_monitor.pending_types_index, "
    "outbox_monitor.sync_outcome_logging, outbox_monitor.ack_plain, outbox_monitor.fail_plain, "
    "outbox_monitor.ack_logging_outcomes, outbox_monitor.fail_logging_outcomes; "
    # 011: claim health
    "DROP TABLE outbox_monitor.claim_plans, outbox_monitor.claim_statement_samples; "
    # 012: the table's health in the samples
    "ALTER TABLE outbox_monitor.samples DROP COLUMN dead_tuples, DROP COLUMN live_tuples, "
    "DROP COLUMN table_bytes, DROP COLUMN indexes_bytes, DROP COLUMN xmin_horizon_age_seconds; "
    # 013: what the sampler saw of each worker; 014: the samples per event type
    "DROP TABLE outbox_monitor.workers_seen, outbox_monitor.event_type_samples; "
    # 015: the timeline's indexes (breaker_transitions_at_idx went with its table above;
    # error_groups, migration 006's, may be gone already when a test undoes that too)
    "DROP INDEX IF EXISTS outbox_monitor.error_groups_first_seen_idx; "
    # 016: the retention job's index of notifications and the audit log's pruner
    "DROP INDEX outbox_monitor.notifications_created_at_idx; "
    "DROP FUNCTION outbox_monitor.prune_audit_log; "
    # 017: the alert state per outbox
    "ALTER TABLE outbox_monitor.alert_instances DROP COLUMN outbox; "
    "ALTER TABLE outbox_monitor.alert_transitions DROP COLUMN outbox; "
    "ALTER TABLE outbox_monitor.notifications DROP COLUMN outbox; "
    # 018: the scheduler replicas' registry
    "DROP TABLE outbox_monitor.scheduler_replicas; "
    # 022: the control change's lock (008 replaces claim and creates claim_grants again)
    "DROP FUNCTION outbox_monitor.control_barrier, outbox_monitor.change_lock_key; "
    # 021: the episode of each alert instance (issue 29 item 8)
    "ALTER TABLE outbox_monitor.alert_instances DROP COLUMN episode_id; "
    # 019: the login and the address of each audit row
    "ALTER TABLE outbox_monitor.audit_log DROP COLUMN db_login, DROP COLUMN client_addr; "
    # 020: the rows a reap writer reports to the breakers (record_outcome went with 008)
    "DROP TABLE outbox_monitor.writer_outcomes; "
    # 031: the backlog as the sampler last read it
    "DROP TABLE outbox_monitor.backlog_snapshots; "
    # 029: the alert groups' state
    "DROP TABLE outbox_monitor.alert_groups; "
    # 028: acknowledged episodes and the replay cache of Slack's button presses
    "DROP TABLE outbox_monitor.alert_acks, outbox_monitor.slack_action_requests; "
    # 027: what inhibits an alert instance
    "ALTER TABLE outbox_monitor.alert_instances DROP COLUMN inhibited_by; "
    # 026: the retry error groups' counts (its function replaced 025's, dropped with it)
    "DROP TABLE outbox_monitor.retry_error_group_counts, "
    "outbox_monitor.retry_error_groups_refreshed; "
    # 025: the retry error groups' cache and the samples' retrying
    "DROP FUNCTION outbox_monitor.refresh_retry_error_groups; "
    "DROP TABLE outbox_monitor.retry_fingerprints, outbox_monitor.retry_fingerprint_texts; "
    "ALTER TABLE outbox_monitor.samples DROP COLUMN retrying; "
    # 030: the worker functions' registry, generator, dispatchers' helpers and ack_many (the
    # generated per-table functions stay: 030 replaces them)
    "DROP TABLE outbox_monitor.worker_outboxes; "
    "DROP FUNCTION outbox_monitor.install_worker_functions, "
    "outbox_monitor.dispatch_worker_functions, outbox_monitor.worker_function_name, "
    "outbox_monitor.worker_functions_missing, outbox_monitor.claim_with_controls, "
    "outbox_monitor.ack_many, outbox_monitor.ack_many_plain, "
    "outbox_monitor.ack_many_logging_outcomes; "
    # 032: worker_function_name's new rule (dropped with 030's above)
    # 033: the finished rows per event type in the backlog snapshot (dropped with 031's table)
    # 034: worker_function_name's rule for tables named by 12 hex digits (dropped with 030's)
    # 035: the backlog snapshot's window (dropped with 031's table)
)
"""SQL taking a database back to before migration 008 (claim, ack and fail stay as the later
migrations left them, which 008 replaces again). Extend it with every later migration."""
