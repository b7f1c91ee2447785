"""Per-call statistics: the native decode's record and a reader's read (the metrics the design asks for)."""

from __future__ import annotations

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
    total_ms: float = 0.0           # end to end, this call
    kv_hits: int = 0                # KV piece cache
    kv_misses: int = 0
    kv_errors: int = 0              # KV unreachable or skipped (circuit open)
    kv_corrupt: int = 0             # KV entries that failed verification
    remote_reads: int = 0           # reads from the agent (or in-process export)
    remote_bytes: int = 0
    backfills_queued: int = 0
    backfills_dropped: int = 0
    frames_returned: int = 0

    def __add__(self, other: FluxonFsVideoReadStats) -> FluxonFsVideoReadStats:
        """Counters and times summed; text fields from whichever side has one (other first)."""
        return FluxonFsVideoReadStats(**{
            k: (getattr(other, k) or v) if isinstance(v, str) else v + getattr(other, k)
            for k, v in asdict(self).items()})
