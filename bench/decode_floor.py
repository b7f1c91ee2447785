"""The "decode floor": what libavcodec alone needs for a clip.

The decode floor of a clip is the time libavcodec needs to decode from the
keyframe before the clip's first frame to its last frame, with no pixel
conversion and no copy out: no reader can be faster than that with the same
threads, so ``clip time / floor`` says how much is left to win. It is
measured by ``fluxon_video._floor.decode_floor`` (the indexed path's seeks,
every frame decoded, nothing converted).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def decode_floor_ms(path: Path, indices: Sequence[int], num_threads: int) -> float:
    """Milliseconds libavcodec alone needs for frames ``indices`` of ``path``."""
    from fluxon_video import _avio, _floor
    from fluxon_video.sources import LocalFileRangeSource

    with LocalFileRangeSource(path) as source:
        with _avio.ByteSource(source, source.size, name=source.name) as byte_source:
            return float(_floor.decode_floor(byte_source, list(indices), num_threads,
                                             source.name)["decode_ms"])
