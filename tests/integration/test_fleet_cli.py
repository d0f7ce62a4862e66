"""``outbox-monitor outboxes`` on real databases (issue 16 item 1): two outboxes in two
databases of the test cluster and one whose database is missing; a DSN is never printed."""

import json

from click.testing import CliRunner

from outbox_monitor.cli import main

FLEET = """
version: 1
outboxes:
  - name: orders
    dsn_env: ORDERS_DSN
    labels: {team: payments}
  - name: billing
    dsn_env: BILLING_DSN
  - name: gone
    dsn_env: GONE_DSN
  - name: tableless
    dsn_env: ORDERS_DSN
    table: public.no_such_outbox
"""


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False, prog_name="outbox-monitor")


def test_each_outbox_checked_on_its_own_database(dsn, make_dsn, empty_dsn, monkeypatch, tmp_path):
    billing = make_dsn()
    gone = empty_dsn.rsplit("/", 1)[0] + "/no_such_database"
    for name, value in (("ORDERS_DSN", dsn), ("BILLING_DSN", billing), ("GONE_DSN", gone)):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("OUTBOX_MONITOR_DSN", raising=False)
    path = tmp_path / "outboxes.yml"
    path.write_text(FLEET)

    result = run("outboxes", "--file", str(path), "--check", "--json")

    assert result.exit_code == 1, result.output
    listed = {row["name"]: row for row in json.loads(result.stdout)["outboxes"]}
    assert list(listed) == ["orders", "billing", "gone", "tableless"]
    assert listed["orders"]["reachable"] and listed["orders"]["labels"] == {"team": "payments"}
    assert listed["orders"]["database"].endswith("/" + dsn.rsplit("/", 1)[1])
    assert listed["billing"]["reachable"] and listed["billing"]["error"] is None
    assert not listed["gone"]["reachable"] and "no_such_database" in listed["gone"]["error"]
    # a missing table says how to fix it, for this outbox of the file
    assert not listed["tableless"]["reachable"]
    assert listed["tableless"]["error"] == (
        "the outbox table public.no_such_outbox does not exist in this database; did you mean "
        'public.integration_outbox? Set the `table:` of outbox "tableless" in the fleet file '
        "to your outbox table (schema.table). To create a new, empty outbox named "
        "public.no_such_outbox, run `outbox-monitor init-db --create-table --outbox tableless`."
    )
    assert json.loads(result.stdout)["failed"] == 2

    text = run("outboxes", "--file", str(path))
    assert text.exit_code == 0  # listed, not checked
    assert "4 outbox(es) from " + str(path) in text.output
    assert "password" not in text.output


def test_an_invalid_file_exits_2_naming_the_outbox_and_field(monkeypatch, tmp_path):
    monkeypatch.delenv("BILLING_DSN", raising=False)
    monkeypatch.setenv("ORDERS_DSN", "postgresql://x@localhost/orders")
    monkeypatch.setenv("GONE_DSN", "postgresql://x@localhost/gone")
    path = tmp_path / "outboxes.yml"
    path.write_text(FLEET)

    result = CliRunner().invoke(main, ["outboxes", "--file", str(path)])

    assert result.exit_code == 2
    assert 'outbox "billing" (outboxes[1]), dsn_env: the environment variable BILLING_DSN' in (
        result.output
    )


def test_one_run_names_every_unset_variable_of_every_outbox(monkeypatch, tmp_path):
    for name in ("ORDERS_DSN", "BILLING_DSN", "GONE_DSN"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "outboxes.yml"
    path.write_text(FLEET)

    result = CliRunner().invoke(main, ["outboxes", "--file", str(path)])

    assert result.exit_code == 2
    unset = [("orders", "ORDERS_DSN"), ("billing", "BILLING_DSN"), ("gone", "GONE_DSN")]
    unset.append(("tableless", "ORDERS_DSN"))
    for index, (outbox, variable) in enumerate(unset):
        assert (
            f'{path}: outbox "{outbox}" (outboxes[{index}]), dsn_env: the environment variable '
            f"{variable} is not set"
        ) in result.output


TWO = """
version: 1
outboxes:
  - name: orders
    dsn_env: ORDERS_DSN
  - name: billing
    dsn_env: BILLING_DSN
"""


def two_outboxes(dsn, make_dsn, monkeypatch, tmp_path) -> str:
    monkeypatch.setenv("ORDERS_DSN", dsn)
    monkeypatch.setenv("BILLING_DSN", make_dsn())
    monkeypatch.delenv("OUTBOX_MONITOR_DSN", raising=False)
    path = tmp_path / "outboxes.yml"
    path.write_text(TWO)
    monkeypatch.setenv("OUTBOX_MONITOR_OUTBOXES", str(path))
    return str(path)


def test_status_of_every_outbox_keyed_by_name(dsn, make_dsn, monkeypatch, tmp_path, rows):
    two_outboxes(dsn, make_dsn, monkeypatch, tmp_path)
    rows.add(event_type="order.paid", created_ago=120)  # in orders' database only
    rows.add(event_type="order.paid", created_ago=60)

    every = run("status", "--json")
    billing = run("status", "--json", "--outbox", "billing")

    assert every.exit_code == 0, every.output
    found = json.loads(every.stdout)
    assert list(found["outboxes"]) == ["orders", "billing"] and found["failed"] == []
    assert found["outboxes"]["orders"]["queue_depth"] == 2
    assert found["outboxes"]["billing"]["queue_depth"] == 0
    assert json.loads(billing.stdout)["queue_depth"] == 0  # that outbox alone, not keyed


def test_a_command_on_one_outbox_must_name_it(dsn, make_dsn, monkeypatch, tmp_path, rows):
    path = two_outboxes(dsn, make_dsn, monkeypatch, tmp_path)
    stuck = rows.add(status="processing", created_ago=3600, locked_ago=1800)  # in orders

    unnamed = CliRunner().invoke(main, ["reap", "--dry-run", "--json"])
    unknown = CliRunner().invoke(main, ["reap", "--dry-run", "--outbox", "shipping"])
    both = CliRunner().invoke(main, ["reap", "--dry-run", "--outbox", "orders", "--dsn", dsn])
    billing = run("reap", "--yes", "--json", "--outbox", "billing")
    orders = run("reap", "--yes", "--json", "--outbox", "orders")

    assert unnamed.exit_code == 2
    assert json.loads(unnamed.stdout)["error"] == (
        f"{path} lists 2 outboxes: name one with --outbox (orders, billing)"
    )
    assert unknown.exit_code == 2 and "no outbox named 'shipping'" in unknown.output
    assert both.exit_code == 2 and "--outbox and --dsn/--table: use one" in both.output
    assert json.loads(billing.stdout)["matched"] == 0  # another database: nothing stuck
    assert json.loads(orders.stdout)["changed"] == 1
    assert rows.get(stuck)["status"] == "pending"


def test_scheduler_refuses_a_rule_naming_an_outbox_missing_from_the_fleet(
    dsn, make_dsn, monkeypatch, tmp_path
):
    """``outbox-monitor scheduler`` with a fleet file exits 2 at start, naming the rule and
    its ``outboxes`` field, before watching anything."""
    monkeypatch.setenv("ORDERS_DSN", dsn)
    monkeypatch.setenv("BILLING_DSN", make_dsn())
    monkeypatch.delenv("OUTBOX_MONITOR_DSN", raising=False)
    fleet = tmp_path / "outboxes.yml"
    fleet.write_text(FLEET.split("  - name: gone")[0])
    monkeypatch.setenv("OUTBOX_MONITOR_OUTBOXES", str(fleet))
    rules = tmp_path / "alerts.yml"
    rules.write_text(
        "version: 1\n"
        "rules:\n"
        "  - name: shipping_depth\n"
        "    metric: depth\n"
        "    op: '>'\n"
        "    threshold: 10\n"
        "    severity: warning\n"
        "    outboxes: [shipping]\n"
    )

    for selected in ([], ["--outbox", "orders"]):  # one outbox: checked against the file
        result = CliRunner().invoke(
            main, ["scheduler", *selected, "--rules", str(rules), "--metrics-port", "0"]
        )

        assert result.exit_code == 2, result.output
        assert "shipping_depth" in result.output and "outboxes" in result.output
        assert f'unknown outbox "shipping" ({fleet} lists orders, billing)' in result.output
