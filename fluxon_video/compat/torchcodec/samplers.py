"""torchcodec.samplers on fluxon_video: clips at random or regular indices or timestamps.

The four samplers of torchcodec 0.13 to 0.17 (unchanged) with its
signatures, arguments checks, policies and return type (a 5-D FrameBatch:
clips x frames x ...). They draw from torch's random generator exactly as
torchcodec does (``randint`` for indices, ``rand`` for timestamps), so under
the same ``torch.manual_seed`` they pick the same clips. All the clips' frames are one batched read
(``decoder.get_frames_at`` / ``get_frames_played_at``), which reads each
frame once, in file order, from its keyframe. Any decoder with torchcodec's
interface works: ours, or torchcodec's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch

from fluxon_video.compat.torchcodec._frame import FrameBatch

__all__ = ["clips_at_random_indices", "clips_at_random_timestamps", "clips_at_regular_indices",
           "clips_at_regular_timestamps"]

Policy = Literal["repeat_last", "wrap", "error"]


def _repeat_last(values: list, desired: int) -> list:
    return values + [values[-1]] * (desired - len(values))


def _wrap(values: list, desired: int) -> list:
    return (values * (desired // len(values) + 1))[:desired]


def _error(values: list, desired: int) -> list:
    raise ValueError("You set the 'error' policy, and the sampler tried to decode a frame that "
                     "is beyond the number of frames in the video. Try to leave "
                     "sampling_range_end to its default value?")


POLICIES: dict[str, Callable[[list, int], list]] = {
    "repeat_last": _repeat_last, "wrap": _wrap, "error": _error}


def _check_common(decoder: Any, num_frames_per_clip: int, policy: str) -> None:
    if len(decoder) < 1:
        raise ValueError(f"Decoder must have at least one frame, found {len(decoder)} frames.")
    if num_frames_per_clip <= 0:
        raise ValueError(f"num_frames_per_clip ({num_frames_per_clip}) must be strictly positive")
    if policy not in POLICIES:
        raise ValueError(f"Invalid policy ({policy}). Supported values are {POLICIES.keys()}.")


def _as_clips(frames: Any, num_clips: int, per_clip: int) -> FrameBatch:
    """The flat batch of every clip's frames as (clips, frames per clip, ...)."""
    return FrameBatch(data=frames.data.view(num_clips, per_clip, *frames.data.shape[-3:]),
                      pts_seconds=frames.pts_seconds.view(num_clips, per_clip),
                      duration_seconds=frames.duration_seconds.view(num_clips, per_clip))


# ---- by index ----

def _index_range(between: int, per_clip: int, start: int, end: int | None,
                 count: int) -> tuple[int, int]:
    """[start, end) where clips may start, as torchcodec bounds it."""
    if start < 0:
        start = count + start
    if start >= count:
        raise ValueError(f"sampling_range_start ({start}) must be smaller than the number of "
                         f"frames ({count}).")
    span = between * (per_clip - 1) + 1
    if end is None:
        end = max(count - span + 1, 1)
        if start >= end:
            raise ValueError(f"We determined that sampling_range_end should be {end}, but it is "
                             f"smaller than or equal to sampling_range_start ({start}).")
    else:
        end = min(count + end if end < 0 else end, count)
        if start >= end:
            raise ValueError(f"sampling_range_start ({start}) must be smaller than "
                             f"sampling_range_end ({end}).")
    return start, end


def _by_index(kind: str, decoder: Any, num_clips: int, num_frames_per_clip: int,
              num_indices_between_frames: int, sampling_range_start: int,
              sampling_range_end: int | None, policy: Policy) -> FrameBatch:
    _check_common(decoder, num_frames_per_clip, policy)
    if num_clips <= 0:
        raise ValueError(f"num_clips ({num_clips}) must be > 0")
    if num_indices_between_frames <= 0:
        raise ValueError(f"num_indices_between_frames ({num_indices_between_frames}) must be "
                         "strictly positive")
    count = len(decoder)
    start, end = _index_range(num_indices_between_frames, num_frames_per_clip,
                              sampling_range_start, sampling_range_end, count)
    if kind == "random":
        starts = torch.randint(low=start, high=end, size=(num_clips,))
    else:  # torch.linspace repeats starts when there are more clips than places
        starts = torch.linspace(start, end - 1, steps=num_clips, dtype=torch.int)
    span = num_indices_between_frames * (num_frames_per_clip - 1) + 1
    indices: list[int] = []
    for first in starts.tolist():
        clip = list(range(first, min(first + span, count), num_indices_between_frames))
        if len(clip) < num_frames_per_clip:
            clip = POLICIES[policy](clip, num_frames_per_clip)
        indices += clip
    return _as_clips(decoder.get_frames_at(indices=indices), num_clips, num_frames_per_clip)


def clips_at_random_indices(decoder: Any, *, num_clips: int = 1, num_frames_per_clip: int = 1,
                            num_indices_between_frames: int = 1, sampling_range_start: int = 0,
                            sampling_range_end: int | None = None,
                            policy: Policy = "repeat_last") -> FrameBatch:
    """``num_clips`` clips starting at random indices in [sampling_range_start,
    sampling_range_end) (None: so that no clip runs past the end), each
    ``num_frames_per_clip`` frames ``num_indices_between_frames`` apart; a clip
    past the end follows ``policy``."""
    return _by_index("random", decoder, num_clips, num_frames_per_clip,
                     num_indices_between_frames, sampling_range_start, sampling_range_end,
                     policy)


def clips_at_regular_indices(decoder: Any, *, num_clips: int = 1, num_frames_per_clip: int = 1,
                             num_indices_between_frames: int = 1, sampling_range_start: int = 0,
                             sampling_range_end: int | None = None,
                             policy: Policy = "repeat_last") -> FrameBatch:
    """As clips_at_random_indices, the clips' starts equally spaced."""
    return _by_index("regular", decoder, num_clips, num_frames_per_clip,
                     num_indices_between_frames, sampling_range_start, sampling_range_end,
                     policy)


# ---- by time ----

def _time_step(decoder: Any, num_clips: int | None, seconds_between_clip_starts: float | None,
               seconds_between_frames: float | None) -> float:
    if seconds_between_clip_starts is not None and seconds_between_clip_starts <= 0:
        raise ValueError(f"seconds_between_clip_starts ({seconds_between_clip_starts}) must be > 0")
    if num_clips is not None and num_clips <= 0:
        raise ValueError(f"num_clips ({num_clips}) must be > 0")
    if decoder.metadata.average_fps is None:
        raise ValueError("Could not infer average fps from video metadata. Try using an "
                         "index-based sampler instead.")
    if decoder.metadata.end_stream_seconds is None:
        raise ValueError("Could not infer stream end from video metadata. Try using an "
                         "index-based sampler instead.")
    if seconds_between_frames is None:
        return 1 / decoder.metadata.average_fps
    if seconds_between_frames <= 0:
        raise ValueError(f"seconds_between_frames ({seconds_between_frames}) must be > 0")
    return seconds_between_frames


def _time_range(per_clip: int, between: float, start: float | None, end: float | None,
                begin: float, stream_end: float) -> tuple[float, float]:
    """[start, end) where clips may start, as torchcodec bounds it."""
    if start is None:
        start = begin
    elif start < begin:
        raise ValueError(f"sampling_range_start ({start}) must be at least {begin}")
    elif start >= stream_end:
        raise ValueError(f"sampling_range_start ({start}) must be smaller than {stream_end}")
    if end is None:  # no clip's frames past the end
        end = stream_end - (per_clip - 1) * between
    elif end <= begin:
        raise ValueError(f"sampling_range_end ({end}) must be at least {begin}")
    if start >= end:
        raise ValueError(f"sampling_range_start ({start}) must be smaller than "
                         f"sampling_range_end ({end})")
    return start, min(end, stream_end)


def _by_time(kind: str, decoder: Any, num_clips: int | None,
             seconds_between_clip_starts: float | None, num_frames_per_clip: int,
             seconds_between_frames: float | None, sampling_range_start: float | None,
             sampling_range_end: float | None, policy: Policy) -> FrameBatch:
    _check_common(decoder, num_frames_per_clip, policy)
    between = _time_step(decoder, num_clips, seconds_between_clip_starts, seconds_between_frames)
    metadata = decoder.metadata
    start, end = _time_range(num_frames_per_clip, between, sampling_range_start,
                             sampling_range_end, metadata.begin_stream_seconds,
                             metadata.end_stream_seconds)
    if kind == "random":
        starts = torch.rand(num_clips, dtype=torch.float64) * (end - start) + start
    else:  # arange may reach the end by rounding: those starts are dropped
        starts = torch.arange(start, end, seconds_between_clip_starts, dtype=torch.float64)
        starts = starts[starts < end]
        num_clips = len(starts)
    stream_end = metadata.end_stream_seconds
    times: list[float] = []
    for first in starts.tolist():
        clip = [t for i in range(num_frames_per_clip) if (t := first + i * between) < stream_end]
        if len(clip) < num_frames_per_clip:
            clip = POLICIES[policy](clip, num_frames_per_clip)
        times += clip
    assert num_clips is not None
    return _as_clips(decoder.get_frames_played_at(seconds=times), num_clips, num_frames_per_clip)


def clips_at_random_timestamps(decoder: Any, *, num_clips: int = 1, num_frames_per_clip: int = 1,
                               seconds_between_frames: float | None = None,
                               sampling_range_start: float | None = None,
                               sampling_range_end: float | None = None,
                               policy: Policy = "repeat_last") -> FrameBatch:
    """``num_clips`` clips starting at random times in [sampling_range_start,
    sampling_range_end) (None: the stream's begin; so that no clip runs past
    the end), each ``num_frames_per_clip`` frames sampled
    ``seconds_between_frames`` apart (None: 1 / average_fps)."""
    return _by_time("random", decoder, num_clips, None, num_frames_per_clip,
                    seconds_between_frames, sampling_range_start, sampling_range_end, policy)


def clips_at_regular_timestamps(decoder: Any, *, seconds_between_clip_starts: float,
                                num_frames_per_clip: int = 1,
                                seconds_between_frames: float | None = None,
                                sampling_range_start: float | None = None,
                                sampling_range_end: float | None = None,
                                policy: Policy = "repeat_last") -> FrameBatch:
    """Clips starting every ``seconds_between_clip_starts`` over the sampling
    range, otherwise as clips_at_random_timestamps."""
    return _by_time("regular", decoder, None, seconds_between_clip_starts, num_frames_per_clip,
                    seconds_between_frames, sampling_range_start, sampling_range_end, policy)
