"""``outbox-monitor claim-advice``: the index that serves the workers' claim, proposed with its
estimated effect and write cost (``outbox_monitor.health.claim_advice``), printed never run."""

import sys

import click

from outbox_monitor.cli.support import (
    DSN_OPTION,
    JSON_OPTION,
    OUTBOX_OPTION,
    TABLE_OPTION,
    command_outboxes,
    echo,
    emit_json,
    open_checked,
    reports_errors,
)
from outbox_monitor.health.claim_advice import ClaimAdvice, advise_claim
from outbox_monitor.store.db_errors import describe_target

EXIT_NOTHING_TO_PROPOSE = 0
EXIT_PROPOSED = 1
"""An index is proposed (as ``check`` exits 1 on a breach): a script can act on it."""
EXIT_ERRORS = 2
"""The advice could not be read (the database, a privilege, the table): as ``check``."""


def advice_lines(advice: ClaimAdvice) -> list[str]:
    """The advice as text lines, the statements to run alone on their lines."""
    lines = [f"  {finding.as_json()['label']}: {finding.text}" for finding in advice.findings]
    lines += [
        f"  retired index still on the table: {name} (init-db drops it)"
        for name in advice.retired_present
    ]
    proposal = advice.proposal
    if proposal is None:
        return [*lines, advice.note]
    lines += ["", f"Proposed index: {proposal.definition}", ""]
    lines += proposal.statements
    lines += ["", "Run it yourself, outside a transaction: outbox-monitor never builds it."]
    if proposal.estimate is None:
        lines += ["", f"Effect on the claim: not estimated. {proposal.estimate_note}"]
    else:
        lines += [
            "",
            f"Effect on the claim (HypoPG {proposal.estimate.hypopg_version}, "
            "hypothetical index; planner cost units, not time):",
        ]
        for plan in proposal.estimate.plans:
            uses = "" if plan.uses_index else " (the planner would not use it)"
            lines += [
                f"  {plan.label}: cost {plan.cost_before:,.2f} → {plan.cost_after:,.2f}{uses}",
                f"    now:  {plan.shape_before}",
                f"    with: {plan.shape_after}",
            ]
    return [*lines, "", proposal.measured, "", f"Write cost: {proposal.write_cost}"]


@click.command(
    "claim-advice",
    short_help="Propose the index that serves the workers' claim (printed, never built).",
)
@DSN_OPTION
@TABLE_OPTION
@OUTBOX_OPTION
@JSON_OPTION
@reports_errors(exit_code=EXIT_ERRORS)
def claim_advice(dsn: str | None, table: str | None, outbox: str | None, as_json: bool) -> None:
    """Read how Postgres plans the workers' claim (EXPLAIN, never run) and, when it sorts
    every due row or walks rows it cannot hand out, propose the index that serves it: the
    CREATE INDEX CONCURRENTLY to run, its estimated effect on the claim — measured with a
    HypoPG hypothetical index when the extension is installed in that database — and its
    write cost on publish and ack (an estimate).

    It never builds the index, never runs CREATE EXTENSION, never reads a row of the
    outbox, and never proposes an index that exists already or that init-db retired.
    Exit 0: nothing to propose; 1: an index is proposed; 2: the advice could not be read.
    """
    [chosen] = command_outboxes(outbox, dsn, table)
    with open_checked(chosen.settings) as db:
        advice = advise_claim(db)
        target = f"{db.table_name} at {describe_target(db.settings.dsn)}"
    code = EXIT_PROPOSED if advice.proposal is not None else EXIT_NOTHING_TO_PROPOSE
    if as_json:
        emit_json(advice.as_json())
    else:
        echo(f"The workers' claim on {target}:")
        for line in advice_lines(advice):
            echo(line)
    sys.exit(code)
