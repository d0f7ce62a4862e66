"""The references generated from the code (issue 28 item 3): docs/reference/ and the JSON
Schemas of alerts.yml, the controls file and the fleet file are what the generator writes now;
every shipped file and accepted test fixture validates against its schema; the schema refuses
what the loader refuses for types and enums."""

import copy
import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from jsonschema import Draft202012Validator

from outbox_monitor.alerts import own_runbooks
from outbox_monitor.alerts.rules_file import RULES_ENV, RulesError, load_rules
from outbox_monitor.cli import reference
from outbox_monitor.cli.file_reference import FILES, MODELINE, SHIPPED_FILES, file_schema
from outbox_monitor.cli.when_paged import scheduler_page, when_paged_page
from outbox_monitor.config import fleet as fleet_module
from outbox_monitor.config.fleet import FLEET_ENV, load_fleet
from outbox_monitor.config.settings import ENV_PREFIX, Settings, load_settings
from outbox_monitor.config.yaml_files import dump_yaml, parse_yaml
from outbox_monitor.flow import controls_file
from outbox_monitor.flow.controls_file import ControlsError, load_controls
from outbox_monitor.logs import LEVEL_ENV
from tests.unit import test_fleet, test_outbox_scope, test_rule_predict, test_rules

REPO = Path(__file__).resolve().parents[2]
KINDS = {kind.name: kind for kind in FILES}
SETTINGS = load_settings(dsn="postgresql://monitor@localhost/app")
PARAMETER_SET = type(pytest.param())


def validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(file_schema(KINDS[name]))


def refused(name: str, document: Any) -> list[str]:
    """The schema's complaints about ``document`` (empty: it validates)."""
    return [error.message for error in validator(name).iter_errors(document)]


def parametrized(test: Any) -> list[Any]:
    """The parameter sets of a parametrised test of another module (its own list, reused)."""
    (mark,) = [mark for mark in test.pytestmark if mark.name == "parametrize"]
    return [case.values if isinstance(case, PARAMETER_SET) else case for case in mark.args[1]]


# ------------------------------------------------------------------ generated, not stale


def test_every_page_schema_and_first_line_is_what_the_generator_writes_now():
    stale = reference.stale(REPO)
    assert stale == [], f"stale: {', '.join(map(str, stale))}: run `make reference`"
    assert sorted(p.name for p in (REPO / "docs" / "reference").iterdir()) == [
        "alerts-file.md",
        "cli.md",
        "configuration.md",
        "controls-file.md",
        "fleet-file.md",
    ]


def test_a_stale_page_schema_or_first_line_is_named_and_written_again(tmp_path):
    for relative in [*reference.wanted(REPO), Path("pyproject.toml")]:  # a checkout's
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / relative, tmp_path / relative)
    assert reference.stale(tmp_path) == []
    page = tmp_path / "docs/reference/cli.md"
    page.write_text(page.read_text().replace("outbox-monitor replay", "outbox-monitor redrive"))
    rules = tmp_path / "alerts.yml"
    rules.write_text(rules.read_text().split("\n", 1)[1])  # its schema's line gone
    (tmp_path / "outbox_monitor/schemas/fleet.schema.json").unlink()
    (tmp_path / "docs/reference/old.md").write_text("# a page no code writes\n")
    expected = [
        Path("alerts.yml"),
        Path("docs/reference/cli.md"),
        Path("docs/reference/old.md"),
        Path("outbox_monitor/schemas/fleet.schema.json"),
    ]
    assert reference.stale(tmp_path) == expected
    # make reference --check (python -m outbox_monitor.cli.reference)
    checked = CliRunner().invoke(reference.regenerate, ["--check", "--root", str(tmp_path)])
    assert checked.exit_code == 1, checked.output
    assert checked.stdout.splitlines() == [f"stale: {path}" for path in expected]
    assert checked.stderr == "run `make reference`\n"
    assert reference.write(tmp_path) == expected
    assert reference.stale(tmp_path) == []
    (tmp_path / "pyproject.toml").unlink()  # not a checkout: nothing written there
    elsewhere = CliRunner().invoke(reference.regenerate, ["--root", str(tmp_path)])
    assert elsewhere.exit_code == 2 and "is no checkout of outbox-monitor" in elsewhere.stderr
    assert rules.read_text() == (REPO / "alerts.yml").read_text()
    assert not (tmp_path / "docs/reference/old.md").exists()


def test_the_output_depends_on_the_code_only(monkeypatch):
    first = reference.generated()
    for variable, value in {
        "OUTBOX_MONITOR_LOCK_TIMEOUT": "1m",
        "OUTBOX_MONITOR_TABLE": "other.outbox",
        "OUTBOX_MONITOR_LOG_LEVEL": "DEBUG",
        "OUTBOX_MONITOR_RULES": "/nowhere/alerts.yml",
        "COLUMNS": "40",
    }.items():
        monkeypatch.setenv(variable, value)
    assert reference.generated() == first


def test_every_variable_the_product_reads_is_in_the_configuration_reference():
    page = (REPO / "docs/reference/configuration.md").read_text()
    named = {
        name
        for path in (REPO / "outbox_monitor").rglob("*.py")
        if "demo" not in path.relative_to(REPO / "outbox_monitor").parts
        for name in re.findall(r"OUTBOX_MONITOR_[A-Z0-9_]+", path.read_text())
        if not name.endswith("_")  # a family: OUTBOX_MONITOR_REDACT_*
    }
    rows = [line.split("`")[1] for line in page.splitlines() if line.startswith("| `OUTBOX_")]
    settings = {f"{ENV_PREFIX}{name.upper()}" for name in Settings.model_fields}
    assert sorted(rows) == sorted(settings | {RULES_ENV, FLEET_ENV, LEVEL_ENV})  # once each
    assert named - set(rows) == set()
    assert {"OUTBOX_MONITOR_DSN", RULES_ENV, "OUTBOX_MONITOR_ACTIONS_DSN"} <= named
    assert "| `OUTBOX_MONITOR_LOCK_TIMEOUT` | duration, ≥ 1s | `15m` | A `processing` row" in page
    assert "| `OUTBOX_MONITOR_LOG_LEVEL` | one of `DEBUG`, `INFO`, `WARNING`, `ERROR` | `INFO`" in (
        page
    )


def test_the_cli_reference_has_every_command_and_option():
    page = (REPO / "docs/reference/cli.md").read_text()
    headings = re.findall(r"^## (outbox-monitor.*)$", page, re.M)
    # the group, its 22 commands, alerts test and validate, controls apply
    assert len(headings) == 26 and len(set(headings)) == 26
    assert {
        "outbox-monitor",
        "outbox-monitor alerts validate",
        "outbox-monitor uninstall",
        "outbox-monitor claim-advice",
    } <= set(headings)
    assert "| `--watch-timeout` | duration | `10m` | – | Stop watching after this long. |" in page
    assert "| `--log-level` | one of `DEBUG`, `INFO`, `WARNING`, `ERROR` | `INFO` | " in page
    assert "outbox-monitor demo-downstream [OPTIONS] {break|heal|status}" in page


# ------------------------------------------------------------------- the shipped schemas

JSON_SCHEMA_KEYWORDS = {
    "$schema",
    "$defs",
    "$ref",
    "title",
    "description",
    "default",
    "type",
    "const",
    "enum",
    "properties",
    "additionalProperties",
    "patternProperties",
    "propertyNames",
    "required",
    "items",
    "minItems",
    "maxItems",
    "minProperties",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "minLength",
    "maxLength",
    "pattern",
    "anyOf",
    "allOf",
    "not",
    "if",
    "then",
}
"""The keywords the schemas use: pydantic writes others (``gt``) where it cannot say a
bound in JSON Schema, which editors ignore."""


def _keywords(node: Any, names: set[str]) -> set[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            names.add(key)
            if key in ("properties", "$defs", "patternProperties"):
                for below in value.values():
                    _keywords(below, names)
            elif key not in ("default", "const", "enum"):
                _keywords(value, names)
    elif isinstance(node, list):
        for item in node:
            _keywords(item, names)
    return names


@pytest.mark.parametrize("kind", FILES, ids=[kind.name for kind in FILES])
def test_each_schema_is_valid_json_schema_with_a_description_for_every_key(kind):
    schema = file_schema(kind)
    Draft202012Validator.check_schema(schema)
    assert _keywords(schema, set()) <= JSON_SCHEMA_KEYWORDS
    sections = [schema, *schema["$defs"].values()]
    undescribed = [
        (section.get("title"), key)
        for section in sections
        for key, value in section.get("properties", {}).items()
        if not value.get("description")
    ]
    assert undescribed == []


def first_line_schema(path: Path) -> Path:
    line = path.read_text().split("\n", 1)[0]
    assert line.startswith(MODELINE), line
    return (path.parent / line.removeprefix(MODELINE)).resolve()


def test_the_shipped_files_name_their_schema_and_validate_with_check_jsonschema():
    for name, path in SHIPPED_FILES.items():
        assert first_line_schema(path) == KINDS[name].schema_path
        checked = subprocess.run(
            [
                str(Path(sys.executable).parent / "check-jsonschema"),
                "--schemafile",
                str(KINDS[name].schema_path),
                str(path),
            ],
            capture_output=True,
            text=True,
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
    assert SHIPPED_FILES["alerts"] == REPO / "alerts.yml"
    assert SHIPPED_FILES["controls"] == REPO / "outbox_monitor/demo/controls.yml"


# --------------------------------------------------------- accepted fixtures validate


def _example(module: Any, start: str, end: str) -> str:
    """The YAML example of a module's docstring, between ``start`` and ``end``."""
    return textwrap.dedent(module.__doc__.split(start, 1)[1].split(end, 1)[0])


ACCEPTED_RULES = {
    "test_rules.VALID": test_rules.VALID,
    "test_outbox_scope.RULES": parse_yaml(test_outbox_scope.RULES),
    "predict": test_rule_predict.rules(predict="15m"),
    "predict an age": test_rule_predict.rules(
        metric="oldest_pending_age", threshold="5m", predict="10m"
    ),
    **{
        f"predict scoped {scope}": test_rule_predict.rules(predict="15m", **scope)
        for scope in parametrized(
            test_rule_predict.test_a_depth_or_age_rule_scoped_to_event_types_may_predict
        )
    },
    "a whole-table metric, a route without transport": {
        "version": 1,
        "routes": {"oncall": {}, "quiet": {"send_resolved": False}},
        "rules": [
            {
                "name": "horizon",
                "metric": "xmin_horizon_age",
                "op": ">",
                "threshold": "10m",
                "route": "oncall",
                "by": [],
                "event_type": None,
            },
            {
                "name": "claim",
                "metric": "claim_plan_degraded",
                "op": ">",
                "threshold": 0,
                "route": "quiet",
                "window": None,
                "by": None,
                "attempts": None,
            },
        ],
    },
}


@pytest.mark.parametrize("name", ACCEPTED_RULES)
def test_every_accepted_rules_fixture_validates(tmp_path, name):
    document = ACCEPTED_RULES[name]
    path = tmp_path / "alerts.yml"
    path.write_text(dump_yaml(document))
    load_rules(path, test_outbox_scope.FLEET)  # the loader accepts it
    assert refused("alerts", document) == []


ACCEPTED_CONTROLS = {
    "flow/controls_file.py's example": _example(controls_file, "::\n\n", "\n\n"),
    # tests/integration/test_flow_cli.py's files (apply, idempotent; a pause silencing)
    "test_flow_cli apply": 'version: 1\ncontrols:\n  - event_type: "crm.%"\n    concurrency: 5\n'
    "    breaker: {cooldown: 45s}\n  - event_type: legacy.sync\n"
    "    pause: {reason: decommissioned}\n",
    "test_flow_cli pause": 'controls:\n  - {event_type: "crm.%", concurrency: 5}\n',
    "every key": "version: 1\ncontrols:\n  - event_type: a.b\n    pause: true\n"
    "    concurrency: 3\n    rate: {per_second: 2.5, burst: 4}\n"
    "    breaker: {window: 2m, min_attempts: 5, ratio: 0.5, cooldown: 15m, probe_timeout: 60}\n"
    "  - {event_type: c, rate: {per_second: 1}, breaker: true, pause: false}\n",
    "an empty file": "",
}


@pytest.mark.parametrize("name", ACCEPTED_CONTROLS)
def test_every_accepted_controls_fixture_validates(tmp_path, name):
    path = tmp_path / "controls.yml"
    path.write_text(ACCEPTED_CONTROLS[name])
    load_controls(path)  # the loader accepts it
    assert refused("controls", parse_yaml(path.read_text())) == []


def _fleet_texts(tmp_path: Path) -> dict[str, str]:
    from outbox_monitor.demo.fleet import DEMO_FLEET, write_fleet_file

    return {
        "test_fleet.TWO": test_fleet.TWO,
        "docs/fleet.md's example": test_fleet.documented_example(),
        "config/fleet.py's example": _example(fleet_module, "```yaml\n", "```"),
        "the demo's": write_fleet_file(tmp_path, DEMO_FLEET, lock_timeout="5m").read_text(),
    }


def test_every_accepted_fleet_fixture_validates(tmp_path):
    texts = _fleet_texts(tmp_path)
    for name, text in texts.items():
        document = parse_yaml(text)
        variables = {
            value
            for outbox in document["outboxes"]
            for key, value in outbox.items()
            if key.endswith("_env")
        }
        env = {variable: f"postgresql://monitor@{variable.lower()}/db" for variable in variables}
        path = tmp_path / "outboxes.yml"
        path.write_text(text)
        assert len(load_fleet(SETTINGS, path, env).outboxes) == len(document["outboxes"]), name
        assert refused("fleet", document) == [], name
    assert len(texts) == 4


# ------------------------------------- the schema refuses what the loader refuses (types)

RULES_LOADER_ONLY = {
    "duplicate-name": "names unique across rules",
    "unknown-route": "a reference to another part of the file",
    "summary-unknown-placeholder": "the placeholders inside a template",
    "summary-jinja-block": "the placeholders inside a template",
}
"""test_rules.MALFORMED's variants that are no type or enum error, which only the loader
refuses (JSON Schema cannot say them); the schema refuses every other."""


@pytest.mark.parametrize(("change", "expected"), test_rules.MALFORMED)
def test_the_schema_refuses_each_malformed_rules_variant_of_a_type_or_enum(
    request, change, expected
):
    variant = request.node.callspec.id
    document = copy.deepcopy(test_rules.VALID)
    change(document)
    complaints = refused("alerts", document)
    if variant in RULES_LOADER_ONLY:
        assert complaints == [], f"the schema refuses {variant} now: drop it from the list"
    else:
        assert complaints != [], f"{variant}: the loader says {expected!r}, the schema nothing"


def test_the_loader_only_variants_are_named_as_in_test_rules():
    assert set(RULES_LOADER_ONLY) <= {case.id for case in test_rules.MALFORMED}


PREDICT_LOADER_ONLY = {"notification.%", "pending_total"}
"""test_rule_predict's refusals that depend on the per-type samples, not a type or enum."""


@pytest.mark.parametrize(
    "change",
    [
        case[0]
        for case in parametrized(test_rule_predict.test_a_bad_predict_names_the_rule_and_the_field)
    ],
)
def test_the_schema_refuses_each_bad_predict_of_a_type_or_enum(change):
    complaints = refused("alerts", test_rule_predict.rules(**change))
    loader_only = {change.get("event_type"), change.get("metric")} & PREDICT_LOADER_ONLY
    assert (complaints == []) == bool(loader_only), (change, complaints)


FLEET_LOADER_ONLY = {
    "BILLING_DSN is not set",  # the environment, not the file
    'outbox "orders" (outboxes[1]), name: also the name of outboxes[0]',  # unique names
    'outbox "orders" (outboxes[0]), retention.failed: retention is written in days',  # ≥ 1d
    "anchors",  # YAML itself (the schema sees the document they make)
}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (case[0], case[2])
        for case in parametrized(test_fleet.test_each_problem_names_the_outbox_and_the_field)
    ],
)
def test_the_schema_refuses_each_malformed_fleet_file_of_a_type_or_enum(text, message):
    # the loader refuses anchors; the schema sees the document they make
    document = yaml.safe_load(text) if message == "anchors" else parse_yaml(text)
    complaints = refused("fleet", document)
    assert (complaints == []) == (message in FLEET_LOADER_ONLY), (message, complaints)


# tests/integration/test_flow_cli.py's refused files, entry by entry
MALFORMED_CONTROLS = {
    "version 2": "version: 2\ncontrols: []\n",
    "concurrency over the maximum": "controls:\n  - {event_type: a, concurrency: 3000000000}\n",
    "concurrency true": "controls:\n  - {event_type: a, concurrency: true}\n",
    "a rate over the maximum": "controls:\n  - {event_type: a, rate: {per_second: 1.0e12}}\n",
    "a NUL in the filter": 'controls:\n  - event_type: "a\\0b"\n',
    "a typo": 'controls:\n  - event_type: "crm.%"\n    concurency: 5\n',
    "a pause of text": "controls:\n  - {event_type: a, pause: yes please}\n",
    "a breaker duration": "controls:\n  - {event_type: a, breaker: {window: a minute}}\n",
    "no event type": "controls:\n  - {concurrency: 5}\n",
}


@pytest.mark.parametrize("name", MALFORMED_CONTROLS)
def test_the_schema_refuses_each_malformed_controls_file_of_a_type_or_enum(tmp_path, name):
    path = tmp_path / "controls.yml"
    path.write_text(MALFORMED_CONTROLS[name])
    with pytest.raises(ControlsError):
        load_controls(path)
    assert refused("controls", parse_yaml(path.read_text())) != []


# ------------------------ one verdict per document: the loader's is the schema's (types)


def _control(entry: str) -> str:
    return f"controls:\n  - {{event_type: a, {entry}}}\n"


def _rules(route: str = "{}", threshold: str = "1000", attempts: str | None = None) -> str:
    metric = "queue_depth" if attempts is None else f"attempts_at_least, attempts: {attempts}"
    return (
        f"version: 1\nroutes:\n  oncall: {route}\nrules:\n  - {{name: backlog, "
        f'metric: {metric}, op: ">", threshold: {threshold}, route: oncall}}\n'
    )


ONE_VERDICT = {
    # a whole number written with a fraction is that number (JSON Schema's "integer" too)
    "concurrency: 5.0": ("controls", _control("concurrency: 5.0"), True),
    "rate.burst: 2.0": ("controls", _control("rate: {per_second: 1, burst: 2.0}"), True),
    "breaker.min_attempts: 5.0": ("controls", _control("breaker: {min_attempts: 5.0}"), True),
    "attempts: 5.0": ("alerts", _rules(attempts="5.0"), True),
    "concurrency: 5.5": ("controls", _control("concurrency: 5.5"), False),
    "attempts: 2.5": ("alerts", _rules(attempts="2.5"), False),
    "breaker.min_attempts: 2.5": ("controls", _control("breaker: {min_attempts: 2.5}"), False),
    # no coercion of booleans and text into numbers
    "breaker.ratio: true": ("controls", _control("breaker: {ratio: true}"), False),
    "breaker.ratio: '0.5'": ("controls", _control("breaker: {ratio: '0.5'}"), False),
    "breaker.min_attempts: true": ("controls", _control("breaker: {min_attempts: true}"), False),
    "breaker.min_attempts: '5'": ("controls", _control("breaker: {min_attempts: '5'}"), False),
    "attempts: true": ("alerts", _rules(attempts="true"), False),
    "attempts: '5'": ("alerts", _rules(attempts="'5'"), False),
    "threshold: '1_000'": ("alerts", _rules(threshold="'1_000'"), False),
    "threshold: 'inf'": ("alerts", _rules(threshold="'inf'"), False),
    "threshold: .inf": ("alerts", _rules(threshold=".inf"), False),
    # YAML 1.2, as editors and check-jsonschema read it: 1e3 is a number; yes, no and 1:30
    # are text; True is true
    "rate.per_second: 1e3": ("controls", _control("rate: {per_second: 1e3}"), True),
    "concurrency: 1e3": ("controls", _control("concurrency: 1e3"), True),
    "threshold: 1e3": ("alerts", _rules(threshold="1e3"), True),
    "pause: yes": ("controls", _control("pause: yes"), False),
    "pause: True": ("controls", _control("pause: True"), True),
    "breaker.window: 1:30": ("controls", _control("breaker: {window: 1:30}"), False),
    "send_resolved: no": ("alerts", _rules(route="{send_resolved: no}"), False),
    "send_resolved: false": ("alerts", _rules(route="{send_resolved: false}"), True),
}
"""A file's text each, and whether it is a valid file: the loader, check-jsonschema (YAML
1.2, as the editors' YAML language server) and the schema on the loader's reading agree."""
ONE_VERDICT_LOADERS = {
    "controls": (load_controls, ControlsError),
    "alerts": (load_rules, RulesError),
}


@pytest.fixture(scope="module")
def check_jsonschema_refuses(tmp_path_factory) -> set[str]:
    """The cases of ``ONE_VERDICT`` check-jsonschema refuses (one run per file kind)."""
    folder = tmp_path_factory.mktemp("one-verdict")
    refusing = set()
    for kind in ("controls", "alerts"):
        paths = {}
        for index, (name, (case_kind, text, _)) in enumerate(ONE_VERDICT.items()):
            if case_kind == kind:
                paths[str(folder / f"{kind}-{index}.yml")] = name
                (folder / f"{kind}-{index}.yml").write_text(text)
        checked = subprocess.run(
            [
                str(Path(sys.executable).parent / "check-jsonschema"),
                *("--output-format", "json", "--schemafile", str(KINDS[kind].schema_path)),
                *paths,
            ],
            capture_output=True,
            text=True,
        )
        report = json.loads(checked.stdout)
        assert report["parse_errors"] == [], report
        refusing |= {paths[error["filename"]] for error in report["errors"]}
    return refusing


@pytest.mark.parametrize("name", ONE_VERDICT)
def test_the_loader_and_the_schema_give_a_document_one_verdict(
    tmp_path, check_jsonschema_refuses, name
):
    kind, text, valid = ONE_VERDICT[name]
    path = tmp_path / f"{kind}.yml"
    path.write_text(text)
    load, error = ONE_VERDICT_LOADERS[kind]
    try:
        load(path)
        loader = True
    except error:
        loader = False
    verdicts = {
        "loader": loader,
        "check-jsonschema": name not in check_jsonschema_refuses,
        "schema on the loader's reading": refused(kind, parse_yaml(text)) == [],
    }
    assert verdicts == dict.fromkeys(verdicts, valid)


# ------------------------------------------------------------ When paged (issue 30 item 10)


def test_when_paged_is_generated_from_every_shipped_rules_runbook_steps():
    page = (REPO / "docs/when-paged.md").read_text()
    assert page == when_paged_page(REPO / "alerts.yml")  # up to date (`make reference`)
    ruleset = load_rules(REPO / "alerts.yml")
    headings = re.findall(r"^## (\S+)$", page, re.M)
    assert headings == [rule.name for rule in ruleset.rules]
    for rule in ruleset.rules:
        body = page.split(f"## {rule.name}\n", 1)[1].split("\n## ", 1)[0]
        steps = re.findall(r"^(\d+)\. (.+)$", body, re.M)  # wrapped: continued indented
        assert [int(n) for n, _ in steps] == list(range(1, len(rule.runbook_steps) + 1))
        assert f"**Fires** ({rule.severity}) when `{rule.metric}`" in body
        assert f"`{rule.condition}`" in " ".join(body.split())
    # a step's code span stays code, its other markup is escaped
    stuck = " ".join(page.split("## stuck-lock\n", 1)[1].split())
    assert "CLI `outbox-monitor reap --dry-run`, then `outbox-monitor reap --yes`." in stuck
    assert '("–" for an orphan without a lock time)' in stuck
    late = " ".join(page.split("## notifications-late\n", 1)[1].split("\n## ", 1)[0].split())
    assert (
        "**Fires** (critical) when `oldest_pending_age` (Seconds since the oldest pending row "
        "was created (absent when none is pending)) of the event types `notification.%` is "
        "`> 5m 0s`, at once; it resolves once clear for 2m (`keep_firing_for`)."
    ) in late


def test_the_scheduler_alerts_page_is_generated_from_their_drills_and_steps():
    page = (REPO / "docs/scheduler-alerts.md").read_text()
    assert page == scheduler_page()  # up to date (`make reference`)
    headings = re.findall(r"^## (.+)$", page, re.M)
    assert headings == [alert.name for alert in own_runbooks.OWN_ALERTS]
    for alert in own_runbooks.OWN_ALERTS:
        body = page.split(f"## {alert.name}\n", 1)[1].split("\n## ", 1)[0]
        steps = re.findall(r"^(\d+)\. (.+)$", body, re.M)  # wrapped: continued indented
        assert [int(n) for n, _ in steps] == list(range(1, len(own_runbooks.steps(alert.name)) + 1))
    unreachable = " ".join(page.split("## database-unreachable\n", 1)[1].split())
    assert "2. From the scheduler's host run `outbox-monitor status`: it fails" in unreachable


def test_a_changed_runbook_step_makes_when_paged_stale(tmp_path):
    for relative in [*reference.wanted(REPO), Path("pyproject.toml")]:
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / relative, tmp_path / relative)
    assert reference.stale(tmp_path) == []
    rules = tmp_path / "alerts.yml"
    rules.write_text(rules.read_text().replace("Reap stuck locks lists", "Reap stuck locks shows"))
    assert reference.stale(tmp_path) == [Path("docs/when-paged.md")]
    assert reference.write(tmp_path) == [Path("docs/when-paged.md")]
    assert "Reap stuck locks shows every stuck row" in (tmp_path / "docs/when-paged.md").read_text()
