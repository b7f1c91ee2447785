"""Decode frames from a local file through the same open path, byte source and decoder.

Not the product's entry point (that is FluxonFsPatcher.open_video_reader);
thin wrappers of opening.open_source that return each decode's DecodeStats,
to compare against peers on local files and to check a file quickly.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from fluxon_video.errors import FluxonFsClosedError
from fluxon_video.frame_index import FrameIndex
from fluxon_video.fs.config import ClientSettings
from fluxon_video.native import require_native
from fluxon_video.opened import OpenedVideo
from fluxon_video.opening import open_source
from fluxon_video.stats import DecodeStats
from fluxon_video.validation import Threads, positive_int, stream_choice, thread_count


def _open_local(path: str | os.PathLike[str], num_threads: Threads, index: FrameIndex | str,
                on_damage: str, stream_index: int | None) -> tuple[OpenedVideo, Any]:
    """The file opened by the one open path (opening.open_source) and a decoder
    over its byte source; if the decoder cannot be made, the open is released."""
    _, decode = require_native("decoding a local file")
    num_threads = thread_count(num_threads)
    video = open_source(path, stream_choice(stream_index), ClientSettings(), index=index)
    try:
        decoder = decode.VideoDecoder(video.byte_source, num_threads, video.source.name,
                                      on_damage, video.stream_index)
        decoder.index = video.index
        video.byte_source.set_extents(video.index.open_extents if video.index is not None
                                      else [])
    except BaseException:
        video.byte_source.close()
        video.close()
        raise
    return video, decoder


def decode_local_frames(
    path: str | os.PathLike[str],
    indices: Sequence[int],
    height: int,
    width: int,
    num_threads: Threads = 1,
    seek: bool = True,
    on_damage: str = "error",
    stream_index: int | None = None,
) -> tuple[np.ndarray, DecodeStats]:
    """Frames at ``indices`` of the file at ``path``, and the decode's stats.

    ``seek=False`` decodes sequentially from frame 0 (the reference path).
    ``on_damage`` and ``stream_index`` as for FluxonFsPatcher.open_video_reader.
    """
    for name, value in (("height", height), ("width", width)):
        positive_int(name, value)
    video, decoder = _open_local(path, num_threads, "load" if seek else "none", on_damage,
                                 stream_index)
    with video.byte_source, decoder:
        try:
            frames: np.ndarray
            frames, stats = decoder.decode(indices, height, width)
            return frames, stats
        finally:
            video.close()


class LocalVideoReader:
    """A local file held open: its frame index built once, the decoder kept between
    reads (a read ahead of where it stands continues without seeking), as a
    FluxonFS reader does. Use as a context manager; ``close()`` is idempotent.

    ``index`` (a FrameIndex of this very file) skips the scan at open.
    """

    def __init__(self, path: str | os.PathLike[str], num_threads: Threads = 1, *,
                 index: FrameIndex | None = None, on_damage: str = "error",
                 stream_index: int | None = None) -> None:
        self._video: OpenedVideo | None = None
        self._decoder: Any = None
        self._video, self._decoder = _open_local(path, num_threads,
                                                 "load" if index is None else index,
                                                 on_damage, stream_index)
        self._name = self._video.source.name
        try:
            if on_damage == "conceal":
                self._decoder.survey()
        except BaseException:
            self.close()
            raise

    @property
    def index(self) -> FrameIndex | None:
        """The FrameIndex (None if the file could not be indexed: reads are sequential)."""
        return self._decoder.index if self._decoder is not None else None

    def read_frames_numpy(self, indices: Sequence[int], height: int,
                          width: int) -> tuple[np.ndarray, DecodeStats]:
        """Frames at ``indices`` as uint8 (N, height, width, 3) RGB, and the decode's stats."""
        if self._decoder is None:
            raise FluxonFsClosedError(f"{self._name}: the reader is closed")
        positive_int("height", height)
        positive_int("width", width)
        frames: np.ndarray
        frames, stats = self._decoder.decode(indices, height, width)
        return frames, stats

    def close(self) -> None:
        """Release the decoder, the byte source and the file. Safe to call twice."""
        decoder, video = self._decoder, self._video
        self._decoder = self._video = None
        if decoder is not None:
            decoder.close()
        if video is not None:
            video.byte_source.close()
            video.close()

    def __enter__(self) -> LocalVideoReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
