"""The Alerts page marks an inhibited instance with what inhibits it (issue 31 item 4):
AppTest on a real Postgres, instances from a real evaluation of hand-made outbox rows (a
dead letter fires the source, pending rows the targets)."""

from pathlib import Path

from rendered import plain

from outbox_monitor.alerts.evaluate import Evaluator
from outbox_monitor.alerts.rules_file import RULES_ENV, load_rules
from tests.integration.test_inhibition import rules

PAGE = "alerts"


def test_an_inhibited_instance_is_marked_with_what_inhibits_it(
    open_page, environment, tmp_path: Path, db, rows
) -> None:
    path = tmp_path / "alerts.yml"
    path.write_text(rules())
    environment.setenv(RULES_ENV, str(path))
    rows.add(event_type="order.paid")
    rows.add(event_type="order.shipped")
    rows.add_failed(event_type="order.paid")
    Evaluator(db, load_rules(path)).run_once()

    at = open_page(PAGE)

    assert not at.exception
    states = {
        (r["rule"], r["instance"]): r["state"] for r in at.dataframe[0].value.to_dict("records")
    }
    assert states == {
        ("type-backlog", "event_type=order.paid"): (
            "FIRING · inhibited by type-dead event_type=order.paid"
        ),
        ("type-backlog", "event_type=order.shipped"): "FIRING",
        ("outbox-backlog", "all"): "FIRING",
        ("type-dead", "event_type=order.paid"): "FIRING",
    }
    captions = [plain(c.value) for c in at.caption]
    assert (
        "Inhibited (1): type-backlog event_type=order.paid by type-dead event_type=order.paid"
        in captions
    )
    tiles = {m.label: m.value for m in at.metric}
    assert tiles["Firing"] == "4"  # an inhibited alert still fires on the dashboard

    # the Notifications tab says why its notification was not posted
    notes = at.dataframe[1].value.to_dict("records")
    [muted] = [
        n for n in notes if n["instance"] == "event_type=order.paid" and n["rule"] == "type-backlog"
    ]
    assert muted["status"] == "suppressed"
    at.selectbox(key="alerts.notification").set_value(int(muted["id"])).run()
    assert (
        "Not posted: inhibited by type-dead event_type=order.paid, firing. Below is what would "
        "have been posted." in [plain(m.value) for m in at.markdown]
    )
