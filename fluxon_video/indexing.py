"""Getting a video's frame index: from the KV (another reader built it) or by a scan."""

from __future__ import annotations

import time
from typing import Any

from fluxon_video.errors import FluxonFsDecodeError
from fluxon_video.frame_index import FrameIndex
from fluxon_video.native import require_native


def load_or_build_index(byte_source: Any, name: str,
                        range_source: Any = None) -> tuple[FrameIndex | None, str, float]:
    """(index or None, where it came from: "kv" | "scan" | "none", milliseconds).

    A range source with load_index/store_index (FluxonFS) shares the index
    through the KV, keyed by the file version. A file the scan cannot read
    gets no index: the sequential decode then reports the precise error.
    """
    require_native("building a frame index")
    from fluxon_video import _demux

    t0 = time.perf_counter()
    load = getattr(range_source, "load_index", None)
    if load is not None:
        blob = load()
        index = FrameIndex.from_bytes(blob) if blob else None
        if index is not None:
            return index, "kv", (time.perf_counter() - t0) * 1e3
    try:
        index = _demux.scan_packets(byte_source, name)
    except FluxonFsDecodeError:
        return None, "none", (time.perf_counter() - t0) * 1e3
    store = getattr(range_source, "store_index", None)
    if store is not None:
        store(index.to_bytes())
    return index, "scan", (time.perf_counter() - t0) * 1e3
