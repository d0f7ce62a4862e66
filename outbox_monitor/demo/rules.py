"""The demo's alert rules: the shipped alerts.yml with the ``xmin-horizon-held`` rule's
threshold at 1 minute instead of 10, so that a forgotten transaction started in the demo
(``demo-forgotten-transaction start``) is alerted while you watch, as the demo's 5-minute lock
timeout does for stuck locks; and the paging drill's routes and rules (``drill.add_drill``:
``breaker-open`` critical, paging PagerDuty, Alertmanager and Slack; per-type warnings it
inhibits). Rules of your own (``OUTBOX_MONITOR_RULES``, an ``alerts.yml`` of your own in the
current directory) are used as they are."""

import os
from pathlib import Path

from outbox_monitor.alerts.rules_file import RULES_ENV, SHIPPED_RULES_PATH, resolve_rules_path
from outbox_monitor.config.yaml_files import dump_yaml, parse_yaml
from outbox_monitor.demo.drill import add_drill

HORIZON_RULE = "xmin-horizon-held"
DEMO_HORIZON_THRESHOLD = "1m"
"""The ``xmin-horizon-held`` threshold in the demo (shipped: 10m)."""


def use_demo_rules(
    folder: Path, *, drill: bool = False, channel: str | None = None, alertmanager: bool = False
) -> str | None:
    """When the rules in force are the shipped ones, write the demo's copy into ``folder`` and
    point ``OUTBOX_MONITOR_RULES`` at it (in this process's environment, which the dashboard
    inherits).

    Args:
        folder: where ``demo-alerts.yml`` is written.
        drill: add the paging drill (``drill.add_drill``; the demo of one outbox).
        channel, alertmanager: as ``add_drill`` (the Slack channel of the bot token, ``None``
            for your Slack variables; whether an Alertmanager runs).

    Returns:
        The demo's threshold of ``xmin-horizon-held`` (``"1m"``), or ``None`` when your own
        rules are in force (left as they are).
    """
    current = resolve_rules_path(None)
    if not current.is_file() or current.resolve() != SHIPPED_RULES_PATH.resolve():
        return None
    document = parse_yaml(current.read_text(), what="rules file")
    for rule in document["rules"]:
        if rule["name"] == HORIZON_RULE:
            rule["threshold"] = DEMO_HORIZON_THRESHOLD
    if drill:
        add_drill(document, channel=channel, alertmanager=alertmanager)
    path = folder / "demo-alerts.yml"
    path.write_text(dump_yaml(document))
    os.environ[RULES_ENV] = str(path)
    return DEMO_HORIZON_THRESHOLD
