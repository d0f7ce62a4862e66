"""The pure state step of the evaluator (no database), and silence matching."""

from datetime import UTC, datetime, timedelta

from outbox_monitor.alerts.silences import matches
from outbox_monitor.alerts.state_machine import (
    InstanceState,
    advance,
    dedupe_key,
)
from outbox_monitor.durations import duration_label

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def step(state, seconds, *, breached, value=None, for_=0.0, keep=0.0, error=None):
    """One ``advance`` of ``state`` at ``seconds`` after T0; returns (state, steps)."""
    return advance(
        state,
        now=at(seconds),
        breached=breached,
        value=value,
        for_=for_,
        keep_firing_for=keep,
        error=error,
    )


def run(states, *, for_=60.0, keep=120.0):
    """Feed (seconds, breached) observations; return every transition as 'a→b@t'."""
    state = InstanceState()
    seen = []
    for seconds, breached in states:
        state, steps = step(state, seconds, breached=breached, value=1.0, for_=for_, keep=keep)
        seen += [f"{s.from_state}→{s.to_state}@{seconds:g}" for s in steps]
    return state, seen


def test_pending_then_firing_after_for_then_resolved_after_keep_firing_for():
    state, seen = run([(0, True), (59, True), (60, True), (61, False), (180, False), (181, False)])
    assert seen == ["inactive→pending@0", "pending→firing@60", "firing→inactive@181"]
    assert state.state == "inactive" and state.firing_seq == 1


def test_for_zero_fires_at_once_and_keep_zero_resolves_at_once():
    state, seen = run([(0, True), (10, False)], for_=0, keep=0)
    assert seen == ["inactive→firing@0", "firing→inactive@10"]
    assert state.state == "inactive" and state.firing_since is None


def test_pending_that_clears_goes_back_silently():
    state = InstanceState()
    state, _ = step(state, 0, breached=True, value=5, for_=60)
    state, steps = step(state, 30, breached=False, value=1, for_=60)
    assert [(s.to_state, s.kind) for s in steps] == [("inactive", None)]
    assert state.pending_since is None


def test_breach_while_firing_restarts_keep_firing_for():
    state, seen = run([(0, True), (10, False), (100, True), (110, False), (200, False)], for_=0)
    assert seen == ["inactive→firing@0"]
    assert state.state == "firing" and state.cleared_since == at(110)


def test_error_from_firing_stays_in_the_episode_and_its_resolve_closes_it():
    state, _ = run([(0, True)], for_=0)
    state, steps = step(state, 5, breached=False, error="boom")
    assert [(s.from_state, s.to_state, s.kind, s.seq) for s in steps] == [
        ("firing", "error", "error", 1)
    ]
    state, steps = step(state, 6, breached=False, error="again")
    assert steps == [] and state.error == "again"
    state, steps = step(state, 7, breached=True, value=3)
    assert [(s.to_state, s.kind, s.seq) for s in steps] == [
        ("inactive", "resolved", 1),
        ("firing", "firing", 2),
    ]
    assert state.firing_seq == 2 and state.error is None


def test_error_from_inactive_starts_an_episode():
    state, steps = step(InstanceState(firing_seq=3), 0, breached=False, error="x")
    assert steps[0].seq == 4 and state.firing_seq == 4 and state.state == "error"


def test_dedupe_keys_and_duration_labels():
    assert dedupe_key("backlog", "", 2, "firing") == "backlog||2|firing"
    assert dedupe_key("p", "event_type=a", 1, "repeat", 3) == "p|event_type=a|1|repeat-3"
    assert [duration_label(s) for s in (900, 3600, 86400, 90, 45)] == [
        "15m",
        "1h",
        "24h",
        "90s",
        "45s",
    ]


def test_silence_matchers_equality_and_like():
    labels = {"rule": "payment-failed", "severity": "critical", "event_type": "payment.captured"}
    assert matches({"matchers": {"rule": "payment-failed"}}, labels)
    assert matches({"matchers": {"event_type": "payment.%", "severity": "critical"}}, labels)
    assert not matches({"matchers": {"event_type": "payment_captured"}}, labels)
    assert not matches({"matchers": {"rule": "payment-failed", "team": "core"}}, labels)
    assert not matches({"matchers": {}}, labels)
    assert matches({"matchers": {"event_type": "payment.%"}}, {"event_type": "payment.%"})
