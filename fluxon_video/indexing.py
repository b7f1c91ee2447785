"""Getting a video's frame index: from a blob store (another reader built it) or by a scan."""

from __future__ import annotations

import struct
import time
from typing import Any, Protocol

from fluxon_video.errors import FluxonFsDecodeError, FluxonFsIOError, FluxonFsNoVideoStreamError
from fluxon_video.frame_index import FrameIndex, blob_kind
from fluxon_video.logs import get_logger
from fluxon_video.native import require_native

log = get_logger("indexing")


class BlobStore(Protocol):
    """Opaque blobs of one file version (FluxonFsRangeSource keeps them in the KV)."""

    def load_blob(self, kind: str) -> bytes | None: ...

    def store_blob(self, kind: str, data: bytes) -> None: ...


def load_or_build_index(byte_source: Any, name: str, stream_index: int | None = None, *,
                        stored: bytes | None = None, blobs: BlobStore | None = None,
                        why_none: list[Exception] | None = None, stored_from: str = "kv",
                        head: bytes | None = None) -> tuple[FrameIndex | None, str, float]:
    """(index or None, where it came from: ``stored_from`` ("kv", or "process" for
    index_cache.py's) | "scan" | "none", milliseconds).

    The index of video stream ``stream_index`` (None: the default rule's;
    see _demux.choose_stream). ``stored``: the blob already fetched for it
    (FileMetadata.open brings it with the stat); when it is absent or does
    not parse, the file is scanned and the new index stored in ``blobs``.
    The scan reads ``byte_source``: a ByteSource, or a callable that makes
    one (then only when scanning, and closed after). A file the scan cannot
    read gets no index: the sequential decode then reports the precise error,
    and ``why_none`` (when given) gets the scan's. ``head``: the file's first
    bytes when the open brought them (the byte source serves them): where an
    MP4's index lies is read from them instead of probed.
    """
    t0 = time.perf_counter()
    index = FrameIndex.from_bytes(stored) if stored else None
    if index is not None:
        return index, stored_from, (time.perf_counter() - t0) * 1e3
    require_native("building a frame index")
    try:
        if callable(byte_source):
            with byte_source() as made:
                index = _scan(made, name, stream_index, head)
        else:
            index = _scan(byte_source, name, stream_index, head)
    except FluxonFsDecodeError as exc:
        if isinstance(exc, FluxonFsNoVideoStreamError) and stream_index is not None:
            raise  # the stream asked for is not there: no decode will find it
        if why_none is not None:
            why_none.append(exc)
        return None, "none", (time.perf_counter() - t0) * 1e3
    if blobs is not None:
        blobs.store_blob(blob_kind(stream_index), index.to_bytes())
    return index, "scan", (time.perf_counter() - t0) * 1e3


def share_learnt_index(blobs: BlobStore | None, index: FrameIndex, kind: str) -> None:
    """Store an index a decode taught something (damage, the tolerant survey)
    back in the blob store, folded together with what another reader may have
    stored since, so every reader of the file version numbers frames alike. ``kind``: the
    blob kind the index was loaded as (``blob_kind``)."""
    if blobs is None:
        return
    from fluxon_video.damage import merge_stored

    try:
        stored = blobs.load_blob(kind)
    except FluxonFsIOError as exc:  # the KV is a cache: the local index stays right
        log.debug("reading the stored index back failed (%s); storing ours", exc)
        stored = None
    if stored:
        merge_stored(index, FrameIndex.from_bytes(stored))
    blobs.store_blob(kind, index.to_bytes())


def open_round_trips(stat_and_index: int, index_source: str, scan_source: Any) -> int:
    """Network round trips an open waited for: getting the stat and the index
    (``FluxonFsClient.open_file``'s count), and after a scan the fetch jobs it
    waited for on ``scan_source``'s pages (its KV write is not waited for)."""
    if index_source == "scan" and scan_source is not None:
        return stat_and_index + scan_source.stats()["fetch_waits"]
    return stat_and_index


# Containers whose scan reads every byte (packet sizes and flags are spread
# over the file). Judged by the name only to start fetching early: the scan
# itself asks for the rest of any file that is not MP4 once it has opened it.
WHOLE_FILE_SCANS = (".mkv", ".webm", ".avi")


# Containers whose index (an MP4 moov) may follow the media: the scan's open
# would read the head, find the media there, then wait for the end.
MOOV_MAY_TRAIL = (".mp4", ".m4v", ".mov", ".3gp")
# The end of such a file, read alongside the head. A moov takes some 10-20
# bytes per frame, the media bitrate / fps: 1/64 of the file holds it down to
# ~250 kbit/s at 30 fps, and the floor holds half a minute of frames at any
# bitrate. A larger moov is read from the pages before it (one more round
# trip). For a moov-first file these bytes are the cost of the probe.
TAIL_PROBE_MIN = 16 << 10
TAIL_PROBE_MAX = 1 << 20


def tail_probe_bytes(size: int) -> int:
    """How many bytes at the end of an MP4 of ``size`` bytes a cold scan reads early."""
    return min(max(size // 64, TAIL_PROBE_MIN), TAIL_PROBE_MAX)


def _scan(byte_source: Any, name: str, stream_index: int | None,
          head: bytes | None = None) -> FrameIndex:
    from fluxon_video import _demux

    if name.lower().endswith(WHOLE_FILE_SCANS):
        byte_source.prefetch(0, byte_source.size)  # in parallel batches, not page 0 first
    elif name.lower().endswith(MOOV_MAY_TRAIL) and not (
            head and _index_after_head(byte_source, name, head)):
        _probe_tail(byte_source, name)
    index = _demux.scan_packets(byte_source, name, -1 if stream_index is None else stream_index)
    # The scan's open read the container's header bytes: keep them with the
    # index (no fetch; only pages still cached), so later opens need none.
    index.record_open_extents(byte_source.size, byte_source.peek)
    return index


def mp4_moov_range(head: bytes, size: int) -> tuple[int, int] | None:
    """Where an MP4's moov box lies, from its top-level boxes walked in ``head``
    (the file's first bytes; the file is ``size`` bytes): (offset, length).
    Past the head, the rest of the file from the first box the head does not
    show (a moov that follows the media: everything after the mdat). None
    where the walk cannot tell: not MP4 boxes, or no moov anywhere."""
    offset = 0
    while offset + 8 <= len(head):
        box, kind = struct.unpack_from(">I4s", head, offset)
        header = 8
        if box == 1:  # a 64-bit size follows the type
            if offset + 16 > len(head):
                break
            box, header = struct.unpack_from(">Q", head, offset + 8)[0], 16
        elif box == 0:  # the last box: to the end of the file
            box = size - offset
        if box < header or offset + box > size or not kind.isascii():
            return None
        if kind == b"moov":
            return offset, box
        offset += box
    return (offset, size - offset) if offset < size else None


def _index_after_head(byte_source: Any, name: str, head: bytes) -> bool:
    """Fetch an MP4's moov where its head says it is, while the scan parses the
    head: nothing when the moov is in the head, the moov's bytes when it follows
    the media. False: the head does not tell (the probe then guesses)."""
    size, page = byte_source.size, byte_source.page_size
    found = mp4_moov_range(head, size)
    if found is None:
        return False
    start, length = found
    if start + length <= len(head):
        return True
    if size - start > max(TAIL_PROBE_MAX, size // 16):
        return False  # more media after the first mdat, not a trailing moov alone
    if start < len(head):  # a moov the head holds only the start of
        byte_source.prefetch(len(head), start + length - len(head))
        return True
    # From the page the moov starts in: the scan reads the media's last bytes
    # before it too, and every byte read can be cached as a piece (a piece read
    # in part is not).
    _fetch_end(byte_source, name, start - start % page)
    return True


def _probe_tail(byte_source: Any, name: str) -> None:
    """Fetch an MP4's end alongside its first page, where the moov may be
    (tail_probe_bytes), without knowing where it is."""
    size, page = byte_source.size, byte_source.page_size
    probe = tail_probe_bytes(size)
    if size <= page + probe:
        byte_source.prefetch(0, size)  # one round trip for both ends
        return
    start = size - probe
    if page <= probe:
        # Whole pages cost at most one more: every byte read can be cached as a
        # piece (a piece read in part is not).
        start -= start % page
    byte_source.prefetch(0, 1)  # the head in flight while the tail is read
    _fetch_end(byte_source, name, start)


def _fetch_end(byte_source: Any, name: str, start: int) -> None:
    """The file's bytes from ``start`` to its end, as an extent, ahead of the
    scan (which reads them again if this fails)."""
    try:
        byte_source.fetch_extent(start, byte_source.size - start)
    except FluxonFsIOError as exc:
        log.debug("%s: reading the last %d bytes ahead of the scan failed (%s); the scan "
                  "reads them", name, byte_source.size - start, exc)
