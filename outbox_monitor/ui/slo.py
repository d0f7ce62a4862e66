"""The SLO thresholds the Overview tiles are coloured against (SPEC §3 default rules).

One place for every threshold; the alerting feature's ``alerts.yml`` will feed these later.
A figure breaches its SLO when it is strictly greater than ``limit``.
"""

from dataclasses import dataclass

from outbox_monitor.ui import format

FAILED_TILE_WINDOW_SECONDS = 24 * 3600.0
"""The "Failed (24 h)" tile counts dead letters of the last 24 hours, whatever the window."""


@dataclass(frozen=True)
class Slo:
    """One threshold: ``metric`` (alerts.yml name), ``limit`` (breached when value > limit)
    and ``kind`` (``"count"`` or ``"duration"`` in seconds, for the label)."""

    metric: str
    limit: float
    kind: str = "count"

    @property
    def label(self) -> str:
        """The target as people read it: ``"≤ 5m"``, ``"≤ 1,000"``, ``"= 0"``."""
        if self.limit == 0:
            return "= 0"
        if self.kind == "duration":
            return f"≤ {format.short_duration(self.limit)}"
        return f"≤ {format.count(self.limit)}"


QUEUE_DEPTH = Slo("queue_depth", 1000)
OLDEST_PENDING_AGE = Slo("oldest_pending_age", 5 * 60.0, "duration")
LATENCY_P95 = Slo("latency_p95", 2 * 60.0, "duration")
FAILED_IN_WINDOW = Slo("failed_in_window", 0)
STUCK_LOCKS = Slo("stuck_locks", 0)


@dataclass(frozen=True)
class Judgement:
    """How a tile shows one value against its SLO: ``text`` under the value, ``color`` of
    ``st.metric(delta_color=…)`` (``"green"`` within, ``"red"`` breached)."""

    breached: bool
    text: str
    color: str


def judge(slo: Slo, value: float | None) -> Judgement:
    """Compare one figure with its SLO; ``None`` (no rows, e.g. nothing pending) is within."""
    if value is not None and value > slo.limit:
        return Judgement(True, f"SLO {slo.label} breached", "red")
    return Judgement(False, f"within SLO {slo.label}", "green")
