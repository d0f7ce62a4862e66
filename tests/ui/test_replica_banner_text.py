"""The read-replica banner's text (``banners.describe_replica``), without a server."""

from outbox_monitor.store.standby import ReplicaStatus
from outbox_monitor.ui.banners import describe_replica

PRIMARY = ReplicaStatus(in_recovery=False, lag_seconds=0.0, target="u@primary:5432/app")
IDLE = ReplicaStatus(in_recovery=True, lag_seconds=0.4, target="u@standby:5432/app")
LAGGING = ReplicaStatus(in_recovery=True, lag_seconds=75.0, target="u@standby:5432/app")


def test_nothing_on_a_primary_info_within_the_limit_warning_over_it():
    assert describe_replica(PRIMARY, max_lag=60, actions=PRIMARY) is None
    level, text = describe_replica(IDLE, max_lag=60, actions=PRIMARY)
    assert level == "info" and "replay lag **0.4s**" in text and "refused" not in text
    level, text = describe_replica(LAGGING, max_lag=60, actions=PRIMARY)
    assert level == "warning" and "whose replay lags **1m 15s**" in text
    assert "evaluates no alert rule" in text


def test_actions_on_the_standby_are_said_to_be_refused():
    _, text = describe_replica(IDLE, max_lag=60, actions=IDLE)
    assert "Operator actions are refused here: `OUTBOX_MONITOR_ACTIONS_DSN` is not set" in text
    other = ReplicaStatus(in_recovery=True, lag_seconds=0.0, target="u@standby2:5432/app")
    _, text = describe_replica(IDLE, max_lag=60, actions=other)
    assert "`OUTBOX_MONITOR_ACTIONS_DSN` is a hot standby too" in text
