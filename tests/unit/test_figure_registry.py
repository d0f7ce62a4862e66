"""The figure registry against SPEC §2's "One name per figure" table (docs/SPEC.md); SPEC §5's
flow figures and the table's health (issue 14) are the entries that table does not list."""

import re
from pathlib import Path

from outbox_monitor.alerts.rules import FIGURES as RULE_METRICS
from outbox_monitor.export.collector import OPEN_FAMILIES
from outbox_monitor.export.labels import WINDOWED_METRICS
from outbox_monitor.figures.registry import (
    CLAIM_FIGURES,
    FIGURES,
    FLOW_FIGURES,
    HEALTH_FIGURES,
    SAMPLED,
    WORKER_FIGURES,
)
from outbox_monitor.service.sampler import HEADLINE

SPEC = Path(__file__).resolve().parents[2] / "docs" / "SPEC.md"


def _names(cell: str) -> list[str]:
    """The first backticked name of each comma-separated item of a table cell, without a
    label set (``outbox_failed_in_window{event_type}`` → ``outbox_failed_in_window``)."""
    items = re.split(r",\s+(?=`)", cell)
    return [re.sub(r"\{.*\}", "", re.findall(r"`([^`]+)`", item)[0]) for item in items]


def spec_names() -> dict[str, tuple[str, str]]:
    """``{alerts.yml metric: (status --json key, Prometheus family)}`` from the SPEC table."""
    text = SPEC.read_text()
    table = text[text.index("### One name per figure") : text.index("## 3.")]
    names = {}
    for line in table.splitlines()[4:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 4:
            continue
        keys, families = _names(cells[1]), _names(cells[3])
        metrics = keys if cells[2] == "same" else _names(cells[2])
        for index, metric in enumerate(metrics):
            pick = index if len(keys) == len(metrics) else 0
            names[metric] = (keys[pick], families[min(index, len(families) - 1)])
    return names


def test_every_spec_metric_is_one_registry_entry_with_the_spec_names():
    names = spec_names()
    # latency: one status key holds the three quantiles
    names.update(
        {
            f"latency_{q}": (f"latency_seconds.{q}", "outbox_latency_seconds")
            for q in ("p50", "p95", "p99")
        }
    )
    # and SPEC §5's flow figures, the table's health and the claim's plan (issue 14), the
    # workers' liveness (issue 15)
    others = set(FLOW_FIGURES) | set(HEALTH_FIGURES) | set(CLAIM_FIGURES) | set(WORKER_FIGURES)
    assert set(FIGURES) - others == set(names)
    for metric, (status_key, family) in names.items():
        assert (FIGURES[metric].status_key, FIGURES[metric].prometheus) == (status_key, family)


def test_alerts_exporter_and_sampler_read_the_registry():
    assert RULE_METRICS is FIGURES
    assert {family.name for family in OPEN_FAMILIES} <= {f.prometheus for f in FIGURES.values()}
    windowed = {name for names in WINDOWED_METRICS.values() for name in names}
    assert windowed == {name for name, f in FIGURES.items() if f.window != "none"}
    assert HEADLINE is SAMPLED
    assert set(SAMPLED) == {
        "queue_depth",
        "pending_total",
        "scheduled_retries",
        "retrying",
        "oldest_pending_age_seconds",
        "processing",
        "stuck_locks",
        "latency_p50_seconds",
        "latency_p95_seconds",
        "failed_in_window",
        "dead_tuples",
        "live_tuples",
        "table_bytes",
        "indexes_bytes",
        "xmin_horizon_age_seconds",
    }


def test_health_figures_describe_the_whole_table_under_the_health_key():
    for name in HEALTH_FIGURES + CLAIM_FIGURES:
        figure = FIGURES[name]
        assert figure.scope == "table" and figure.window == "none", name
        assert figure.status_key.startswith("health."), name
        assert figure.prometheus.startswith("outbox_"), name
        if figure.is_duration:
            assert figure.status_key.endswith("_seconds"), name
            assert figure.prometheus.endswith("_seconds"), name
    table_wide = set(HEALTH_FIGURES) | set(CLAIM_FIGURES) | set(WORKER_FIGURES)
    assert {n for n, f in FIGURES.items() if f.scope == "table"} == table_wide


def test_the_workers_liveness_is_a_duration_of_the_whole_table_under_the_workers_key():
    figure = FIGURES["no_claim_while_due"]
    assert (figure.scope, figure.window, figure.unit) == ("table", "none", "seconds")
    assert figure.status_key == "workers.no_claim_while_due_seconds"
    assert figure.prometheus == "outbox_no_claim_while_due_seconds"
