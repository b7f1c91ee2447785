"""FluxonFsVideoMetadata: what a loader needs to know before it decodes.

Everything here comes from the frame index (the demux-only packet scan) and
the container header recorded with it; nothing is decoded. Frame ``i`` is the
i-th frame in presentation order, as everywhere in fluxon_video.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from fluxon_video.defaults import TIME_TOLERANCE_S
from fluxon_video.errors import (
    FluxonFsDamagedStreamError, FluxonFsDecodeError, FluxonFsFrameIndexError,
)
from fluxon_video.damage import numbered_frames
from fluxon_video.frame_index import AV_NOPTS_VALUE, FrameIndex
from fluxon_video.renamed import add_renamed_attributes
from fluxon_video.validation import positive_int, time_tolerance


@dataclass(frozen=True)
class FluxonFsAudioMetadata:
    """The audio stream the container pairs with the video, as its header says it."""

    stream_index: int               # the container's stream (``ffmpeg -map 0:<it>``)
    codec: str                      # e.g. "aac", "opus", "mp3"
    sample_rate: int                # Hz
    num_channels: int
    layout: str                     # FFmpeg's name, e.g. "mono", "stereo", "5.1"
    begin_stream_seconds: float | None  # the stream's start time as the header gives it
    duration_seconds: float | None  # None when the header does not say


add_renamed_attributes(FluxonFsAudioMetadata, {
    "channels": "num_channels", "start_s": "begin_stream_seconds",
    "duration_s": "duration_seconds"})

# The index header's names (stored in index blobs: they stay) of the renamed fields.
_AUDIO_HEADER_NAMES = {"num_channels": "channels", "begin_stream_seconds": "start_s",
                       "duration_seconds": "duration_s"}


def audio_metadata(header: dict[str, Any] | None) -> FluxonFsAudioMetadata | None:
    """The audio metadata of an index header's audio part (None: no audio)."""
    if not header:
        return None
    return FluxonFsAudioMetadata(**{f.name: header[_AUDIO_HEADER_NAMES.get(f.name, f.name)]
                                    for f in fields(FluxonFsAudioMetadata)})


@dataclass(frozen=True)
class FluxonFsVideoMetadata:
    """A video's frame count, timing, size, rotation, codec and keyframes."""

    num_frames: int                 # frames a sequential decode yields
    average_fps: float              # num_frames / duration_seconds
    duration_seconds: float         # end_stream_seconds - begin_stream_seconds
    begin_stream_seconds: float     # presentation time of the first frame
    end_stream_seconds: float       # ... of the end of the last frame
    width: int                      # native, as decoded (before any rotation)
    height: int
    sample_aspect_ratio: tuple[int, int]
    rotation_deg: int               # counter-clockwise turn for display: 0, 90, 180, 270
    codec: str                      # e.g. "h264", "hevc", "vp9", "av1"
    pix_fmt: str                    # e.g. "yuv420p"; "" if the header does not say
    bit_depth: int
    color_range: str                # "tv", "pc" or "unknown"
    color_space: str                # e.g. "bt709" or "unknown"
    container: str                  # FFmpeg's demuxer name, e.g. "mov,mp4,m4a,3gp,3g2,mj2"
    stream_index: int               # the container's stream read (``ffmpeg -map 0:<it>``)
    bit_rate: int                   # bits/s, 0 if unknown
    keyframe_indices: tuple[int, ...]
    size_bytes: int
    mtime_ns: int
    audio: FluxonFsAudioMetadata | None = None  # None: the file has no audio stream

    @property
    def display_width(self) -> int:
        """Width as displayed: sample aspect ratio applied, then rotation."""
        return self._display()[0]

    @property
    def display_height(self) -> int:
        return self._display()[1]

    def _display(self) -> tuple[int, int]:
        num, den = self.sample_aspect_ratio
        width, height = _round_even(self.width * num / den), self.height
        return (height, width) if self.rotation_deg in (90, 270) else (width, height)


add_renamed_attributes(FluxonFsVideoMetadata, {
    "duration_s": "duration_seconds", "begin_s": "begin_stream_seconds",
    "end_s": "end_stream_seconds"})


# Bits of the orientation the decoder applies (_convert.pxd FX_ORIENT_*).
ORIENT_TRANSPOSE, ORIENT_MIRROR_X, ORIENT_MIRROR_Y = 1, 2, 4


def _theta(matrix: list[int]) -> float | None:
    """The ffmpeg CLI's get_rotation: clockwise degrees in [0, 360), None if degenerate."""
    m = [v / 65536.0 for v in matrix]
    scale0, scale1 = math.hypot(m[0], m[3]), math.hypot(m[1], m[4])
    if scale0 == 0 or scale1 == 0:
        return None
    # av_display_rotation_get gives the counter-clockwise angle; the CLI negates it.
    theta = -round(-math.degrees(math.atan2(m[1] / scale1, m[0] / scale0)))
    return theta - 360 * math.floor(theta / 360 + 0.9 / 360)


def rotation_from_matrix(matrix: Iterable[int] | None) -> int:
    """How far the picture turns counter-clockwise for display: 0, 90, 180 or 270
    (ffprobe's "rotation", normalised; another angle reports 0)."""
    theta = _theta(list(matrix)) if matrix is not None else None
    if theta is None:
        return 0
    for right in (90, 180, 270):
        if abs(theta - right) < 1:
            return 360 - right
    return 0


def orientation_from_matrix(matrix: Iterable[int] | None) -> int | None:
    """The pixel permutation the ffmpeg CLI's autorotate applies, as ORIENT_* bits
    (0: none); None for an angle that is not a multiple of 90 degrees (the
    CLI then interpolates with its rotate filter, which this does not do)."""
    if matrix is None:
        return 0
    m = list(matrix)
    theta = _theta(m)
    if theta is None:
        return 0
    if abs(theta - 90) < 1:  # transpose=clock, or cclock_flip when mirrored
        return ORIENT_TRANSPOSE if m[3] > 0 else ORIENT_TRANSPOSE | ORIENT_MIRROR_Y
    if abs(theta - 180) < 1:  # hflip and/or vflip
        return (ORIENT_MIRROR_X if m[0] < 0 else 0) | (ORIENT_MIRROR_Y if m[4] < 0 else 0)
    if abs(theta - 270) < 1:  # transpose=cclock, or clock_flip when mirrored
        return (ORIENT_TRANSPOSE | ORIENT_MIRROR_X | ORIENT_MIRROR_Y if m[3] < 0
                else ORIENT_TRANSPOSE | ORIENT_MIRROR_X)
    if abs(theta) < 1:
        return ORIENT_MIRROR_Y if m[4] < 0 else 0
    return None


def timestamps_s(index: FrameIndex, on_damage: str = "error", name: str = "") -> np.ndarray:
    """Presentation time of every frame, in frame-index order (pts x time_base),
    numbered as ``on_damage`` numbers them (damage.numbered_frames).

    Where the container's timestamps are damaged (index.time_problem), the
    sorted pts are not the times of the frames a read returns: only the
    conceal policy's survey (the decoder's own output times) says them, and
    without it this raises FluxonFsDamagedStreamError rather than give a
    time that would pick another frame."""
    if index.time_problem and (on_damage != "conceal" or index.decoded_pts is None):
        raise FluxonFsDamagedStreamError(
            f"{name or 'this video'}: the container's timestamps are damaged "
            f"({index.time_problem}), so they do not say which frame is shown when; frames "
            "read by index are exact, and a reader opened with on_damage='conceal' times "
            "the frames as the decoder outputs them")
    return _frame_times(index, on_damage)


def _frame_times(index: FrameIndex, on_damage: str) -> np.ndarray:
    """The frames' pts in seconds; NaN for a frame without pts."""
    num, den = index.header.get("time_base", (1, 1))
    pts = numbered_frames(index, on_damage)[0]
    # pts * num / den, not pts * (num / den): 208 * 0.001 is 0.20800000000000002.
    return np.where(pts == AV_NOPTS_VALUE, np.nan, pts.astype(np.float64) * num / den)


def _frame_end_s(index: FrameIndex, times: np.ndarray, last: int) -> float:
    """When the last frame (its packet's decode position, -1: unknown) stops
    being shown: its pts plus its duration."""
    num, den = index.header.get("time_base", (1, 1))
    durations = index.pkt_duration
    duration = int(durations[last]) * num / den if last >= 0 and durations is not None else 0.0
    if duration <= 0:
        if times.shape[0] > 1:
            duration = float(np.median(np.diff(times)))
        else:
            rate_num, rate_den = index.header.get("avg_frame_rate", (0, 1))
            duration = rate_den / rate_num if rate_num > 0 else 0.0
    return float(times[-1] + duration)


def build_metadata(index: FrameIndex, size_bytes: int, mtime_ns: int,
                   name: str = "", on_damage: str = "error") -> FluxonFsVideoMetadata:
    header: dict[str, Any] = index.header
    _, is_key, packets = numbered_frames(index, on_damage)
    count = int(packets.shape[0])
    if count == 0:
        raise FluxonFsDecodeError(f"{name}: the video stream has no frames")
    times = _frame_times(index, on_damage)
    times = times[np.isfinite(times)]  # the span of the frames whose pts are known
    if times.size == 0:
        times = np.zeros(1)
    begin = float(times[0])
    end = _frame_end_s(index, times, int(packets[-1]))
    duration = end - begin
    keyframes = np.flatnonzero(is_key)
    return FluxonFsVideoMetadata(
        num_frames=count,
        average_fps=count / duration if duration > 0 else 0.0,
        duration_seconds=duration,
        begin_stream_seconds=begin,
        end_stream_seconds=end,
        width=int(header.get("width", 0)),
        height=int(header.get("height", 0)),
        sample_aspect_ratio=tuple(header.get("sample_aspect_ratio", (1, 1))),
        rotation_deg=rotation_from_matrix(header.get("display_matrix")),
        codec=index.codec_name,
        pix_fmt=str(header.get("pix_fmt", "")),
        bit_depth=int(header.get("bit_depth", 0)),
        color_range=str(header.get("color_range", "unknown")),
        color_space=str(header.get("color_space", "unknown")),
        container=index.format_name,
        stream_index=index.stream_index,
        bit_rate=int(header.get("bit_rate", 0)),
        keyframe_indices=tuple(int(k) for k in keyframes),
        size_bytes=int(size_bytes),
        mtime_ns=int(mtime_ns),
        audio=audio_metadata(header.get("audio")),
    )


# A time this far or less below a frame's pts is at it under "last pts <= t"
# too: far below any time base's tick (1/90000 s), far above a float's rounding
# of a sum of seconds (0.587 + 12 / 8 = 2.0869999999999997 is at 2.087).
SUM_SLACK_S = 1e-9


def indices_at_times(frame_times: np.ndarray, metadata: FluxonFsVideoMetadata, seconds: Any,
                     name: str = "", *, tolerance_s: float = TIME_TOLERANCE_S) -> list[int]:
    """For each time t, the frame it names (docs/frame-index.md, "Frames by time"):

    - the frame whose pts is nearest t, when that is within ``tolerance_s``
      (on a tie, the earlier frame: the one on screen at t);
    - otherwise the frame displayed at t: the last one whose pts <= t (within
      SUM_SLACK_S), for t in ``[begin_s, end_s)``;
    - any other time (before the first frame or from ``end_s`` on, and not
      within ``tolerance_s`` of a frame) is FluxonFsFrameIndexError.

    This is the one time-to-frame rule: every read by time (the reader's,
    the pool's requests, the dataset's clips, the CLI, and compat layers that
    give another library's rule and default, e.g. LeRobot's ``tolerance_s``)
    comes here, and ``tolerance_s`` is checked here (validation.time_tolerance).
    ``tolerance_s=0`` is the rule without a tolerance: last pts <= t.
    ``frame_times`` is ``timestamps_s(index)`` of the same video.
    """
    tolerance = time_tolerance(tolerance_s)
    times = np.asarray(seconds, dtype=np.float64).reshape(-1)
    if times.size and not np.isfinite(times).all():
        raise FluxonFsFrameIndexError(f"{name}: times must be finite numbers")
    begin, end = metadata.begin_stream_seconds, metadata.end_stream_seconds
    outside = (times < begin) | (times >= end)
    if not (np.diff(frame_times) >= 0).all():  # NaN compares False too
        if outside.any():  # no frame's time can be trusted to be near it
            _raise_outside(name, float(times[outside][0]), metadata, None)
        # The conceal policy's times of a stream whose timestamps are damaged:
        # they go back, or a frame has none, and no frame is "the one shown at t".
        raise FluxonFsDamagedStreamError(
            f"{name}: the frames' times do not increase in frame order (damaged "
            "timestamps), so no frame is the one shown at a given time; read by index")
    count = frame_times.shape[0]
    before = np.searchsorted(frame_times, times, side="right") - 1  # last pts <= t
    after = before + 1                                              # first pts > t
    below = np.where(before >= 0, times - frame_times[np.maximum(before, 0)], np.inf)
    above = np.where(after < count, frame_times[np.minimum(after, count - 1)] - times, np.inf)
    near = np.where(above < below, after, before)      # a tie goes to the frame shown at t
    within = np.minimum(below, above) <= tolerance
    shown = np.searchsorted(frame_times, times + SUM_SLACK_S, side="right") - 1
    found = np.where(within, near, shown)
    bad = (outside & ~within) | (found < 0)
    if bad.any():
        _raise_outside(name, float(times[bad][0]), metadata, tolerance)
    return [int(i) for i in found]


def indices_in_range(frame_times: np.ndarray, metadata: FluxonFsVideoMetadata, start_s: float,
                     stop_s: float, name: str = "", *,
                     tolerance_s: float = TIME_TOLERANCE_S) -> np.ndarray:
    """The frames whose pts fall in ``[start_s, stop_s)``, a pts within
    ``tolerance_s`` of a bound counting as at it (so at ``start_s``: in; at
    ``stop_s``: out): pts in ``[start_s - tolerance_s, stop_s - tolerance_s)``.
    The range must lie in ``[begin_stream_seconds - tolerance_s,
    end_stream_seconds + tolerance_s]``."""
    tolerance = time_tolerance(tolerance_s)
    begin, end = metadata.begin_stream_seconds, metadata.end_stream_seconds
    if not (begin - tolerance <= start_s <= stop_s <= end + tolerance):
        raise FluxonFsFrameIndexError(
            f"{name}: range [{start_s}, {stop_s}) s is not inside the video "
            f"[{begin}, {end}) s" + _within(tolerance))
    return np.flatnonzero((frame_times >= start_s - tolerance)
                          & (frame_times < stop_s - tolerance))


def _within(tolerance: float | None) -> str:
    return "" if not tolerance else f" (tolerance_s={tolerance:g})"


def _raise_outside(name: str, bad: float, metadata: FluxonFsVideoMetadata,
                   tolerance: float | None) -> None:
    raise FluxonFsFrameIndexError(
        f"{name}: time {bad} s is outside the video "
        f"[{metadata.begin_stream_seconds}, {metadata.end_stream_seconds}) s"
        + ("" if not tolerance else f" and not within tolerance_s={tolerance:g} of a frame"))


def _round_even(value: float) -> int:
    """The nearest even integer, at least 2."""
    return max(2, 2 * int(math.floor(value / 2 + 0.5)))


def output_size(metadata: FluxonFsVideoMetadata, height: int | None, width: int | None,
                autorotate: bool) -> tuple[int, int]:
    """(height, width) of output frames.

    Both None: the native size as decoded (rotated when autorotate turns it
    by 90 or 270 degrees). One None: kept from the display aspect ratio (the
    sample aspect ratio applied, and the rotation when autorotate), rounded
    to the nearest even number.
    """
    if height is not None:
        height = positive_int("height", height)
    if width is not None:
        width = positive_int("width", width)
    turned = autorotate and metadata.rotation_deg in (90, 270)
    if height is None and width is None:
        return (metadata.width, metadata.height) if turned else (metadata.height, metadata.width)
    num, den = metadata.sample_aspect_ratio
    display_w, display_h = metadata.width * num / den, float(metadata.height)
    if turned:
        display_w, display_h = display_h, display_w
    if width is None:
        assert height is not None
        return height, _round_even(height * display_w / display_h)
    assert width is not None
    return (_round_even(width * display_h / display_w) if height is None else height), width
