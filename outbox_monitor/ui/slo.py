"""The SLO thresholds the charts (the latency chart's SLO line) and the Health page's
horizon banner are drawn against, read from alerts.yml. The Overview tiles' badges are not
judged here: they are the rules' own state (``rule_state``, issue 15 item 3).

Each threshold takes its threshold from the matching SPEC §3 rule of the loaded rules file
(``rules_file.resolve_rules_path()``: ``OUTBOX_MONITOR_RULES``, else ``alerts.yml`` in the
current directory, else the shipped one): ``notifications-late`` (oldest pending age),
``backlog`` (queue depth), ``payment-failed`` (failures), ``latency-slo`` (P95 latency),
``stuck-lock`` (stuck locks), and the health tile's ``xmin-horizon-held`` (issue 14; not a
SPEC §3 rule: its default is the shipped 10 min); a rule renamed in the file is found by its
metric. When the
file is missing or invalid the SPEC §3 constants below apply and ``show_rules_problem()``
says so with the error. ``slo.QUEUE_DEPTH`` etc. always give the current thresholds.
"""

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import streamlit as st

from outbox_monitor.alerts.measure import compare
from outbox_monitor.alerts.rules import RuleSet
from outbox_monitor.alerts.rules_file import RulesError, load_rules, resolve_rules_path
from outbox_monitor.ui import format

FAILED_TILE_WINDOW_SECONDS = 24 * 3600.0
"""The "Failed (24 h)" tile counts dead letters of the last 24 hours, whatever the window."""

# The condition met by a value within the SLO, for each breach operator of a rule.
_WITHIN = {">": "≤", ">=": "<", "<": "≥", "<=": ">", "==": "≠", "!=": "="}


@dataclass(frozen=True)
class Slo:
    """One threshold: ``metric`` (alerts.yml name), ``limit`` (breached when ``value <op>
    limit``, ``op`` ``">"`` unless the rule says otherwise), ``kind`` (``"count"`` or
    ``"duration"`` in seconds, for the label) and ``rule`` (the alerts.yml rule it came
    from; ``None`` for a SPEC §3 default)."""

    metric: str
    limit: float
    kind: str = "count"
    op: str = ">"
    rule: str | None = None

    @property
    def label(self) -> str:
        """The target as people read it: ``"≤ 5m"``, ``"≤ 1,000"``, ``"= 0"``."""
        if self.limit == 0 and self.op == ">":
            return "= 0"
        limit = (
            format.duration_label(self.limit)
            if self.kind == "duration"
            else format.count(self.limit)
        )
        return f"{_WITHIN[self.op]} {limit}"


# SPEC §3 defaults, used when the rules file is missing, invalid or lacks the rule.
DEFAULTS: dict[str, Slo] = {
    "queue_depth": Slo("queue_depth", 1000),
    "oldest_pending_age": Slo("oldest_pending_age", 5 * 60.0, "duration"),
    "latency_p95": Slo("latency_p95", 2 * 60.0, "duration"),
    "failed_in_window": Slo("failed_in_window", 0),
    "stuck_locks": Slo("stuck_locks", 0),
    "xmin_horizon_age": Slo("xmin_horizon_age", 10 * 60.0, "duration"),  # issue 14
}
# Tile constant → (metric, SPEC §3 rule name in the shipped alerts.yml).
TILES: dict[str, tuple[str, str]] = {
    "QUEUE_DEPTH": ("queue_depth", "backlog"),
    "OLDEST_PENDING_AGE": ("oldest_pending_age", "notifications-late"),
    "LATENCY_P95": ("latency_p95", "latency-slo"),
    "FAILED_IN_WINDOW": ("failed_in_window", "payment-failed"),
    "STUCK_LOCKS": ("stuck_locks", "stuck-lock"),
    "XMIN_HORIZON_AGE": ("xmin_horizon_age", "xmin-horizon-held"),
}


@dataclass(frozen=True)
class Thresholds:
    """The tiles' thresholds by metric, the rules file they came from, and ``error`` (the
    problem with that file, one per line) when the SPEC §3 defaults apply instead."""

    slos: dict[str, Slo]
    path: str
    error: str | None = None


def from_rules(ruleset: RuleSet) -> dict[str, Slo]:
    """The tile thresholds of a rule set: for each tile metric, the SPEC §3 rule of that
    name with that metric, else the first rule with that metric, else the default."""
    slos = dict(DEFAULTS)
    for metric, name in TILES.values():
        matches = [rule for rule in ruleset.rules if rule.metric == metric]
        named = [rule for rule in matches if rule.name == name]
        chosen = (named or matches or [None])[0]
        if chosen is not None:
            slos[metric] = Slo(
                metric, chosen.threshold, DEFAULTS[metric].kind, chosen.op, chosen.name
            )
    return slos


@lru_cache(maxsize=8)
def _thresholds_of(path: str, content: bytes | None) -> Thresholds:
    try:
        ruleset = load_rules(path)
    except RulesError as error:
        return Thresholds(dict(DEFAULTS), path, "\n".join(error.problems))
    return Thresholds(from_rules(ruleset), path)


def thresholds(path: str | Path | None = None) -> Thresholds:
    """The current thresholds, re-read whenever the rules file's content changes.

    Args:
        path: a rules file; default ``rules_file.resolve_rules_path()``.
    """
    resolved = resolve_rules_path(path)
    try:
        content: bytes | None = resolved.read_bytes()
    except OSError:
        content = None
    return _thresholds_of(str(resolved), content)


def show_rules_problem() -> None:
    """A warning banner when the rules file is missing or invalid: the tiles then show no
    rule state, the charts the SPEC §3 defaults. Renders nothing when the rules loaded."""
    current = thresholds()
    if current.error is None:
        return
    st.warning(
        f"**Alert rules file invalid** — {format.md_code(current.path)}; the tiles show no "
        "rule state and the charts use the SPEC §3 default thresholds until it is fixed.",
        icon=":material/rule:",
    )
    st.code(current.error, language=None, wrap_lines=True)
    st.caption("Check it with `outbox-monitor alerts validate --rules FILE`.")


def __getattr__(name: str) -> Slo:
    """``slo.QUEUE_DEPTH``, ``slo.OLDEST_PENDING_AGE``, ``slo.LATENCY_P95``,
    ``slo.FAILED_IN_WINDOW``, ``slo.STUCK_LOCKS``, ``slo.XMIN_HORIZON_AGE``: the current
    threshold of that tile."""
    if name in TILES:
        return thresholds().slos[TILES[name][0]]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class Judgement:
    """How a tile shows one value against its SLO: ``text`` under the value, ``color`` of
    ``st.metric(delta_color=…)`` (``"green"`` within, ``"red"`` breached)."""

    breached: bool
    text: str
    color: str


def judge(slo: Slo, value: float | None) -> Judgement:
    """Compare one figure with its SLO; ``None`` (no rows, e.g. nothing pending) is within."""
    if value is not None and compare(slo.op, value, slo.limit):
        return Judgement(True, f"SLO {slo.label} breached", "red")
    return Judgement(False, f"within SLO {slo.label}", "green")
