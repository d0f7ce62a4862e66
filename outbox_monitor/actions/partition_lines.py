"""What a prune says of its partitions (``actions.partitions``), for the CLI and the dashboard."""

from typing import Any

from outbox_monitor.actions.partition_detach import DETACH_LOCK_TIMEOUT_SECONDS
from outbox_monitor.actions.partitions import Partition


def preview_lines(details: dict[str, Any]) -> list[str]:
    """What a prune's preview says of its partitions (``details`` of ``preview_prune``), one
    line each, for the CLI and the dashboard; empty without partitions."""
    listed = [Partition.from_detail(detail) for detail in details.get("partitions") or ()]
    uncounted = [
        f"  {name}: {why}" for name, why in (details.get("uncounted_partitions") or {}).items()
    ]
    if not listed:
        return ["partitions left to the batches:", *uncounted] if uncounted else []
    how = (
        "DETACH PARTITION … CONCURRENTLY"
        if details.get("detach") == "concurrently"
        else "a plain DETACH PARTITION: the outbox has a default partition, so Postgres refuses "
        f"CONCURRENTLY, and the outbox is locked for the moment of the detach (waiting at most "
        f"{DETACH_LOCK_TIMEOUT_SECONDS:g} s)"
    )
    lines = [
        f"{len(listed)} partition(s) detached whole and dropped ({how}); the other rows are "
        "deleted in batches:"
    ]
    for partition in listed:
        line = (
            f"  {partition.qualified}: {partition.rows:,} rows ({partition.done:,} done, "
            f"{partition.failed:,} failed)"
        )
        if partition.detach_pending:
            then = "dropped" if partition.prunable else "attached back (it holds rows to keep)"
            line += f", detach left pending by an earlier prune: finished, then {then}"
        lines.append(line)
    if uncounted:
        lines += ["partitions left to the batches:", *uncounted]
    return lines


def outcome_lines(detached: tuple[str, ...], kept: dict[str, str]) -> list[str]:
    """What became of a prune run's partitions (``ActionResult.detached`` and ``.kept``), one
    line each; empty without partitions."""
    return [f"partition {name} detached and dropped" for name in detached] + [
        f"partition {name} not detached: {why}" for name, why in kept.items()
    ]
