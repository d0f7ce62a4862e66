"""Read replicas without a database: when a reading stops evaluation, and what the banner,
/healthz and the log say (issue 14 item 4; the real standby is in
tests/integration/test_replica.py)."""

from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.store.standby import ReplicaStatus, skip_reason

PRIMARY = ReplicaStatus(in_recovery=False, lag_seconds=0.0, target="u@primary:5432/app")
IDLE = ReplicaStatus(in_recovery=True, lag_seconds=0.0, target="u@standby:5432/app")
LAGGING = ReplicaStatus(in_recovery=True, lag_seconds=75.0, target="u@standby:5432/app")
UNKNOWN = ReplicaStatus(in_recovery=True, lag_seconds=None, target="u@standby:5432/app")


def test_only_a_standby_over_the_limit_or_of_unknown_lag_stops_evaluation():
    assert not PRIMARY.exceeds(60) and not IDLE.exceeds(60) and not LAGGING.exceeds(75)
    assert LAGGING.exceeds(60) and UNKNOWN.exceeds(60)
    assert LAGGING.as_json() == {"in_recovery": True, "lag_seconds": 75.0}
    assert UNKNOWN.as_json() == {"in_recovery": True, "lag_seconds": None}
    assert LAGGING.describe() == "hot standby u@standby:5432/app, replay lag 1m 15s"
    assert PRIMARY.describe() == "primary u@primary:5432/app"


def test_skip_reason_says_the_lag_and_the_setting():
    assert skip_reason(LAGGING, 60) == (
        "rules not evaluated: replica lags 1m 15s (u@standby:5432/app; more than "
        "OUTBOX_MONITOR_MAX_REPLICA_LAG 1m 0s)"
    )
    assert "replica lags an unknown time" in skip_reason(UNKNOWN, 60)


def test_healthz_stays_healthy_and_carries_the_notice_while_skipping():
    status = SchedulerStatus()
    status.replica(LAGGING, skipping=True, max_lag=60)
    _, details = status.health()
    assert details["notice"] == skip_reason(LAGGING, 60)
    assert details["replica"] == {
        "in_recovery": True,
        "lag_seconds": 75.0,
        "max_lag_seconds": 60,
        "evaluating": False,
    }
    status.replica(IDLE, skipping=False, max_lag=60)
    assert status.health()[1]["notice"] is None
