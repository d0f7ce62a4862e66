"""deploy/prometheus/rules.yml: well-formed, equivalent to the shipped alerts.yml, alerting per
outbox (issue 16: every aggregation keeps ``outbox``), and every metric, label and window it
uses is exposed by a live scheduler's /metrics.

Expressions are read by a small PromQL tokenizer that finds each selector (metric name and
label matchers) and each aggregation with its ``by`` labels, skipping functions, keywords,
strings, ranges and durations; it runs without promtool. Tests feed it typos to prove it
catches them. ``test_prometheus_rules_fleet.py`` evaluates the rules with promtool on the
/metrics of a scheduler watching two outboxes.
"""

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from outbox_monitor.alerts.rules import SEVERITIES
from outbox_monitor.alerts.rules_file import SHIPPED_RULES_PATH, load_rules
from outbox_monitor.config.settings import DEFAULT_WINDOW_SECONDS, load_settings
from outbox_monitor.durations import duration_label
from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.export.server import MetricsServer
from outbox_monitor.figures.registry import FIGURES
from outbox_monitor.service.scheduler import build_scheduler
from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import like_escape
from outbox_monitor.store.schema import init_db

REPO = Path(__file__).resolve().parents[2]
RULES_PATH = REPO / "deploy" / "prometheus" / "rules.yml"
MAIN_GROUP = "outbox-monitor"

# SPEC §2 "One name per figure": alerts.yml metric → Prometheus family.
PROMETHEUS_NAME = {
    "queue_depth": "outbox_queue_depth",
    "pending_total": "outbox_pending",
    "scheduled_retries": "outbox_scheduled_retries",
    "oldest_pending_age": "outbox_oldest_pending_age_seconds",
    "processing": "outbox_processing",
    "stuck_locks": "outbox_stuck_locks",
    "latency_p50": "outbox_latency_seconds",
    "latency_p95": "outbox_latency_seconds",
    "latency_p99": "outbox_latency_seconds",
    "processed_per_minute": "outbox_processed_per_minute",
    "created_per_minute": "outbox_created_per_minute",
    "failed_in_window": "outbox_failed_in_window",
    "attempts_at_least": "outbox_rows_by_attempts",
    "rows_held": "outbox_rows_held",
    "rows_throttled": "outbox_rows_throttled",
    "breaker_open": "outbox_breaker_open",
    "xmin_horizon_age": "outbox_xmin_horizon_age_seconds",
    "inactive_slots_holding_horizon": "outbox_inactive_slots_holding_horizon",
    "vacuum_overdue": "outbox_vacuum_overdue_seconds",
    "claim_plan_degraded": "outbox_claim_plan_degraded",
    "claim_plan_cost": "outbox_claim_plan_cost",
    "no_claim_while_due": "outbox_no_claim_while_due_seconds",
}
QUANTILE = {"latency_p50": "0.5", "latency_p95": "0.95", "latency_p99": "0.99"}
RULE_KEYS = {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}
_DURATION = re.compile(
    r"^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$"
)
_UNITS = (365 * 86400, 7 * 86400, 86400, 3600, 60, 1, 0.001)

# ------------------------------------------------------------------ a PromQL tokenizer

_STRING = r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`'
_TOKEN = re.compile(
    rf"""
      (?P<space>\s+)
    | (?P<string>{_STRING})
    | (?P<matchers>\{{(?:[^{{}}"'`]|{_STRING})*\}})
    | (?P<range>\[[^\]]*\])
    | (?P<duration>\d+(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*(?![A-Za-z0-9_:]))
    | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
    | (?P<paren>[()])
    | (?P<op>==|!=|>=|<=|=~|!~|[-+*/%^<>=,@])
    """,
    re.VERBOSE,
)
_MATCHER = re.compile(rf"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*({_STRING})\s*(?:,|$)")
_GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_KEYWORDS = _GROUPING | {"bool", "and", "or", "unless", "offset", "atan2", "inf", "nan"}


@dataclass(frozen=True)
class Selector:
    """One vector selector: ``name{label op "value", ...}`` (values unescaped)."""

    name: str
    matchers: tuple[tuple[str, str, str], ...] = ()

    def matcher(self, label: str) -> tuple[str, str] | None:
        """``(op, value)`` of the matcher on ``label``, or ``None``."""
        for name, op, value in self.matchers:
            if name == label:
                return op, value
        return None


def _unquote(text: str) -> str:
    if text.startswith("`"):
        return text[1:-1]
    if text.startswith("'"):
        text = '"' + text[1:-1].replace("\\'", "'").replace('"', '\\"') + '"'
    return json.loads(text)  # PromQL's double-quoted escapes are Go's (JSON's for these)


def _matchers(block: str) -> tuple[tuple[str, str, str], ...]:
    body = block[1:-1].strip()
    found, position = [], 0
    while position < len(body):
        match = _MATCHER.match(body, position)
        if not match:
            raise ValueError(f"cannot read label matchers {block!r} at {body[position:]!r}")
        found.append((match.group(1), match.group(2), _unquote(match.group(3))))
        position = match.end()
    return tuple(found)


def tokens(expr: str) -> list[tuple[str, str]]:
    """``[(kind, text), ...]`` without blanks; ``ValueError`` on text it cannot read."""
    found, position = [], 0
    while position < len(expr):
        match = _TOKEN.match(expr, position)
        if not match:
            raise ValueError(f"unexpected {expr[position : position + 20]!r} in {expr!r}")
        if match.lastgroup != "space":
            found.append((match.lastgroup, match.group()))
        position = match.end()
    depth = 0
    for kind, text in found:
        depth += {"(": 1, ")": -1}.get(text, 0) if kind == "paren" else 0
        if depth < 0:
            raise ValueError(f"unbalanced parentheses in {expr!r}")
    if depth:
        raise ValueError(f"unbalanced parentheses in {expr!r}")
    return found


def selectors(expr: str) -> list[Selector]:
    """Every vector selector of a PromQL expression, in order."""
    items = tokens(expr)
    found: list[Selector] = []
    index = 0
    while index < len(items):
        kind, text = items[index]
        following = items[index + 1] if index + 1 < len(items) else ("", "")
        if kind == "ident" and text in _GROUPING and following == ("paren", "("):
            close = next(i for i in range(index + 1, len(items)) if items[i] == ("paren", ")"))
            index = close  # a label list, not metrics
        elif kind == "ident" and (
            text in _KEYWORDS
            or following == ("paren", "(")
            or following in (("ident", "by"), ("ident", "without"))
        ):
            pass  # keyword, function, or aggregation (sum by (…) (…))
        elif kind == "ident":
            matchers = _matchers(following[1]) if following[0] == "matchers" else ()
            found.append(Selector(text, matchers))
            index += 1 if matchers or following[0] == "matchers" else 0
        elif kind == "matchers":  # {__name__="x", ...}
            matchers = _matchers(text)
            names = [value for label, op, value in matchers if label == "__name__" and op == "="]
            rest = tuple(m for m in matchers if m[0] != "__name__")
            found.append(Selector(names[0] if names else "", rest))
        index += 1
    return found


_AGGREGATIONS = {"sum", "max", "min", "avg", "count", "group", "stddev", "stdvar"}


def aggregations(expr: str) -> list[tuple[str, tuple[str, ...] | None]]:
    """Each aggregation of ``expr`` in order, with its ``by (…)`` labels as written (``None``
    for none or ``without``; the form ``max(x) by (l)`` counts as none)."""
    items = tokens(expr)
    found: list[tuple[str, tuple[str, ...] | None]] = []
    for index, (kind, text) in enumerate(items[:-1]):
        if kind != "ident" or text not in _AGGREGATIONS:
            continue
        if items[index + 1] == ("ident", "by") and items[index + 2] == ("paren", "("):
            close = next(i for i in range(index + 2, len(items)) if items[i] == ("paren", ")"))
            labels = tuple(t for k, t in items[index + 3 : close] if k == "ident")
            found.append((text, labels))
        elif items[index + 1] in (("paren", "("), ("ident", "without")):
            found.append((text, None))
    return found


OUTBOX_PREFIX = "{{ if $labels.outbox }}{{ $labels.outbox }}: {{ end }}"
"""How every summary opens: the outbox's name, when the series have one (a fleet file)."""


def per_outbox_problems(rule: dict[str, Any]) -> list[str]:
    """Where a rule would add one outbox's figures to another's or not name its outbox:
    every aggregation must keep ``outbox`` (``by (outbox, …)``), a ``sum`` must sum the
    replicas' ``max by (outbox, event_type)``, and the summary must open with
    ``OUTBOX_PREFIX``."""
    where, expr = rule["alert"], rule["expr"]
    problems = []
    found = aggregations(expr)
    if not found:
        problems.append(f"{where}: no aggregation: the replicas' series are not collapsed")
    for position, (operator, labels) in enumerate(found):
        if labels is None or "outbox" not in labels:
            problems.append(f"{where}: {operator} without by (outbox, …) mixes outboxes: {expr}")
        following = found[position + 1] if position + 1 < len(found) else None
        if operator == "sum" and (
            following is None
            or following[0] != "max"
            or not {"outbox", "event_type"} <= set(following[1] or ())
        ):
            problems.append(f"{where}: sum must add max by (outbox, event_type): {expr}")
    if not rule["annotations"]["summary"].startswith(OUTBOX_PREFIX):
        problems.append(f"{where}: the summary must open with {OUTBOX_PREFIX}")
    return problems


Exposed = dict[str, list[dict[str, str]]]


def check_expression(expr: str, exposed: Exposed) -> list[str]:
    """What in ``expr`` the live /metrics does not back: unknown metric names, label names
    no series of that metric has, ``=`` values no series has, regexes matching no series."""
    try:
        found = selectors(expr)
    except ValueError as error:
        return [str(error)]
    if not found:
        return [f"no metric in {expr!r}"]
    problems = []
    for selector in found:
        series = exposed.get(selector.name)
        if not series:
            problems.append(f"{selector.name or '{…}'}: not exposed by /metrics")
            continue
        labels = set().union(*series)
        for label, op, value in selector.matchers:
            values = {s[label] for s in series if label in s}
            if label not in labels:
                problems.append(f"{selector.name}: has no label {label!r} ({sorted(labels)})")
            elif op == "=" and value not in values:
                problems.append(f"{selector.name}{{{label}={value!r}}}: no such series {values}")
            elif op == "=~" and not any(re.fullmatch(value, v) for v in values):
                problems.append(f"{selector.name}{{{label}=~{value!r}}}: matches no series")
    return problems


# ------------------------------------------------------------------ the rules file


def seconds(duration: str) -> float:
    """A Prometheus duration (``10m``, ``1h30m``, ``0s``) in seconds; ``ValueError`` if not."""
    match = _DURATION.match(duration) if isinstance(duration, str) and duration else None
    if not match:
        raise ValueError(f"not a Prometheus duration: {duration!r}")
    return sum(int(part) * unit for part, unit in zip(match.groups(), _UNITS, strict=True) if part)


def structure_problems(document: Any) -> list[str]:
    """What makes a rules document invalid for Prometheus (or for us): groups with unique
    names, alerting rules only, each with alert, expr, valid ``for``/``keep_firing_for``,
    a known severity label and a summary annotation; alert names unique per group."""
    if not isinstance(document, dict) or set(document) != {"groups"}:
        return ["the document must be a mapping with one key, groups"]
    problems: list[str] = []
    groups = document["groups"]
    if not isinstance(groups, list) or not groups:
        return ["groups must be a non-empty list"]
    names = [group.get("name") for group in groups if isinstance(group, dict)]
    if len(names) != len(set(names)) or len(names) != len(groups):
        problems.append(f"group names must be present and unique: {names}")
    for group in groups:
        if not isinstance(group, dict) or not isinstance(group.get("rules"), list):
            problems.append(f"group {group!r}: needs name and rules")
            continue
        seen: set[str] = set()
        for rule in group["rules"]:
            where = f"{group.get('name')}/{rule.get('alert') if isinstance(rule, dict) else rule}"
            if not isinstance(rule, dict):
                problems.append(f"{where}: a rule must be a mapping")
                continue
            if unknown := set(rule) - RULE_KEYS:
                problems.append(f"{where}: unknown keys {sorted(unknown)}")
            if not isinstance(rule.get("alert"), str) or not rule["alert"]:
                problems.append(f"{where}: alert (a name) is required")
            elif rule["alert"] in seen:
                problems.append(f"{where}: duplicate alert name")
            else:
                seen.add(rule["alert"])
            if not isinstance(rule.get("expr"), str) or not rule["expr"].strip():
                problems.append(f"{where}: expr is required")
            else:
                try:
                    tokens(rule["expr"])
                except ValueError as error:
                    problems.append(f"{where}: {error}")
            for key in ("for", "keep_firing_for"):
                if key in rule:
                    try:
                        seconds(rule[key])
                    except ValueError as error:
                        problems.append(f"{where}: {key}: {error}")
            labels, annotations = rule.get("labels") or {}, rule.get("annotations") or {}
            if labels.get("severity") not in SEVERITIES:
                problems.append(f"{where}: labels.severity must be one of {SEVERITIES}")
            if not all(isinstance(v, str) for v in {**labels, **annotations}.values()):
                problems.append(f"{where}: label and annotation values must be strings")
            if not annotations.get("summary"):
                problems.append(f"{where}: annotations.summary is required")
    return problems


def load_document(text: str | None = None) -> dict[str, Any]:
    return yaml.safe_load(RULES_PATH.read_text() if text is None else text)


def all_rules(document: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for group in document["groups"]:
        yield from group["rules"]


def main_rules(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    [group] = [g for g in document["groups"] if g["name"] == MAIN_GROUP]
    return {rule["alert"]: rule for rule in group["rules"]}


def test_rules_file_is_well_formed():
    document = load_document()
    assert structure_problems(document) == []
    # 11 from alerts.yml, 4 about the monitor itself (writes-failing: issue 29 item 7)
    assert sum(1 for _ in all_rules(document)) == 15


def test_structure_check_catches_mistakes():
    broken = load_document()
    rule = broken["groups"][0]["rules"][1]
    rule["for"] = "10 minutes"
    rule["labels"] = {"severity": "urgent"}
    rule["expr"] = "sum(max by (event_type) (outbox_queue_depth) > 1000"
    del broken["groups"][0]["rules"][2]["annotations"]
    broken["groups"][0]["rules"][3]["alert"] = "notifications-late"
    broken["groups"][0]["rules"][4]["record"] = "x"
    problems = "\n".join(structure_problems(broken))
    assert "backlog: for: not a Prometheus duration: '10 minutes'" in problems
    assert "backlog: labels.severity" in problems
    assert "backlog: unbalanced parentheses" in problems
    assert "payment-failed: annotations.summary is required" in problems
    assert "notifications-late: duplicate alert name" in problems
    assert "stuck-lock: unknown keys ['record']" in problems
    assert structure_problems({"groups": []}) == ["groups must be a non-empty list"]


def like_matches(db: Database, pattern: str, names: list[str]) -> set[str]:
    """The names a SPEC §2 event-type filter selects, decided by Postgres itself."""
    rows = db.fetch_all(
        "exporter_event_types_matching", {"names": names, "patterns": [like_escape(pattern)]}
    )
    return {row["name"] for row in rows}


def probes(pattern: str) -> list[str]:
    """Event types on both sides of a filter: the pattern filled in, its literal dots and
    underscores changed, a prefix and a suffix added."""
    filled = [pattern.replace("%", fill) for fill in ("", "x", "a.b", "%")]
    changed = [p.replace(".", "X", 1) for p in filled] + [p.replace("_", "Y", 1) for p in filled]
    return sorted({*filled, *changed, *("z" + p for p in filled), *(p + "z" for p in filled)})


def equivalence_problems(document: dict[str, Any], db: Database) -> list[str]:
    """Where the main group differs from the shipped alerts.yml (SPEC §3)."""
    ruleset = load_rules(SHIPPED_RULES_PATH)
    prometheus = main_rules(document)
    problems = []
    if set(prometheus) != {rule.name for rule in ruleset.rules}:
        problems.append(
            f"rules {sorted(prometheus)} != alerts.yml {[r.name for r in ruleset.rules]}"
        )
    for rule in ruleset.rules:
        mirror = prometheus.get(rule.name)
        if mirror is None:
            continue
        where, expr = rule.name, mirror["expr"]
        if mirror["labels"].get("severity") != rule.severity:
            problems.append(f"{where}: severity {mirror['labels']} != {rule.severity}")
        if seconds(mirror.get("for", "0s")) != rule.for_:
            problems.append(f"{where}: for {mirror.get('for')} != {rule.for_} s")
        if seconds(mirror.get("keep_firing_for", "0s")) != rule.keep_firing_for:
            problems.append(f"{where}: keep_firing_for != {rule.keep_firing_for} s")
        tail = re.search(r"(>=|<=|==|!=|>|<)\s*(-?\d+(?:\.\d+)?(?:e[+-]?\d+)?)\s*$", expr)
        if not tail or tail.group(1) != rule.op or float(tail.group(2)) != rule.threshold:
            problems.append(f"{where}: expr must end with {rule.op} {rule.threshold:g}: {expr}")
        groups = aggregations(expr)
        outer = set(groups[0][1] or ()) if groups else set()
        wanted_outer = {"outbox", "event_type"} if rule.by else {"outbox"}
        if outer != wanted_outer:
            problems.append(
                f"{where}: the outer aggregation must be by {sorted(wanted_outer)}: {expr}"
            )
        family = PROMETHEUS_NAME[rule.metric]
        matching = [s for s in selectors(expr) if s.name == family]
        if len(matching) != 1:
            problems.append(f"{where}: expr must select {family} once: {expr}")
            continue
        [selector] = matching
        metric = FIGURES[rule.metric]
        window = None
        if metric.window != "none":
            window = duration_label(rule.window or DEFAULT_WINDOW_SECONDS)
        if selector.matcher("window") != (None if window is None else ("=", window)):
            problems.append(f"{where}: window matcher {selector.matcher('window')} != {window}")
        quantile = QUANTILE.get(rule.metric)
        if selector.matcher("quantile") != (None if quantile is None else ("=", quantile)):
            problems.append(f"{where}: quantile matcher != {quantile}")
        event_type = selector.matcher("event_type")
        if rule.event_type is None:
            if event_type is not None:
                problems.append(f"{where}: alerts.yml has no event_type filter")
        elif event_type is None or event_type[0] != "=~":
            problems.append(f"{where}: needs event_type=~ for {rule.event_type!r}")
        else:
            names = probes(rule.event_type)
            wanted = like_matches(db, rule.event_type, names)
            got = {name for name in names if re.fullmatch(event_type[1], name)}
            if got != wanted:
                problems.append(
                    f"{where}: {event_type[1]!r} selects {sorted(got)}; "
                    f"{rule.event_type!r} selects {sorted(wanted)}"
                )
        summary = mirror["annotations"]["summary"]
        humanized = "humanizeDuration" in summary
        if humanized != metric.is_duration:
            problems.append(f"{where}: humanizeDuration only (and always) for seconds")
        plain = re.sub(
            r"\{\{\s*\$value(?:\s*\|\s*humanizeDuration)?\s*\}\}",
            "{{ value }}",
            summary.removeprefix(OUTBOX_PREFIX),
        ).replace("{{ $labels.event_type }}", "{{ event_type }}")
        if plain != rule.summary:
            problems.append(f"{where}: summary {summary!r} != alerts.yml {rule.summary!r}")
    return problems


def test_rules_are_the_shipped_alerts_yml(db):
    assert equivalence_problems(load_document(), db) == []


def test_every_rule_alerts_per_outbox():
    assert {rule["alert"]: per_outbox_problems(rule) for rule in all_rules(load_document())} == {
        rule["alert"]: [] for rule in all_rules(load_document())
    }


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("sum(max by (outbox, event_type) (outbox_queue_depth)) > 1000", "sum without by"),
        ("sum by (outbox) (outbox_queue_depth) > 1000", "sum must add max by (outbox, event"),
        ("sum by (outbox) (max by (event_type) (outbox_stuck_locks)) > 0", "max without by"),
        ("max(outbox_monitor_up) by (outbox) == 0", "max without by (outbox"),
        ("max without (event_type) (outbox_breaker_open) > 0", "max without by"),
        ("outbox_monitor_up == 0", "no aggregation"),
    ],
)
def test_the_per_outbox_check_catches_aggregates_across_outboxes(expr, problem):
    rule = {"alert": "x", "expr": expr, "annotations": {"summary": OUTBOX_PREFIX + "x"}}
    assert any(problem in p for p in per_outbox_problems(rule)), per_outbox_problems(rule)
    rule["annotations"]["summary"] = "{{ $labels.outbox }}: x"
    assert "x: the summary must open with" in "\n".join(per_outbox_problems(rule))


def test_equivalence_check_catches_drift(db):
    text = RULES_PATH.read_text()
    for old, new, expected in (
        ("> 1000", "> 100", "backlog: expr must end with > 1000"),
        ('window="15m"', 'window="1h"', "payment-failed: window matcher"),
        ('"notification\\\\..*"', '"notification.*"', "notifications-late: 'notification.*'"),
        (
            "max by (outbox, event_type) (outbox_failed",
            "max by (outbox) (outbox_failed",
            "payment-failed: the outer",
        ),
        (
            "sum by (outbox) (max by (outbox, event_type) (outbox_queue",
            "sum(max(outbox_queue",
            "backlog: the outer",
        ),
        ("{{ end }}Outbox backlog:", "{{ end }}Backlog:", "backlog: summary"),
        ("for: 10m", "for: 5m", "backlog: for 5m"),
        ('quantile="0.95"', 'quantile="0.99"', "latency-slo: quantile matcher"),
        ("outbox_stuck_locks", "outbox_processing", "stuck-lock: expr must select"),
        ("is {{ $value | humanizeDuration }} old", "is {{ $value }} old", "humanizeDuration"),
    ):
        assert old in text, old
        problems = "\n".join(equivalence_problems(load_document(text.replace(old, new)), db))
        assert expected in problems, (old, new, problems)


# ------------------------------------------------------------------ against a live /metrics


@pytest.fixture(scope="module")
def exposed(pg_cluster) -> Exposed:
    """``{series name: [labels, ...]}`` of one scrape of a running scheduler with the shipped
    rules, on rows that make every family non-empty."""
    name = f"prom_rules_{int(time.time() * 1000)}"
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    dsn = pg_cluster.dsn_for(name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        with Database(load_settings(dsn=dsn)) as setup:
            init_db(setup, create_table=True, create_indexes=False)
        for event_type, status in (
            ("notification.email", "pending"),
            ("order.paid", "processing"),
            ("order.paid", "done"),
            ("payment.captured", "failed"),
        ):
            conn.execute(
                "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, "
                "event_key, payload, status, created_at, locked_at, processed_at) "
                "VALUES (%(type)s, 'order', '1', %(key)s, '{}', %(status)s, "
                "now() - interval '2 minutes', "
                "CASE WHEN %(status)s = 'processing' THEN now() END, "
                "CASE WHEN %(status)s IN ('done', 'failed') THEN now() - interval '1 minute' END)",
                {"type": event_type, "key": f"{event_type}:{status}", "status": status},
            )
        conn.execute(  # a breaker (SPEC §5): outbox_breaker_open has a series
            "INSERT INTO outbox_monitor.controls (outbox, event_type_filter, layer, breaker,"
            " updated_by) VALUES ('integration_outbox', 'order.%', 'ui', true, 'test')"
        )
    with Database(load_settings(dsn=dsn, sample_interval=1)) as db:
        ruleset = load_rules(SHIPPED_RULES_PATH)
        status = SchedulerStatus()
        scheduler = build_scheduler(db, blocking=False, ruleset=ruleset, status=status)
        server = MetricsServer(db, status, ruleset=ruleset, port=0, cache_seconds=0)
        scheduler.start()
        server.start()
        try:
            deadline = time.monotonic() + 15
            while True:
                with urllib.request.urlopen(server.url + "/metrics", timeout=10) as response:
                    text = response.read().decode()
                lag = re.search(r"^outbox_monitor_sampler_lag_seconds ", text, re.MULTILINE)
                if lag or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        finally:
            server.stop()
            scheduler.shutdown(wait=True)
    found: Exposed = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append(dict(sample.labels))
    return found


def test_every_metric_of_every_rule_is_exposed(exposed):
    problems = {
        rule["alert"]: check_expression(rule["expr"], exposed)
        for rule in all_rules(load_document())
    }
    assert problems == {name: [] for name in problems}


def test_a_typo_in_the_rules_file_fails(exposed):
    text = RULES_PATH.read_text().replace("(outbox_stuck_locks)", "(outbox_stuck_lock)")
    problems = {
        rule["alert"]: check_expression(rule["expr"], exposed)
        for rule in all_rules(load_document(text))
    }
    assert problems["stuck-lock"] == ["outbox_stuck_lock: not exposed by /metrics"]
    assert problems["backlog"] == []


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("sum(max by (event_type) (outbox_queue_dept)) > 1000", "outbox_queue_dept: not exposed"),
        ('max(outbox_latency_seconds{quantil="0.95"}) > 1', "has no label 'quantil'"),
        ('max(outbox_latency_seconds{window="1hour"}) > 1', "{window='1hour'}: no such series"),
        ('max(outbox_failed_in_window{event_type=~"paymnt\\\\..*"})', "matches no series"),
        ('max(outbox_queue_depth{window="1h"})', "outbox_queue_depth: has no label 'window'"),
        ('{__name__="outbox_pendng"} > 0', "outbox_pendng: not exposed"),
        ("max(outbox_pending", "unbalanced parentheses"),
        ("max(outbox_pending) > 300 ; 1", "unexpected '; 1'"),
    ],
)
def test_the_expression_check_catches_typos(exposed, expr, problem):
    problems = check_expression(expr, exposed)
    assert any(problem in p for p in problems), problems


def test_the_tokenizer_skips_functions_keywords_labels_and_durations(exposed):
    expr = (
        "sum by (outcome) (rate(outbox_monitor_notifications_total[5m] offset 1m)) "
        '> bool on(outcome) group_left max without (job) ({__name__="outbox_monitor_up"}) '
        "unless outbox_monitor_leader == 1"
    )
    assert [s.name for s in selectors(expr)] == [
        "outbox_monitor_notifications_total",
        "outbox_monitor_up",
        "outbox_monitor_leader",
    ]
    assert check_expression(expr, exposed) == []
    [selector] = selectors('x{a="1", b=~"p\\\\..*", c!=\'q\'}')
    assert selector.matchers == (("a", "=", "1"), ("b", "=~", "p\\..*"), ("c", "!=", "q"))
