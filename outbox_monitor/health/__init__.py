"""Health of the watched outbox beyond its figures (issue 14): table, xmin horizon, claim plan."""
