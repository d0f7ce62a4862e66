"""Issue 29 item 5: each page shows its action buttons for the role on the outbox acted on —
the one chosen in the sidebar — not the role of the outbox the page was opened for. An
operator of billing who switches the Actions page to orders, where they are a viewer, gets
the preview buttons disabled with the reason; switched back, enabled again."""

from tests.fleet_rows import seed_fleet, write_fleet
from tests.ui.test_fleet_page import signed_in

ACCESS = """
version: 1
outboxes:
  - {name: orders, dsn_env: ORDERS_DSN, access: {viewers: [op@example.com]}}
  - {name: billing, dsn_env: BILLING_DSN, access: {operators: [op@example.com]}}
"""
PREVIEWS = ("actions.reap.preview_button", "actions.replay.preview_button")


def previews(at) -> dict[str, bool]:
    """Each preview button of the Actions page: whether it is disabled."""
    return {b.key: b.disabled for b in at.button if b.key in PREVIEWS}


def test_the_actions_page_offers_buttons_by_the_role_on_the_chosen_outbox(
    open_page, environment, dsn, make_dsn, rows, tmp_path
):
    billing = make_dsn()
    seed_fleet(dsn, billing, rows)
    path = write_fleet(tmp_path, environment, dsn, billing)
    path.write_text(ACCESS)
    environment.setenv("OUTBOX_MONITOR_OUTBOXES", str(path))
    environment.setenv("OUTBOX_MONITOR_AUTH", "oidc")

    at = open_page("actions", outbox="billing", user=signed_in("op@example.com"))
    assert not at.exception
    assert previews(at) == dict.fromkeys(PREVIEWS, False)

    at.selectbox(key="outbox").select("orders").run()
    assert not at.exception
    assert previews(at) == dict.fromkeys(PREVIEWS, True)
    reasons = [c.value for c in at.caption]
    assert "`op@example.com` is a viewer on the outbox `orders`: reap needs the operator role." in (
        reasons
    )
    assert (
        "`op@example.com` is a viewer on the outbox `orders`: replay needs the operator role."
        in (reasons)
    )

    at.selectbox(key="outbox").select("billing").run()
    assert previews(at) == dict.fromkeys(PREVIEWS, False)
