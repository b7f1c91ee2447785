"""ReadMeter: one reader's per-read stats, from counters that only grow.

The byte source's counters (KV hits, remote reads, ...) count for the
reader's whole life; a read's stats are what changed since the last read.
The first read also carries what opening the file cost (its time, the
frame index's time and source, its round trips), reported once.
"""

from __future__ import annotations

from typing import Any

from fluxon_video.fs.counters import ReadCounters
from fluxon_video.stats import FluxonFsVideoReadStats

# Counters of one byte source both halves of a split read include (they ran
# at once): the larger stands for the read; the others are each decoder's
# own and add up.
SHARED_COUNTERS = ("page_hits", "page_misses", "first_frame_waits", "bytes_fetched", "decode_ms")
# The page cache's lookahead counters, reported per read.
AHEAD_COUNTERS = ("ahead_pages", "ahead_hits", "ahead_wasted")


class ReadMeter:
    """Turns a decoder's stats and the source's counters into a read's stats."""

    def __init__(self, counters: ReadCounters, *, index_source: str, index_ms: float,
                 round_trips: int) -> None:
        self._counters = counters
        # Counters already reported: none yet, so the first read reports what
        # opening (the stat and the frame index) fetched.
        self._reported = ReadCounters().snapshot()
        self._index_source = index_source
        self._index_ms = index_ms
        self._open_round_trips = round_trips
        self._open_ms = 0.0
        self._ahead_seen = dict.fromkeys(AHEAD_COUNTERS, 0)

    @property
    def index_ms(self) -> float:
        return self._index_ms

    def opened(self, open_ms: float) -> None:
        """The time the open took (less the frame index's), for the first read."""
        self._open_ms = open_ms

    def read(self, native: Any, returned: int, seconds: float,
             cache: dict[str, int] | None = None,
             page_cache: dict[str, int] | None = None) -> FluxonFsVideoReadStats:
        """A read's stats: the decoder's (``native``), or for an audio read the
        page cache's counts (``cache``), and what was fetched since the last;
        ``page_cache``: the byte source's cumulative stats, for the lookahead's."""
        now = self._counters.snapshot()
        fetched: dict[str, Any] = {k: now[k] - self._reported[k] for k in now}
        if page_cache is not None:
            for name in AHEAD_COUNTERS:
                total, seen = page_cache.get(name, 0), self._ahead_seen[name]
                # A smaller total is a new byte source (after fork): all of it is new.
                fetched[name] = total - seen if total >= seen else total
                self._ahead_seen[name] = total
        self._reported = now
        open_ms, self._open_ms = self._open_ms, 0.0
        open_trips, self._open_round_trips = self._open_round_trips, 0
        index_ms, self._index_ms = self._index_ms, 0.0
        return FluxonFsVideoReadStats(
            **(native.as_dict() if native is not None else cache or {}), **fetched,
            open_ms=open_ms, index_ms=index_ms, index_source=self._index_source,
            total_ms=seconds * 1e3, frames_returned=returned, open_round_trips=open_trips)


def merge_halves(left: Any, right: Any) -> Any:
    """One decoder stats record for a read split over two decoders."""
    merged = {key: (max(value, getattr(right, key)) if key in SHARED_COUNTERS
                    else value + getattr(right, key) if isinstance(value, (int, float))
                    else value or getattr(right, key))
              for key, value in left.as_dict().items()}
    return type(left)(**merged)
