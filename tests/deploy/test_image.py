"""The image itself, built from the Dockerfile in the tree and run with podman (issue 17):
the default command's refusal, ``init-db`` against the suite's Postgres, the dashboard and
the scheduler healthy by the image's own HEALTHCHECK (read-only root, tmpfs /tmp,
non-root), ``/metrics`` scraped from the scheduler's container, and a replay run as a
one-off container, audited. Podman's workarounds on these machines: tests/deploy/podman.py.
"""

import json
import time
import urllib.request
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from outbox_monitor.demo.pgcluster import TemporaryCluster, free_port
from tests.deploy import podman
from tests.deploy.deployfiles import REPO, image

HEALTH_TIMEOUT_SECONDS = 120.0
"""The image's start period is 60 s; two containers start on two shared cores."""
SERVICE_FLAGS = ["--read-only", "--tmpfs", "/tmp", "--network", podman.SLIRP_NETWORK]
"""What compose.yaml gives each service of the image (read_only, tmpfs /tmp), and the
network that reaches the suite's Postgres on the host. (Podman's health timer needs
systemd, absent here: it logs so on stderr, and the tests run the HEALTHCHECK themselves.)"""


@pytest.fixture(scope="module")
def built(pytestconfig: pytest.Config) -> dict[str, float]:
    figures = podman.built_image(REPO)
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(
            f"\nimage built with podman: stand-in base {figures['base_seconds']:.0f} s "
            f"(0: cached), build {figures['build_seconds']:.0f} s, "
            f"size {figures['size_mb']:.0f} MB"
        )
    return figures


def database_env(cluster: TemporaryCluster, dsn: str) -> list[str]:
    """``--env`` flags reaching one database of the suite's cluster from a container."""
    values = {
        "PGHOST": podman.HOST_FROM_CONTAINER,
        "PGPORT": str(cluster.port),
        "PGUSER": "postgres",
        "PGDATABASE": dsn.rsplit("/", 1)[1],
    }
    return [flag for key, value in values.items() for flag in ("--env", f"{key}={value}")]


@pytest.fixture
def containers() -> Iterator[list[str]]:
    """Names of the containers a test started; each is removed at the end."""
    names: list[str] = []
    yield names
    for name in names:
        podman.podman("rm", "--force", "--time", "10", name, check=False, timeout=60)


def start(names: list[str], *args: str) -> str:
    name = f"om-test-{uuid.uuid4().hex[:8]}"
    names.append(name)
    podman.podman("run", "--detach", "--name", name, *SERVICE_FLAGS, *args, timeout=120)
    return name


def test_image_keeps_the_healthcheck_and_runs_as_non_root(built, deploy_log):
    inspected = json.loads(podman.podman("image", "inspect", podman.IMAGE).stdout)[0]
    config = inspected["Config"]
    img = image()
    assert inspected["Healthcheck"]["Test"] == ["CMD", *img.healthcheck], "--format docker"
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == img.entrypoint and config["Cmd"] == img.cmd
    deploy_log(
        f"image {podman.IMAGE} built with podman: stand-in base {built['base_seconds']:.0f} s "
        f"(0: cached), build {built['build_seconds']:.0f} s, {built['size_mb']:.0f} MB; "
        f"HEALTHCHECK kept, user {config['User']}"
    )


def test_default_command_refuses_all_interfaces_without_sign_in(built):
    done = podman.podman("run", "--rm", *SERVICE_FLAGS, podman.IMAGE, check=False)
    assert done.returncode != 0, done.stdout
    assert "refusing to serve the dashboard on 0.0.0.0 without sign-in" in done.stderr
    assert "OUTBOX_MONITOR_AUTH=oidc" in done.stderr


def scrape(port: int, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
                return page.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def test_services_of_the_image_run_healthy_and_a_replay_is_audited(
    built, pg_cluster, empty_dsn, containers, deploy_log
):
    """init-db on an empty database; the dashboard (sign-in by proxy) and the scheduler
    healthy as uid 10001 with only /tmp writable; the scheduler's /metrics published and
    scraped from the host; ``replay --id N --yes`` as a one-off container moves the dead
    letter back to pending and writes its audit row."""
    env = database_env(pg_cluster, empty_dsn)
    init = podman.podman(
        "run", "--rm", *SERVICE_FLAGS, *env, podman.IMAGE, "init-db", "--create-table"
    )
    assert "schema version" in init.stdout, init
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        migrations = "SELECT count(*) FROM outbox_monitor.schema_migrations"
        assert conn.execute(migrations).fetchone()[0] >= 1

    metrics_port = free_port()
    proxy = (
        "--env",
        "OUTBOX_MONITOR_AUTH=proxy",
        "--env",
        "OUTBOX_MONITOR_TRUSTED_PROXIES=10.0.0.0/8",
    )
    dashboard = start(containers, *env, *proxy, podman.IMAGE)
    scheduler = start(
        containers, *env, "--publish", f"127.0.0.1:{metrics_port}:9108", podman.IMAGE, "scheduler"
    )
    for name in (dashboard, scheduler):
        podman.wait_healthy(name, HEALTH_TIMEOUT_SECONDS)
        assert podman.podman("exec", name, "id", "-u").stdout.strip() == "10001"
        for path, writable in (("/app/probe", False), ("/tmp/probe", True)):
            probe = podman.podman("exec", name, "touch", path, check=False)
            assert (probe.returncode == 0) is writable, (name, path, probe.stderr)
    text = scrape(metrics_port)
    assert "# TYPE outbox_monitor_" in text, text[:500]
    deploy_log(
        f"image containers healthy by their HEALTHCHECK: dashboard {dashboard}, scheduler "
        f"{scheduler} (uid 10001, read-only root, tmpfs /tmp); /metrics scraped from the host "
        f"({text.count('# TYPE outbox_monitor_')} families)"
    )

    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        row_id = conn.execute(
            "INSERT INTO public.integration_outbox (event_type, aggregate_type, aggregate_id,"
            " event_key, payload, status, attempts, last_error, processed_at)"
            " VALUES ('order.paid', 'order', '1', 'image-test', '{}', 'failed', 10,"
            " 'HTTP 500', now()) RETURNING id"
        ).fetchone()[0]
    replay = podman.podman(
        "run", "--rm", *SERVICE_FLAGS, *env, podman.IMAGE,
        "replay", "--id", str(row_id), "--yes", "--actor", "image-test",
    )  # fmt: skip
    assert replay.returncode == 0, replay
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        audit = conn.execute(
            "SELECT actor, action, affected_count, affected_ids FROM outbox_monitor.audit_log"
        ).fetchall()
        status = conn.execute(
            "SELECT status FROM public.integration_outbox WHERE id = %s", (row_id,)
        ).fetchone()[0]
    assert audit == [("image-test", "replay", 1, [row_id])]
    assert status == "pending"
    deploy_log(f"image one-off `replay --id {row_id} --yes`: row pending again, audited once")
