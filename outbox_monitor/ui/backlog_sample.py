"""What the Overview says when its figures are the scheduler's sample (issue 32 item 3): above
``backlog.SAMPLED_ABOVE_ROWS`` rows pending or processing, while a scheduler's snapshot of the
backlog is fresh, the figures that read each row's heap tuple come from that snapshot
(``loaders.status``' ``"sampled"``); at any backlog, the table by event type's latency P95 and
rates come from the same snapshot (``"finished_sample"``); each labelled with its age."""

from collections.abc import Mapping
from typing import Any

from outbox_monitor.figures.backlog import SAMPLED_ABOVE_ROWS
from outbox_monitor.ui import format


def note(figures: Mapping[str, Any]) -> str | None:
    """The caption under the tiles when ``figures`` (``loaders.status``' value) holds sampled
    figures: which, how old, and which are counted now; ``None`` when every figure was counted
    now. Markdown, every value ours (numbers and durations)."""
    sampled = figures.get("sampled")
    if not sampled:
        return None
    return (
        f"More than {format.count(SAMPLED_ABOVE_ROWS)} rows pending or processing "
        f"({format.count(sampled['backlog_rows'])} when sampled): retrying, stuck locks, "
        f"retry pressure, the workers' liveness and the backlog columns by event type are the "
        f"scheduler's sample of {format.duration(sampled['age_seconds'])} ago; queue depth, "
        "pending, scheduled retries, oldest pending age and processing are counted now. "
        "`outbox-monitor status --json` counts every figure now."
    )


def table_note(age_seconds: float | None) -> str:
    """The clause the table by event type adds when its backlog columns are sampled
    (``age_seconds`` of the sample), else the empty string."""
    if age_seconds is None:
        return ""
    return f" · backlog columns as the scheduler sampled them {format.duration(age_seconds)} ago"


def finished_note(age_seconds: float | None) -> str:
    """The clause the table by event type adds when its latency P95 and rates are the
    scheduler's sample (``age_seconds`` of the sample), else the empty string."""
    if age_seconds is None:
        return ""
    return (
        f" · P95 and rates as the scheduler sampled them {format.duration(age_seconds)} ago "
        "(the tiles count now)"
    )
