import pytest

from outbox_monitor.config.settings import load_settings
from outbox_monitor.config.values import split_table_name
from outbox_monitor.errors import ConfigError


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in (
        "OUTBOX_MONITOR_DSN",
        "DATABASE_URL",
        "OUTBOX_MONITOR_TABLE",
        "OUTBOX_MONITOR_LOCK_TIMEOUT",
        "OUTBOX_MONITOR_MAX_ATTEMPTS",
    ):
        monkeypatch.delenv(name, raising=False)


def test_defaults_match_the_spec():
    settings = load_settings()
    assert settings.dsn is None
    assert settings.table_parts == ("public", "integration_outbox")
    assert settings.ledger_parts == ("public", "integration_idempotency")
    assert (settings.lock_timeout, settings.max_attempts, settings.window) == (900.0, 10, 3600.0)
    assert settings.statement_timeout == 5.0


def test_dsn_falls_back_to_database_url(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgresql://a@h/db")
    assert load_settings().dsn == "postgresql://a@h/db"
    monkeypatch.setenv("OUTBOX_MONITOR_DSN", "postgresql://b@h/db")
    assert load_settings().dsn == "postgresql://b@h/db"


def test_durations_from_the_environment(monkeypatch):
    monkeypatch.setenv("OUTBOX_MONITOR_LOCK_TIMEOUT", "5m")
    assert load_settings().lock_timeout == 300.0


def test_error_names_the_variable_and_the_problem(monkeypatch):
    monkeypatch.setenv("OUTBOX_MONITOR_LOCK_TIMEOUT", "soon")
    monkeypatch.setenv("OUTBOX_MONITOR_MAX_ATTEMPTS", "0")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    message = str(caught.value)
    assert "OUTBOX_MONITOR_LOCK_TIMEOUT: expected a duration" in message
    assert "'soon'" in message
    assert "OUTBOX_MONITOR_MAX_ATTEMPTS" in message


def test_table_name_is_validated(monkeypatch):
    monkeypatch.setenv("OUTBOX_MONITOR_TABLE", "public.outbox; drop table x")
    with pytest.raises(ConfigError, match=r"OUTBOX_MONITOR_TABLE: expected schema\.table"):
        load_settings()


def test_split_table_name():
    assert split_table_name("billing.Outbox_Events") == ("billing", "Outbox_Events")
    assert split_table_name("outbox") == ("public", "outbox")
    with pytest.raises(ValueError):
        split_table_name("a.b.c")


def test_overrides_win_and_none_is_ignored(monkeypatch):
    monkeypatch.setenv("OUTBOX_MONITOR_TABLE", "app.events")
    assert load_settings(table=None).table == "app.events"
    assert load_settings(table="ops.outbox").table_parts == ("ops", "outbox")


def test_read_replica_settings_default_and_name_their_variable(monkeypatch):
    settings = load_settings(dsn="postgresql://viewer@standby/app")
    assert settings.primary_dsn is None and settings.max_replica_lag == 60.0
    assert settings.primary_target == "postgresql://viewer@standby/app"
    monkeypatch.setenv("OUTBOX_MONITOR_PRIMARY_DSN", "postgresql://scheduler@primary/app")
    monkeypatch.setenv("OUTBOX_MONITOR_MAX_REPLICA_LAG", "2m")
    settings = load_settings(dsn="postgresql://viewer@standby/app")
    assert settings.primary_target == "postgresql://scheduler@primary/app"
    assert settings.max_replica_lag == 120.0
    monkeypatch.setenv("OUTBOX_MONITOR_MAX_REPLICA_LAG", "soon")
    monkeypatch.setenv("OUTBOX_MONITOR_PRIMARY_DSN", "not a dsn")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    message = str(caught.value)
    assert "OUTBOX_MONITOR_MAX_REPLICA_LAG: expected a duration" in message
    assert "OUTBOX_MONITOR_PRIMARY_DSN: not a connection string" in message


def test_the_automatic_reapers_budget_defaults_and_is_validated_naming_its_variable(
    monkeypatch,
):
    for name in ("OUTBOX_MONITOR_AUTO_REAP_MAX_ROWS", "OUTBOX_MONITOR_AUTO_REAP_MAX_SHARE"):
        monkeypatch.delenv(name, raising=False)
    defaults = load_settings()
    assert (defaults.auto_reap_max_rows, defaults.auto_reap_max_share) == (500, 0.5)
    for written, share in (("25%", 0.25), ("0.25", 0.25), ("100%", 1.0), ("1", 1.0)):
        monkeypatch.setenv("OUTBOX_MONITOR_AUTO_REAP_MAX_SHARE", written)
        assert load_settings().auto_reap_max_share == share
    for written, problem in (
        ("50", "a share is at most 1: write 50% or 0.5, not 50"),
        ("0", "greater than 0"),
        ("150%", "less than or equal to 1"),
        ("half", "not a share: 'half'"),
    ):
        monkeypatch.setenv("OUTBOX_MONITOR_AUTO_REAP_MAX_SHARE", written)
        with pytest.raises(ConfigError, match=f"OUTBOX_MONITOR_AUTO_REAP_MAX_SHARE: .*{problem}"):
            load_settings()
    monkeypatch.delenv("OUTBOX_MONITOR_AUTO_REAP_MAX_SHARE")
    for written in ("0", "100001"):
        monkeypatch.setenv("OUTBOX_MONITOR_AUTO_REAP_MAX_ROWS", written)
        with pytest.raises(ConfigError, match="OUTBOX_MONITOR_AUTO_REAP_MAX_ROWS"):
            load_settings()


@pytest.mark.parametrize("variable", ["OUTBOX_MONITOR_REFRESH", "OUTBOX_MONITOR_OUTAGE_RETRY"])
def test_a_browser_timer_setting_is_at_most_a_day_naming_its_variable(monkeypatch, variable):
    field = variable.removeprefix("OUTBOX_MONITOR_").lower()
    monkeypatch.setenv(variable, "1d")
    assert getattr(load_settings(), field) == 86_400.0
    # 25 days is past a browser's setInterval (2^31 - 1 ms ≈ 24.8 days): it would fire at once
    for written in ("86401", "25d"):
        monkeypatch.setenv(variable, written)
        with pytest.raises(ConfigError, match=f"{variable}: .*less than or equal to 86400"):
            load_settings()
