"""The demo's fleet of outboxes (``outbox-monitor demo --outboxes N``, issue 16): up to three
outboxes with traffic of their own, in databases of the throwaway cluster, listed in a fleet
file (``outboxes.yml`` in the demo's folder, read by ``fleet.load_fleet``) that names the DSN
variables the demo sets.

Each outbox publishes its own event types of the simulator's mix at its own share of the
demo's rate, worked by its own simulated workers, and calls a downstream of its own
(``downstream.Downstream`` with its own ``DownstreamOutage``): ``demo-downstream break
--url <its URL>`` breaks that outbox's calls only, its breaker opens and only its
``breaker-open`` alert fires. ``demo/fleet_run.py`` runs them; this module holds the fleet's
shape, its file and its breakers.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from outbox_monitor.config.fleet import FLEET_ENV
from outbox_monitor.config.yaml_files import dump_yaml
from outbox_monitor.demo.simulate import PERMANENT_EVENT_TYPE
from outbox_monitor.errors import OutboxMonitorError
from outbox_monitor.flow.model import ControlSettings

FLEET_FILE = "outboxes.yml"
"""The fleet file's name in the demo's folder."""


@dataclass(frozen=True)
class DemoOutbox:
    """One outbox of the demo's fleet: its ``name`` (the fleet file's), the ``database`` of
    the throwaway cluster holding its table ``public.<name>_outbox``, its ``labels``, the
    ``event_types`` it publishes (of the simulator's mix, in their relative weights), its
    ``share`` of the demo's ``--rate``, its simulated ``workers``, and the event type the
    banner's break command names (``broken``)."""

    name: str
    database: str
    event_types: tuple[str, ...]
    share: float
    workers: int
    broken: str
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def table(self) -> str:
        """``public.<name>_outbox``."""
        return f"public.{self.name}_outbox"

    @property
    def dsn_env(self) -> str:
        """The environment variable of its DSN, named by the fleet file: ``<NAME>_DSN``."""
        return f"{self.name.upper()}_DSN"

    @property
    def breakers(self) -> tuple[str, ...]:
        """The event types whose downstream has a circuit breaker: every one of its types
        but the permanently failing one (a breaker counts transient failures only)."""
        return tuple(t for t in self.event_types if t != PERMANENT_EVENT_TYPE)


# Three different traffics: orders (half the rate, HTTP downstreams with ~4 % transient
# errors), billing (a fifth: slow invoices, and crm.upsert dead-lettering every row: HTTP 401)
# and notifications (the rest: e-mail bounces dead-letter, SMTP 421s are retried). Orders and
# billing share the database "shop", notifications has "comms": two databases, as in the
# docs/fleet.md's example.
DEMO_FLEET: tuple[DemoOutbox, ...] = (
    DemoOutbox(
        "orders",
        "shop",
        ("order.paid", "payment.captured", "shipment.created"),
        share=0.5,
        workers=2,
        broken="order.paid",
        labels={"team": "payments", "service": "orders"},
    ),
    DemoOutbox(
        "billing",
        "shop",
        ("invoice.sent", PERMANENT_EVENT_TYPE),
        share=0.2,
        workers=4,  # invoices: 2.2/s at --rate 20, 2.7 at the wave's top; 4 workers take 3.2
        broken="invoice.sent",
        labels={"team": "payments", "service": "billing"},
    ),
    DemoOutbox(
        "notifications",
        "comms",
        ("notification.email", "notification.slack"),
        share=0.3,
        workers=1,
        broken="notification.email",
        labels={"team": "comms", "service": "notifications"},
    ),
)


def demo_fleet(count: int) -> tuple[DemoOutbox, ...]:
    """The first ``count`` outboxes of ``DEMO_FLEET``.

    Raises:
        OutboxMonitorError: ``count`` is not between 1 and ``len(DEMO_FLEET)``.
    """
    if not 1 <= count <= len(DEMO_FLEET):
        raise OutboxMonitorError(
            f"--outboxes {count}: the demo's fleet has 1 to {len(DEMO_FLEET)} outboxes "
            f"({', '.join(o.name for o in DEMO_FLEET)})"
        )
    return DEMO_FLEET[:count]


def write_fleet_file(folder: Path, members: Sequence[DemoOutbox], *, lock_timeout: str) -> Path:
    """Write the fleet file of ``members`` into ``folder`` (``FLEET_FILE``): name, DSN
    variable, table, ``lock_timeout`` (e.g. ``"5m"``) and labels of each; never a DSN.
    Returns its path."""
    document = {
        "version": 1,
        "outboxes": [
            {
                "name": member.name,
                "dsn_env": member.dsn_env,
                "table": member.table,
                "lock_timeout": lock_timeout,
                "labels": dict(member.labels),
            }
            for member in members
        ],
    }
    path = folder / FLEET_FILE
    path.write_text(
        f"# The demo's fleet ({FLEET_ENV}); the DSN variables are set by the demo.\n"
        + dump_yaml(document)
    )
    return path


def fleet_controls(
    member: DemoOutbox, demo_controls: Mapping[str, ControlSettings]
) -> dict[str, ControlSettings]:
    """The controls of ``member``: a circuit breaker on each of its ``breakers``, the one the
    demo's controls file gives its first downstream (``demo/controls.yml``: order.paid)."""
    breaker = next(iter(demo_controls.values()))
    return dict.fromkeys(member.breakers, breaker)
