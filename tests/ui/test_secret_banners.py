"""Dashboard banners never show a DSN password (issue 4): a wrong password and an
unreachable server, for the read DSN on every page and for the actions DSN on a replay,
against a server that really checks passwords. Every element's content is searched."""

from collections.abc import Iterator

import psycopg
import pytest
from rendered import plain
from streamlit.testing.v1 import AppTest

from outbox_monitor.demo.pgcluster import TemporaryCluster, free_port
from tests.least_privilege import (
    PASSWORD,
    PASSWORD_LOGIN,
    WRONG_PASSWORD,
    password_cluster,
    password_dsn,
)

PAGES = ("overview", "events", "dead_letters", "alerts", "actions")


@pytest.fixture(scope="module")
def cluster() -> Iterator[TemporaryCluster]:
    with password_cluster() as server:
        yield server


def everything(at: AppTest) -> str:
    """The serialized content of every element and block the run rendered."""
    found: list[str] = []

    def walk(node) -> None:
        proto = getattr(node, "proto", None)
        if proto is not None:
            found.append(str(proto))
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at.main)
    walk(at.sidebar)
    return "\n".join(found)


@pytest.mark.parametrize("failure", ["wrong password", "unreachable"])
def test_the_read_dsn_banner_never_shows_the_password(open_page, environment, cluster, failure):
    secret = WRONG_PASSWORD if failure == "wrong password" else PASSWORD
    port = free_port() if failure == "unreachable" else None
    environment.setenv("OUTBOX_MONITOR_DSN", password_dsn(cluster, secret, port=port))

    said = (
        "**Database login refused** — the login or password of OUTBOX_MONITOR_DSN was refused by "
        if failure == "wrong password"
        else "**Database unreachable** — cannot connect to "
    )
    for page in PAGES:
        at = open_page(page)
        banner = plain(at.error[0].value)
        assert banner.startswith(said), banner
        assert f"{PASSWORD_LOGIN}@127.0.0.1" in banner
        hint = " ".join(i.value for i in at.info)
        if failure == "wrong password":
            assert hint.startswith("Check the user and password of OUTBOX_MONITOR_DSN"), hint
            assert "Is the database server up" not in hint
        content = everything(at)
        assert "was refused by" in content or "cannot connect to" in content  # the banner
        assert secret not in content and PASSWORD not in content, page


def test_the_actions_dsn_banner_never_shows_the_password(open_page, environment, cluster):
    with psycopg.connect(cluster.dsn_for("app"), autocommit=True) as owner:
        owner.execute(
            "INSERT INTO integration_outbox (event_type, aggregate_type, aggregate_id, "
            "event_key, payload, status, attempts, processed_at, last_error) "
            "VALUES ('order.paid', 'order', '1', 'k-1', '{}', 'failed', 10, now(), 'e')"
        )
    environment.setenv("OUTBOX_MONITOR_DSN", password_dsn(cluster))
    environment.setenv("OUTBOX_MONITOR_ACTIONS_DSN", password_dsn(cluster, WRONG_PASSWORD))

    at = open_page("actions", event_type="%")
    at.button(key="actions.replay.preview_button").click().run()
    at.button(key="actions.replay.confirm").click().run()

    banner = plain(at.error[0].value)
    assert banner.startswith(
        "**Database login refused** — the login or password of OUTBOX_MONITOR_ACTIONS_DSN "
        f"was refused by {PASSWORD_LOGIN}@127.0.0.1"
    ), banner
    assert "password authentication failed" in banner
    (replay,) = (tab for tab in at.tabs if tab.label == "Replay by filter")
    assert plain(replay.error[0].value) == banner  # shown in the replay's own flow
    hint = " ".join(i.value for i in replay.info)
    assert hint.startswith("Check the user and password of OUTBOX_MONITOR_ACTIONS_DSN"), hint
    content = everything(at)
    assert WRONG_PASSWORD not in content and PASSWORD not in content
