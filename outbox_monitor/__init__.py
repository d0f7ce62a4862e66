"""outbox-monitor: the control room for a Postgres transactional outbox worked by n8n."""

__version__ = "0.1.0"
