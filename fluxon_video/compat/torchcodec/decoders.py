"""torchcodec.decoders on fluxon_video: ``VideoDecoder`` and ``AudioDecoder``.

The constructors, methods, return types, attribute names and exception
types of torchcodec 0.13 to 0.17's CPU decoders (with 0.15's WavDecoder and
0.17's output_dtype); frames are the ffmpeg CLI's (where torchcodec's are
not, these are: docs/compat.md), read by one
:class:`~fluxon_video.FluxonFsVideoReader` per decoder, so every source
``fluxon_video.compat`` takes works, FluxonFS locations included.
"""

from __future__ import annotations

import io
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

from fluxon_video.audio import AudioSpec
from fluxon_video.compat._sources import OwnsReader, open_reader
from fluxon_video.compat._timing import FrameTiming
from fluxon_video.compat.torchcodec._frame import AudioSamples, Frame, FrameBatch
from fluxon_video.compat.torchcodec._metadata import (
    AudioStreamMetadata,
    VideoStreamMetadata,
    audio_stream_metadata,
    video_stream_metadata,
)
from fluxon_video.errors import (
    FluxonFsAudioRangeError,
    FluxonFsFrameIndexError,
    FluxonFsNoAudioStreamError,
)

__all__ = ["AudioDecoder", "AudioStreamMetadata", "CpuFallbackStatus", "SimpleVideoDecoder",
           "VideoDecoder", "VideoStreamMetadata", "WavDecoder"]

Source = str | Path | io.RawIOBase | io.BufferedReader | bytes | Tensor
DIMENSION_ORDERS = ("NCHW", "NHWC")
SEEK_MODES = ("exact", "approximate")


class PlayedAtError(FluxonFsFrameIndexError, RuntimeError):
    """A time outside the stream given to ``get_frames_played_at``: torchcodec
    raises RuntimeError there (and IndexError in ``get_frame_played_at``)."""


class NoSamplesError(FluxonFsAudioRangeError, RuntimeError):
    """An audio range with no samples of the stream in it: torchcodec's RuntimeError."""


@dataclass
class CpuFallbackStatus:
    """torchcodec's ``VideoDecoder.cpu_fallback``: decoding here is on the CPU,
    never a fallback from a GPU."""

    status_known: bool = True

    def __bool__(self) -> bool:
        return False

    def __str__(self) -> str:
        return "[CPU] Fallback status: No fallback required"


def _check_device(device: Any) -> None:
    """Only the CPU decodes here (None: torchcodec's default device, the CPU's
    unless the user moved it)."""
    name = str(device if device is not None else torch.get_default_device())
    if name.split(":")[0] != "cpu":
        raise ValueError(f"fluxon_video.compat.torchcodec decodes on the CPU only, got "
                         f"device={device!r}; move the frames with .to(device)")


def _threads(num_ffmpeg_threads: Any) -> int | str:
    """torchcodec's num_ffmpeg_threads: 0 (or below) lets FFmpeg choose."""
    if isinstance(num_ffmpeg_threads, bool) or not isinstance(num_ffmpeg_threads,
                                                               numbers.Integral):
        raise ValueError(f"{num_ffmpeg_threads = } should be an int.")
    return int(num_ffmpeg_threads) if num_ffmpeg_threads > 0 else "auto"


def _transform_name(transform: Any) -> str:
    """``Resize``, ``CenterCrop`` or ``RandomCrop`` (ours, torchcodec's or
    torchvision's v2 of that name), else NotImplementedError."""
    name = type(transform).__name__
    size = getattr(transform, "size", None)
    if name not in ("Resize", "CenterCrop", "RandomCrop") or size is None or len(size) != 2:
        raise NotImplementedError(
            "fluxon_video.compat.torchcodec applies these decoder transforms: a bilinear "
            "Resize((height, width)) first, then CenterCrop and RandomCrop; got "
            f"{transform!r}. Apply the others to the returned frames")
    if name == "Resize" and "bilinear" not in str(getattr(transform, "interpolation",
                                                          "bilinear")).lower():
        raise ValueError("TorchVision Resize transform must use bilinear interpolation.")
    return name


def _resize_of(transforms: Sequence[Any] | None) -> tuple[int | None, int | None]:
    """(height, width) of a ``transforms`` list's Resize, which must come first:
    the decoder scales (the CLI's bilinear scale), the crops are cut after."""
    names = [_transform_name(t) for t in transforms or ()]
    if "Resize" in names[1:]:
        raise NotImplementedError(
            "fluxon_video.compat.torchcodec scales once, while decoding: a Resize may only "
            f"be the first of the transforms, got {list(transforms or ())!r}")
    if names[:1] == ["Resize"]:
        size = transforms[0].size  # type: ignore[index]
        return int(size[0]), int(size[1])
    return None, None


def _crop_of(transforms: Sequence[Any] | None, height: int, width: int
             ) -> tuple[int, int, int, int] | None:
    """(top, left, height, width) of the crops after the Resize, composed, on
    frames of ``height`` x ``width``: CenterCrop as FFmpeg's ``crop`` filter
    centres (half offsets to even, lrint), RandomCrop's offsets drawn from torch's
    generator when the decoder is made, top then left, as torchcodec draws them."""
    window = None
    top = left = 0
    for transform in transforms or ():
        name = _transform_name(transform)
        if name == "Resize":
            continue
        h, w = int(transform.size[0]), int(transform.size[1])
        if h > height or w > width:
            raise ValueError(f"Input dimensions {(height, width)} are smaller than the crop "
                             f"size {(h, w)}.")
        if name == "CenterCrop":
            y, x = round((height - h) / 2), round((width - w) / 2)  # lrint: half to even
        else:
            y = int(torch.randint(0, height - h + 1, size=()).item())
            x = int(torch.randint(0, width - w + 1, size=()).item())
        top, left, height, width = top + y, left + x, h, w
        window = (top, left, height, width)
    return window


OUTPUT_DTYPES = ("torch.uint8", "torch.float32", "auto")


def _float_output(output_dtype: Any) -> bool:
    """torchcodec's output_dtype (0.17): uint8 frames, or "auto" (uint8 here:
    frames are 8-bit RGB), or float32 in [0, 1] (the uint8 frames / 255)."""
    if output_dtype == "auto" or output_dtype is torch.uint8:
        return False
    if output_dtype is torch.float32:
        return True
    raise ValueError(f"Invalid output_dtype ({output_dtype}). "
                     "Supported values are torch.uint8, torch.float32, and 'auto'.")


class VideoDecoder(OwnsReader):
    """A single-stream video decoder (torchcodec.decoders.VideoDecoder).

    ``source``: a path, a FluxonFS location (``s3://...``, an absolute path
    under an export's root, ``EXPORT:RELPATH``; see fluxon_video.compat),
    bytes, a uint8 tensor of encoded bytes, or a seekable binary file object.
    ``stream_index``: the container's stream (None: the best video stream).
    ``dimension_order``: "NCHW" (default) or "NHWC". ``num_ffmpeg_threads``:
    decoder threads (0: FFmpeg's choice). ``device``: "cpu" only.
    ``seek_mode``: "exact" or "approximate"; both are exact here (the frame
    index makes exact as cheap). ``transforms``: a bilinear ``Resize`` (first),
    then ``CenterCrop``/``RandomCrop`` (fluxon_video.compat.torchcodec.transforms).
    ``output_dtype``: torch.uint8 (default) or "auto" (both uint8 here), or
    torch.float32 (the uint8 frames / 255). ``custom_frame_mappings``:
    accepted and not needed (the frame index is exact). Frames are turned
    upright as torchcodec turns them.

    ``close()`` (or ``with``) releases the reader at once; otherwise when the
    decoder is collected.
    """

    def __init__(self, source: Source, *, stream_index: int | None = None,
                 dimension_order: Literal["NCHW", "NHWC"] = "NCHW",
                 num_ffmpeg_threads: int = 1, device: Any = None,
                 seek_mode: Literal["exact", "approximate"] = "exact",
                 transforms: Sequence[Any] | None = None,
                 output_dtype: Any = torch.uint8,
                 custom_frame_mappings: Any = None) -> None:
        self._reader: Any = None
        if dimension_order not in DIMENSION_ORDERS:
            raise ValueError(f"Invalid dimension order ({dimension_order}). "
                             f"Supported values are {', '.join(DIMENSION_ORDERS)}.")
        if custom_frame_mappings is None and seek_mode not in SEEK_MODES:
            raise ValueError(f"Invalid seek mode ({seek_mode}). "
                             f"Supported values are {', '.join(SEEK_MODES)}.")
        threads = _threads(num_ffmpeg_threads)
        _check_device(device)
        if stream_index is not None and (isinstance(stream_index, bool) or stream_index < 0):
            raise ValueError(f"The stream at index {stream_index} is not a video stream.")
        height, width = _resize_of(transforms)
        self._float = _float_output(output_dtype)
        self._nchw = dimension_order == "NCHW"
        self._reader = open_reader(source, height=height, width=width, num_threads=threads,
                                   stream_index=stream_index)
        try:
            self._crop = _crop_of(transforms, self._reader.height, self._reader.width)
            self._timing = FrameTiming(self._reader)
            self.metadata: VideoStreamMetadata = video_stream_metadata(self._reader, self._timing)
        except BaseException:
            self.close()
            raise
        self.stream_index: int = int(self.metadata.stream_index)  # type: ignore[arg-type]
        self._num_frames = self._timing.count
        self._begin_stream_seconds = self._timing.begin
        self._end_stream_seconds = self._timing.end
        self._cpu_fallback = CpuFallbackStatus()

    # ---- what torchcodec's decoder has besides the reads ----

    def __len__(self) -> int:
        return self._num_frames

    @property
    def cpu_fallback(self) -> CpuFallbackStatus:
        return self._cpu_fallback

    def _get_key_frame_indices(self) -> Tensor:
        return torch.tensor(self._timing.keyframes, dtype=torch.int64)

    # ---- reads: one batched read of the reader each ----

    def _indices(self, indices: Any) -> np.ndarray:
        """Frame indices as int64, negative ones from the end; IndexError out of range."""
        if isinstance(indices, Tensor):
            indices = indices.detach().cpu().numpy()
        wanted = np.asarray(indices)
        if wanted.size == 0:
            return np.empty(0, np.int64)
        if wanted.dtype.kind not in "iu":
            raise TypeError(f"frame indices must be integers, got {wanted.dtype} values")
        wanted = wanted.astype(np.int64).reshape(-1)
        count = self._num_frames
        bad = (wanted < -count) | (wanted >= count)
        if bad.any():
            index = int(wanted[bad][0])
            raise IndexError(f"Invalid frame index={index} for streamIndex={self.stream_index}; "
                             + (f"must be less than {count}" if index >= 0 else
                                "negative indices must have an absolute value less than the "
                                "number of frames"))
        return np.where(wanted < 0, wanted + count, wanted)

    def _data(self, indices: np.ndarray) -> Tensor:
        """The frames at (valid, non-negative) indices as a uint8 tensor, in the decoder's order."""
        frames = self._reader.read_frames_numpy(indices)
        if self._crop is not None:
            top, left, height, width = self._crop
            frames = np.ascontiguousarray(frames[:, top:top + height, left:left + width])
        tensor = torch.from_numpy(frames)
        if self._float:
            tensor = tensor.to(torch.float32).div_(255)
        return tensor.permute(0, 3, 1, 2) if self._nchw else tensor

    def _batch(self, indices: np.ndarray) -> FrameBatch:
        return FrameBatch(data=self._data(indices),
                          pts_seconds=torch.from_numpy(self._timing.pts[indices]),
                          duration_seconds=torch.from_numpy(self._timing.durations[indices]))

    def _frame(self, index: int) -> Frame:
        return Frame(data=self._data(np.array([index], np.int64))[0],
                     pts_seconds=float(self._timing.pts[index]),
                     duration_seconds=float(self._timing.durations[index]))

    def __getitem__(self, key: numbers.Integral | slice) -> Tensor:
        """The frame at an index, or the frames of a slice (negative steps too)."""
        if isinstance(key, numbers.Integral):
            return self._data(self._indices([int(key)]))[0]
        if isinstance(key, slice):
            return self._data(np.arange(*key.indices(self._num_frames), dtype=np.int64))
        raise TypeError(f"Unsupported key type: {type(key)}. Supported types are int and slice.")

    def get_frame_at(self, index: int) -> Frame:
        """The frame at ``index`` (negative: from the end)."""
        return self._frame(int(self._indices([index])[0]))

    def get_frames_at(self, indices: Tensor | list[int]) -> FrameBatch:
        """The frames at ``indices``, in their order (repeats read once)."""
        return self._batch(self._indices(indices))

    def get_frames_in_range(self, start: int, stop: int, step: int = 1) -> FrameBatch:
        """Frames ``start, start + step, ...`` before ``stop``, as a slice clamps them."""
        return self._batch(np.arange(*slice(start, stop, step).indices(self._num_frames),
                                     dtype=np.int64))

    def get_frame_played_at(self, seconds: float) -> Frame:
        """The frame on screen at ``seconds``, in [begin_stream_seconds, end_stream_seconds)."""
        if not self._begin_stream_seconds <= seconds < self._end_stream_seconds:
            raise IndexError(f"Invalid pts in seconds: {seconds}. It must be greater than or "
                             f"equal to {self._begin_stream_seconds} and less than "
                             f"{self._end_stream_seconds}.")
        return self._frame(int(self._timing.shown_at([seconds])[0]))

    def get_frames_played_at(self, seconds: Tensor | list[float]) -> FrameBatch:
        """The frames on screen at each time (each in [begin, end) of the stream)."""
        if isinstance(seconds, Tensor):
            seconds = seconds.detach().cpu().numpy()
        times = np.asarray(seconds, np.float64).reshape(-1)
        bad = ~((times >= self._begin_stream_seconds) & (times < self._end_stream_seconds))
        if bad.any():
            raise PlayedAtError(f"frame pts is {float(times[bad][0])}; must be in "
                                f"[{self._begin_stream_seconds}, {self._end_stream_seconds}).")
        return self._batch(self._timing.shown_at(times))

    def get_frames_played_in_range(self, start_seconds: float, stop_seconds: float,
                                   fps: float | None = None) -> FrameBatch:
        """The frames played in [start_seconds, stop_seconds): from the one on
        screen at the start to the last whose pts is before the stop; with
        ``fps``, the frame on screen at ``start + i / fps`` for
        ``round((stop - start) * fps)`` values of i, timed at those instants."""
        begin, end = self._begin_stream_seconds, self._end_stream_seconds
        if not start_seconds <= stop_seconds:
            raise ValueError(f"Invalid start seconds: {start_seconds}. It must be less than or "
                             f"equal to stop seconds ({stop_seconds}).")
        if not begin <= start_seconds < end:
            raise ValueError(f"Invalid start seconds: {start_seconds}. It must be greater than "
                             f"or equal to {begin} and less than {end}.")
        if not stop_seconds <= end:
            raise ValueError(f"Invalid stop seconds: {stop_seconds}. It must be less than or "
                             f"equal to {end}.")
        if fps is None:
            return self._batch(self._timing.played_in(start_seconds, stop_seconds))
        if not 0 < fps < math.inf:
            raise ValueError(f"fps must be positive, got {fps}")
        if start_seconds == stop_seconds:
            return self._batch(np.empty(0, np.int64))
        step = 1.0 / fps
        times = start_seconds + np.arange(round((stop_seconds - start_seconds) * fps)) * step
        indices = self._timing.shown_at(times)
        return FrameBatch(data=self._data(indices), pts_seconds=torch.from_numpy(times),
                          duration_seconds=torch.full(times.shape, step, dtype=torch.float64))

    def get_all_frames(self, fps: float | None = None) -> FrameBatch:
        """Every frame (with ``fps``: resampled to that rate, as above)."""
        return self.get_frames_played_in_range(self._begin_stream_seconds,
                                               self._end_stream_seconds, fps=fps)


class AudioDecoder(OwnsReader):
    """A single-stream audio decoder (torchcodec.decoders.AudioDecoder): float32
    samples in [-1, 1], (num_channels, num_samples), the ffmpeg CLI's.

    ``source`` as for VideoDecoder (a video file's audio stream, or an audio
    file). ``stream_index``: None or the audio stream FFmpeg picks (another
    audio stream is not read here). ``sample_rate`` and ``num_channels``:
    None keeps the stream's; others are the CLI's ``-af aresample=R -ac C``.
    """

    # Samples one read of an open-ended range asks for beyond the header's end.
    _TAIL_S = 1.0

    def __init__(self, source: Source, *, stream_index: int | None = None,
                 sample_rate: int | None = None, num_channels: int | None = None) -> None:
        self._reader: Any = None
        spec = AudioSpec(sample_rate, num_channels, trim=True)  # checks both
        self._reader = open_reader(source, stream_index=None)
        try:
            audio = self._reader.audio_metadata
            if audio is None:
                raise FluxonFsNoAudioStreamError(
                    f"{self._reader.name}: the file has no audio stream")
            self.metadata: AudioStreamMetadata = audio_stream_metadata(audio)
            if stream_index is not None and stream_index != self.metadata.stream_index:
                raise ValueError(
                    f"The stream at index {stream_index} is not the audio stream read here "
                    f"({self.metadata.stream_index}): fluxon_video.compat.torchcodec reads the "
                    "audio stream FFmpeg picks")
            self.stream_index: int = int(self.metadata.stream_index)  # type: ignore[arg-type]
            self._spec = spec
            self._rate = int(sample_rate or self.metadata.sample_rate)  # type: ignore[arg-type]
            # The stream's first sample's time: a trimmed read from before it starts there.
            self._first = float(self._reader.read_audio(-1e9, -1e9, spec).pts_seconds)
        except BaseException:
            self.close()
            raise

    def get_all_samples(self) -> AudioSamples:
        """Every sample of the stream, from its first."""
        return self.get_samples_played_in_range()

    def get_samples_played_in_range(self, start_seconds: float = 0.0,
                                    stop_seconds: float | None = None) -> AudioSamples:
        """The samples of [start_seconds, stop_seconds), from the stream's first
        sample when the range starts before it, to its last when it ends after
        it or ``stop_seconds`` is None."""
        if stop_seconds is not None and not start_seconds <= stop_seconds:
            raise ValueError(f"Invalid start seconds: {start_seconds}. It must be less than or "
                             f"equal to stop seconds ({stop_seconds}).")
        rate, first = self._rate, self._first

        def position(seconds: float) -> int:
            """A time's sample position from the first, half up as torchcodec 0.14+
            rounds it (0.13's round() took ties to even, a different way at each end)."""
            return math.floor((seconds - first) * rate + 0.5)

        m0 = position(start_seconds) if start_seconds > first else 0
        pts = start_seconds if start_seconds > first else first
        if stop_seconds is not None:
            data = self._read(m0, max(position(stop_seconds), m0))
        else:
            data = self._read_to_end(m0)
        if data.shape[1] == 0 and (stop_seconds is None or stop_seconds > start_seconds):
            raise NoSamplesError(
                f"{self._reader.name}: no audio samples in [{start_seconds}, {stop_seconds}) "
                f"s (the stream's first is at {first} s): start_seconds is past its end")
        tensor = torch.from_numpy(data)
        return AudioSamples(data=tensor, pts_seconds=pts, duration_seconds=data.shape[1] / rate,
                            sample_rate=rate)

    def _read(self, m0: int, m1: int) -> np.ndarray:
        """Positions [m0, m1) the stream has (fewer at its end)."""
        start = self._first + m0 / self._rate
        return self._reader.read_audio(start, start, self._spec, num_samples=m1 - m0).data

    def _read_to_end(self, m0: int) -> np.ndarray:
        """Positions from m0 to the stream's end: up to a second past the end
        the header gives, then on until a read comes back short."""
        rate = self._rate
        duration = self.metadata.duration_seconds
        span = round((duration + self._TAIL_S) * rate) - m0 if duration else 0
        parts: list[np.ndarray] = []
        ask = max(span, 10 * rate)
        while True:
            part = self._read(m0, m0 + ask)
            parts.append(part)
            if part.shape[1] < ask:
                break
            m0 += ask
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)


class WavDecoder(AudioDecoder):
    """torchcodec.decoders.WavDecoder (0.15+): a WAV file's samples, at its own
    rate and channels, with AudioDecoder's reads (here the same decoder: FFmpeg's)."""

    def __init__(self, source: Source) -> None:
        super().__init__(source)
        self.metadata.begin_stream_seconds_from_header = None  # WAV has no start time


SimpleVideoDecoder = VideoDecoder
