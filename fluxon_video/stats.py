"""Per-call statistics: the native decode's record and a reader's read (the metrics the design asks for)."""

from __future__ import annotations

import os
import threading
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class DecodeStats:
    """What one native decode call did (``VideoDecoder.decode``)."""

    path: str = ""                  # "indexed" (keyframe seeks) or "sequential"
    fallback: str = ""              # why an indexed read was redone sequentially, if it was
    decoder_seeks: int = 0
    container_open_ms: float = 0.0  # FFmpeg opening the container in this call
    decode_ms: float = 0.0          # demux + decode + convert
    range_reads: int = 0            # FFmpeg read callbacks
    range_bytes: int = 0            # bytes those callbacks returned
    seeks: int = 0                  # FFmpeg seek callbacks
    page_hits: int = 0              # reader page cache
    page_misses: int = 0
    first_frame_waits: int = 0      # fetch jobs (round trips) waited for before the first frame was ready
    bytes_fetched: int = 0          # bytes fetch workers brought into the page cache
    frames_decoded: int = 0
    frames_converted: int = 0
    decode_errors: int = 0          # bad packets skipped, as the ffmpeg CLI does

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class FluxonFsVideoReadStats(DecodeStats):
    """What one read_frames_numpy call cost: the decode's own record, plus the
    reader's open and index time and what the FluxonFS client did.

    Byte counters are attributed to the call during which they happened; a
    readahead fetch that completes after the call is counted in the next one.
    """

    open_ms: float = 0.0            # opening the reader (stat, set-up); 0 for later reads
    index_ms: float = 0.0           # getting the frame index (first read only)
    index_source: str = ""          # "kv" (shared by another reader), "scan" or "none"
    # Network round trips the reader's open waited for (first read only): the
    # agent stat with the index's KV read, a scan's fetch jobs. With
    # first_frame_waits: the round trips before the first frame.
    open_round_trips: int = 0
    total_ms: float = 0.0           # end to end, this call
    kv_hits: int = 0                # KV piece cache
    kv_misses: int = 0
    kv_bytes: int = 0               # bytes served by KV hits
    kv_round_trips: int = 0         # pipelined KV reads of pieces (one per fetched range)
    kv_errors: int = 0              # KV unreachable or skipped (circuit open)
    kv_corrupt: int = 0             # KV entries that failed verification
    stat_requests: int = 0          # stats asked of the agent (first read: the open's)
    remote_reads: int = 0           # reads from the agent (or in-process export)
    remote_bytes: int = 0
    head_bytes: int = 0             # of remote_bytes: the first piece with a cold open's stat
    backfills_queued: int = 0
    backfills_dropped: int = 0
    frames_returned: int = 0
    # Pages fetched ahead of the reads that use them, since the reader's last
    # read: queued by a read's own plan (the frame index's spans), by the
    # open (container ranges) and by a lookahead (reader.prefetch_frames, the
    # pool's prefetch, read_many's ahead).
    ahead_pages: int = 0            # pages queued ahead
    ahead_hits: int = 0             # pages queued ahead that a read then used
    ahead_wasted: int = 0           # pages queued ahead, dropped before any read used them

    def __add__(self, other: FluxonFsVideoReadStats) -> FluxonFsVideoReadStats:
        """Counters and times summed; text fields from whichever side has one (other first)."""
        summed: dict[str, Any] = {
            k: (getattr(other, k) or v) if isinstance(v, str) else v + getattr(other, k)
            for k, v in asdict(self).items()}
        return FluxonFsVideoReadStats(**summed)


@dataclass(frozen=True)
class FluxonFsProcessStats:
    """Cumulative figures of one patcher in one process (``patcher.stats()``).

    A data loader logs them every N steps; ``later - earlier`` gives what
    happened in between. Each process (every DataLoader worker) counts its
    own: nothing is shared across fork or spawn.
    """

    reads: int = 0                  # read_frames_numpy calls (a batched group is one)
    fallbacks: int = 0              # reads redone sequentially after disagreeing with the index
    metadata_calls: int = 0         # video_metadata calls
    index_scans: int = 0            # frame indexes built by a scan (else taken from the KV)
    index_from_kv: int = 0
    frames_returned: int = 0
    frames_decoded: int = 0
    decoder_seeks: int = 0
    range_bytes: int = 0            # bytes FFmpeg read through the page cache
    kv_hits: int = 0
    kv_misses: int = 0
    kv_errors: int = 0
    kv_corrupt: int = 0
    remote_reads: int = 0
    remote_bytes: int = 0           # bytes from the agent (or in-process export)
    head_bytes: int = 0             # of them, first pieces that came with an open's stat
    kv_bytes: int = 0               # bytes served by KV hits
    kv_round_trips: int = 0
    stat_requests: int = 0          # stats asked of the agent
    backfills_queued: int = 0
    backfills_dropped: int = 0
    ahead_pages: int = 0            # lookahead: pages queued ahead, used by a read, dropped
    ahead_hits: int = 0
    ahead_wasted: int = 0
    open_ms: float = 0.0
    index_ms: float = 0.0
    decode_ms: float = 0.0
    total_ms: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __sub__(self, earlier: FluxonFsProcessStats) -> FluxonFsProcessStats:
        return FluxonFsProcessStats(**{k: v - getattr(earlier, k)
                                       for k, v in asdict(self).items()})

    def __add__(self, other: FluxonFsProcessStats) -> FluxonFsProcessStats:
        return FluxonFsProcessStats(**{k: v + getattr(other, k) for k, v in asdict(self).items()})


_SUMMED = [f for f in FluxonFsProcessStats.__dataclass_fields__
           if f in FluxonFsVideoReadStats.__dataclass_fields__]


class StatsAccumulator:
    """Adds up read stats for FluxonFsProcessStats; thread-safe, starts from zero after fork."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._totals: dict[str, float] = dict.fromkeys(FluxonFsProcessStats.__dataclass_fields__, 0)

    def _local(self) -> None:
        if self._pid != os.getpid():
            self._reset()

    def add_read(self, stats: FluxonFsVideoReadStats, *, metadata: bool = False) -> None:
        self._local()
        with self._lock:
            totals = self._totals
            totals["metadata_calls" if metadata else "reads"] += 1
            totals["fallbacks"] += bool(stats.fallback)
            if stats.index_ms > 0:  # the read that reports its reader's index (the first)
                totals["index_scans"] += stats.index_source == "scan"
                totals["index_from_kv"] += stats.index_source == "kv"
            for name in _SUMMED:
                totals[name] += getattr(stats, name)

    def snapshot(self) -> FluxonFsProcessStats:
        self._local()
        with self._lock:
            return FluxonFsProcessStats(**self._totals)  # type: ignore[arg-type]
