"""A replica's share of a fleet's leases (issue 16 item 5): ⌈M/N⌉, taken while it holds fewer,
the surplus released after the running pass; job ids per outbox in one scheduler; families
labelled by outbox."""

import threading
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client.core import GaugeMetricFamily

from outbox_monitor.export.fleet import labelled
from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.service.fleet_scheduler import OutboxJobs
from outbox_monitor.service.jobs import JobRuntime
from outbox_monitor.service.replica_registry import LeaseShare, fleet_key


def test_a_replica_holds_at_most_its_share_of_the_leases():
    held = [0]
    share = LeaseShare(3, lambda: held[0])
    assert share.cap == 3 and share.may_take()  # alone: every outbox
    share.replicas = 2
    assert share.cap == 2  # 3 outboxes, 2 replicas: 2/1, never 3/0
    held[0] = 3
    assert not share.may_take() and share.surplus() == 1
    held[0] = 1
    assert share.may_take() and share.surplus() == 0
    share.replicas = 4  # more replicas than outboxes: one each at most
    assert share.cap == 1 and not share.may_take()
    assert LeaseShare(50, lambda: 0).cap == 50
    fifty = LeaseShare(50, lambda: 0)
    fifty.replicas = 3
    assert fifty.cap == 17  # ⌈50/3⌉


def test_the_fleet_key_ignores_the_order_of_the_outboxes():
    assert fleet_key(["orders", "billing"]) == fleet_key(["billing", "orders"])
    assert fleet_key(["orders"]) != fleet_key(["orders", "billing"])


def test_each_outbox_has_its_own_job_ids_pool_and_phase_in_one_scheduler():
    scheduler = BackgroundScheduler(timezone=UTC)
    start = datetime(2026, 12, 1, tzinfo=UTC)
    jobs = {
        name: OutboxJobs(scheduler, name, phase)
        for name, phase in (("orders", 0), ("billing", 0.5))
    }
    for outbox in jobs.values():
        outbox.add_job(print, "interval", seconds=60, id="sampler", name="s", next_run_time=start)
    assert sorted(job.id for job in scheduler.get_jobs()) == ["sampler@billing", "sampler@orders"]
    orders, billing = jobs["orders"].get_job("sampler@orders"), scheduler.get_job("sampler@billing")
    assert orders.name == "s (orders)" and orders.executor == "outbox:orders"
    assert billing.executor == "outbox:billing"
    # half of the 60 s interval later: the two outboxes' passes never start together
    assert (orders.next_run_time, billing.next_run_time) == (start, start + timedelta(seconds=30))


def test_every_sample_gets_the_outbox_label_first():
    family = GaugeMetricFamily("outbox_queue_depth", "rows", labels=["event_type"])
    family.add_metric(["order.paid"], 3)
    [(same, sample)] = labelled([family], "orders")
    assert same is family
    assert sample.labels == {"outbox": "orders", "event_type": "order.paid"}
    assert sample.value == 3


class _Lease:
    """A lease held until released (the part of ``Leadership`` ``JobRuntime`` uses)."""

    held = True
    released = 0

    def try_acquire(self) -> bool:
        return self.held

    def release(self) -> None:
        self.held = False
        self.released += 1


class _Health:
    def tick(self) -> None: ...

    def due(self) -> bool:
        return True

    def succeeded(self) -> None: ...


def test_a_surplus_lease_is_released_after_the_running_pass_never_during_it():
    lease = _Lease()
    runtime = JobRuntime(None, lease, _Health(), SchedulerStatus())  # type: ignore[arg-type]
    inside, finish, passes = threading.Event(), threading.Event(), []

    def evaluation() -> None:
        passes.append("started")
        inside.set()
        finish.wait(5)

    running = threading.Thread(target=runtime.as_leader(evaluation))
    running.start()
    assert inside.wait(5)
    runtime.release()
    assert lease.held and runtime.releasing  # the pass goes on, holding the lease
    runtime.as_leader(evaluation)()  # another pass does not start meanwhile
    assert passes == ["started"]
    finish.set()
    running.join(5)
    assert not lease.held and lease.released == 1 and not runtime.releasing
    runtime.release()  # nothing running: at once
    assert lease.released == 2
