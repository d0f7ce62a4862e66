"""A rule's runbook on the dashboard (issue 30 item 10): the Overview's card of a firing alert
and the Alerts page show its numbered steps, written literally but for their code spans, and
its runbook link; a rule without a runbook shows none."""

from rendered import plain

from outbox_monitor.alerts.rules_file import RULES_ENV, load_rules
from tests.alerting import evaluate_as_scheduler, rules_file

RULES = """
version: 1
defaults: {interval: 30s, for: 0s, keep_firing_for: 2m}
routes:
  oncall: {webhook_url_env: SLACK_WEBHOOK_URL}
rules:
  - name: stuck-lock
    metric: stuck_locks
    op: ">"
    threshold: 0
    route: oncall
    runbook_url: "https://runbooks.example/{{ rule }}"
    runbook: |
      1. Open Actions → Reap stuck locks: each row's *locked_by* and lock age.
      2. Reap: `outbox-monitor reap --dry-run`, then
         `outbox-monitor reap --yes` [not a link](x).
      3. Over when no stuck row is left.
  - {name: backlog, metric: queue_depth, op: ">", threshold: 1000, route: oncall}
"""
STEPS = [
    "Open Actions → Reap stuck locks: each row's *locked_by* and lock age.",
    "Reap: outbox-monitor reap --dry-run, then outbox-monitor reap --yes [not a link](x).",
    "Over when no stuck row is left.",
]
"""The steps as a person reads them (``rendered.plain``: escapes and code fences gone)."""
LINK = "[Open the runbook](https://runbooks.example/stuck-lock)"


def runbooks(at) -> dict[str, list[str]]:
    """Each runbook expander's label → its markdown, line by line."""
    return {
        expander.label: expander.markdown[0].value.splitlines()
        for expander in at.expander
        if expander.label.startswith("Runbook")
    }


def steps_read(lines: list[str]) -> list[str]:
    return [plain(line.split(". ", 1)[1]) for line in lines if line[:1].isdigit()]


def firing(rows, settings, db, tmp_path, environment) -> None:
    path = rules_file(tmp_path, RULES)
    environment.setenv(RULES_ENV, str(path))
    rows.add(status="processing", created_ago=25 * 60, locked_ago=20 * 60)  # a stuck lock
    evaluate_as_scheduler(settings, db, load_rules(path))


def test_the_firing_alerts_card_shows_its_rules_runbook(
    open_page, environment, rows, settings, db, tmp_path
):
    firing(rows, settings, db, tmp_path, environment)

    at = open_page("overview")

    assert not at.exception
    shown = runbooks(at)
    assert list(shown) == ["Runbook · stuck-lock (3 steps)"]  # backlog does not fire
    lines = shown["Runbook · stuck-lock (3 steps)"]
    assert [line.split(".")[0] for line in lines[:3]] == ["1", "2", "3"]
    assert steps_read(lines) == STEPS
    # the code spans stay code; the rest is literal (no emphasis, no link from the steps)
    assert "`outbox-monitor reap --dry-run`" in lines[1]
    assert "\\*locked\\_by\\*" in lines[0] and "\\[not a link\\]" in lines[1]
    assert lines[-1] == LINK


def test_the_alerts_page_shows_every_runbook_and_the_linked_rules_open(
    open_page, environment, rows, settings, db, tmp_path
):
    firing(rows, settings, db, tmp_path, environment)

    at = open_page("alerts")

    assert not at.exception
    assert [e.label for e in at.expander if e.label.startswith("Runbook")] == [
        "Runbook · stuck-lock (3 steps)"  # backlog has no runbook: no expander
    ]
    assert steps_read(runbooks(at)["Runbook · stuck-lock (3 steps)"]) == STEPS
    (closed,) = [e for e in at.expander if e.label.startswith("Runbook")]
    assert closed.proto.expanded is False

    focused = open_page("alerts", rule="stuck-lock", instance="")
    (opened,) = [e for e in focused.expander if e.label.startswith("Runbook")]
    assert opened.proto.expanded is True
    assert runbooks(focused)["Runbook · stuck-lock (3 steps)"][-1] == LINK

    other = open_page("alerts", rule="backlog")
    assert not [e for e in other.expander if e.label.startswith("Runbook")]
    assert "No rule here has a runbook" in " ".join(plain(c.value) for c in other.caption)
