-- The newest dead-letter seen of each worker (issue 29 item 12): last_fail_at is the newest
-- processed_at of a row a sampler pass saw in its hand and a later pass found failed (a
-- permanent fail or the last attempt), as last_ack_at is for a row found done; null until
-- one is seen. With the last claim and ack it is what the automatic reaper shows of a stuck
-- row's holder (SPEC section 4): evidence, never a veto. A retry leaves no time (the row is
-- pending again, as after a reap), so it is not a fail seen here.
ALTER TABLE outbox_monitor.workers_seen ADD COLUMN IF NOT EXISTS last_fail_at timestamptz;
