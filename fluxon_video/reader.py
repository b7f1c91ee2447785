"""FluxonFsVideoReader: one file version, one identity, one output size and resize."""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar, cast

import numpy as np

from fluxon_video.audio import AudioSamples, AudioSpec, AudioTrack, AVClip
from fluxon_video.defaults import TIME_TOLERANCE_S
from fluxon_video.errors import (
    FluxonFsClosedError,
    FluxonFsConfigError,
    FluxonFsDecodeError,
    FluxonFsFrameIndexError,
    FluxonFsNoAudioStreamError,
    FluxonFsNoVideoStreamError,
    located,
)
from fluxon_video.frame_index import FrameIndex
from fluxon_video.frames import Frame, FrameBatch, as_torch, frame_durations
from fluxon_video.indexing import share_learnt_index
from fluxon_video.metadata import (
    FluxonFsAudioMetadata,
    FluxonFsVideoMetadata,
    audio_metadata,
    build_metadata,
    indices_at_times,
    indices_in_range,
    orientation_from_matrix,
    output_size,
    timestamps_s,
)
from fluxon_video.logs import get_logger
from fluxon_video.meter import ReadMeter
from fluxon_video.native import require_native
from fluxon_video.opened import OpenedVideo
from fluxon_video.options import ReadOptions
from fluxon_video.planning import decode_span_packets, page_runs, split_in_two
from fluxon_video.renamed import NOT_GIVEN, renamed_arguments
from fluxon_video.split_read import SplitReads
from fluxon_video.stats import FluxonFsVideoReadStats
from fluxon_video.validation import output_fits

log = get_logger("reader")
# Frames one step of iteration decodes: a forward decode, a bounded array.
ITER_CHUNK = 16
# The pixel formats read_gray16_numpy reads: one little-endian sample of 9-16 bits.
GRAY16_FORMATS = frozenset({"gray9le", "gray10le", "gray12le", "gray14le", "gray16le"})
Method = TypeVar("Method", bound=Callable[..., Any])


def _located(method: Method) -> Method:
    """A reader method whose FluxonFsErrors say which file, as fields
    (errors.located): export and relpath, or the local file's path."""

    @functools.wraps(method)
    def call(self: FluxonFsVideoReader, *args: Any, **kwargs: Any) -> Any:
        if self.export_name is None:
            named = isinstance(self.relpath, str) and not self.relpath.startswith("<")
            where = {"path": self.relpath if named else None}  # "<bytes>": no path
        else:
            where = {"export": self.export_name, "relpath": self.relpath}
        with located(**where):
            return method(self, *args, **kwargs)

    return cast(Method, call)


class FluxonFsVideoReader:
    """Reads frames of one video through FluxonFS; use as a context manager.

    Opened by :meth:`FluxonFsPatcher.open_video_reader` (fluxon_video/opening.py
    opens the file and gets its frame index). Holds the file version and the
    request identity captured at open, the frame index (``metadata``,
    ``len()`` and times need no decode), and a page cache that later reads
    reuse. One read runs at a time; ``close()`` is idempotent and every read
    after it fails.
    """

    def __init__(self, video: OpenedVideo, options: ReadOptions, *, open_ms: float,
                 on_read: Callable[[FluxonFsVideoReadStats], None] | None = None) -> None:
        _, self._decode = require_native()
        t0 = time.perf_counter()
        self.options = options  # as asked (None sizes: native); height/width as resolved
        self.on_damage = options.on_damage
        self.resize = options.resize
        self.interpolation = options.interpolation
        self.stream_index = video.stream_index  # as asked; metadata names the stream read
        self.export_name = video.export  # None: a source read without FluxonFS
        self.relpath = video.relpath
        self.identity = video.identity
        self.version = video.version
        self.num_threads = options.num_threads
        self.autorotate = options.autorotate
        self.name = video.source.name
        self._video = video
        self._range_source = video.source
        self._on_read = on_read  # the patcher's cumulative stats
        self._lock = threading.Lock()
        # prefetch_frames runs beside a read (which holds _lock); close() takes
        # this one too before it frees what a prefetch queues into
        self._prefetch_lock = threading.Lock()
        self._closed = False
        self._byte_source: Any = video.byte_source
        self._decoder: Any = None
        # Reads over two decoders: the second made on first use, over the current byte source.
        self._split = SplitReads(lambda: self._decode.VideoDecoder(
            self._byte_source, 1, self.name, self.on_damage, self.stream_index))
        self._audio: AudioTrack | None = None  # opened by the first audio read
        self._metadata: FluxonFsVideoMetadata | None = None
        self.last_stats: FluxonFsVideoReadStats | None = None
        self._meter = ReadMeter(video.source.counters, index_source=video.index_source,
                                index_ms=video.index_ms, round_trips=video.round_trips)
        index = video.index
        height, width = options.height, options.width
        try:
            decoder = self._make_decoder(index, self._byte_source)
            if index is not None:
                self._prefetch_container(index)
                if self.on_damage == "conceal":
                    decoder.survey()  # once per file version: the KV keeps it
                self._metadata = build_metadata(index, self.version.size, self.version.mtime_ns,
                                                self.name, self.on_damage)
            if self.autorotate:
                decoder.orient = self._orientation(index)
            if video.audio_only:  # no frames to size: clips of it carry only audio
                height, width = height or 0, width or 0
            elif height is None or width is None:
                height, width = output_size(self.metadata, height, width, self.autorotate)
        except BaseException:
            self.close()
            raise
        self.height: int = height
        self.width: int = width
        self._meter.opened(open_ms + (time.perf_counter() - t0) * 1e3 - self._meter.index_ms)

    def _prefetch_container(self, index: FrameIndex) -> None:
        """Queue the container bytes the open reads when the index does not carry
        them (over MAX_OPEN_EXTENT_BYTES): the index says where they are, so they
        come in one round trip (head and tail on two fetch workers) and no byte
        of media is fetched for them. An index that carries extents carries every
        container range the scan's open read; a range it left out (the audio
        after the last video packet of a faststart MP4) is not read by the open
        and is not fetched. After a scan the ranges are cached already."""
        if index.open_extents:
            return
        for off, length in index.container_ranges(self.version.size):
            self._byte_source.prefetch(off, length)

    def _orientation(self, index: FrameIndex | None) -> int:
        orient = orientation_from_matrix(index.header.get("display_matrix")
                                         if index is not None else None)
        if orient is None:
            raise FluxonFsDecodeError(
                f"{self.name}: autorotate turns frames by multiples of 90 degrees; this video's "
                "display matrix asks for another angle (open it without autorotate)")
        return orient

    def _make_decoder(self, index: FrameIndex | None, byte_source: Any = None) -> Any:
        """A decoder of this process over byte_source (a new one after fork),
        kept as the reader's and returned."""
        self._byte_source = (byte_source if byte_source is not None
                             else self._video.make_byte_source())
        self._close_helpers()  # over the byte source it replaces (or the parent's)
        # The decoder lives as long as the reader: a request ahead of where it
        # stands continues without seeking.
        orient = self._decoder.orient if self._decoder is not None else 0
        decoder = self._decode.VideoDecoder(self._byte_source, self.num_threads, self.name,
                                            self.on_damage, self.stream_index)
        self._decoder = decoder
        decoder.index = index
        decoder.index_learned = self._share_index
        if index is not None:
            self._byte_source.set_extents(index.open_extents)
        decoder.orient = orient
        decoder.scaling = (self.resize, self.interpolation)
        return decoder

    def _share_index(self, index: FrameIndex) -> None:
        """The decoder learnt damage (or surveyed the file): every reader should know."""
        log.info("%s: %s", self.name, "the file's frames were surveyed for damage"
                 if index.decoded_pts is not None else "the decoder found damaged data")
        share_learnt_index(self._range_source, index, self._video.kind)

    # ---- what is known without decoding ----

    @property
    def metadata(self) -> FluxonFsVideoMetadata:
        """Frame count, fps, duration, native size, rotation, codec, keyframes, ..."""
        if self._metadata is None:
            if self._video.audio_only:  # every frame call and time lookup comes here
                raise FluxonFsNoVideoStreamError(self._video.why_no_index)
            raise FluxonFsDecodeError(self._video.why_no_index
                                      or f"{self.name}: FFmpeg could not index this file")
        return self._metadata

    def __len__(self) -> int:
        return self.metadata.num_frames

    def timestamps_s(self) -> np.ndarray:
        """Presentation time of every frame in seconds (float64), in frame-index order."""
        self.metadata  # noqa: B018 - raises for a file without an index
        return timestamps_s(self._index(), self.on_damage, self.name)

    @_located
    def indices_at_times(self, seconds: float | Sequence[float] | np.ndarray, *,
                         tolerance_s: float = TIME_TOLERANCE_S) -> list[int]:
        """For each time, the index of the frame it names: the frame whose pts
        is nearest, if within ``tolerance_s`` (default 1e-4 s: times that went
        through float32 still name their frame), else the frame displayed then
        (the last whose pts <= t), for t in [begin_s, end_s); any other time is
        FluxonFsFrameIndexError (metadata.indices_at_times; docs/frame-index.md)."""
        metadata = self.metadata  # raises for a file without an index
        return indices_at_times(self.timestamps_s(), metadata, seconds, self.name,
                                tolerance_s=tolerance_s)

    # ---- torchcodec-style access: frames with their times ----

    def get_frames_at(self, indices: Sequence[int] | np.ndarray) -> FrameBatch:
        """Frames at ``indices`` with their ``pts_seconds`` and ``duration_seconds``."""
        frames = self.read_frames_numpy(indices)
        count = len(self)
        chosen = np.asarray(indices, np.int64).reshape(-1)
        chosen = np.where(chosen < 0, chosen + count, chosen)
        times = self.timestamps_s()
        durations = frame_durations(times, self.metadata.end_stream_seconds)
        return FrameBatch(frames, times[chosen], durations[chosen], chosen)

    def get_frames_played_at(self, seconds: float | Sequence[float] | np.ndarray, *,
                             tolerance_s: float = TIME_TOLERANCE_S) -> FrameBatch:
        """The frames on screen at each time (see ``indices_at_times``)."""
        return self.get_frames_at(self.indices_at_times(seconds, tolerance_s=tolerance_s))

    def get_frame_at(self, index: int) -> Frame:
        """Frame ``index`` (negative: from the end) with its time."""
        return self.get_frames_at([index])[0]  # type: ignore[return-value]

    def get_frame_played_at(self, seconds: float, *,
                            tolerance_s: float = TIME_TOLERANCE_S) -> Frame:
        """The frame on screen at ``seconds`` (see ``indices_at_times``)."""
        return self.get_frames_played_at([seconds], tolerance_s=tolerance_s)[0]  # type: ignore

    def get_frames_in_range(self, start: int, stop: int, step: int = 1) -> FrameBatch:
        """Frames ``start, start + step, ...`` before ``stop`` (as ``range``)."""
        return self.get_frames_at(range(*slice(start, stop, step).indices(len(self))))

    def get_frames_played_in_range(self, start_seconds: float = NOT_GIVEN,
                                   stop_seconds: float = NOT_GIVEN,
                                   fps: float | None = None, *,
                                   tolerance_s: float = TIME_TOLERANCE_S,
                                   **renamed: float) -> FrameBatch:
        """The frames shown in ``[start_seconds, stop_seconds)``: each frame whose
        time falls there (a pts within ``tolerance_s`` of a bound is at it), or
        with ``fps`` the frame ``indices_at_times`` names at each
        ``start_seconds + k / fps``. (``start_s=``/``stop_s=``: deprecated.)"""
        start_s, stop_s, _ = _renamed(self.get_frames_played_in_range, renamed, start_seconds,
                                      stop_seconds, None, audio=False)
        metadata = self.metadata
        times = self.timestamps_s()
        shown = indices_in_range(times, metadata, start_s, stop_s, self.name,
                                 tolerance_s=tolerance_s)
        if fps is None:
            return self.get_frames_at(shown)
        if not 0 < fps < float("inf"):
            raise FluxonFsConfigError(f"fps must be a finite number > 0, got {fps!r}")
        count = int(np.ceil((stop_s - start_s) * fps - 1e-9))
        output_fits(self.name, f"{count} frames (fps={fps})",
                    count * (self.height or 1) * (self.width or 1) * 3)
        return self.get_frames_played_at(start_s + np.arange(max(count, 0)) / fps,
                                         tolerance_s=tolerance_s)

    def read_frames_torch(self, indices: Sequence[int] | np.ndarray,
                          layout: str | None = None) -> Any:
        """Frames as a torch uint8 tensor sharing the decoded array's memory;
        ``layout="NCHW"`` gives a permuted view (no copy); None: the options'."""
        return as_torch(self.read_frames_numpy(indices), layout or self.options.layout)

    def __getitem__(self, key: int | slice) -> np.ndarray:
        """``reader[i]`` is frame i ``(H, W, 3)``; ``reader[a:b:s]`` the frames of the slice."""
        if isinstance(key, slice):
            return self.read_frames_numpy(range(*key.indices(len(self))))
        if isinstance(key, (int, np.integer)):
            frame: np.ndarray = self.read_frames_numpy([int(key)])[0]
            return frame
        raise TypeError(f"{self.name}: frames are indexed by an int or a slice, "
                        f"got {type(key).__name__}")

    def __iter__(self) -> Iterator[np.ndarray]:
        """Every frame in order, decoded ITER_CHUNK at a time (one forward decode)."""
        for start in range(0, len(self), ITER_CHUNK):
            yield from self.read_frames_numpy(range(start, min(start + ITER_CHUNK, len(self))))

    # ---- audio on the frames' clock (fluxon_video/audio.py) ----

    @_located
    def read_audio(self, start_s: float, end_s: float, spec: AudioSpec | None = None,
                   num_samples: int | None = None) -> AudioSamples:
        """The audio of ``[start_s, end_s)`` (``num_samples`` samples from its
        first, when given) as ``spec`` asks (None: the options' ``audio``, else
        the stream's own rate and channels), from this reader's byte source."""
        spec = spec or self.options.audio or AudioSpec()
        with self._lock:
            self._check_open()
            t0 = time.perf_counter()
            self._range_source.check_current()  # the version rule: fs/file_metadata.py
            before = self._byte_source.stats()
            samples = self._audio_track().read(start_s, end_s, spec, num_samples)
            after = self._byte_source.stats()
            cache = {k: after[k] - before[k] for k in ("page_hits", "page_misses",
                                                       "bytes_fetched")}
            self._report(self._meter.read(None, 0, time.perf_counter() - t0, cache, after))
            return samples

    def _audio_track(self) -> AudioTrack:
        """The reader's audio track, opened on first use: the stream the frame
        index names (with its packet table), or for a file without an index the
        one FFmpeg picks."""
        if self._audio is None:
            index = self._decoder.index
            header = index.header.get("audio") if index is not None else None
            stream, packets = ((-1, None) if header is None else
                               (header["stream_index"],
                                (index.audio_packets, tuple(header["time_base"]))))
            self._audio = AudioTrack(self._byte_source, self.name, stream, packets,
                                     None if self._video.audio_only else self._decoder)
        return self._audio

    def get_audio_played_in_range(self, start_seconds: float = NOT_GIVEN,
                                  stop_seconds: float = NOT_GIVEN, *,
                                  sample_rate: int | None = None,
                                  num_channels: int | None = None,
                                  pad_audio: bool = True, exact_audio: bool = True,
                                  **renamed: Any) -> AudioSamples:
        """float32 ``(num_channels, samples)`` covering ``[start_seconds,
        stop_seconds)`` on the frames' clock, at ``sample_rate`` / ``num_channels``
        (None: the options' ``audio``'s, else the stream's)."""
        start_s, stop_s, channels = _renamed(self.get_audio_played_in_range, renamed,
                                             start_seconds, stop_seconds, num_channels)
        default = self.options.audio or AudioSpec()
        return self.read_audio(start_s, stop_s, AudioSpec(
            sample_rate or default.sample_rate, channels or default.num_channels, pad_audio,
            exact_audio))

    def get_clip_played_in_range(self, start_seconds: float = NOT_GIVEN,
                                 stop_seconds: float = NOT_GIVEN, *,
                                 fps: float | None = None, sample_rate: int | None = None,
                                 num_channels: int | None = None, pad_audio: bool = True,
                                 exact_audio: bool = True,
                                 tolerance_s: float = TIME_TOLERANCE_S,
                                 **renamed: Any) -> AVClip:
        """The frames of ``[start_seconds, stop_seconds)`` (as
        ``get_frames_played_in_range``) and the audio of exactly that span; a file
        without video gives no frames."""
        start_s, stop_s, channels = _renamed(self.get_clip_played_in_range, renamed,
                                             start_seconds, stop_seconds, num_channels)
        frames = (self.get_frames_played_in_range(start_s, stop_s, fps, tolerance_s=tolerance_s)
                  if self.has_video else self._no_frames())
        return AVClip(frames, self.get_audio_played_in_range(
            start_s, stop_s, sample_rate=sample_rate, num_channels=channels, pad_audio=pad_audio,
            exact_audio=exact_audio))

    def get_clip_at(self, indices: Sequence[int] | np.ndarray, *,
                    sample_rate: int | None = None, num_channels: int | None = None,
                    pad_audio: bool = True, exact_audio: bool = True,
                    **renamed: Any) -> AVClip:
        """The frames at ``indices`` and the audio from the first one's time to
        the end of the last one's display (the span the frames cover)."""
        channels = renamed_arguments("FluxonFsVideoReader.get_clip_at", renamed,
                                     {"channels": "num_channels"},
                                     {"num_channels": num_channels})["num_channels"]
        frames = self.get_frames_at(indices)
        if len(frames) == 0:
            raise FluxonFsFrameIndexError(f"{self.name}: a clip needs at least one frame index")
        start_s, stop_s = frames.span_s()
        return AVClip(frames, self.get_audio_played_in_range(
            start_s, stop_s, sample_rate=sample_rate, num_channels=channels, pad_audio=pad_audio,
            exact_audio=exact_audio))

    @property
    def audio_metadata(self) -> FluxonFsAudioMetadata | None:
        """The audio stream's metadata (``metadata.audio``, from the frame index);
        for an audio-only file, from its header (the audio decoder opens); None
        when the file has no audio."""
        if self._metadata is not None:
            return self._metadata.audio
        with self._lock:
            self._check_open()
            try:
                return audio_metadata(self._audio_track().header())
            except FluxonFsNoAudioStreamError:
                return None

    @property
    def has_video(self) -> bool:
        """Whether the file has a video stream (False: an audio-only file)."""
        return self._metadata is not None or not self._video.audio_only

    def _no_frames(self) -> FrameBatch:
        empty = np.empty(0, np.float64)
        return FrameBatch(np.empty((0, self.height, self.width, 3), np.uint8), empty, empty,
                          np.empty(0, np.int64))

    def _check_not_closed(self) -> None:
        if self._closed:
            raise FluxonFsClosedError(f"{self.name}: the reader is closed")

    def _check_open(self) -> None:
        self._check_not_closed()
        if self._byte_source.pid != os.getpid():
            # Forked: the parent's fetch workers and page cache are not ours.
            self._make_decoder(self._decoder.index)

    def _index(self) -> FrameIndex:
        decoder = self._decoder
        if decoder is None:
            raise FluxonFsClosedError(f"{self.name}: the reader is closed")
        index: FrameIndex = decoder.index
        return index

    # ---- reading ----

    @property
    def closed(self) -> bool:
        return self._closed

    @_located
    def read_frames_numpy(self, indices: Sequence[int] | np.ndarray,
                          out: np.ndarray | None = None) -> np.ndarray:
        """Frames at ``indices`` as uint8 ``(len(indices), height, width, 3)`` RGB.

        Negative indices count from the end. With ``out`` (a C-contiguous
        uint8 array of exactly that shape) the frames are decoded into it and
        it is returned.
        """
        with self._lock:
            self._check_open()
            t0 = time.perf_counter()
            self._range_source.check_current()  # the version rule: fs/file_metadata.py
            if self._video.audio_only:  # a clip of an audio-only file has no frames
                if len(indices):
                    raise FluxonFsNoVideoStreamError(self._video.why_no_index)
                self._report(self._meter.read(None, 0, time.perf_counter() - t0))
                return self._no_frames().data
            halves = self._gop_halves(indices) if out is None else None
            frames: np.ndarray
            if halves is None:
                frames, native = self._decoder.decode(indices, self.height, self.width, out)
            else:
                wanted = np.asarray(indices).reshape(-1)
                frames, native = self._split.decode(self._decoder, wanted, *halves,
                                                    self.height, self.width)
            self._report(self._meter.read(native, len(frames), time.perf_counter() - t0,
                                          page_cache=self._byte_source.stats()))
            return frames

    @_located
    def read_gray16_numpy(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Frames of a 9- to 16-bit gray video (a depth map) at ``indices`` as
        uint16 ``(len(indices), H, W)``: each sample as coded (LeRobot's depth
        cameras: 12-bit codes), at the video's own size (turned upright with
        ``autorotate``), nothing scaled or converted. Negative indices count
        from the end. A video in another pixel format is refused
        (FluxonFsDecodeError), and so is a reader opened at another size
        (FluxonFsConfigError): a depth code is a measurement, not a colour to
        interpolate."""
        with self._lock:
            self._check_open()
            t0 = time.perf_counter()
            self._range_source.check_current()  # the version rule: fs/file_metadata.py
            metadata = self.metadata  # raises for a file without an index
            native = output_size(metadata, None, None, self.autorotate)
            if (self.height, self.width) != native:
                raise FluxonFsConfigError(
                    f"{self.name}: read_gray16_numpy reads at the video's size "
                    f"{native[1]}x{native[0]}; this reader outputs {self.width}x{self.height} "
                    "(open it without height and width)")
            if metadata.pix_fmt and metadata.pix_fmt not in GRAY16_FORMATS:
                raise FluxonFsDecodeError(
                    f"{self.name}: a {metadata.pix_fmt} video; read_gray16_numpy reads 9- to "
                    "16-bit gray videos (gray10le, gray12le, ...: depth maps)")
            frames: np.ndarray
            frames, stats = self._decoder.decode(indices, self.height, self.width, None,
                                                 samples="gray16")
            self._report(self._meter.read(stats, len(frames), time.perf_counter() - t0,
                                          page_cache=self._byte_source.stats()))
            return frames

    def cancel_prefetch(self) -> int:
        """Drop the pages queued ahead (``prefetch_frames``, readahead) that no
        fetch worker has started, and return how many: the read they were for
        is not coming. Pages fetching or fetched stay cached. 0 once closed."""
        with self._lock:
            if self._closed:
                return 0
            return int(self._byte_source.cancel_prefetch())

    @_located
    def prefetch_frames(self, indices: Sequence[int] | np.ndarray) -> int:
        """Start fetching the bytes a read of ``indices`` will read, and return at
        once: the pages of every packet from each frame's start keyframe to the
        frame (and, for a codec that reorders, the few packets after it that the
        read decodes too), through the same piece path (page cache, KV, agent or store),
        queued for the fetch workers. Never more than the page cache holds;
        nothing a read of them would not read. Bytes queued (0: nothing to
        plan by, e.g. no trusted index or an index out of range; the read
        itself then says why). Safe beside a read of this reader on another
        thread: the pages join the fetch queue behind the read's own."""
        with self._prefetch_lock:
            self._check_not_closed()  # not _check_open: a read, not a prefetch, rebuilds after fork
            decoder, source = self._decoder, self._byte_source
            if decoder is None or source.pid != os.getpid():
                return 0  # a forked copy: its read makes its own fetch workers
            index = decoder.index
            if index is None or not index.trusted or (index.pkt_pos < 0).any():
                return 0
            spans = _frame_spans(index, indices)
            if spans is None:
                return 0
            # the read decodes a reordering codec's next few packets too (its plan
            # fetches them: FrameIndex.plan), so they are the read's bytes as well
            starts, ends = spans
            ends = np.minimum(ends + index.confirm_packets, index.pkt_pos.size - 1)
            packets = decode_span_packets(starts, ends)
            page: int = source.page_size
            first = index.pkt_pos[packets] // page
            last = (index.pkt_pos[packets] + np.maximum(index.pkt_size[packets], 1) - 1) // page
            queued = 0
            for start, stop in page_runs(first, last):
                queued += source.prefetch(start * page, (stop - start + 1) * page)
            return queued * page

    # ---- num_threads >= 2: two GOP sets on two decoders at once ----

    def _gop_halves(self, indices: Sequence[int] | np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Request positions in two sets for two decoders (fluxon_video/planning.py's
        rule, each frame an item), the larger first; None when one decoder should
        read them all: one thread, a split the rule refuses, or no spans to plan by."""
        if self.num_threads < 2:
            return None
        spans = self.decode_spans(indices)
        return None if spans is None else split_in_two(*spans)

    def decode_spans(self, indices: Sequence[int] | np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray] | None:
        """Each frame's decode span for planning (fluxon_video/planning.py): the
        decode position of the keyframe its decode starts at, and its own; None
        when reads of this reader must stay on one decoder (an index that is not
        trusted, damage, a reader that left the indexed path) or an index is out
        of range (the read names it)."""
        decoder = self._decoder  # no lock: the reader's read holds it when it plans
        index = decoder.index if decoder is not None else None
        if (self.on_damage != "error" or self._split.off or index is None
                or not index.trusted or index.pkt_damaged.any()):
            return None
        return _frame_spans(index, indices)

    def _close_helpers(self) -> None:
        """Close the audio track and the second decoder (opened on first use)."""
        if self._audio is not None:
            self._audio.close()
        self._audio = None
        self._split.close()

    def _report(self, stats: FluxonFsVideoReadStats) -> None:
        self.last_stats = stats
        if stats.fallback:
            log.info("%s: the decode disagreed with the frame index (%s); read sequentially, "
                     "and this reader stays on the sequential path", self.name, stats.fallback)
        if self._on_read is not None:
            self._on_read(stats)

    def close(self) -> None:
        """Release the decoder, page cache and fetch workers. Safe to call twice."""
        with self._lock, self._prefetch_lock:
            if self._closed:
                return
            self._closed = True
            self._close_helpers()
            if self._decoder is not None:
                self._decoder.close()
                self._decoder = None
            if self._byte_source is not None:
                self._byte_source.close()
                self._byte_source = None
            self._video.close()

    def __enter__(self) -> FluxonFsVideoReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> Any:
        raise TypeError(f"{self.name}: a FluxonFsVideoReader holds threads and FFmpeg state and "
                        "does not pickle; pickle the FluxonFsPatcher or the reader pool, which "
                        "rebuild their readers in the receiving process")

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        who = f" identity={self.identity.name}" if self.identity is not None else ""
        return (f"<FluxonFsVideoReader {self.name} {getattr(self, 'height', '?')}x"
                f"{getattr(self, 'width', '?')}{who} {state}>")


def _frame_spans(index: FrameIndex, indices: Sequence[int] | np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray] | None:
    """Each frame's decode span in ``index``: the decode position of the keyframe
    its decode starts at, and its own. None for no frames, indices that are not
    integers or out of range, or a frame with no start keyframe (the read
    itself says why)."""
    wanted = np.asarray(indices).reshape(-1)
    if wanted.size == 0 or wanted.dtype.kind not in "iu":
        return None
    count = index.frame_dec.size
    wanted = np.where(wanted < 0, wanted + count, wanted).astype(np.int64)
    if wanted.min() < 0 or wanted.max() >= count:
        return None
    starts = index.frame_key[wanted]
    return None if (starts < 0).any() else (starts, index.frame_dec[wanted])


def _renamed(method: Any, renamed: dict[str, Any], start: float, stop: float,
             num_channels: int | None, audio: bool = True) -> tuple[float, float, int | None]:
    """A method's (start_seconds, stop_seconds, num_channels), from the old
    keyword names too (start_s=, stop_s=, and for audio channels=: they warn)."""
    renames = {"start_s": "start_seconds", "stop_s": "stop_seconds"}
    if audio:
        renames["channels"] = "num_channels"
    values = renamed_arguments(
        f"FluxonFsVideoReader.{method.__name__}", renamed, renames,
        {"start_seconds": start, "stop_seconds": stop, "num_channels": num_channels})
    return values["start_seconds"], values["stop_seconds"], values["num_channels"]
