"""The fleet file (issue 16 item 1): outboxes with the variables of their DSNs, validated like
alerts.yml (the outbox and the field named), and the single-outbox settings as a fleet of one."""

from pathlib import Path

import pytest

from outbox_monitor.config.fleet import FLEET_ENV, SINGLE, FleetError, load_fleet
from outbox_monitor.config.settings import load_settings

ENV = {
    "ORDERS_DSN": "postgresql://monitor@db-a/orders",
    "ORDERS_PRIMARY": "postgresql://monitor@db-a-primary/orders",
    "BILLING_DSN": "postgresql://monitor@db-b/billing",
}
TWO = """
version: 1
outboxes:
  - name: orders
    dsn_env: ORDERS_DSN
    primary_dsn_env: ORDERS_PRIMARY
    lock_timeout: 5m
    retention: {done: 30d, failed: 90d}
    labels: {team: payments, service: orders}
  - name: billing
    dsn_env: BILLING_DSN
    table: billing.outbox
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "outboxes.yml"
    path.write_text(text)
    return path


@pytest.fixture
def settings():
    return load_settings(dsn="postgresql://monitor@single/app", lock_timeout="15m")


def test_two_outboxes_each_with_its_own_database_table_and_labels(tmp_path, settings):
    fleet = load_fleet(settings, write(tmp_path, TWO), ENV)

    assert fleet.names == ["orders", "billing"]
    orders, billing = fleet.outboxes
    assert orders.settings.dsn == ENV["ORDERS_DSN"]
    assert orders.settings.primary_target == ENV["ORDERS_PRIMARY"]
    assert orders.settings.table == "public.integration_outbox"
    assert orders.settings.lock_timeout == 300.0
    assert (orders.settings.auto_prune_done, orders.settings.auto_prune_failed) == (
        30 * 86400.0,
        90 * 86400.0,
    )
    assert orders.labels == {"team": "payments", "service": "orders"}
    assert billing.settings.dsn == ENV["BILLING_DSN"]
    assert billing.settings.table == "billing.outbox"
    assert billing.settings.lock_timeout == 900.0  # the process's
    assert billing.settings.primary_target == ENV["BILLING_DSN"]
    assert fleet.get("billing") is billing
    with pytest.raises(KeyError, match="has orders, billing"):
        fleet.get("nope")


def test_without_a_file_the_settings_are_a_fleet_of_one(settings):
    fleet = load_fleet(settings, env={})

    (only,) = fleet.outboxes
    assert (only.name, only.settings, fleet.path) == (SINGLE, settings, None)


def test_the_file_named_by_the_environment(tmp_path, settings):
    path = write(tmp_path, TWO)
    assert load_fleet(settings, env={**ENV, FLEET_ENV: str(path)}).path == str(path)


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        (
            TWO.replace("dsn_env: BILLING_DSN", "dsn_env: postgresql://x@y/z"),
            ENV,
            'outbox "billing" (outboxes[1]), dsn_env: ',
        ),
        (TWO, {k: v for k, v in ENV.items() if k != "BILLING_DSN"}, "BILLING_DSN is not set"),
        (
            TWO.replace("name: billing", "name: orders"),
            ENV,
            'outbox "orders" (outboxes[1]), name: also the name of outboxes[0]',
        ),
        (
            TWO.replace("lock_timeout: 5m", "lock_timout: 5m"),
            ENV,
            'outbox "orders" (outboxes[0]), lock_timout: unknown key; did you mean "lock_timeout"',
        ),
        (
            TWO.replace("failed: 90d", "failed: 2h"),
            ENV,
            'outbox "orders" (outboxes[0]), retention.failed: retention is written in days',
        ),
        (TWO.replace("name: billing", "name: Billing Co"), ENV, "is not an outbox name"),
        (TWO.replace("service: orders", "outbox: orders"), ENV, "not 'outbox'"),
        (TWO.replace("table: billing.outbox", "table: a.b.c"), ENV, 'outbox "billing"'),
        ("version: 2\noutboxes: []\n", ENV, "version"),
        ("version: 1\noutboxes:\n  - &a {name: x, dsn_env: X}\n", ENV, "anchors"),
    ],
)
def test_each_problem_names_the_outbox_and_the_field(tmp_path, settings, text, env, message):
    path = write(tmp_path, text)
    with pytest.raises(FleetError) as raised:
        load_fleet(settings, path, env)
    assert message in str(raised.value)
    assert str(raised.value).startswith(f"{path}: ")


def documented_example() -> str:
    """The fleet file of docs/fleet.md, its first example."""
    page = (Path(__file__).parents[2] / "docs" / "fleet.md").read_text()
    return page.split("```yaml\n", 1)[1].split("```", 1)[0]


def test_one_load_names_every_unset_variable_of_every_outbox(tmp_path, settings):
    path = write(tmp_path, documented_example())
    with pytest.raises(FleetError) as raised:
        load_fleet(settings, path, {})
    unset = "the environment variable {} is not set"
    assert str(raised.value).splitlines() == [
        f'{path}: outbox "orders" (outboxes[0]), dsn_env: {unset.format("ORDERS_DSN")}',
        f'{path}: outbox "orders" (outboxes[0]), primary_dsn_env: {unset.format("ORDERS_PRIMARY")}',
        f'{path}: outbox "orders" (outboxes[0]), actions_dsn_env: {unset.format("ORDERS_ACTIONS")}',
        f'{path}: outbox "shipping" (outboxes[1]), dsn_env: {unset.format("ORDERS_DSN")}',
        f'{path}: outbox "billing" (outboxes[2]), dsn_env: {unset.format("BILLING_DSN")}',
    ]
    # the optional keys left out, only the DSNs are needed: the documented example loads
    env = {"ORDERS_DSN": ENV["ORDERS_DSN"], "BILLING_DSN": ENV["BILLING_DSN"]}
    text = documented_example().replace("    primary_dsn_env: ORDERS_PRIMARY", "    # ")
    text = text.replace("    actions_dsn_env: ORDERS_ACTIONS", "    # ")
    fleet = load_fleet(settings, write(tmp_path, text), env)
    assert fleet.names == ["orders", "shipping", "billing"]
    orders = fleet.get("orders").settings
    assert orders.primary_target == orders.actions_target == ENV["ORDERS_DSN"]


def test_a_dsn_never_appears_in_an_error(tmp_path, settings):
    env = {**ENV, "BILLING_DSN": "postgresql://monitor:s3cret@db-b/billing?bogus=1"}
    with pytest.raises(FleetError) as raised:
        load_fleet(settings, write(tmp_path, TWO), env)
    assert "BILLING_DSN holds no usable DSN" in str(raised.value)
    assert "s3cret" not in str(raised.value)


@pytest.mark.parametrize(
    "third",
    [
        "  - {name: again, dsn_env: BILLING_DSN, table: billing.outbox}",  # same variable
        "  - {name: again, dsn_env: COPY_DSN, table: billing.outbox}",  # same DSN value
        "  - {name: again, dsn_env: SPELLED_DSN, table: billing.outbox}",  # spelled otherwise
        "  - {name: again, dsn_env: PORT_DSN, table: billing.outbox}",  # the default port
    ],
)
def test_the_same_database_and_table_twice_is_refused_naming_both(tmp_path, settings, third):
    env = {
        **ENV,
        "COPY_DSN": ENV["BILLING_DSN"],
        "SPELLED_DSN": "host=db-b dbname=billing user=reader application_name=again",
        "PORT_DSN": "postgresql://monitor@db-b:5432/billing?sslmode=require",
    }
    with pytest.raises(FleetError) as refused:
        load_fleet(settings, write(tmp_path, TWO + third + "\n"), env)
    assert str(refused.value).endswith(
        'outbox "again" (outboxes[2]), table: the same database and table as '
        'outbox "billing" (outboxes[1]); each outbox is one table'
    )
    assert "db-b" not in str(refused.value)


def test_the_same_database_with_another_table_is_two_outboxes(tmp_path, settings):
    third = "  - {name: shipping, dsn_env: BILLING_DSN, table: billing.shipping_outbox}\n"
    fleet = load_fleet(settings, write(tmp_path, TWO + third), ENV)
    assert fleet.names == ["orders", "billing", "shipping"]


def test_the_dashboards_fleet_scheduler_writes_through_the_actions_dsn(tmp_path, settings):
    """``dashboard --with-scheduler``: an outbox without ``primary_dsn_env`` writes through
    its ``actions_dsn_env``; one with a primary keeps it; one with neither writes through
    its ``dsn_env`` (``primary_target``)."""
    from outbox_monitor.service.fleet_scheduler import writing_with_actions

    text = TWO + "    actions_dsn_env: BILLING_ACTIONS\n  - {name: plain, dsn_env: BILLING_DSN}\n"
    env = {**ENV, "BILLING_ACTIONS": "postgresql://operator@db-b/billing"}
    fleet = load_fleet(settings, write(tmp_path, text), env=env)
    written = writing_with_actions(fleet)
    assert (written.names, written.path) == (["orders", "billing", "plain"], fleet.path)
    assert [o.settings.primary_target for o in written.outboxes] == [
        "postgresql://monitor@db-a-primary/orders",
        "postgresql://operator@db-b/billing",
        "postgresql://monitor@db-b/billing",
    ]
    assert [o.settings.fleet_outbox for o in written.outboxes] == ["orders", "billing", "plain"]
