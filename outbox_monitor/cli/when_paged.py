"""The docs' "When paged" page (``docs/when-paged.md``), generated from the shipped alerts.yml
(issue 30 item 10): one section per rule — what fires it, in words from the rule itself, and
its ``runbook:`` steps, the same steps its Slack message, the Overview's alert card and the
Alerts page show. ``cli.reference`` writes it with the other generated files (``make
reference``) and finds it stale when a rule changed (``tests/unit/test_reference.py``).
"""

import textwrap
from pathlib import Path

from outbox_monitor.alerts.rules import Rule
from outbox_monitor.alerts.rules_file import load_rules
from outbox_monitor.cli.markdown import code, paragraph
from outbox_monitor.durations import duration_label

WIDTH = 96
"""The page's lines wrap at this many characters (the docs keep lines short)."""
PAGE = Path("docs") / "when-paged.md"
"""The page, relative to a checkout's root."""
NOTE = (
    "<!-- Generated from the shipped alerts.yml's runbook steps by `make reference`; do not "
    "edit. -->"
)
INTRO = """\
One runbook per rule of the shipped `alerts.yml`, generated from the rule: what fires it, and
the numbered steps of its `runbook:` — the same steps its Slack message, the Overview's alert
card and the Alerts page show. Write your own rules' steps the same way
([alerts.yml](reference/alerts-file.md), `runbook` and `runbook_url`). The alerts the scheduler
raises about itself — `database-unreachable`, `alerting-stalled`, `replica-lag`, a rule's
evaluation error — and Prometheus' `sampler-stalled` are on
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
