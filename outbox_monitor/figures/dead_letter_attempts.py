"""The dead letters by attempts, the part of SPEC §2 retry pressure that is not the backlog:
counted exactly from their index, or — for the dashboard above its cap — estimated from a
sample of the table's pages (``metrics.attempts_histogram`` and ``attempts_histogram_capped``
add the backlog's part)."""

from outbox_monitor.figures import estimates
from outbox_monitor.store.db import Database
from outbox_monitor.store.filters import Where

DEAD_LETTERS_SAMPLE_PAGES = 1_000
"""Pages (8 kB) of the outbox table the dashboard samples to estimate the dead letters by
attempts when there are more than its cap (``attempts_histogram_capped``)."""
MIN_SAMPLED_DEAD_LETTERS = 500
"""Dead letters a sample must hold for its estimate to be shown; with fewer, they are
counted exactly."""
DEAD_LETTERS_PER_SAMPLED_PAGE = 100
"""The dashboard samples only when the planner expects at least this many dead letters per
page it would sample: counting ≈ 100 index entries costs about what reading one sampled page
does (benchmarks/estimates.py), so fewer are counted exactly."""


def added(*histograms: dict[int, int]) -> dict[int, int]:
    """Histograms ``{attempts: rows}`` added up, in ascending attempts."""
    total: dict[int, int] = {}
    for histogram in histograms:
        for attempts, rows in histogram.items():
            total[attempts] = total.get(attempts, 0) + rows
    return dict(sorted(total.items()))


def exact(db: Database, where: Where) -> dict[int, int]:
    """The dead letters by attempts, counted exactly (index-only on the recommended index)."""
    rows = db.fetch_all("attempts_histogram_dead_letters", where.params, and_filters=where.fragment)
    return {row["attempts"]: row["rows"] for row in rows}


def capped(db: Database, where: Where, cap: int) -> tuple[dict[int, int], bool]:
    """The dead letters by attempts, estimated above ``cap`` when a sample can tell:
    ``(histogram, exact)``.

    Up to ``cap`` they are counted exactly (index-only). Above it, when the planner expects
    at least ``DEAD_LETTERS_PER_SAMPLED_PAGE`` of them per sampled page, they are counted by
    attempts in a sample of ``DEAD_LETTERS_SAMPLE_PAGES`` of the table's pages
    (``TABLESAMPLE SYSTEM``, the same pages at every refresh), each count scaled by the
    table's pages over the pages sampled. Fewer dead letters, a table of fewer pages than the
    sample, or a sample holding fewer than ``MIN_SAMPLED_DEAD_LETTERS`` of them: they are
    counted exactly (``exact`` true).
    """
    if estimates.count_up_to(db, "dead_letter_rows", cap=cap, where=where) > cap:
        sampled = _sampled(db, where, cap)
        if sampled is not None:
            return sampled, False
    return exact(db, where), True


def _sampled(db: Database, where: Where, cap: int) -> dict[int, int] | None:
    """Dead letters by attempts estimated from a sample of the table's pages, or ``None``
    when counting them is cheaper or a sample cannot tell (see ``capped``)."""
    dead_letters = db.compose("dead_letter_rows", and_filters=where.estimated_fragment)
    expected = estimates.planner_rows(db, dead_letters, where.params)
    if expected < DEAD_LETTERS_PER_SAMPLED_PAGE * DEAD_LETTERS_SAMPLE_PAGES:
        return None
    pages = db.fetch_one("table_pages", {"table_regclass": db.table_name})["pages"]
    if pages <= DEAD_LETTERS_SAMPLE_PAGES:
        return None
    percent = 100 * DEAD_LETTERS_SAMPLE_PAGES / pages
    rows = db.fetch_all(
        "attempts_dead_letters_sample",
        {"percent": percent, **where.params},
        and_filters=where.fragment,
    )
    if sum(row["rows"] for row in rows) < MIN_SAMPLED_DEAD_LETTERS:
        return None
    scaled = {row["attempts"]: round(row["rows"] * 100 / percent) for row in rows}
    return scaled if sum(scaled.values()) > cap else None
