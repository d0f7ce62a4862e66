"""The docs' "When paged" page (``docs/when-paged.md``), generated from the shipped alerts.yml
(issue 30 item 10): one section per rule — what fires it, in words from the rule itself, and
its ``runbook:`` steps, the same steps its Slack message, the Overview's alert card and the
Alerts page show. And "When the scheduler pages" (``docs/scheduler-alerts.md``), generated
from the scheduler's own alerts' drills and steps (``alerts.own_runbooks``), the steps their
Slack messages show. ``cli.reference`` writes both with the other generated files (``make
reference``) and finds them stale when a rule or a drill changed
(``tests/unit/test_reference.py``).
"""

import textwrap
from pathlib import Path

from outbox_monitor.alerts.own_runbooks import OWN_ALERTS, OwnAlert, steps
from outbox_monitor.alerts.rules import Rule
from outbox_monitor.alerts.rules_file import load_rules
from outbox_monitor.cli.markdown import code, paragraph
from outbox_monitor.durations import duration_label

WIDTH = 96
"""The page's lines wrap at this many characters (the docs keep lines short)."""
PAGE = Path("docs") / "when-paged.md"
"""The page, relative to a checkout's root."""
SCHEDULER_PAGE = Path("docs") / "scheduler-alerts.md"
"""The page of the scheduler's own alerts, relative to a checkout's root."""
NOTE = (
    "<!-- Generated from the shipped alerts.yml's runbook steps by `make reference`; do not "
    "edit. -->"
)
INTRO = """\
One runbook per rule of the shipped `alerts.yml`, generated from the rule: what fires it, and
the numbered steps of its `runbook:` — the same steps its Slack message, the Overview's alert
card and the Alerts page show. Write your own rules' steps the same way
([alerts.yml](reference/alerts-file.md), `runbook` and `runbook_url`). The alerts the scheduler
raises about itself — `database-unreachable`, `alerting-stalled`, `replica-lag`,
`writes-failing`, a rule's evaluation error — and Prometheus' `sampler-stalled`, with their
steps, are on
[When the scheduler pages](scheduler-alerts.md).

Every Slack message carries the dashboard link where the fix is (pre-filtered), a
**Timeline** link to [what changed around it](figures.md#incident-timeline) and, with a bot
token, its resolve in the same thread. The CLI lines read the same settings as the dashboard
(`OUTBOX_MONITOR_DSN`, `OUTBOX_MONITOR_TABLE`; with a [fleet file](fleet.md) add
`--outbox NAME`, the outbox the message names); in a checkout the command is
`.venv/bin/outbox-monitor`. Reap, replay and prune preview first and ask; `--dry-run` previews
only, `--yes` applies without asking. Flow-control changes (`pause`, `resume`, `limit`,
`breaker`) apply at once. Everything an action does is audited ([Actions](actions.md)).

A pause with `--silence` (the Controls page's checkbox) mutes the rules it will trip until
resumed; a silence for anything else is made on the **Alerts** page (matchers, until when, a
comment), audited and expired there."""


SCHEDULER_NOTE = (
    "<!-- Generated from outbox_monitor/alerts/own_runbooks.py by `make reference`; do not "
    "edit. -->"
)
SCHEDULER_INTRO = """\
The alerts the scheduler raises about itself — it cannot reach the database, alert evaluation
stalled, its replica lags, its writes fail, a receiver keeps failing, an Alertmanager refuses
its alerts — a rule's evaluation error, and the one alert only
the Prometheus rules have (`sampler-stalled`). They are no rules of `alerts.yml`: their runbook
steps are the product's own, and their Slack messages show them as a rule's `runbook:` steps
are shown. Each drill says what the alert means, where to look first, the likely causes, the
fix, its steps and how you know it is over. The shipped rules' runbooks are on
[When paged](when-paged.md)."""


def fires_when(rule: Rule) -> str:
    """What fires ``rule``, as one Markdown paragraph from its fields: the figure (its
    registry help), its scope, the condition, ``predict``, severity, ``for`` and
    ``keep_firing_for`` (resolved from the file's defaults)."""
    figure = rule.spec
    subject = f"{code(rule.metric)} ({paragraph(figure.help.rstrip('.'))})"
    if rule.window is not None:
        subject += f" over the last {duration_label(rule.window)}"
    if rule.attempts is not None:
        subject += f" with at least {rule.attempts} attempts"
    if rule.event_type is not None:
        subject += f" of the event types {code(rule.event_type)}"
    if rule.by:
        subject += ", one alert per event type,"
    if rule.predict is not None:
        subject = f"the forecast {duration_label(rule.predict)} ahead of {subject}"
    held = rule.for_ or 0.0
    hold = f"for {duration_label(held)}" if held else "at once"
    keep = rule.keep_firing_for or 0.0
    resolves = (
        f"it resolves once clear for {duration_label(keep)} (`keep_firing_for`)"
        if keep
        else "it resolves at the first evaluation that finds it clear"
    )
    return (
        f"**Fires** ({rule.severity}) when {subject} is {code(rule.condition)}, {hold}; {resolves}."
    )


def wrapped(text: str, indent: str = "", first: str = "") -> str:
    """``text`` wrapped at ``WIDTH``, starting with ``first`` and continued with ``indent``
    (a list item's continuation); words (options, code) are never split."""
    return textwrap.fill(
        text,
        WIDTH,
        initial_indent=first,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )


def rule_section(rule: Rule) -> list[str]:
    """A rule's section: its heading (the rule's name: the anchor ``#<name>``), what fires it
    (``fires_when``), its message's summary, its runbook link and its numbered steps."""
    lines = [f"## {rule.name}", "", wrapped(fires_when(rule)), ""]
    if rule.summary:
        lines += [wrapped(f"Its message: {paragraph(rule.summary)}"), ""]
    if rule.runbook_url:
        lines += [f"Runbook: <{rule.runbook_url}>", ""]
    steps = rule.runbook_steps
    if steps:
        lines += [
            wrapped(paragraph(step), " " * (len(str(number)) + 2), f"{number}. ")
            for number, step in enumerate(steps, 1)
        ]
    else:
        lines.append("No `runbook:` steps.")
    return [*lines, ""]


def when_paged_page(rules_path: Path) -> str:
    """The "When paged" page from the rules file at ``rules_path`` (the shipped alerts.yml).

    Raises:
        RulesError: the file does not load (``rules_file.load_rules``).
    """
    ruleset = load_rules(rules_path)
    lines = ["# When paged", "", NOTE, "", INTRO, ""]
    for rule in ruleset.rules:
        lines += rule_section(rule)
    return "\n".join(lines).rstrip("\n") + "\n"


def own_alert_section(alert: OwnAlert) -> list[str]:
    """An own alert's section: its heading, the drill's paragraphs (``Means``, ``First
    look``, ``Likely causes``, ``Fix``), its numbered steps (``own_runbooks.steps``, as its
    Slack message shows them) and ``Over when``."""
    lines = [f"## {alert.name}", ""]
    for label, text in (
        ("Means", alert.means),
        ("First look", alert.first_look),
        ("Likely causes", alert.causes),
        ("Fix", alert.fix),
    ):
        lines += [wrapped(f"**{label}.** {' '.join(text.split())}"), ""]
    numbered = steps(alert.name)
    if numbered:
        lines += ["**Steps** (its Slack message shows them):", ""]
        lines += [
            wrapped(paragraph(step), " " * (len(str(number)) + 2), f"{number}. ")
            for number, step in enumerate(numbered, 1)
        ]
        lines.append("")
    lines += [wrapped(f"**Over when.** {' '.join(alert.over.split())}"), ""]
    return lines


def scheduler_page() -> str:
    """The "When the scheduler pages" page from ``own_runbooks.OWN_ALERTS``."""
    lines = ["# When the scheduler pages", "", SCHEDULER_NOTE, "", SCHEDULER_INTRO, ""]
    for alert in OWN_ALERTS:
        lines += own_alert_section(alert)
    return "\n".join(lines).rstrip("\n") + "\n"
