"""Roles per outbox (issue 16 item 6): a fleet file's ``access`` maps roles for its outbox
alone, with the entries of OUTBOX_MONITOR_ADMINS/OPERATORS/VIEWERS; an error names the outbox
and the field."""

import pytest

from outbox_monitor.access import Role, role_for
from outbox_monitor.config.fleet import FleetError, load_fleet
from outbox_monitor.config.settings import load_settings

ENV = {"A_DSN": "postgresql://monitor@db-a/a", "B_DSN": "postgresql://monitor@db-b/b"}
FILE = """
version: 1
outboxes:
  - name: payments
    dsn_env: A_DSN
    access: {operators: [Ops@Example.com, groups=payments-oncall], viewers: ["@example.com"]}
  - name: billing
    dsn_env: B_DSN
    access: {admins: [boss@example.com], viewers: [ops@example.com]}
  - {name: plain, dsn_env: B_DSN, table: public.plain_outbox}
"""


@pytest.fixture
def fleet(tmp_path):
    path = tmp_path / "outboxes.yml"
    path.write_text(FILE)
    settings = load_settings(operators="ops@example.com", viewers="@example.org")
    return load_fleet(settings, path, env=ENV)


def test_an_operator_of_one_outbox_is_a_viewer_of_another(fleet):
    payments, billing, plain = (o.settings for o in fleet.outboxes)
    assert role_for(payments, "ops@example.com") == Role.operator  # e-mails lowercased
    assert role_for(billing, "ops@example.com") == Role.viewer
    assert role_for(plain, "ops@example.com") == Role.operator  # the process's mapping
    assert role_for(payments, "eve@example.com") == Role.viewer  # the domain
    assert role_for(payments, "x@corp.io", {"groups": ["payments-oncall"]}) == Role.operator
    assert role_for(billing, "boss@example.com") == Role.admin
    # an outbox with its own mapping inherits nothing of the process's
    assert role_for(billing, "eve@example.org") is None
    assert role_for(plain, "eve@example.org") == Role.viewer


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            "access: {operators: [not an entry]}",
            "access.operators: 'not an entry' is not an e-mail",
        ),
        ("access: {operatorz: [a@b.c]}", 'access.operatorz: unknown key; did you mean "operators"'),
        ("access: [a@b.c]", "access: "),
    ],
)
def test_a_bad_access_names_the_outbox_and_the_field(tmp_path, entry, message):
    path = tmp_path / "outboxes.yml"
    path.write_text(f"version: 1\noutboxes:\n  - name: payments\n    dsn_env: A_DSN\n    {entry}\n")
    with pytest.raises(FleetError) as raised:
        load_fleet(load_settings(), path, env=ENV)
    assert f'outbox "payments" (outboxes[0]), {message}' in str(raised.value)


def test_the_dashboard_serves_a_fleet_with_the_process_mapping(fleet, monkeypatch):
    from outbox_monitor.cli.serving import dashboard_settings

    monkeypatch.setenv("OUTBOX_MONITOR_OPERATORS", "ops@example.com")
    for name in ("OUTBOX_MONITOR_DSN", "DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    every = list(fleet.outboxes)
    assert dashboard_settings(every).dsn is None  # the file's, per page and per outbox
    payments = dashboard_settings([fleet.get("payments")])
    # the in-process scheduler's outbox, but not its role mapping as the process's
    assert (payments.dsn, payments.operators) == (ENV["A_DSN"], ("ops@example.com",))
