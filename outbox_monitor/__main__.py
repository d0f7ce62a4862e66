"""``python -m outbox_monitor`` is the ``outbox-monitor`` command."""

from outbox_monitor.cli import main

main()
