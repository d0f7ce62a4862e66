"""outbox-monitor: the control room for a Postgres transactional outbox worked by n8n."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # type checkers and IDEs see the name; at run time it is imported lazily
    from outbox_monitor.outbox import nudge as nudge

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """``outbox_monitor.nudge`` is ``outbox.nudge``, imported on first use: every CLI
    command imports this package, and only a publisher needs the worker API."""
    if name == "nudge":
        from outbox_monitor.outbox import nudge

        return nudge
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The package's names, ``nudge`` included (``dir()`` and completion list it before its
    first use)."""
    return sorted([*globals(), "nudge"])
