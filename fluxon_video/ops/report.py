"""Printing results: aligned text on a terminal, JSON lines with --json."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any


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
