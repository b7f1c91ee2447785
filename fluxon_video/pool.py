"""FluxonFsVideoReaderPool: a per-process LRU of readers, and batched reads.

The entry point for data loaders. Readers are keyed by ``ReaderKey(export_name,
relpath, identity, options)``: ``options`` is the request's ReadOptions. A
reader is leased to one call at a time (concurrent calls for one key open
more readers); a leased reader is never closed by eviction;
idle readers beyond ``max_readers`` are closed oldest first.

Fork-safe like redis-py's connection pool: the pool remembers its pid, and in
a forked child it forgets the parent's readers (never closing or using them)
and starts empty.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from fluxon_video.audio import AudioSamples, AudioSpec
from fluxon_video.damage import check_policy
from fluxon_video.defaults import TIME_TOLERANCE_S
from fluxon_video.frame_index import FrameIndex
from fluxon_video.errors import (
    FluxonFsClosedError,
    FluxonFsConfigError,
    FluxonFsError,
    FluxonFsFrameIndexError,
)
from fluxon_video.frames import as_torch, covered_span, frame_durations, shape_of
from fluxon_video.fs.concurrency import PerProcess
from fluxon_video.fs.config import RequestIdentity
from fluxon_video.fs.paths import check_relpath
from fluxon_video.fs.uris import is_uri
from fluxon_video.logs import get_logger
from fluxon_video.metadata import FluxonFsVideoMetadata, timestamps_s
from fluxon_video.options import ReadOptions, options_from
from fluxon_video.planning import split_in_two
from fluxon_video.reader import FluxonFsVideoReader
from fluxon_video.stats import FluxonFsProcessStats, FluxonFsVideoReadStats
from fluxon_video.validation import (Threads, frame_indices, positive_int, time_tolerance,
                                     times_in_seconds)

if TYPE_CHECKING:
    from fluxon_video.opening import VideoOpener


class ReaderKey(NamedTuple):
    """What makes two reads share a reader: the file, the identity, the options
    (with the pool's autorotate and on_damage)."""

    export_name: str
    relpath: str
    identity: RequestIdentity
    options: ReadOptions


log = get_logger("pool")

# read_many's ``ahead``: the next call's requests, or what makes them
Ahead = Sequence["FluxonFsVideoReadRequest"] | Callable[[], Sequence["FluxonFsVideoReadRequest"]]

# Errors that say nothing about the reader's health: it goes back to the pool.
_ARGUMENT_ERRORS = (FluxonFsFrameIndexError, FluxonFsConfigError, TypeError)


@dataclass(frozen=True)
class FluxonFsVideoReadRequest:
    """One clip to read: which video, output size, decoder threads and frame indices.

    A None height or width means native size / kept aspect ratio (as for
    ``open_video_reader``); negative indices count from the end.
    ``stream_index``: the container stream (None: the default rule's).
    ``resize`` and ``interpolation`` as for ``open_video_reader``.
    ``audio``: also read the audio of the span the frames cover (from the
    first frame's time to the end of the last one's display, or exactly
    ``audio_span_s`` when given) into the result's ``audio``.
    ``times_s`` (instead of ``indices``): the frames by time, the frame each
    time names under ``tolerance_s`` (``reader.indices_at_times``; the
    reader that reads them maps them, so they are that file version's).
    ``options``: a ReadOptions instead of height, width, num_threads,
    stream_index, resize and interpolation (the pool's ``autorotate`` and
    ``on_damage`` apply either way); ``request.options`` holds them after.
    """

    export_name: str
    relpath: str
    height: int | None = None
    width: int | None = None
    num_threads: Threads = 1
    indices: tuple[int, ...] = ()
    stream_index: int | None = None
    resize: str = "stretch"
    interpolation: str = "bilinear"
    audio: AudioSpec | None = None
    audio_span_s: tuple[float, float] | None = None
    times_s: tuple[float, ...] | None = None
    tolerance_s: float = TIME_TOLERANCE_S
    options: ReadOptions = None  # type: ignore[assignment]  # set from the fields when None

    def __post_init__(self) -> None:
        # A URI as the relpath (export_name None, or the export whose root holds
        # it) is mapped to (export, relpath) by the pool, which has the config.
        uri = is_uri(self.relpath)
        if not (isinstance(self.export_name, str) and self.export_name) and not (
                uri and self.export_name is None):
            raise FluxonFsConfigError(f"export_name must be a non-empty string, got {self.export_name!r}")
        if not uri:
            object.__setattr__(self, "relpath", check_relpath(self.relpath))
        # The reader's options are checked once, in ReadOptions; the separate
        # fields mirror them (the pool's autorotate and on_damage apply).
        options = options_from(self.options, "FluxonFsVideoReadRequest", height=self.height,
                               width=self.width, num_threads=self.num_threads,
                               stream_index=self.stream_index, resize=self.resize,
                               interpolation=self.interpolation)
        object.__setattr__(self, "options", options)
        for name in ("height", "width", "num_threads", "stream_index", "resize", "interpolation"):
            object.__setattr__(self, name, getattr(options, name))
        object.__setattr__(self, "indices", tuple(int(i) for i in frame_indices(self.indices)))
        if self.audio is not None and not isinstance(self.audio, AudioSpec):
            raise TypeError(f"audio must be an AudioSpec or None, got {type(self.audio).__name__}")
        if self.audio_span_s is not None:
            try:
                start_s, end_s = (float(t) for t in self.audio_span_s)
                ordered = end_s >= start_s
            except (TypeError, ValueError):  # not two numbers
                ordered = False
            if not ordered:
                raise FluxonFsConfigError(f"audio_span_s must be (start_s, end_s) with end_s >= "
                                          f"start_s, got {self.audio_span_s!r}")
            object.__setattr__(self, "audio_span_s", (start_s, end_s))
        object.__setattr__(self, "tolerance_s", time_tolerance(self.tolerance_s))
        if self.times_s is not None:
            if self.indices:
                raise FluxonFsConfigError("a request reads frames by indices or by times_s, "
                                          "not both")
            object.__setattr__(self, "times_s", times_in_seconds(self.times_s))


@dataclass(frozen=True)
class FluxonFsVideoReadResult:
    """Frames of one request and what reading them cost.

    In a batched read, ``stats`` describe the one native call that served the
    request's group (``group_size`` requests), so they are shared, not split.
    """

    frames: np.ndarray
    stats: FluxonFsVideoReadStats
    reader_reused: bool
    group_size: int = 1
    audio: AudioSamples | None = None  # when the request asked for audio

    def __repr__(self) -> str:
        # Shapes, not pixels; the stats by their totals (``stats`` has the rest).
        return (f"FluxonFsVideoReadResult(frames={shape_of(self.frames)}, audio={self.audio!r}, "
                f"reader_reused={self.reader_reused}, group_size={self.group_size}, "
                f"total_ms={self.stats.total_ms:.1f})")

    @property
    def open_ms(self) -> float:
        return self.stats.open_ms

    @property
    def decode_ms(self) -> float:
        return self.stats.decode_ms

    @property
    def total_ms(self) -> float:
        return self.stats.total_ms


@dataclass
class PoolCounters:
    readers_opened: int = 0
    leases_reused: int = 0  # leases served by an idle cached reader
    readers_evicted: int = 0
    readers_discarded: int = 0  # closed after a failed read
    native_calls: int = 0
    peak_leased: int = 0  # most readers in use at once

    def reuse_rate(self) -> float:
        leases = self.readers_opened + self.leases_reused
        return self.leases_reused / leases if leases else 0.0


@dataclass
class _State:
    """Everything that belongs to one process; replaced wholesale after fork."""

    # a Condition: the lookahead waits on it for the reader a read leases
    lock: threading.Condition = field(default_factory=threading.Condition)
    idle: OrderedDict[FluxonFsVideoReader, ReaderKey] = field(default_factory=OrderedDict)
    leased: dict[FluxonFsVideoReader, ReaderKey] = field(default_factory=dict)
    counters: PoolCounters = field(default_factory=PoolCounters)


class FluxonFsVideoReaderPool:
    """Reads frames through cached readers. Thread-safe and fork-safe; a context manager."""

    def __init__(self, opener: VideoOpener, max_readers: int = 32, *,
                 autorotate: bool = False, on_damage: str = "error") -> None:
        self.opener = opener  # the reader factory (FluxonFsPatcher builds both)
        self.max_readers = positive_int("max_readers", max_readers)
        self.autorotate = bool(autorotate)
        self.on_damage = check_policy(on_damage)
        self._state = PerProcess(_State)
        self._closed = False

    # ---- process-local state ----

    def _local(self) -> _State:
        # A forked child builds its own: the parent's readers (and threads) are not ours.
        return self._state.get()

    def _key(self, request: FluxonFsVideoReadRequest) -> ReaderKey:
        identity = self.opener.identities.current
        if identity is None:
            raise FluxonFsConfigError("no request identity is set on the patcher")
        export_name, relpath = request.export_name, request.relpath
        if is_uri(relpath):  # one reader for a file, named by URI or by relpath
            export_name, relpath = self.opener.resolve(export_name, relpath, identity)
            relpath = check_relpath(relpath)
        return ReaderKey(export_name, relpath, identity,
                         request.options.decoding().replace(autorotate=self.autorotate,
                                                            on_damage=self.on_damage))

    @contextmanager
    def _lease(self, key: ReaderKey) -> Iterator[tuple[FluxonFsVideoReader, bool]]:
        """The most recently used idle reader for key, or a new one; returned after."""
        state = self._local()
        with state.lock:
            if self._closed:
                raise FluxonFsClosedError("the reader pool is closed")
            reader = next((r for r in reversed(state.idle) if state.idle[r] == key), None)
            if reader is not None:
                del state.idle[reader]
                state.leased[reader] = key
                state.lock.notify_all()
                state.counters.leases_reused += 1
                state.counters.peak_leased = max(state.counters.peak_leased, len(state.leased))
        reused = reader is not None
        if reader is None:
            reader = self.opener.open_reader(key.export_name, key.relpath, key.options,
                                             identity=key.identity)
            with state.lock:
                state.leased[reader] = key
                state.lock.notify_all()
                state.counters.readers_opened += 1
                state.counters.peak_leased = max(state.counters.peak_leased, len(state.leased))
        healthy = False
        try:
            yield reader, reused
            healthy = True
        except _ARGUMENT_ERRORS:
            healthy = True
            raise
        finally:
            self._give_back(state, key, reader, healthy)

    def _count_native_call(self) -> None:
        state = self._local()
        with state.lock:
            state.counters.native_calls += 1

    def _give_back(self, state: _State, key: ReaderKey, reader: FluxonFsVideoReader,
                   healthy: bool) -> None:
        to_close = []
        with state.lock:
            state.leased.pop(reader, None)
            if self._closed or not healthy or reader.closed:
                to_close.append(reader)
                if not healthy:
                    state.counters.readers_discarded += 1
            else:
                state.idle[reader] = key
                # Only idle readers are evicted, least recently used first.
                while state.idle and len(state.idle) + len(state.leased) > self.max_readers:
                    victim, _ = state.idle.popitem(last=False)
                    to_close.append(victim)
                    state.counters.readers_evicted += 1
        for victim in to_close:
            victim.close()

    # ---- reads ----

    def read_frames_numpy(self, *, export_name: str, relpath: str, height: int | None,
                          width: int | None, num_threads: Threads, indices: Sequence[int],
                          out: np.ndarray | None = None, stream_index: int | None = None,
                          resize: str = "stretch", interpolation: str = "bilinear") -> np.ndarray:
        """Frames at ``indices`` as uint8 ``(len(indices), height, width, 3)`` RGB
        (into ``out`` when given)."""
        return self.read_frames_numpy_with_stats(
            export_name=export_name, relpath=relpath, height=height, width=width,
            num_threads=num_threads, indices=indices, out=out, stream_index=stream_index,
            resize=resize, interpolation=interpolation).frames

    def read_frames_torch(self, *, export_name: str, relpath: str, height: int | None,
                          width: int | None, num_threads: Threads, indices: Sequence[int],
                          layout: str = "NHWC", stream_index: int | None = None,
                          resize: str = "stretch", interpolation: str = "bilinear") -> Any:
        """The frames as a torch uint8 tensor sharing the decoded array's memory
        (``layout="NCHW"``: a permuted view, no copy)."""
        return as_torch(self.read_frames_numpy(
            export_name=export_name, relpath=relpath, height=height, width=width,
            num_threads=num_threads, indices=indices, stream_index=stream_index,
            resize=resize, interpolation=interpolation), layout)

    def read_gray16_numpy(self, *, export_name: str, relpath: str, num_threads: Threads,
                          indices: Sequence[int], stream_index: int | None = None
                          ) -> np.ndarray:
        """Frames of a 9- to 16-bit gray video (a depth map) as uint16
        ``(len(indices), H, W)``, each sample as coded, on a pooled reader of
        the video's own size (``FluxonFsVideoReader.read_gray16_numpy``)."""
        request = FluxonFsVideoReadRequest(export_name, relpath, None, None, num_threads,
                                           tuple(indices), stream_index)
        with self._lease(self._key(request)) as (reader, _):
            frames = reader.read_gray16_numpy(request.indices)
            self._count_native_call()
        return frames

    def read_frames_numpy_with_stats(self, *, export_name: str, relpath: str,
                                     height: int | None, width: int | None, num_threads: Threads,
                                     indices: Sequence[int], out: np.ndarray | None = None,
                                     stream_index: int | None = None, resize: str = "stretch",
                                     interpolation: str = "bilinear",
                                     audio: AudioSpec | None = None,
                                     audio_span_s: tuple[float, float] | None = None,
                                     ) -> FluxonFsVideoReadResult:
        """The frames with what reading them cost, and with ``audio`` the audio
        of their span (see FluxonFsVideoReadRequest)."""
        request = FluxonFsVideoReadRequest(export_name, relpath, height, width, num_threads,
                                           tuple(indices), stream_index, resize, interpolation,
                                           audio, audio_span_s)
        t0 = time.perf_counter()
        with self._lease(self._key(request)) as (reader, reused):
            frames = reader.read_frames_numpy(request.indices, out=out)
            stats = reader.last_stats
            self._count_native_call()
            samples = _audio_of(reader, request, request.indices) if audio is not None else None
        assert stats is not None
        stats = replace(stats, total_ms=(time.perf_counter() - t0) * 1e3)
        return FluxonFsVideoReadResult(frames, stats, reused, audio=samples)

    def read_many_numpy_with_stats(
            self, requests: Sequence[FluxonFsVideoReadRequest],
            max_workers: int | None = None, *,
            ahead: Ahead = ()) -> list[FluxonFsVideoReadResult]:
        """Results in request order; one native decode per reader key over the union of indices.

        Groups (distinct reader keys) are decoded concurrently on up to
        ``max_workers`` threads (default: one per group, at most one per CPU);
        the GIL is released while they decode. Every request is validated
        before any decoding; on failure every group finishes, every reader
        goes back, and the first failing group's error (naming its requests)
        is raised.

        ``ahead``: the next call's requests, or a function that makes them
        (called on the lookahead thread, so the next items' index loads are
        ahead too). While these decode, their readers are opened and their
        pages fetched (``prefetch``, on a thread of its own, in the caller's
        context: its identity); those that share a reader with these are
        queued on it beside the read (behind the read's own pages). A failure
        there is left for the next call to raise; the call returns once the
        lookahead has queued.
        """
        groups = self._groups(requests)
        if max_workers is not None:
            positive_int("max_workers", max_workers)
        cpus = max_workers or os.cpu_count() or 1
        read = threading.Event()
        lookahead = None
        if callable(ahead) or ahead:
            lookahead = threading.Thread(target=contextvars.copy_context().run,
                                         args=(self._look_ahead, ahead, groups, read),
                                         name="fluxon-lookahead", daemon=True)
            lookahead.start()
        try:
            outcomes = self._read_groups(groups, requests, cpus)
        finally:
            read.set()
            if lookahead is not None:
                state = self._local()
                with state.lock:
                    state.lock.notify_all()  # a lookahead waiting for a reader: the read is over
                lookahead.join()
        results: list[FluxonFsVideoReadResult | None] = [None] * len(requests)
        for group_results in outcomes:
            for position, result in group_results:
                results[position] = result
        return results  # type: ignore[return-value]

    def _read_groups(self, groups: dict[ReaderKey, list[int]],
                     requests: Sequence[FluxonFsVideoReadRequest], cpus: int
                     ) -> list[list[tuple[int, FluxonFsVideoReadResult]]]:
        """Each group's results, the groups on up to ``cpus`` threads."""
        tasks = self._split_groups([(key, positions) for key, positions in groups.items()],
                                   requests, cpus)
        workers = min(len(tasks), cpus)
        if workers <= 1:
            outcomes = [self._read_group(key, positions, requests) for key, positions in tasks]
        else:
            with concurrent.futures.ThreadPoolExecutor(workers, "fluxon-read-many") as executor:
                futures = [executor.submit(self._read_group, key, positions, requests)
                           for key, positions in tasks]
                concurrent.futures.wait(futures)
            outcomes = [future.result() for future in futures]  # the first error, in order
        return outcomes

    def _groups(self, requests: Sequence[FluxonFsVideoReadRequest], quiet: bool = False
                ) -> dict[ReaderKey, list[int]]:
        """Request positions by reader key, each request checked (its type, its
        export). ``quiet``: requests that fail the checks are left out (the read
        of them raises)."""
        groups: dict[ReaderKey, list[int]] = {}
        for position, request in enumerate(requests):
            try:
                key = self._checked_key(position, request)
            except (FluxonFsError, TypeError):
                if quiet:
                    continue
                raise
            groups.setdefault(key, []).append(position)
        return groups

    def _checked_key(self, position: int, request: Any) -> ReaderKey:
        """``requests[position]``'s reader key, once its type and export are checked."""
        if not isinstance(request, FluxonFsVideoReadRequest):
            raise TypeError(f"requests[{position}] is {type(request).__name__}, "
                            "not a FluxonFsVideoReadRequest")
        try:
            self.opener.config.export(self.opener.resolve(request.export_name,
                                                          request.relpath)[0])
        except FluxonFsError as exc:
            raise type(exc)(f"requests[{position}]: {exc}") from None
        return self._key(request)

    def _look_ahead(self, ahead: Ahead, current: dict[ReaderKey, list[int]],
                    read: threading.Event) -> None:
        """The lookahead thread: ``ahead``'s readers opened and pages queued,
        those that share a reader with the current read on the reader it holds."""
        try:
            requests = ahead() if callable(ahead) else ahead
        except Exception as exc:  # noqa: BLE001 - the next call makes them again, and raises
            log.debug("lookahead: the next requests could not be made (%s)", exc)
            return
        coming = self._groups(requests, quiet=True)
        self._prefetch_quietly({k: v for k, v in coming.items() if k not in current}, requests)
        # The files being read now: queued on the reader the read holds, beside
        # the read (its own pages go first); after the read if it is over first.
        later = {}
        for key, positions in coming.items():
            if key not in current:
                continue
            reader = self._reader_in_use(key, read)
            if reader is None:
                later[key] = positions
                continue
            try:
                _queue_on(reader, positions, requests)
            except FluxonFsError as exc:
                log.debug("lookahead beside the read of %s failed (%s)", key.relpath, exc)
        read.wait()
        self._prefetch_quietly(later, requests)

    def _reader_in_use(self, key: ReaderKey, read: threading.Event
                       ) -> FluxonFsVideoReader | None:
        """The reader a read holds for ``key``, once it holds one; None when the
        read is over first."""
        state = self._local()
        with state.lock:
            while not read.is_set():
                reader = next((r for r, k in state.leased.items() if k == key), None)
                if reader is not None:
                    return reader
                state.lock.wait(0.05)  # a lease and the read's end notify; a guard
        return None

    def _prefetch_quietly(self, groups: dict[ReaderKey, list[int]],
                          requests: Sequence[FluxonFsVideoReadRequest]) -> None:
        """``prefetch`` of ``groups``, its failure logged: their read raises it."""
        try:
            self._prefetch_groups(groups, requests)
        except FluxonFsError as exc:
            log.debug("lookahead of %d requests failed (%s); their read will say why",
                      sum(map(len, groups.values())), exc)

    def prefetch(self, requests: Sequence[FluxonFsVideoReadRequest]) -> int:
        """Start fetching what ``read_many_numpy_with_stats(requests)`` will read,
        and return the bytes queued. Each reader key's reader is opened now when
        no idle one has it (the stat and the frame index come ahead too); the
        pages of its requests' frames are queued on its fetch workers
        (``reader.prefetch_frames``), and it goes back idle, the most recently
        used, for the read that follows. Call it with the next batch while this
        one decodes (the pool is thread-safe)."""
        return self._prefetch_groups(self._groups(requests), requests)

    def _prefetch_groups(self, groups: dict[ReaderKey, list[int]],
                         requests: Sequence[FluxonFsVideoReadRequest]) -> int:
        queued = 0
        for key, positions in groups.items():
            with self._lease(key) as (reader, _):
                queued += _queue_on(reader, positions, requests)
        return queued

    def _split_groups(self, groups: list[tuple[ReaderKey, list[int]]],
                      requests: Sequence[FluxonFsVideoReadRequest],
                      cpus: int) -> list[tuple[ReaderKey, list[int]]]:
        """Give spare cores to big groups: a group is read by two readers at once
        when fluxon_video/planning.py's rule (each request an item) splits it,
        so nothing is decoded twice. Only for single-threaded decoders (a
        threaded reader splits its own reads), and only when an idle reader
        already knows where the keyframes are."""
        spare = cpus - len(groups)
        out: list[tuple[ReaderKey, list[int]]] = []
        for key, positions in groups:
            halves = None
            if spare > 0 and len(positions) >= 2 and key.options.num_threads == 1:
                reader = self._idle_reader(key)
                halves = None if reader is None else _split_requests(reader, positions, requests)
            if halves:
                out.extend((key, half) for half in halves)
                spare -= 1
            else:
                out.append((key, positions))
        return out

    def _idle_reader(self, key: ReaderKey) -> FluxonFsVideoReader | None:
        """The most recently used idle reader for key, if any (left idle: for planning)."""
        state = self._local()
        with state.lock:
            return next((r for r in reversed(state.idle) if state.idle[r] == key), None)

    def _read_group(self, key: ReaderKey, positions: list[int],
                    requests: Sequence[FluxonFsVideoReadRequest]
                    ) -> list[tuple[int, FluxonFsVideoReadResult]]:
        """One native decode for a group's requests, each frame decoded once.

        The decode writes every request's frames, in request order, into one
        array (a frame two requests share is decoded once and copied), and
        each result is a view of its own rows: peak memory is the output, not
        the output plus a union of it.
        """
        t0 = time.perf_counter()
        try:
            with self._lease(key) as (reader, reused):
                chosen = {p: _frames_of(reader, requests[p]) for p in positions}
                sizes = [len(chosen[p]) for p in positions]
                wanted = np.fromiter((i for p in positions for i in chosen[p]), dtype=np.int64,
                                     count=sum(sizes))
                frames = reader.read_frames_numpy(wanted)
                stats = reader.last_stats
                self._count_native_call()
                audio = {p: _audio_of(reader, requests[p], chosen[p]) for p in positions
                         if requests[p].audio is not None}
        except FluxonFsError as exc:
            raise _name_requests(exc, positions) from exc
        assert stats is not None
        stats = replace(stats, total_ms=(time.perf_counter() - t0) * 1e3)
        out = []
        start = 0
        for position, size in zip(positions, sizes):
            out.append((position, FluxonFsVideoReadResult(frames[start:start + size], stats, reused,
                                                           group_size=len(positions),
                                                           audio=audio.get(position))))
            start += size
        return out

    def __getstate__(self) -> dict[str, object]:
        """Configuration only: the receiving process starts with no readers."""
        return {"opener": self.opener, "max_readers": self.max_readers,
                "autorotate": self.autorotate, "on_damage": self.on_damage,
                "closed": self._closed}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(state["opener"], state["max_readers"],  # type: ignore[misc]
                      autorotate=state["autorotate"],
                      on_damage=state.get("on_damage", "error"))
        self._closed = bool(state["closed"])

    # ---- what is known without decoding (the index, as the patcher's calls) ----

    def video_metadata_and_timestamps_s(
            self, export_name: str, relpath: str,
            stream_index: int | None = None) -> tuple[FluxonFsVideoMetadata, np.ndarray]:
        """Metadata and every frame's time from one index load (see the patcher's)."""
        index, metadata, _ = self._video_index(export_name, relpath, stream_index)
        return metadata, timestamps_s(index, self.on_damage, f"{export_name}:{relpath}")

    def video_timestamps_s(self, export_name: str, relpath: str,
                           stream_index: int | None = None) -> np.ndarray:
        """Every frame's presentation time (see FluxonFsPatcher.video_timestamps_s)."""
        return self.video_metadata_and_timestamps_s(export_name, relpath, stream_index)[1]

    def video_metadata(self, export_name: str, relpath: str,
                       stream_index: int | None = None) -> FluxonFsVideoMetadata:
        """The video's metadata without opening a decoder (see FluxonFsPatcher.video_metadata)."""
        return self._video_index(export_name, relpath, stream_index)[1]

    def _video_index(self, export_name: str, relpath: str, stream_index: int | None
                     ) -> tuple[FrameIndex, FluxonFsVideoMetadata, FluxonFsVideoReadStats]:
        self._local()
        if self._closed:
            raise FluxonFsClosedError("the reader pool is closed")
        return self.opener.video_index(export_name, relpath, None, self.on_damage, stream_index)

    def stats(self) -> FluxonFsProcessStats:
        """The cumulative figures of the patcher that made this pool, in this process."""
        return self.opener.process_stats()

    # ---- life cycle ----

    def counters(self) -> PoolCounters:
        return self._local().counters

    def cancel_prefetch(self) -> int:
        """Drop the pages queued ahead on the idle readers (``prefetch``, a read's
        ``ahead``) that no fetch worker has started, and return how many: for a
        plan that changed, whose next batch is not the one prefetched."""
        state = self._local()
        with state.lock:  # idle readers stay idle meanwhile: no read loses its pages
            return sum(reader.cancel_prefetch() for reader in state.idle)

    def idle_readers(self) -> list[ReaderKey]:
        """Keys of idle readers, least recently used first (for inspection and tests)."""
        state = self._local()
        with state.lock:
            return list(state.idle.values())

    def close(self) -> None:
        """Close every idle reader; leased ones close when returned. Safe to call twice."""
        state = self._local()
        with state.lock:
            self._closed = True
            idle = list(state.idle)
            state.idle.clear()
        for reader in idle:
            reader.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> FluxonFsVideoReaderPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _queue_on(reader: FluxonFsVideoReader, positions: list[int],
              requests: Sequence[FluxonFsVideoReadRequest]) -> int:
    """``reader.prefetch_frames`` of the frames ``requests[positions]`` read: bytes queued."""
    return reader.prefetch_frames([i for p in positions for i in _frames_of(reader, requests[p])])


def _frames_of(reader: FluxonFsVideoReader, request: FluxonFsVideoReadRequest) -> tuple[int, ...]:
    """The frame indices a request reads: its indices, or those its times name
    in the reader's file version."""
    if request.times_s is None:
        return request.indices
    return tuple(reader.indices_at_times(request.times_s, tolerance_s=request.tolerance_s))


def _audio_of(reader: FluxonFsVideoReader, request: FluxonFsVideoReadRequest,
              indices: Sequence[int]) -> AudioSamples:
    """The audio a request asked for: its span, or the span its frames cover."""
    assert request.audio is not None
    if request.audio_span_s is not None:
        start_s, end_s = request.audio_span_s
    elif indices:
        times = reader.timestamps_s()
        chosen = np.asarray(indices, np.int64) % len(times)  # negatives from the end
        start_s, end_s = covered_span(
            times[chosen], frame_durations(times, reader.metadata.end_stream_seconds)[chosen])
    else:
        start_s = end_s = 0.0
    return reader.read_audio(start_s, end_s, request.audio)


def _split_requests(reader: FluxonFsVideoReader, positions: list[int],
                    requests: Sequence[FluxonFsVideoReadRequest]) -> list[list[int]] | None:
    """A group's positions in two halves by the planning rule, each request's
    frames one item, or None. Times are mapped by the idle ``reader`` for
    planning only (the reader that reads them maps them again)."""
    starts, ends, empty = [], [], []
    for position in positions:
        try:
            spans = reader.decode_spans(_frames_of(reader, requests[position]))
        except FluxonFsError:  # a time that names no frame: the read raises it
            return None
        if spans is None:
            if requests[position].indices or requests[position].times_s:
                return None  # the reader cannot plan, or an index is out of range
            empty.append(position)  # no frames: no work, either half
            continue
        starts.append(int(spans[0].min()))
        ends.append(int(spans[1].max()))
    planned = [p for p in positions if p not in empty]
    halves = split_in_two(np.asarray(starts), np.asarray(ends))
    if halves is None:
        return None
    first, second = ([planned[k] for k in half] for half in halves)
    return [sorted(first + empty), sorted(second)]


def _name_requests(exc: FluxonFsError, positions: list[int]) -> BaseException:
    """The same error, saying which requests it belongs to."""
    label = f"requests[{positions[0]}]" if len(positions) == 1 else f"requests{positions}"
    try:
        return type(exc)(f"{label}: {exc}")
    except TypeError:
        return exc
