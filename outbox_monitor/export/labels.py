"""Bounded labels of ``/metrics``: the top event types (the rest folded into ``other``) and the
windows of each windowed family."""

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from outbox_monitor.figures.registry import by_family
from outbox_monitor.units import OTHER as OTHER

Combine = Callable[[Iterable[float]], float]

# Which alerts.yml metrics read which windowed family (their rules add windows to it).
WINDOWED_METRICS = {
    "latency": by_family("outbox_latency_seconds"),
    "throughput": by_family("outbox_processed_per_minute") + by_family("outbox_created_per_minute"),
    "failed": by_family("outbox_failed_in_window"),
}


def bound_event_types(
    values: Mapping[str, float | None],
    *,
    top: int,
    pinned: Collection[str] = (),
    combine: Combine = sum,
    empty_other: float | None = 0.0,
) -> dict[str, float]:
    """Keep ``top`` event types and fold the rest into ``OTHER`` (bounded cardinality).

    Args:
        values: ``{event_type: value}``; ``None`` values (no figure) are left out.
        top: how many event types keep their own label.
        pinned: event types ranked first (those an alerts.yml filter matches).
        combine: how the rest become one value (``sum`` for counts, ``max`` for ages).
        empty_other: the ``OTHER`` value when nothing is folded (``None``: no ``OTHER``).

    Returns:
        ``{event_type: value}``: pinned first, then by value (largest first), ties by
        name; at most ``top`` entries plus ``OTHER``.
    """
    known = {name: value for name, value in values.items() if value is not None}
    named = [name for name in known if name != OTHER]
    ranked = sorted(named, key=lambda name: (name not in pinned, -known[name], name))
    kept = {name: float(known[name]) for name in ranked[:top]}
    rest = [known[name] for name in ranked[top:]]
    if OTHER in known:
        rest.append(known[OTHER])
    if rest:
        kept[OTHER] = float(combine(rest))
    elif empty_other is not None:
        kept[OTHER] = empty_other
    return kept


def figure_windows(settings_window: float, ruleset: Any = None) -> dict[str, tuple[float, ...]]:
    """The windows (seconds) each windowed family is computed for.

    Args:
        settings_window: ``OUTBOX_MONITOR_WINDOW`` (always exported).
        ruleset: the loaded alerts.yml (``None``: none); each rule on a windowed metric
            adds its ``window`` (or the settings window when it has none).

    Returns:
        ``{"latency"|"throughput"|"failed": (seconds, ...)}``, ascending.
    """
    windows = {kind: {settings_window} for kind in WINDOWED_METRICS}
    for rule in getattr(ruleset, "rules", ()) or ():
        for kind, names in WINDOWED_METRICS.items():
            if rule.metric in names:
                windows[kind].add(rule.window or settings_window)
    return {kind: tuple(sorted(found)) for kind, found in windows.items()}
