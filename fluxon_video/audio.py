"""Audio on the frames' clock: seconds to sample positions, padding, resampling.

A stream's samples are numbered from the first one its decoder outputs
(position 0, at ``first_time_s`` on the container's clock, the one
``timestamps_s()`` uses). At rate R, output sample m lies at
``first_time_s + m / R``; a span ``[start_s, end_s)`` is the samples from the
first at or after ``start_s`` to the last before ``end_s``. At the stream's own
rate and channels the samples are the ``ffmpeg`` CLI's
``-map 0:a:0 -f f32le`` output, sliced; with another rate or channel count
they are its ``-af aresample=R -ac C`` output, sliced: the resampler runs over
the clip's samples plus a margin, starting on a sample both grids share, so
each output sample is computed from the same inputs at the same filter phase.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fluxon_video.errors import FluxonFsAudioRangeError, FluxonFsConfigError
from fluxon_video.frames import FrameBatch, shape_of
from fluxon_video.native import require_audio
from fluxon_video.renamed import NOT_GIVEN, add_renamed_attributes, renamed_arguments
from fluxon_video.validation import output_fits, positive_int

# Input samples either side of a resampled span: swresample's default filter
# (32 taps at the lower of the two rates) reaches at most 16 taps each way.
RESAMPLE_MARGIN_TAPS = 64
# Most bytes of audio packets one read queues ahead of the demuxer (the page
# cache keeps what the frames need too).
AUDIO_PREFETCH_BYTES = 8 << 20
# The highest output rate asked for: 768 kHz is the top rate of audio hardware
# and of FFmpeg's PCM encoders; far above it the resampler's buffers overflow.
MAX_SAMPLE_RATE = 768_000
# Times within this many samples of a sample's time count as that sample's.
SAMPLE_EPSILON = 1e-6


@dataclass(frozen=True, init=False)
class AudioSpec:
    """How a read returns audio: ``sample_rate`` and ``num_channels`` (None: the
    stream's own); ``pad``: zeros where the span runs outside the stream's
    samples (False: FluxonFsAudioRangeError); ``exact``: bit-exact with the
    CLI's decode from the start (False: seek and pre-roll even where the
    decoder's memory is longer, see docs/audio.md); ``trim``: only the samples
    the stream has, the span cut at its first and last sample instead of
    padded or refused (torchcodec's AudioDecoder; ``pad`` is not consulted).
    (``channels``: the old name of ``num_channels``, deprecated.)"""

    sample_rate: int | None
    num_channels: int | None
    pad: bool
    exact: bool
    trim: bool

    def __init__(self, sample_rate: int | None = None, num_channels: int | None = None,
                 pad: bool = True, exact: bool = True, trim: bool = False,
                 **renamed: int | None) -> None:
        if renamed:
            num_channels = renamed_arguments(
                "AudioSpec", renamed, {"channels": "num_channels"},
                {"num_channels": NOT_GIVEN if num_channels is None else num_channels}
            )["num_channels"]
        for name, value in (("sample_rate", sample_rate), ("num_channels", num_channels)):
            object.__setattr__(self, name, None if value is None else positive_int(name, value))
        object.__setattr__(self, "pad", pad)
        object.__setattr__(self, "exact", exact)
        object.__setattr__(self, "trim", trim)
        if self.num_channels is not None and self.num_channels > 64:
            raise FluxonFsConfigError(
                f"num_channels must be at most 64, got {self.num_channels}")
        if self.sample_rate is not None and self.sample_rate > MAX_SAMPLE_RATE:
            raise FluxonFsConfigError(
                f"sample_rate must be at most {MAX_SAMPLE_RATE}, got {self.sample_rate}")


add_renamed_attributes(AudioSpec, {"channels": "num_channels"})


@dataclass(frozen=True)
class AudioSamples:
    """float32 ``(num_channels, num_samples)``; sample k lies at
    ``pts_seconds + k / sample_rate``. (``start_s``, ``channels``,
    ``duration_s``: the old names, deprecated.)"""

    data: np.ndarray
    pts_seconds: float
    sample_rate: int

    @property
    def num_channels(self) -> int:
        return int(self.data.shape[0])

    @property
    def num_samples(self) -> int:
        return int(self.data.shape[1])

    @property
    def duration_seconds(self) -> float:
        return self.num_samples / self.sample_rate

    def to_torch(self) -> Any:
        """The samples as a float32 torch tensor sharing this array's memory."""
        import torch

        return torch.from_numpy(self.data)

    def __repr__(self) -> str:
        return (f"AudioSamples(data={shape_of(self.data)}, pts_seconds={self.pts_seconds:.6g}, "
                f"sample_rate={self.sample_rate})")


add_renamed_attributes(AudioSamples, {"start_s": "pts_seconds", "channels": "num_channels",
                                      "duration_s": "duration_seconds"})


@dataclass(frozen=True)
class AVClip:
    """A clip's frames and the audio of the same span, on one clock: ``audio``
    starts at the first sample at or after the span's start (``audio_start_s``)."""

    frames: FrameBatch
    audio: AudioSamples

    @property
    def audio_start_s(self) -> float:
        return self.audio.pts_seconds

    @property
    def sample_rate(self) -> int:
        return self.audio.sample_rate

    def __repr__(self) -> str:
        return f"AVClip(frames={self.frames!r}, audio={self.audio!r})"


def merged_ranges(offsets: np.ndarray, sizes: np.ndarray, gap: int) -> list[tuple[int, int]]:
    """(offset, length) ranges covering sorted byte ranges, joining those less
    than ``gap`` apart (the pages between are fetched whole anyway)."""
    out: list[tuple[int, int]] = []
    for off, length in zip(offsets.tolist(), sizes.tolist()):
        if out and off - (out[-1][0] + out[-1][1]) < gap:
            out[-1] = (out[-1][0], max(out[-1][1], off + length - out[-1][0]))
        else:
            out.append((off, length))
    return out


def is_time(value: Any) -> bool:
    """Whether value is a number of seconds (int, float or a numpy number; not
    a bool, not a string)."""
    return (isinstance(value, (int, float, np.integer, np.floating))
            and not isinstance(value, (bool, np.bool_)))


def first_at_or_after(seconds: float, first_time_s: float, rate: int) -> int:
    """The position of the first sample at or after ``seconds``."""
    return math.ceil((seconds - first_time_s) * rate - SAMPLE_EPSILON)


class AudioTrack:
    """The audio stream of one open file, read by time (the reader owns it):
    an audio decoder over the reader's byte source, so its reads share the
    frames' page cache and pieces, and in a file with video the frames' demuxer."""

    def __init__(self, byte_source: Any, name: str, stream_index: int = -1,
                 packets: tuple[np.ndarray, tuple[int, int]] | None = None,
                 video_decoder: Any = None) -> None:
        # With the file's video decoder, the audio takes turns on its demuxer
        # (one demuxer for both streams; _audio.pyx says how).
        self._decoder = require_audio().AudioDecoder(byte_source, name, stream_index,
                                                     video_decoder)
        self._byte_source = byte_source
        # The frame index's table of the stream's packets ((3, N) pts, offset,
        # size) and its time base: a read queues the bytes it will decode.
        self._packets = packets
        self.name = name

    @property
    def first_time_s(self) -> float:
        return float(self._decoder.first_time_s)

    def header(self) -> dict[str, Any]:
        """The stream as its container header says it (FluxonFsAudioMetadata's fields)."""
        return dict(self._decoder.header())

    @property
    def sample_rate(self) -> int:
        return int(self._decoder.sample_rate)

    @property
    def channels(self) -> int:
        return int(self._decoder.channels)

    def read(self, start_s: float, end_s: float, spec: AudioSpec = AudioSpec(),
             num_samples: int | None = None) -> AudioSamples:
        """The samples of ``[start_s, end_s)`` (``num_samples`` from the first, when given)."""
        if not (is_time(start_s) and is_time(end_s)):
            raise FluxonFsConfigError(f"{self.name}: audio span [{start_s!r}, {end_s!r}) s: times "
                                      "must be finite numbers of seconds")
        if num_samples is not None and (isinstance(num_samples, (bool, np.bool_))
                                        or not isinstance(num_samples, (int, np.integer))
                                        or num_samples < 0):
            raise FluxonFsConfigError(f"{self.name}: num_samples must be an int >= 0 (or None), "
                                      f"got {num_samples!r}")
        if not (math.isfinite(start_s) and math.isfinite(end_s)):
            raise FluxonFsConfigError(f"{self.name}: audio span [{start_s}, {end_s}) s: times "
                                      "must be finite numbers")
        if not end_s >= start_s:
            raise FluxonFsConfigError(f"{self.name}: audio span [{start_s}, {end_s}) s is empty "
                                      "or reversed")
        native, first = self.sample_rate, self.first_time_s
        rate = spec.sample_rate or native
        channels = spec.num_channels or self.channels
        m0 = first_at_or_after(start_s, first, rate)
        m1 = m0 + num_samples if num_samples is not None else max(
            first_at_or_after(end_s, first, rate), m0)
        if spec.trim:  # no positions before the stream's first sample
            m0, m1 = max(m0, 0), max(m1, 0)
        output_fits(self.name, f"{m1 - m0} audio samples of {channels} channels",
                    (m1 - m0) * channels * 4)
        if rate == native and channels == self.channels:
            self._prefetch(m0, m1, spec.exact)
            data, covered = self._decoder.samples(m0, m1, spec.exact)
            self._require_inside(spec, tuple(covered) == (m0, m1), m0, m1, rate)
            end = covered[1] if covered[0] < covered[1] else m0  # (stop, stop): none
        else:
            data, end = self._converted(m0, m1, rate, channels, spec)
        if spec.trim:  # up to the stream's last sample
            data = data[:, :max(min(end, m1) - m0, 0)]
        return AudioSamples(np.ascontiguousarray(data), first + m0 / rate, rate)

    def _converted(self, m0: int, m1: int, rate: int, channels: int,
                   spec: AudioSpec) -> tuple[np.ndarray, int]:
        """Output positions [m0, m1) at ``rate``, and the end of those the stream's
        samples reach: the resampler's input starts at a native position whose
        time is also an output sample's (a multiple of native / gcd),
        RESAMPLE_MARGIN_TAPS input periods before the span."""
        native = self.sample_rate
        step = native // math.gcd(native, rate)
        margin = RESAMPLE_MARGIN_TAPS * max(1, -(-native // rate))
        a = max(((m0 * native // rate - margin) // step) * step, 0)
        b = max(-(-m1 * native // rate) + margin, a)
        self._prefetch(a, b, spec.exact)
        planes, covered = self._decoder.samples(a, b, spec.exact)
        # Positions the stream has no samples for: before its start (a > 0
        # then only if m0 < 0) or after its end, where the CLI's resampler stops too.
        reached = covered[1] if covered[0] < covered[1] else a  # (b, b): none
        planes = planes[:, :max(reached - a, 0)]
        self._require_inside(spec, m0 >= 0 and reached >= -(-m1 * native // rate), m0, m1,
                             rate)
        out = require_audio().resample(planes, native, rate, channels) if planes.shape[1] else \
            np.zeros((channels, 0), np.float32)
        offset = a * rate // native  # the output position of out[:, 0]
        result = np.zeros((channels, m1 - m0), np.float32)
        lo, hi = max(m0, offset), min(m1, offset + out.shape[1])
        if hi > lo:
            result[:, lo - m0:hi - m0] = out[:, lo - offset:hi - offset]
        return result, offset + out.shape[1]

    def _prefetch(self, start: int, stop: int, exact: bool) -> None:
        """Queue, for the fetch workers, the bytes of the packets a read of
        positions [start, stop) will decode (one round trip for all of them,
        instead of one per page the demuxer reaches); at most
        AUDIO_PREFETCH_BYTES, the last before ``stop``."""
        if self._packets is None or self._packets[0].shape[1] == 0 or stop <= start:
            return
        (pts, offset, size), (num, den) = self._packets
        _, begin = self._decoder.plan(max(start, 0), exact)
        first, rate = self.first_time_s, self.sample_rate
        times = pts * num / den
        # A packet's pts is its first sample's time: keep the one that starts
        # before the first position, and one past the last.
        lo = np.searchsorted(times, first + begin / rate, "right") - 1
        hi = np.searchsorted(times, first + stop / rate, "right") + 1
        lo, hi = max(lo, 0), min(hi, times.size)
        if hi <= lo:
            return
        offset, size = offset[lo:hi], size[lo:hi]
        keep = np.cumsum(size[::-1]) <= AUDIO_PREFETCH_BYTES
        offset, size = offset[::-1][keep][::-1], size[::-1][keep][::-1]
        order = np.argsort(offset, kind="stable")
        for off, length in merged_ranges(offset[order], size[order], self._byte_source.page_size):
            self._byte_source.prefetch(off, length)

    def _require_inside(self, spec: AudioSpec, inside: bool, m0: int, m1: int,
                        rate: int) -> None:
        """With pad=False, a span the stream does not wholly cover is an error."""
        if spec.pad or spec.trim or inside or m1 <= m0:
            return
        first = self.first_time_s
        raise FluxonFsAudioRangeError(
            f"{self.name}: audio [{first + m0 / rate:.6f}, {first + m1 / rate:.6f}) s runs "
            f"outside the stream's samples (its first is at {first:.6f} s); pass "
            "pad_audio=True for zeros there")

    def close(self) -> None:
        self._decoder.close()
