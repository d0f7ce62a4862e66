"""outbox-monitor: the control room for a Postgres transactional outbox worked by n8n."""

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """``outbox_monitor.nudge`` is ``outbox.nudge``, imported on first use: every CLI
    command imports this package, and only a publisher needs the worker API."""
    if name == "nudge":
        from outbox_monitor.outbox import nudge

        return nudge
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
