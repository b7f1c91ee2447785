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
from fluxon_video.validation import positive_int


def decode_local_frames(
    path: str | os.PathLike[str],
    indices: Sequence[int],
    height: int,
    width: int,
    num_threads: int = 1,
    seek: bool = True,
    **byte_source_options: Any,
) -> tuple[np.ndarray, DecodeStats]:
    """Frames at ``indices`` of the file at ``path``, and the decode's stats.

    ``seek=False`` decodes sequentially from frame 0 (the reference path).
    """
    avio, decode = require_native("decoding a local file")
    for name, value in (("height", height), ("width", width), ("num_threads", num_threads)):
        positive_int(name, value)
    with LocalFileRangeSource(path) as source:
        with avio.ByteSource(source, source.size, name=source.name,
                             **byte_source_options) as byte_source:
            index = None
            if seek:
                index, _, _ = load_or_build_index(byte_source, source.name)
            return decode.decode_frames(byte_source, indices, height, width, num_threads,
                                        index=index)
