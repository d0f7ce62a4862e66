-- Inhibition (issue 31 item 4): what inhibits a rule instance now, so the dashboard can mark
-- it. The evaluator sets it at each pass in the instance's own transaction: the firing alert
-- that inhibits it ("breaker-open event_type=order.paid", "database-unreachable host:pid"),
-- NULL when nothing does (or when it is not pending, firing or in error). Its notifications
-- through the product's own receivers are then written suppressed, their payload naming the
-- same alert (inhibited_by). Adding a nullable column rewrites no row; a scheduler of the
-- previous release leaves it NULL.
ALTER TABLE outbox_monitor.alert_instances ADD COLUMN inhibited_by text;
