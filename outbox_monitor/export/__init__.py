"""Prometheus ``/metrics`` and ``/healthz``: the collectors of one outbox and of a fleet,
their families and labels, the HTTP server."""
