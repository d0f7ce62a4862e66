"""The order ``make test``'s workers take the files in (tests/conftest.py): the slowest
first, every one of them a file of the suite."""

from pathlib import Path

from tests.conftest import SLOW_FIRST

REPO = Path(__file__).resolve().parents[2]


def test_every_slow_first_file_is_a_test_file_of_the_suite_named_once():
    missing = [path for path in SLOW_FIRST if not (REPO / path).is_file()]
    assert not missing, f"renamed or removed: {missing} (tests/conftest.py SLOW_FIRST)"
    assert len(set(SLOW_FIRST)) == len(SLOW_FIRST)
    assert all(Path(path).name.startswith("test_") for path in SLOW_FIRST)
