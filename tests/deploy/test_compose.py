"""compose.yaml: valid against the Compose Specification, in order, secrets only in the env
file, and running nothing of this image that test_dockerfile.py does not prove."""

import copy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from outbox_monitor.demo.pgcluster import TemporaryCluster, free_port
from tests.deploy.deployfiles import (
    COMPOSE,
    ENV_FILE,
    ENV_TEMPLATE,
    compose,
    env_file_values,
    image,
    image_services,
)
from tests.deploy.test_dockerfile import PROOFS, compose_order

OWN_SERVICES = {"init-db", "dashboard", "scheduler", "simulate"}


def check_jsonschema() -> str:
    found = Path(sys.prefix) / "bin" / "check-jsonschema"
    binary = str(found) if found.exists() else shutil.which("check-jsonschema")
    if binary is None:
        pytest.skip("check-jsonschema is not installed (a wheel of the test extras)")
    return binary


def validate(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [check_jsonschema(), "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
    )


def test_compose_file_is_valid_against_the_compose_specification():
    result = validate(COMPOSE)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("service", "key", "value"),
    [
        ("scheduler", "deploy", {"replica": 2}),
        ("dashboard", "depends_on", {"init-db": {"condition": "when_ready"}}),
        ("init-db", "restart", ["no"]),
    ],
)
def test_the_schema_check_rejects_an_invalid_file(tmp_path, service, key, value):
    broken = copy.deepcopy(compose())
    broken["services"][service][key] = value
    path = tmp_path / "compose.yaml"
    path.write_text(yaml.safe_dump(broken))
    assert validate(COMPOSE).returncode == 0
    result = validate(path)
    assert result.returncode != 0
    assert f"$.services.{service}" in result.stdout.replace(f"['{service}']", f".{service}")


def test_services_come_up_in_order():
    services = compose()["services"]
    assert set(services) == {"postgres", *OWN_SERVICES, "n8n"}
    assert services["postgres"]["image"] == "postgres:16"
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    assert services["init-db"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert services["init-db"]["restart"] == "no"
    for name in ("dashboard", "scheduler", "simulate", "n8n"):
        assert services[name]["depends_on"] == {
            "postgres": {"condition": "service_healthy"},
            "init-db": {"condition": "service_completed_successfully"},
        }, name
    assert services["scheduler"]["deploy"]["replicas"] == 2
    assert services["simulate"]["profiles"] == ["demo"]
    assert services["n8n"]["profiles"] == ["n8n"]
    assert "./n8n:/n8n:ro" in services["n8n"]["volumes"]
    assert "healthcheck" in services["n8n"]
    order = [run.name for run in compose_order(image_services())]
    assert order.index("init-db") < min(order.index(n) for n in OWN_SERVICES - {"init-db"})


def test_volumes_are_named_and_only_tmp_is_writable():
    spec = compose()
    declared = set(spec["volumes"])
    for name, service in spec["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            assert source in declared or source.startswith("./"), f"{name}: {volume}"
    assert {"postgres-data", "n8n-data"} <= declared
    for name in OWN_SERVICES:
        service = spec["services"][name]
        assert service["read_only"] is True and service["tmpfs"] == ["/tmp"], name
        assert "volumes" not in service, name


def test_secrets_come_only_from_the_env_file_and_the_template_holds_none():
    spec = compose()
    for name, service in spec["services"].items():
        if "env_file" in service:
            assert service["env_file"] == ENV_FILE, name
        for key in service.get("environment", {}):
            assert not any(word in key for word in ("PASSWORD", "TOKEN", "WEBHOOK", "KEY")), (
                f"{name}: {key} belongs in {ENV_FILE}"
            )
    template = env_file_values(ENV_TEMPLATE)
    assert {"POSTGRES_PASSWORD", "PGPASSWORD", "N8N_ENCRYPTION_KEY"} <= set(template)
    assert all(value == "" for value in template.values()), "placeholders only, no secret"


def test_dashboard_is_published_on_loopback_only():
    services = compose()["services"]
    assert services["dashboard"]["ports"] == [
        "127.0.0.1:${OUTBOX_MONITOR_DASHBOARD_PORT:-8501}:8501"
    ], "loopback only; the host port may be chosen (8501 may be taken)"
    assert services["n8n"]["ports"] == ["127.0.0.1:5678:5678"]
    assert "ports" not in services["scheduler"], "two replicas cannot share a host port"


def test_every_command_of_this_image_is_proven_by_the_dockerfile_test():
    """Each service of this image runs ENTRYPOINT + its command, with no interpolation
    (what the tests read is what runs), the image's HEALTHCHECK, and a role that
    test_dockerfile.py starts and proves."""
    img = image()
    runs = image_services()
    assert {run.name for run in runs} == OWN_SERVICES
    services = compose()["services"]
    for run in runs:
        assert run.argv[0] == "outbox-monitor", run.name
        assert run.role in PROOFS, f"{run.name} runs {run.argv}: no proof in test_dockerfile"
        text = " ".join(run.argv) + " ".join(run.environment.values())
        assert "$" not in text, f"{run.name}: no interpolation in what the tests run"
        assert "healthcheck" not in services[run.name], "the image's HEALTHCHECK applies"
    dashboard = next(run for run in runs if run.name == "dashboard")
    assert dashboard.argv == [*img.entrypoint, *img.cmd, "--insecure-no-auth"], (
        "the image default, without sign-in only because it is published on loopback"
    )


def test_postgres_healthcheck_command_answers_for_a_real_server(pg_cluster: TemporaryCluster):
    """The ``pg_isready`` line of the postgres service, run as its container would
    (``$$`` unescaped, the service's POSTGRES_* environment), against a real server and
    against a port with none."""
    service = compose()["services"]["postgres"]
    kind, command = service["healthcheck"]["test"]
    assert kind == "CMD-SHELL"
    env = {
        "PATH": f"{pg_cluster.bindir}:/usr/bin:/bin",
        **service["environment"],
        "PGHOST": "127.0.0.1",
    }
    shell = command.replace("$$", "$")
    ready = subprocess.run(
        ["sh", "-c", shell], env={**env, "PGPORT": str(pg_cluster.port)}, capture_output=True
    )
    assert ready.returncode == 0, ready
    down = subprocess.run(
        ["sh", "-c", shell], env={**env, "PGPORT": str(free_port())}, capture_output=True
    )
    assert down.returncode != 0
