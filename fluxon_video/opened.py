"""An opened file version, as a reader takes it: its bytes, its frame index, what opening cost."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fluxon_video.frame_index import FrameIndex, blob_kind
from fluxon_video.fs.config import ClientSettings
from fluxon_video.fs.range_source import FluxonFsRangeSource
from fluxon_video.indexing import share_learnt_index
from fluxon_video.native import require_native


def make_byte_source(range_source: FluxonFsRangeSource, page_size: int,
                     settings: ClientSettings) -> Any:
    """A ByteSource over a FluxonFS file version, sized by the client settings."""
    avio, _ = require_native()
    return avio.ByteSource(
        range_source, range_source.size, page_size=page_size,
        cache_bytes=settings.reader_cache_bytes, readahead_pages=settings.readahead_pages,
        fetch_workers=settings.fetch_workers, fetch_timeout_s=3 * settings.agent_timeout_s + 1,
        name=range_source.name)


@dataclass
class OpenedVideo:
    """A file version opened for video (fluxon_video/opening.py opens it)."""

    source: FluxonFsRangeSource
    stream_index: int | None   # as asked (None: the default rule's)
    index: FrameIndex | None   # None: FFmpeg could not index the file
    index_source: str          # "kv" | "scan" | "none"
    index_ms: float
    round_trips: int           # network round trips the open waited for
    page_size: int
    settings: ClientSettings
    byte_source: Any = None    # kept open for a reader (its scan's pages stay cached)

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


