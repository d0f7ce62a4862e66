"""Health of the watched outbox beyond its figures (issue 14): what kills a Postgres queue
before its volume does.

Table health: dead tuples autovacuum has not removed (``table``), a vacuum at work
(``vacuum``), and the sessions, prepared transactions and replication slots holding the xmin
horizon (``horizon``), with everything together for ``status --json`` (``status``). Claim
health: the workers' claim as Postgres plans it (``claim_plan``, EXPLAIN, never run) and its
real cost from ``pg_stat_statements`` when readable (``statements``). Claim advice (issue 32):
the index that would serve the claim, printed never built (``claim_proposals``, pure;
``claim_advice``, measured with HypoPG when installed). Read from catalog and
statistics views only, never from the outbox's rows; nothing here changes the watched
database (the claim's plans are recorded in the monitor's own schema)."""
