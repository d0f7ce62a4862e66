"""What only a browser shows: values from the URL and the database rendered as typed (no
link, bold, colour, HTML or math), chart time axes in UTC on a 24-hour clock whatever the
browser's time zone, and a name on every bar of the failures chart."""

import re
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from outbox_monitor.figures import error_grouping
from tests.browser_support import ELEMENT_TIMEOUT_MS

pytestmark = pytest.mark.browser

EVIL = (
    "x`[click me](https://example.com)` **bold** :red[red] <b>html</b> $E=mc^2$ "
    "a -> b :smile: www.example.org"
)


def assert_nothing_interpreted(area: Locator) -> None:
    """No link, emphasis, colour, HTML element or math made from a value in ``area``."""
    expect(area.locator('a[href*="example"]:not([href^="#"])')).to_have_count(0)  # not anchors
    expect(area.locator("strong", has_text="bold")).to_have_count(0)
    expect(area.locator("b", has_text="html")).to_have_count(0)
    expect(area.locator(".katex")).to_have_count(0)
    expect(area.locator('span[class*="Color"], span[style*="color"]')).to_have_count(0)
    expect(area.locator("img")).to_have_count(0)


def test_values_from_the_url_and_the_database_render_as_typed(dashboard, page, rows, db):
    row_id = rows.add(
        event_type=EVIL,
        aggregate=("order", EVIL),
        status="failed",
        attempts=10,
        processed_ago=60,
        last_error=EVIL,
    )
    [group] = error_grouping.error_groups(db)
    query = urlencode({"event_type": EVIL, "error_group": group["group_id"]})

    page.goto(f"{dashboard}/dead_letters?{query}")

    main = page.locator('[data-testid="stMain"]')
    heading = main.locator("h3").first
    expect(heading).to_have_text(f"{EVIL} · {group['fingerprint']}")
    expect(main.get_by_text("1 failed row in 1 error group (event type")).to_contain_text(
        f"(event type {EVIL})"
    )
    assert_nothing_interpreted(main)

    page.goto(f"{dashboard}/events?{urlencode({'event_type': EVIL, 'id': row_id})}")

    expect(main.get_by_text("Event type:").first).to_have_text(
        f"Event type: {EVIL} (sidebar filter)."
    )
    expect(main.get_by_text("status failed")).to_have_text(
        f"{row_id} · {EVIL} · status failed · attempts 10"
    )
    expect(main.get_by_role("heading", name="Timeline of")).to_have_text(
        f"Timeline of order {EVIL}"
    )
    assert_nothing_interpreted(main)


def axis_labels(chart: Locator, axis: str) -> list[str]:
    """The tick labels a person sees on a chart's ``"X"`` or ``"Y"`` axis, as Vega drew
    them (SVG); Vega hides a label it removed for overlap with opacity 0."""
    labels = chart.locator(f'g.role-axis[aria-label^="{axis}-axis"] g.role-axis-label text')
    expect(labels.first).to_be_attached()
    return labels.evaluate_all(
        "nodes => nodes.filter(node => getComputedStyle(node).opacity !== '0')"
        ".map(node => node.textContent)"
    )


@pytest.fixture
def new_york(browser: Browser):
    """A tab whose clock is in New York (UTC-5/-4): a chart in local time would show it."""
    context = browser.new_context(
        viewport={"width": 1400, "height": 2000}, timezone_id="America/New_York"
    )
    context.set_default_timeout(ELEMENT_TIMEOUT_MS)
    yield context.new_page()
    context.close()


def test_chart_time_axes_are_utc_on_a_24_hour_clock(dashboard, new_york: Page, conn):
    sampled = [
        row["sampled_at"]
        for row in conn.execute(
            """INSERT INTO outbox_monitor.samples (table_name, sampled_at, queue_depth,
                   pending_total, scheduled_retries, processing, stuck_locks, failed_in_window)
               SELECT 'public.integration_outbox', now() - make_interval(mins => m), m, m, 0,
                      0, 0, 0
               FROM generate_series(0, 50, 5) AS m
               RETURNING sampled_at"""
        ).fetchall()
    ]
    first, last = min(sampled).astimezone(UTC), max(sampled).astimezone(UTC)

    new_york.goto(f"{dashboard}/overview?window=1h&view=Charts")
    chart = new_york.locator('[data-testid="stVegaLiteChart"]').first
    labels = axis_labels(chart, "X")

    one_day = first.date() == last.date()
    pattern = r"\d\d:\d\d" if one_day else r"[A-Z][a-z]{2} \d\d \d\d:\d\d"
    assert labels and all(re.fullmatch(pattern, label) for label in labels), labels
    for label in labels:  # each tick is an instant of the charted hour, read in UTC
        if one_day:
            hour, minute = map(int, label.split(":"))
            tick = first.replace(hour=hour, minute=minute, second=0, microsecond=0)
        else:  # the label has no year: the charted hour's, two across New Year's midnight
            years = {first.year, last.year}
            parsed = [datetime.strptime(f"{y} {label}", "%Y %b %d %H:%M") for y in years]
            tick = min((t.replace(tzinfo=UTC) for t in parsed), key=lambda t: abs(t - first))
        assert first - timedelta(minutes=5) <= tick <= last + timedelta(minutes=5), (label, first)


def test_every_bar_of_the_failures_chart_is_named(dashboard, page, rows):
    names = [f"event.type_{n}" for n in range(9)]
    for n, name in enumerate(names):
        for _ in range(n + 1):
            rows.add(event_type=name, status="failed", processed_ago=60, last_error="e")

    page.goto(f"{dashboard}/overview?view=Charts")
    expect(page.get_by_role("heading", name="Failures by event type")).to_be_visible()
    chart = page.locator('[data-testid="stVegaLiteChart"]').filter(
        has=page.locator('g.role-axis-label text:text-is("event.type_0")')
    )

    assert sorted(axis_labels(chart, "Y")) == names
