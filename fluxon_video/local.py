"""Decode frames from a local file through the same byte source and decoder.

Not the product's entry point (that is FluxonFsPatcher.open_video_reader);
useful to compare against peers on local files and to check a file quickly.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from fluxon_video.indexing import load_or_build_index
from fluxon_video.native import require_native
from fluxon_video.sources import LocalFileRangeSource
from fluxon_video.stats import DecodeStats
from fluxon_video.validation import Threads, positive_int, stream_choice, thread_count


def decode_local_frames(
    path: str | os.PathLike[str],
    indices: Sequence[int],
    height: int,
    width: int,
    num_threads: Threads = 1,
    seek: bool = True,
    on_damage: str = "error",
    stream_index: int | None = None,
    **byte_source_options: Any,
) -> tuple[np.ndarray, DecodeStats]:
    """Frames at ``indices`` of the file at ``path``, and the decode's stats.

    ``seek=False`` decodes sequentially from frame 0 (the reference path).
    ``on_damage`` and ``stream_index`` as for FluxonFsPatcher.open_video_reader.
    """
    avio, decode = require_native("decoding a local file")
    stream_index = stream_choice(stream_index)
    for name, value in (("height", height), ("width", width)):
        positive_int(name, value)
    num_threads = thread_count(num_threads)
    with LocalFileRangeSource(path) as source:
        with avio.ByteSource(source, source.size, name=source.name,
                             **byte_source_options) as byte_source:
            index = None
            if seek:
                index, _, _ = load_or_build_index(byte_source, source.name,
                                                  stream_index=stream_index)
            return decode.decode_frames(byte_source, indices, height, width, num_threads,
                                        index=index, on_damage=on_damage,
                                        stream_index=stream_index)


class LocalVideoReader:
    """A local file held open: its frame index built once, the decoder kept between
    reads (a read ahead of where it stands continues without seeking), as a
    FluxonFS reader does. Use as a context manager; ``close()`` is idempotent.

    ``index`` (a FrameIndex of this very file) skips the scan at open.
    """

    def __init__(self, path: str | os.PathLike[str], num_threads: Threads = 1, *,
                 index: Any = None, on_damage: str = "error", stream_index: int | None = None,
                 **byte_source_options: Any) -> None:
        avio, decode = require_native("decoding a local file")
        num_threads = thread_count(num_threads)
        stream_index = stream_choice(stream_index)
        self._source = LocalFileRangeSource(path)
        self._byte_source: Any = None
        self._decoder: Any = None
        try:
            self._byte_source = avio.ByteSource(self._source, self._source.size,
                                                name=self._source.name, **byte_source_options)
            if index is None:
                index, _, _ = load_or_build_index(self._byte_source, self._source.name,
                                                  stream_index=stream_index)
            self._byte_source.set_extents(index.open_extents if index is not None else [])
            self._decoder = decode.VideoDecoder(self._byte_source, num_threads,
                                                self._source.name, on_damage, stream_index)
            self._decoder.index = index
            if on_damage == "conceal":
                self._decoder.survey()
        except BaseException:
            self.close()
            raise

    @property
    def index(self) -> Any:
        """The FrameIndex (None if the file could not be indexed: reads are sequential)."""
        return self._decoder.index if self._decoder is not None else None

    def read_frames_numpy(self, indices: Sequence[int], height: int,
                          width: int) -> tuple[np.ndarray, DecodeStats]:
        """Frames at ``indices`` as uint8 (N, height, width, 3) RGB, and the decode's stats."""
        if self._decoder is None:
            from fluxon_video.errors import FluxonFsClosedError

            raise FluxonFsClosedError(f"{self._source.name}: the reader is closed")
        positive_int("height", height)
        positive_int("width", width)
        return self._decoder.decode(indices, height, width)

    def close(self) -> None:
        for part in (self._decoder, self._byte_source, self._source):
            if part is not None:
                part.close()
        self._decoder = self._byte_source = None

    def __enter__(self) -> LocalVideoReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
