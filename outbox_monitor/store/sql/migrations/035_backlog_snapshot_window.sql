-- The window of the backlog snapshot's open rows created in the window (issue 32 item 3,
-- attack33): each group's created_open_in_window (migration 031) was counted over the
-- sampler's window, in seconds here. The Overview's table by event type takes those counts
-- only when the page's window is this one; for another window it counts each named type's
-- open rows created in that window itself (figures.by_event_type). NULL: a snapshot taken
-- before this migration, whose window is unknown (counted by the page too).
ALTER TABLE outbox_monitor.backlog_snapshots
    ADD COLUMN backlog_window double precision;
