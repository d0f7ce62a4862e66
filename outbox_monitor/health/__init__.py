"""Table health (issue 14): what kills a Postgres queue before its volume does — dead tuples
autovacuum has not removed (``table``), a vacuum at work (``vacuum``), and the sessions,
prepared transactions and replication slots holding the xmin horizon (``horizon``), with
everything together for ``status --json`` (``status``). Read from catalog and statistics
views only, never from the outbox's rows; nothing here changes anything."""
