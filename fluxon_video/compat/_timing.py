"""Frame times as torchcodec and decord report them, from one reader's frame index.

- ``pts``: each frame's presentation time (the reader's ``timestamps_s()``).
- ``durations``: each frame's own duration, its packet's (what FFmpeg puts
  in the decoded frame, and what torchcodec's ``duration_seconds`` and
  decord's ``get_frame_timestamp`` end report): in Matroska the block's
  millisecond duration, in MP4 the sample's. Where the container gives none,
  the time until the next frame (the last: until the stream's end).
- ``shown_at``: the frame on screen at a time: torchcodec's rule, the last
  frame whose pts <= t, through the reader's time rule with no tolerance.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fluxon_video.frames import frame_durations


def frame_index(reader: Any) -> Any:
    """The reader's frame index (its header and per-packet durations: what
    the public metadata does not carry)."""
    return reader._index()


class FrameTiming:
    """The times of one reader's frames, computed once."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        metadata = reader.metadata
        self.begin = float(metadata.begin_stream_seconds)
        self.end = float(metadata.end_stream_seconds)
        self.count = int(metadata.num_frames)
        self.keyframes = [int(k) for k in metadata.keyframe_indices]
        self.pts = np.ascontiguousarray(reader.timestamps_s(),
                                        np.float64)
        index = frame_index(reader)
        self.header: dict[str, Any] = dict(index.header)
        num, den = self.header.get("time_base", (1, 1))
        own = index.pkt_duration[index.frame_dec] * num / den
        shown = frame_durations(self.pts, self.end)
        self.durations = np.where(own > 0, own, shown).astype(np.float64)
        rate = self.header.get("avg_frame_rate", (0, 1))
        self.header_fps = rate[0] / rate[1] if rate[0] > 0 and rate[1] > 0 else None

    def shown_at(self, seconds: Any) -> np.ndarray:
        """The index of the frame on screen at each time (inside [begin, end))."""
        times = np.asarray(seconds, np.float64).reshape(-1)
        if times.size == 0:
            return np.empty(0, np.int64)
        return np.asarray(self.reader.indices_at_times(times, tolerance_s=0.0), np.int64)

    def played_in(self, start: float, stop: float) -> np.ndarray:
        """The frames played in [start, stop): from the one on screen at
        ``start`` to the last whose pts is before ``stop`` (torchcodec's range)."""
        if start == stop:
            return np.empty(0, np.int64)
        first = int(self.shown_at([start])[0])
        last = int(np.searchsorted(self.pts, stop, side="left"))
        return np.arange(first, max(last, first), dtype=np.int64)
