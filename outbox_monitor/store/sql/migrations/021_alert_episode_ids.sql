-- The episode of every alert message (issue 29 item 8): delivery is at least once, so each
-- Slack message carries a stable key (alerts/message_key.py) of its rule, outbox, instance,
-- episode and kind, by which a receiver drops a repeat but never a resolve or the next
-- episode. The episode is the id of the alert transition that started it (unique in the
-- database, unlike firing_seq, which starts again when an instance's row is recreated);
-- the evaluator keeps it here while the episode lasts, so its repeats, error and resolve
-- carry it too (in their payload's "episode"). NULL: no episode since this migration (a
-- notification then keys on its dedupe key's firing_seq). Adding a nullable column rewrites
-- no row; a scheduler of the previous release leaves it as it is.
ALTER TABLE outbox_monitor.alert_instances ADD COLUMN episode_id bigint;
