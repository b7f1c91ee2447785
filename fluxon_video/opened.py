"""An opened file version, as a reader takes it: its bytes, its frame index, what opening cost."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from fluxon_video import index_cache
from fluxon_video.frame_index import FrameIndex, blob_kind
from fluxon_video.fs.config import ClientSettings, RequestIdentity
from fluxon_video.fs.counters import ReadCounters
from fluxon_video.fs.origin import FileStat
from fluxon_video.indexing import share_learnt_index
from fluxon_video.native import require_native


class VideoSource(Protocol):
    """What a reader reads a video through: FluxonFsRangeSource, or PlainSource."""

    name: str
    size: int
    counters: ReadCounters

    def read_range(self, offset: int, length: int) -> bytes: ...

    def check_current(self) -> None: ...

    def load_blob(self, kind: str) -> bytes | None: ...

    def store_blob(self, kind: str, data: bytes) -> None: ...


class PlainSource:
    """Any range source (a local file, bytes, a file object) as a reader reads it:
    no KV and no request identity. A local file's frame index (and what readers
    learn of it) is kept for the process (index_cache.py); other sources' stay
    with their reader."""

    def __init__(self, inner: Any, owned: bool) -> None:
        self.inner = inner
        self.owned = owned  # opened here (a path): closed with the reader
        self.name = str(getattr(inner, "name", type(inner).__name__))
        self.size = int(inner.size)
        # A local file's version (LocalFileRangeSource.identity); None: not cached.
        self.identity = getattr(inner, "identity", None)
        self.counters = ReadCounters()

    def read_range(self, offset: int, length: int) -> bytes:
        data: bytes = self.inner.read_range(offset, length)
        return data

    def check_current(self) -> None:
        check = getattr(self.inner, "check_current", None)
        if check is not None:
            check()

    def load_blob(self, kind: str) -> bytes | None:
        return index_cache.load(self.identity, kind) if self.identity is not None else None

    def store_blob(self, kind: str, data: bytes) -> None:
        if self.identity is not None:
            index_cache.store(self.identity, kind, data)

    def close(self) -> None:
        if self.owned:
            self.inner.close()


def make_byte_source(range_source: VideoSource, page_size: int,
                     settings: ClientSettings) -> Any:
    """A ByteSource over a file version, sized by the client settings."""
    avio, _ = require_native()
    return avio.ByteSource(
        range_source, range_source.size, page_size=page_size,
        cache_bytes=settings.reader_cache_bytes, readahead_pages=settings.readahead_pages,
        fetch_workers=settings.fetch_workers,
        # A page may wait out an agent restart (agent_retry_window_s) before its answer.
        fetch_timeout_s=3 * settings.agent_timeout_s + 1 + settings.agent_retry_window_s,
        name=range_source.name)


@dataclass(frozen=True)
class OpenedVideo:
    """A file version opened for video, complete: built once by
    fluxon_video/opening.py's ``indexed_video`` and never changed."""

    source: VideoSource
    stream_index: int | None   # as asked (None: the default rule's)
    index: FrameIndex | None   # None: FFmpeg could not index the file
    index_source: str          # "kv" | "scan" | "none"
    index_ms: float
    round_trips: int           # network round trips the open waited for
    page_size: int
    settings: ClientSettings
    version: FileStat          # the file version the index and every read belong to
    byte_source: Any = None    # kept open for a reader (its scan's pages stay cached)
    # Which file: export and identity are None for a source read without FluxonFS.
    export: str | None = None
    relpath: str = ""
    identity: RequestIdentity | None = None
    why_no_index: str = ""     # the scan's error when FFmpeg could not index the file
    audio_only: bool = False   # the scan found no video stream (the audio may still be read)

    def close(self) -> None:
        """Release what the source holds (a local file's descriptor). Safe twice."""
        close = getattr(self.source, "close", None)
        if close is not None:
            close()

    @property
    def kind(self) -> str:
        return blob_kind(self.stream_index)

    def make_byte_source(self) -> Any:
        return make_byte_source(self.source, self.page_size, self.settings)

    def survey(self) -> None:
        """Decode the version once with one thread to find the frames
        ``on_damage="conceal"`` numbers, and share them (reader-less metadata)."""
        _, decode = require_native()
        assert self.index is not None
        with self.make_byte_source() as byte_source:
            byte_source.set_extents(self.index.open_extents)
            with decode.VideoDecoder(byte_source, 1, self.source.name, "conceal") as decoder:
                decoder.index = self.index
                decoder.index_learned = lambda learnt: share_learnt_index(
                    self.source, learnt, self.kind)
                decoder.survey()


