"""A drop-in for decord's VideoReader and AVReader on fluxon_video.

    import fluxon_video.compat.decord as decord            # was: import decord
    from fluxon_video.compat.decord import VideoReader, AVReader, cpu

    vr = VideoReader("clip.mp4", ctx=cpu(0), width=224, height=224)
    frames = vr.get_batch([0, 8, 16]).asnumpy()   # uint8 (3, 224, 224, 3)

The API of decord 0.6: ``VideoReader`` (``len``, indexing and slicing,
``get_batch``, ``next``, ``seek``/``seek_accurate``/``skip_frames``,
``get_frame_timestamp``, ``get_key_indices``, ``get_avg_fps``), ``AVReader``
(frames with the audio each one spans), ``cpu``, ``bridge.set_bridge``.
Frames are the ffmpeg CLI's (bilinear scaling, turned upright as decord
turns them); sources as fluxon_video.compat takes them, FluxonFS locations
included. What differs: docs/compat.md.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fluxon_video.audio import AudioSpec
from fluxon_video.compat._sources import OwnsReader, open_reader
from fluxon_video.compat._timing import FrameTiming
from fluxon_video.compat.decord import bridge
from fluxon_video.compat.decord._context import DECORDContext, cpu, gpu
from fluxon_video.compat.decord.bridge import NDArray, bridge_out
from fluxon_video.errors import FluxonFsError

__all__ = ["AVReader", "DECORDError", "NDArray", "VideoReader", "bridge", "cpu", "gpu"]

# decord's error base; here every fluxon_video error (decord raises RuntimeError
# and DECORDError where these raise the FluxonFs classes of docs/api.md).
DECORDError = FluxonFsError


def _checked_indices(indices: Any, count: int) -> np.ndarray:
    """int64 indices, negative ones from the end; decord's IndexError otherwise."""
    wanted = np.array(indices, dtype=np.int64).reshape(-1)
    wanted[wanted < 0] += count
    if not (wanted >= 0).all():
        raise IndexError(f"Invalid negative indices: {wanted[wanted < 0] - count}")
    if not (wanted < count).all():
        raise IndexError(f"Out of bound indices: {wanted[wanted >= count]}")
    return wanted


class VideoReader(OwnsReader):
    """decord.VideoReader: frames as uint8 (H, W, 3) / (N, H, W, 3) RGB.

    ``uri``: a path, a FluxonFS location (see fluxon_video.compat), bytes or
    a seekable binary file object. ``width``/``height``: the output size
    (-1: the native one, each side apart, as decord: no aspect kept).
    ``num_threads``: decoder threads (0: one per core). ``fault_tol`` is
    accepted and not used: a frame that depends on damaged data raises
    (fluxon_video's ``on_damage="error"``). ``close()`` releases the reader.
    """

    def __init__(self, uri: Any, ctx: DECORDContext = cpu(0), width: int = -1,
                 height: int = -1, num_threads: int = 0, fault_tol: Any = -1) -> None:
        self._reader: Any = None
        if not isinstance(ctx, DECORDContext) or ctx.device_type != 1:
            raise ValueError(f"fluxon_video.compat.decord decodes on the CPU only, got {ctx!r}")
        threads = num_threads if num_threads > 0 else "auto"
        size = (height if height > 0 else None, width if width > 0 else None)
        self._reader = open_reader(uri, height=size[0], width=size[1], num_threads=threads) \
            if (size[0] is None) == (size[1] is None) else self._one_side(uri, size, threads)
        try:
            self._timing = FrameTiming(self._reader)
        except BaseException:
            self.close()
            raise
        self._num_frame = self._timing.count
        self._next = 0
        # decord's timestamps: float32 (start, start + the frame's duration).
        self._frame_pts = np.stack([self._timing.pts, self._timing.pts + self._timing.durations],
                                   axis=1).astype(np.float32)

    @staticmethod
    def _one_side(uri: Any, size: tuple[int | None, int | None], threads: Any) -> Any:
        """One side given: decord keeps the other one native (not the aspect ratio)."""
        with open_reader(uri, num_threads=threads) as native:
            height, width = size[0] or native.height, size[1] or native.width
        if hasattr(uri, "seek"):
            uri.seek(0)
        return open_reader(uri, height=height, width=width, num_threads=threads)

    def __len__(self) -> int:
        return self._num_frame

    def _frames(self, indices: np.ndarray) -> np.ndarray:
        return self._reader.read_frames_numpy(indices)

    def __getitem__(self, idx: Any) -> Any:
        """Frame ``idx`` (H, W, 3), or the frames of a slice (N, H, W, 3)."""
        if isinstance(idx, slice):
            return self.get_batch(range(*idx.indices(len(self))))
        if idx < 0:
            idx += self._num_frame
        if idx >= self._num_frame or idx < 0:
            raise IndexError(f"Index: {idx} out of bound: {self._num_frame}")
        self._next = int(idx)
        return self.next()

    def next(self) -> Any:
        """The frame after the last one read (or sought); StopIteration past the end."""
        if self._next >= self._num_frame:
            raise StopIteration()
        frame = self._frames(np.array([self._next], np.int64))[0]
        self._next += 1
        return bridge_out(frame)

    def get_batch(self, indices: Any) -> Any:
        """The frames at ``indices`` (N, H, W, 3), in their order."""
        return bridge_out(self._frames(_checked_indices(indices, self._num_frame)))

    def get_frame_timestamp(self, idx: Any) -> np.ndarray:
        """float32 (start, end) seconds of frame ``idx``, (N, 2) of several."""
        if isinstance(idx, slice):
            idx = range(*idx.indices(len(self)))
        if isinstance(idx, (int, np.integer)):
            return self._frame_pts[_checked_indices(idx, self._num_frame)[0], :]
        return self._frame_pts[_checked_indices(idx, self._num_frame), :]

    def get_key_indices(self) -> list[int]:
        """The keyframes' indices."""
        return list(self._timing.keyframes)

    def get_avg_fps(self) -> float:
        """The stream's average frame rate as its header gives it."""
        fps = self._timing.header_fps
        return float(fps if fps is not None else self._reader.metadata.average_fps)

    def seek(self, pos: int) -> None:
        """The next ``next()`` returns frame ``pos`` (exact: decord's may land earlier)."""
        if not 0 <= pos < self._num_frame:
            raise IndexError(f"seek position {pos} out of bound: {self._num_frame}")
        self._next = int(pos)

    def seek_accurate(self, pos: int) -> None:
        self.seek(pos)

    def skip_frames(self, num: int = 1) -> None:
        """Skip ``num`` frames (they are not decoded here)."""
        if num <= 0:
            raise ValueError(f"skip_frames takes a number > 0, got {num}")
        self._next = min(self._next + int(num), self._num_frame)


class AVReader:
    """decord.AVReader: each frame with the audio samples it spans.

    The audio is resampled to ``sample_rate`` (-1: the stream's) and, with
    ``mono``, mixed to one channel, on a grid from time 0 (zeros before the
    stream's first sample); frame i's samples are ``[ceil(start * rate),
    ceil(end * rate))`` of its ``get_frame_timestamp`` (cut at the stream's
    end). ``av[i]`` is (samples (C, S), frame (H, W, 3)); ``get_batch`` is
    (a list of N sample arrays, frames (N, H, W, 3)).
    """

    def __init__(self, uri: Any, ctx: DECORDContext = cpu(0), sample_rate: int = 44100,
                 mono: bool = True, width: int = -1, height: int = -1, num_threads: int = 0,
                 fault_tol: Any = -1) -> None:
        self._video = VideoReader(uri, ctx, width, height, num_threads, fault_tol)
        self._spec = AudioSpec(sample_rate if sample_rate > 0 else None, 1 if mono else None,
                               trim=True)
        audio = self._video._reader.audio_metadata
        self._rate = int(sample_rate if sample_rate > 0 else
                         (audio.sample_rate if audio is not None else 0))

    def close(self) -> None:
        self._video.close()

    def __enter__(self) -> AVReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self._video)

    def _sample(self, seconds: Any) -> int:
        return math.ceil(seconds * self._rate)  # decord's rounding, on its float32 times

    def _samples(self, first: int, stop: int) -> np.ndarray:
        """Positions [first, stop) of the audio on its grid from time 0."""
        rate, count = self._rate, max(stop - first, 0)
        got = self._video._reader.read_audio(first / rate, first / rate, self._spec,
                                             num_samples=count)
        lead = min(max(round((got.pts_seconds - first / rate) * rate), 0), count)
        if lead == 0:
            return got.data
        return np.concatenate([np.zeros((got.data.shape[0], lead), np.float32),
                               got.data[:, :count - lead]], axis=1)

    def __getitem__(self, idx: Any) -> tuple[Any, Any]:
        if isinstance(idx, slice):
            return self.get_batch(range(*idx.indices(len(self))))
        if idx < 0:
            idx += len(self)
        if idx >= len(self) or idx < 0:
            raise IndexError(f"Index: {idx} out of bound: {len(self)}")
        start, end = self._video.get_frame_timestamp(int(idx))
        return (bridge_out(self._samples(self._sample(start), self._sample(end))),
                self._video[idx])

    def get_batch(self, indices: Any) -> tuple[list[Any], Any]:
        """(each frame's samples, the frames): a frame right after the previous one
        continues its audio where that one's ended, as decord does."""
        wanted = _checked_indices(indices, len(self))
        audio, previous, previous_end = [], None, None
        for idx in wanted.tolist():
            start, end = self._video.get_frame_timestamp(idx)
            first = previous_end if previous and idx == previous + 1 else self._sample(start)
            previous, previous_end = idx, self._sample(end)
            audio.append(bridge_out(self._samples(first, previous_end)))
        return audio, self._video.get_batch(wanted)
