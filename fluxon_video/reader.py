"""FluxonFsVideoReader: one file version, one identity, one output size."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from fluxon_video.errors import FluxonFsClosedError
from fluxon_video.fs.client import FluxonFsClient, FluxonFsRangeSource, ReadCounters
from fluxon_video.fs.config import ClientSettings, FluxonFsExport, RequestIdentity
from fluxon_video.fs.storage import FileStat
from fluxon_video.indexing import load_or_build_index
from fluxon_video.native import require_native
from fluxon_video.stats import FluxonFsVideoReadStats


class FluxonFsVideoReader:
    """Reads frames of one video through FluxonFS; use as a context manager.

    Opened by :meth:`FluxonFsPatcher.open_video_reader`. Holds the file
    version and the request identity captured at open, and a page cache that
    later reads reuse. One read runs at a time; ``close()`` is idempotent and
    every read after it fails.
    """

    def __init__(self, client: FluxonFsClient, settings: ClientSettings,
                 identity: RequestIdentity, export: FluxonFsExport, relpath: str,
                 version: FileStat, height: int, width: int, num_threads: int,
                 open_ms: float) -> None:
        self._avio, self._decode = require_native()
        self.export_name = export.name
        self.relpath = relpath
        self.identity = identity
        self.version = version
        self.height = height
        self.width = width
        self.num_threads = num_threads
        self.name = f"{export.name}:{relpath}"
        self._client = client
        self._settings = settings
        self._page_size = export.piece_size
        self._lock = threading.Lock()
        self._closed = False
        self._open_ms = open_ms
        self._index_ms = 0.0
        self._index_source = ""
        self._range_source = FluxonFsRangeSource(client, identity, export.name, relpath, version)
        self._byte_source: Any = None
        self._decoder: Any = None
        self._make_decoder()

    def _make_decoder(self) -> None:
        """A byte source and decoder of this process (again after fork)."""
        settings = self._settings
        self._byte_source = self._avio.ByteSource(
            self._range_source, self.version.size, page_size=self._page_size,
            cache_bytes=settings.reader_cache_bytes, readahead_pages=settings.readahead_pages,
            fetch_workers=settings.fetch_workers,
            fetch_timeout_s=3 * settings.agent_timeout_s + 1, name=self.name)
        # The decoder lives as long as the reader: a request ahead of where it
        # stands continues without seeking. Its frame index comes on first read
        # (and survives a rebuild after fork: it is plain data).
        index = self._decoder.index if self._decoder is not None else None
        self._decoder = self._decode.VideoDecoder(self._byte_source, self.num_threads, self.name)
        self._decoder.index = index

    @property
    def closed(self) -> bool:
        return self._closed

    def read_frames_numpy(self, indices: Sequence[int]) -> np.ndarray:
        """Frames at ``indices`` as uint8 ``(len(indices), height, width, 3)`` RGB."""
        with self._lock:
            if self._closed:
                raise FluxonFsClosedError(f"{self.name}: the reader is closed")
            if self._byte_source.pid != os.getpid():
                # Forked: the parent's fetch workers and page cache are not ours.
                self._make_decoder()
            t0 = time.perf_counter()
            before = self._range_source.counters.snapshot()
            self._client.check_version(self.identity, self.export_name, self.relpath, self.version)
            if not self._index_source:
                self._decoder.index, self._index_source, self._index_ms = load_or_build_index(
                    self._byte_source, self.name, self._range_source)
            frames, native = self._decoder.decode(indices, self.height, self.width)
            self.last_stats = self._stats(native, before, len(frames), time.perf_counter() - t0)
            return frames

    last_stats: FluxonFsVideoReadStats | None = None

    def _stats(self, native: Any, before: dict[str, int], returned: int,
               seconds: float) -> FluxonFsVideoReadStats:
        after = self._range_source.counters.snapshot()
        fetched = {k: after[k] - before[k] for k in ReadCounters.__dataclass_fields__}
        open_ms, self._open_ms = self._open_ms, 0.0
        index_ms, self._index_ms = self._index_ms, 0.0
        return FluxonFsVideoReadStats(
            **native.as_dict(), **fetched, open_ms=open_ms, index_ms=index_ms,
            index_source=self._index_source, total_ms=seconds * 1e3, frames_returned=returned)

    def close(self) -> None:
        """Release the decoder, page cache and fetch workers. Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._decoder is not None:
                self._decoder.close()
                self._decoder = None
            if self._byte_source is not None:
                self._byte_source.close()
                self._byte_source = None

    def __enter__(self) -> FluxonFsVideoReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (f"<FluxonFsVideoReader {self.name} {self.height}x{self.width} "
                f"identity={self.identity.name} {state}>")
