"""Every figure of SPEC §2 and the figure registry: the backlog, per event type, the fleet,
the table, the workers, forecasts, estimates, error groups, the incident timeline."""
