"""The long-running processes: the scheduler (one outbox or a fleet), its jobs, the sampler,
the hang watch, serving the dashboard, the container healthcheck."""
