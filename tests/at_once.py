"""One function run in several threads at once, as concurrent processes would run it (two
init-db, three dashboards): for the tests that concurrent runs are safe."""

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def run_at_once(function: Callable[[], T], times: int = 2) -> list[T]:
    """Call ``function`` from ``times`` threads started together; wait for all.

    Returns:
        Their results, in the order they finished.

    Raises:
        AssertionError: a call raised; the message lists what they raised.
    """
    results: list[T] = []
    errors: list[Exception] = []

    def run() -> None:
        try:
            results.append(function())
        except Exception as error:  # collected and asserted below
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(times)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [], errors
    return results
