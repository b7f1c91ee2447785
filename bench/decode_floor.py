"""HOOK — the "decode floor": what libavcodec alone needs for a clip.

The decode floor of a clip is the time libavcodec needs to decode from the
keyframe before the clip's first frame to its last frame, with no pixel
conversion and no copy out: no reader can be faster than that with the same
threads, so ``clip time / floor`` says how much is left to win.

It is measured by ``fluxon_video._decode.decode_floor``, which mirrors
``decode_frames``::

    decode_floor(byte_source, indices, num_threads=1, name=None)
        -> {"decode_ms": float, ...}   (a plain float in ms is accepted too)

Where that function does not exist (an older build) this hook returns None
and the tables show "n/a". If the native signature changes, adapt ``_call``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def native_decode_floor() -> Any | None:
    """``fluxon_video._decode.decode_floor``, or None where it does not exist (yet)."""
    try:
        from fluxon_video import _decode
    except ImportError:
        return None
    return getattr(_decode, "decode_floor", None)


def _call(decode_floor: Any, path: Path, indices: Sequence[int], num_threads: int) -> float:
    from fluxon_video import _avio
    from fluxon_video.sources import LocalFileRangeSource

    with LocalFileRangeSource(path) as source:
        with _avio.ByteSource(source, source.size, name=source.name) as byte_source:
            result = decode_floor(byte_source, list(indices), num_threads, source.name)
    return float(result["decode_ms"] if isinstance(result, dict) else result)


def decode_floor_ms(path: Path, indices: Sequence[int], num_threads: int) -> float | None:
    """Milliseconds libavcodec alone needs for frames ``indices`` of ``path``, or None."""
    decode_floor = native_decode_floor()
    if decode_floor is None:
        return None
    return _call(decode_floor, path, indices, num_threads)
