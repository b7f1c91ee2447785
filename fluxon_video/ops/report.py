"""Printing results (aligned text on a terminal, JSON lines with --json) and progress."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from tqdm import tqdm


def human_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(count) < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count} B"


def emit(rows: Iterable[dict[str, Any]], columns: Sequence[tuple[str, str]], as_json: bool) -> int:
    """Print rows (dicts) as JSON lines or as a table of the given (key, heading) columns.

    Rows are streamed: a long listing starts printing at once.
    """
    count = 0
    for row in rows:
        if as_json:
            print(json.dumps(row, default=str), flush=False)
        else:
            print("  ".join(str(row.get(key, "")) for key, _ in columns))
        count += 1
    sys.stdout.flush()
    return count


def emit_record(record: dict[str, Any], as_json: bool) -> None:
    """One object: JSON, or 'key: value' lines."""
    if as_json:
        print(json.dumps(record, default=str, indent=2))
        return
    width = max(len(k) for k in record)
    for key, value in record.items():
        print(f"{key:>{width}}: {value}")


class PlainProgress:
    """Progress as plain lines every ``interval_s`` (for logs, where a bar's
    carriage returns make one endless line), with tqdm's update() and context."""

    def __init__(self, total: int, desc: str, in_bytes: bool, interval_s: float = 10.0,
                 stream: Any = None) -> None:
        self.total, self.desc, self.in_bytes = total, desc, in_bytes
        self.interval_s, self.n = interval_s, 0
        self.stream = stream if stream is not None else sys.stderr
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def _amount(self, n: float) -> str:
        return human_bytes(n) if self.in_bytes else f"{n:.0f}"

    def _line(self) -> None:
        share = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        print(f"{self.desc}: {self._amount(self.n)} of {self._amount(self.total)}{share}",
              file=self.stream, flush=True)

    def update(self, n: float = 1) -> None:
        with self._lock:
            self.n += n
            if time.monotonic() - self._last >= self.interval_s:
                self._last = time.monotonic()
                self._line()

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self._line()


def progress(total: int, desc: str, in_bytes: bool, mode: str) -> Any:
    """A progress display: "bar" (tqdm, for a terminal), "lines" (PlainProgress)
    or "off" (a bar that shows nothing)."""
    if mode == "lines":
        return PlainProgress(total, desc, in_bytes)
    units = ({"unit": "iB", "unit_scale": True, "unit_divisor": 1024} if in_bytes
             else {"unit": "file"})  # iB: tqdm's 128MiB reads like the summary's MiB
    return tqdm(total=total, desc=desc, disable=mode == "off", **units)
