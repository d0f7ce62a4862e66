"""``/metrics`` and ``/healthz`` of a scheduler watching a fleet of outboxes (issue 16 items 4
and 5): every family of ``export.collector.OutboxCollector`` per outbox, each sample labelled
``outbox="<name>"``, plus the replicas' own families; ``/healthz`` naming every outbox whose
database is unreachable.

Label sets: with a fleet file every ``outbox_*`` and ``outbox_monitor_*`` family of an outbox
carries ``outbox`` (even a file of one outbox); without a file (the ``OUTBOX_MONITOR_*``
settings, a fleet of one) ``scheduler.run_scheduler`` exports as before, without the label,
so existing dashboards and recording rules keep their series. ``outbox_monitor_leader``
is per outbox: 1 on the replica leading it.

The replicas (``service.replica_registry``): ``outbox_monitor_replicas`` (N, live replicas of the
fleet as this one last read the registry) and ``outbox_monitor_leases_held`` (the outboxes this
replica leads).
"""

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from outbox_monitor.config.fleet import Outbox
from outbox_monitor.errors import DatabaseUnavailable
from outbox_monitor.export.collector import OutboxCollector
from outbox_monitor.export.scheduler_status import SchedulerStatus
from outbox_monitor.store.db import Database

SCRAPE_THREADS = 8
"""Outboxes whose figures are refreshed at once on a scrape (each has its own cache)."""
SCRAPE_DEADLINE_SECONDS = 8.0
"""A scrape waits at most this long for the outboxes' figures (Prometheus' default scrape
timeout is 10 s). An outbox whose figures are not in by then — its database hung: a socket
that never answers, which no statement timeout ends — is exported as ``outbox_monitor_up 0``
alone, is named on /healthz, and is not read again until that read ends."""


class LeaseCounts(Protocol):
    """What ``/metrics`` reports of this replica's lease share
    (``service.replica_registry.LeaseShare``): N, the replicas, and the leases held now."""

    replicas: int
    held: Callable[[], int]


class Member(Protocol):
    """What the exporter reads of one outbox of the fleet (``fleet_scheduler.FleetMember``)."""

    outbox: Outbox
    db: Database
    primary: Database
    status: SchedulerStatus


def labelled(families: Sequence[Metric], outbox: str) -> Iterator[tuple[Metric, Any]]:
    """Each sample of ``families`` with ``outbox`` first among its labels, beside its family."""
    for family in families:
        for sample in family.samples:
            yield family, sample._replace(labels={"outbox": outbox, **sample.labels})


class FleetCollector(Collector):
    """Every outbox's ``OutboxCollector`` families merged, labelled by outbox (see module).

    Args:
        members: the fleet's outboxes with their Databases and status.
        share: this replica's ``LeaseShare`` (``LeaseCounts``: N and the leases held).
        ruleset: the loaded alerts.yml, or ``None``.
        deadline: seconds a scrape waits for the figures (``SCRAPE_DEADLINE_SECONDS``).
    """

    def __init__(
        self,
        members: Sequence[Member],
        share: LeaseCounts,
        ruleset: Any = None,
        *,
        deadline: float = SCRAPE_DEADLINE_SECONDS,
    ) -> None:
        self.share = share
        self.deadline = deadline
        self.members = members
        self.collectors = [
            (
                member.outbox.name,
                OutboxCollector(member.db, member.status, primary=member.primary, ruleset=ruleset),
            )
            for member in members
        ]
        self._reading: dict[str, Future] = {}

    def _collected(self) -> list[list[Metric]]:
        """Each outbox's families, read at most ``SCRAPE_THREADS`` at once for at most
        ``deadline`` seconds; an outbox still read then (or still read by an earlier scrape)
        gets ``outbox_monitor_up 0`` and its status a failure (/healthz)."""
        pool = ThreadPoolExecutor(min(SCRAPE_THREADS, len(self.collectors)))
        try:
            for name, collector in self.collectors:
                if name not in self._reading or self._reading[name].done():
                    self._reading[name] = pool.submit(lambda c=collector: list(c.collect()))
            futures = [self._reading[name] for name, _ in self.collectors]
            done, _ = wait(futures, timeout=self.deadline)
        finally:
            pool.shutdown(wait=False)  # a hung read keeps its thread, not the scrape
        collected = []
        for member, future in zip(self.members, futures, strict=True):
            if future in done:
                collected.append(future.result())
                continue
            member.status.database_failed(
                DatabaseUnavailable(
                    f"no figures within {self.deadline:g} s (its database does not answer)"
                )
            )
            up = "1 when the database answered the figures query of this scrape, else 0."
            collected.append([GaugeMetricFamily("outbox_monitor_up", up, value=0.0)])
        return collected

    def collect(self) -> Iterator[Metric]:
        """Yield the merged families (one family per name, a sample per outbox), then the
        replicas' own."""
        merged: dict[str, Metric] = {}
        for (name, _), families in zip(self.collectors, self._collected(), strict=True):
            for family, sample in labelled(families, name):
                target = merged.get(family.name)
                if target is None:
                    target = Metric(family.name, family.documentation, family.type, family.unit)
                    merged[family.name] = target
                target.samples.append(sample)
        yield from merged.values()
        yield GaugeMetricFamily(
            "outbox_monitor_replicas",
            "Live scheduler replicas of this fleet, as this replica last read the registry.",
            value=float(self.share.replicas),
        )
        yield GaugeMetricFamily(
            "outbox_monitor_leases_held",
            "Outboxes of the fleet this replica leads (at most ceil(outboxes / replicas)).",
            value=float(self.share.held()),
        )


class FleetStatus:
    """``/healthz`` of a fleet's scheduler: the process's state (``SchedulerStatus.health``
    of the first outbox: the scheduler running, every job of every outbox scheduled) with,
    per outbox, whether its database answers, whether this replica leads it and its last
    error; an unreachable outbox is named in the ``notice`` (200: not this process's fault).
    """

    def __init__(self, members: Sequence[Member], share: LeaseCounts) -> None:
        self.members = members
        self.share = share

    def health(self) -> tuple[bool, dict[str, Any]]:
        """``(healthy, details)``: ``SchedulerStatus.health``'s details, with ``notice``
        naming each outbox's trouble (``outbox "x": database unreachable: …``, its replica
        and retention notices), ``outboxes`` (name → ``{"reachable", "leader",
        "last_error"}``), ``replicas`` and ``leases_held``."""
        healthy, details = self.members[0].status.health()
        notices, outboxes = [], {}
        for member in self.members:
            status, name = member.status, member.outbox.name
            own = status.health()[1]  # its notice says "database unreachable: …" first
            if own["notice"]:
                notices.append(f'outbox "{name}": {own["notice"]}')
            outboxes[name] = {
                "reachable": status.reachable,
                "leader": status.is_leader,
                "last_error": status.last_error,
            }
        details.update(
            notice="; ".join(notices) or None,
            outboxes=outboxes,
            replicas=self.share.replicas,
            leases_held=self.share.held(),
        )
        for key in ("last_error", "retention", "replica", "seconds_since_database_contact"):
            details.pop(key)  # the first outbox's: each outbox's are in its own status
        return healthy, details
