"""A rule's runbook on the dashboard (issue 30 item 10): its numbered steps
(``Rule.runbook_steps``, from alerts.yml) and its ``runbook_url``, in an expander on the
Overview's alert card and on the Alerts page — the same steps Slack gets and the docs'
"When paged" page is generated from.
"""

import re
from collections.abc import Sequence

import streamlit as st

from outbox_monitor.alerts.links import instance_event_type
from outbox_monitor.alerts.rules import Rule
from outbox_monitor.ui import format

_CODE_SPAN = re.compile(r"`([^`]+)`")


def step_markdown(step: str) -> str:
    """One step as markdown, shown literally (``format.md_text``) except its ``code`` spans,
    which stay in code font (``format.md_code``): ``"Run `outbox-monitor reap`"``."""
    parts, last = [], 0
    for match in _CODE_SPAN.finditer(step):
        parts.append(format.md_text(step[last : match.start()]))
        parts.append(format.md_code(match.group(1)))
        last = match.end()
    parts.append(format.md_text(step[last:]))
    return "".join(part for part in parts if part)


def runbook_markdown(rule: Rule, event_type: str | None = None) -> str:
    """The rule's runbook as markdown: its steps as a numbered list (``step_markdown``), then
    its ``runbook_url`` (rendered for ``event_type``, ``Rule.render_runbook_url``) as a link;
    ``""`` when the rule has neither."""
    lines = [
        f"{number}. {step_markdown(step)}" for number, step in enumerate(rule.runbook_steps, 1)
    ]
    url = rule.render_runbook_url(event_type)
    if url:
        target = url.replace("(", "%28").replace(")", "%29").replace(" ", "%20")
        lines.append(f"\n[Open the runbook]({target})")
    return "\n".join(lines)


def expander(rule: Rule, *, event_type: str | None = None, expanded: bool = False) -> None:
    """An expander "Runbook · <rule> (N steps)" holding ``runbook_markdown``; nothing when
    the rule has no runbook.

    Args:
        rule: the rule.
        event_type: the instance's event type, for the ``runbook_url``'s placeholders.
        expanded: open it at once (the rule an Overview link focused on).
    """
    text = runbook_markdown(rule, event_type)
    if not text:
        return
    count = format.plural(len(rule.runbook_steps), "step")
    with st.expander(
        f"Runbook · {rule.name} ({count})", expanded=expanded, icon=":material/checklist:"
    ):
        st.markdown(text)


def section(
    rules: Sequence[Rule], *, focus: str | None = None, instance: str | None = None
) -> None:
    """The Alerts page's runbooks: one expander per rule with a runbook (``expander``), only
    the ``focus`` rule's (open) when the page was linked to one rule; a caption when no
    rule has one.

    Args:
        rules: the rules file's rules, in file order.
        focus: the rule the URL names (``?rule=``), or ``None``.
        instance: the instance the URL names (``?instance=``): its event type fills the
            focused rule's ``runbook_url``.
    """
    shown = [rule for rule in rules if focus is None or rule.name == focus]
    st.subheader("Runbooks")
    with_steps = [rule for rule in shown if rule.runbook or rule.runbook_url]
    if not with_steps:
        st.caption(
            "No rule here has a runbook: add `runbook:` steps (and a `runbook_url`) to its rule "
            "in alerts.yml."
        )
        return
    for rule in with_steps:
        event_type = instance_event_type(rule, instance or "", {}) if focus else None
        expander(rule, event_type=event_type, expanded=focus is not None)
