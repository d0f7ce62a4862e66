"""What ``outbox-monitor replay`` adds to the other actions (issue 13 items 4 and 5): the
drip rate, the order-safe exclusion, the preview's replay details and ``--watch``."""

from collections.abc import Callable
from typing import Any

import click

from outbox_monitor.actions.preview import Preview
from outbox_monitor.actions.replay_outcomes import ReplayOutcome, watch_outcome
from outbox_monitor.actions.run import ActionResult
from outbox_monitor.cli.support import DURATION, echo
from outbox_monitor.durations import format_duration
from outbox_monitor.store.db import Database

WATCH_INTERVAL_SECONDS = 2.0


def replay_options(command: Callable) -> Callable:
    """The options of ``replay`` beyond its selection: --rate, --exclude-superseded,
    --watch and --watch-timeout."""
    for decorator in reversed(
        [
            click.option(
                "--rate",
                type=click.FloatRange(0, min_open=True),
                help="Drip: make the rows due one after another at this many rows/s, "
                "oldest first (SPEC §5). Without it every row is due at once.",
            ),
            click.option(
                "--exclude-superseded",
                is_flag=True,
                help="Leave out rows whose aggregate already has a later done event "
                "(order-safe replay, SPEC §5).",
            ),
            click.option(
                "--watch",
                is_flag=True,
                help="After the replay, follow its rows until none is pending or processing "
                "(or --watch-timeout): done, failed again (by error group), pending.",
            ),
            click.option(
                "--watch-timeout",
                type=DURATION,
                default="10m",
                show_default=True,
                help="Stop watching after this long.",
            ),
        ]
    ):
        command = decorator(command)
    return command


def detail_lines(preview: Preview) -> list[str]:
    """The replay lines of a preview: superseded rows per event type, how long a drip
    lasts, and a warning when the group's last replay re-failed entirely."""
    details = preview.details
    lines = []
    superseded = details.get("superseded") or {}
    if superseded:
        choice = (
            "excluded"
            if preview.filter.get("exclude_superseded")
            else "included; --exclude-superseded leaves them out"
        )
        lines.append(
            f"order-safe: {sum(superseded.values())} selected row(s) have a later done event "
            f"on their aggregate ({choice}):"
        )
        lines += [f"  {event_type}: {rows}" for event_type, rows in superseded.items()]
    seconds = details.get("drip_seconds")
    if seconds is not None:
        lines.append(
            f"drip: {preview.matched} row(s) at {preview.filter['rate_per_second']:g} rows/s, "
            f"due over {seconds:g} s" + (f" ({format_duration(seconds)})" if seconds >= 60 else "")
        )
    if details.get("last_replay_refailed"):
        lines.append(f"warning: {details['last_replay_refailed']}")
    return lines


def watcher(
    db: Database, *, as_json: bool, timeout: float
) -> Callable[[ActionResult], dict[str, Any]]:
    """``--watch``: after a replay, poll its outcome every 2 s until settled or ``timeout``
    seconds; print the counts as they change (not with ``--json``) and return the fields
    ``outcome`` (``ReplayOutcome.as_json``) and ``settled`` for the JSON object."""

    def show(outcome: ReplayOutcome) -> None:
        if not as_json:
            echo(f"  {outcome.summary()}")

    def follow(result: ActionResult) -> dict[str, Any]:
        if not as_json:
            echo(f"watching run {result.run_id} (up to {format_duration(timeout)})…")
        outcome, settled = watch_outcome(
            db, result.run_id, timeout=timeout, interval=WATCH_INTERVAL_SECONDS, on_change=show
        )
        if not as_json:
            echo(
                "settled: " + outcome.summary()
                if settled
                else f"still {outcome.pending + outcome.processing} row(s) pending or "
                f"processing after {format_duration(timeout)}; stopped watching"
            )
        return {"outcome": outcome.as_json(), "settled": settled}

    return follow
