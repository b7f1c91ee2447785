"""What a file's reads cost, counted as they happen (a reader's stats are made of these)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields


@dataclass
class ReadCounters:
    """What a reader's range reads cost, counted as they happen."""

    kv_hits: int = 0
    kv_misses: int = 0
    kv_bytes: int = 0  # bytes served by hits
    kv_round_trips: int = 0  # KV reads: one per range (its pieces go in one pipeline), one per blob
    stat_requests: int = 0  # stats asked of the agent (not served by a metadata cache)
    kv_errors: int = 0  # KV unreachable or skipped by the open circuit
    kv_corrupt: int = 0  # entries that failed verification and were deleted
    remote_reads: int = 0
    remote_bytes: int = 0
    head_bytes: int = 0  # of remote_bytes: the first piece a cold open's stat brought
    backfills_queued: int = 0
    backfills_dropped: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def add(self, **deltas: int) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {f.name: getattr(self, f.name) for f in fields(self)}
