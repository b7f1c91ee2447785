"""Running a test worker on several threads at once."""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_in_threads(worker: Callable[[int], object], count: int) -> list[BaseException]:
    """Run worker(0..count-1) on count threads; return what they raised."""
    failures: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            worker(i)
        except Exception as exc:  # noqa: BLE001 - reported to the test
            failures.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return failures
