"""FluxonFsPatcher: the entry point. Holds the exports, the client and the identity."""

from __future__ import annotations

import contextlib
import contextvars
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from fluxon_video.damage import check_policy
from fluxon_video.errors import FluxonFsClosedError, FluxonFsConfigError, FluxonFsDecodeError
from fluxon_video.fs.client import FluxonFsClient, FluxonFsRangeSource, ReadCounters
from fluxon_video.fs.config import (
    ClientSettings,
    FluxonFsConfig,
    FluxonFsExport,
    RequestIdentity,
    load_config,
)
from fluxon_video.fs.kv import PieceStore
from fluxon_video.fs.listing import FluxonFsFileEntry
from fluxon_video.fs.paths import check_relpath
from fluxon_video.indexing import load_or_build_index, open_round_trips
from fluxon_video.frame_index import FrameIndex, blob_kind
from fluxon_video.metadata import FluxonFsVideoMetadata, build_metadata, timestamps_s
from fluxon_video.native import require_native
from fluxon_video.pool import FluxonFsVideoReaderPool
from fluxon_video.reader import FluxonFsVideoReader, make_byte_source, survey_file
from fluxon_video.stats import FluxonFsProcessStats, FluxonFsVideoReadStats, StatsAccumulator
from fluxon_video.validation import positive_int, stream_choice


class FluxonFsPatcher:
    """Exports, the FluxonFS client and the current request identity of this process.

    The identity is settable (``patcher.identity = ...``) and can be swapped
    temporarily with ``with patcher.using_identity(...)`` (per thread/task), or
    given per call (``open_video_reader(..., identity=...)``). Readers capture
    the identity current when they are opened.

    The client is fork-safe: after ``fork`` the child builds its own
    connections and backfill threads on first use; the parent's are never
    touched.
    """

    def __init__(self, config: FluxonFsConfig | None = None, *,
                 exports: Iterable[FluxonFsExport] | None = None,
                 identities: Mapping[str, str] | None = None,
                 client: ClientSettings | None = None,
                 identity: RequestIdentity | str | None = None,
                 kv_store: PieceStore | None = None) -> None:
        if config is None:
            config = FluxonFsConfig.build(exports or [], identities, client)
        elif exports is not None or identities is not None or client is not None:
            raise FluxonFsConfigError("pass either config or exports/identities/client, not both")
        # Exports served by this process get the agent's start-up checks.
        config.check_served(e for e in config.exports.values() if e.in_process)
        self.config = config
        self._kv_store = kv_store
        self._client = FluxonFsClient(config, kv_store)
        self._stats = StatsAccumulator()
        self._closed = False
        self._identity: RequestIdentity | None = None
        self._temporary_identity: contextvars.ContextVar[RequestIdentity | None] = \
            contextvars.ContextVar(f"fluxon_identity_{id(self)}", default=None)
        if identity is not None:
            self.identity = identity  # type: ignore[assignment]

    # ---- pickling: configuration only; the receiver builds its own client ----

    def __getstate__(self) -> dict[str, object]:
        if self._kv_store is not None:
            raise TypeError("a FluxonFsPatcher built with kv_store= does not pickle (the store "
                            "belongs to this process); configure client.redis_url instead")
        return {"config": self.config, "identity": self._identity}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(state["config"], identity=state["identity"])  # type: ignore[misc, arg-type]

    @classmethod
    def from_config_file(cls, path: str | os.PathLike[str],
                         identity: RequestIdentity | str | None = None) -> FluxonFsPatcher:
        return cls(load_config(path), identity=identity)

    # ---- identity ----

    def _as_identity(self, identity: RequestIdentity | str) -> RequestIdentity:
        if isinstance(identity, RequestIdentity):
            return identity
        if isinstance(identity, str):
            return self.config.identity(identity)
        raise FluxonFsConfigError(f"an identity is a RequestIdentity or a configured name, got {identity!r}")

    @property
    def identity(self) -> RequestIdentity | None:
        """The request identity new readers capture."""
        return self._temporary_identity.get() or self._identity

    @identity.setter
    def identity(self, identity: RequestIdentity | str) -> None:
        self._identity = self._as_identity(identity)

    @contextlib.contextmanager
    def using_identity(self, identity: RequestIdentity | str) -> Iterator[RequestIdentity]:
        """Make identity current in this thread/task for the ``with`` block."""
        token = self._temporary_identity.set(self._as_identity(identity))
        try:
            yield self._temporary_identity.get()  # type: ignore[misc]
        finally:
            self._temporary_identity.reset(token)

    # ---- the client ----

    @property
    def client(self) -> FluxonFsClient:
        if self._closed:
            raise FluxonFsClosedError("the FluxonFsPatcher is closed")
        return self._client

    # ---- readers ----

    def open_video_reader(self, export_name: str, relpath: str, height: int | None = None,
                          width: int | None = None, num_threads: int = 1, *,
                          identity: RequestIdentity | str | None = None,
                          autorotate: bool = False, on_damage: str = "error",
                          stream_index: int | None = None) -> FluxonFsVideoReader:
        """Open a reader on ``export_name:relpath`` producing ``height`` x ``width`` RGB frames.

        ``height=None, width=None``: the native size; one of them None keeps
        the display aspect ratio (see :func:`fluxon_video.metadata.output_size`).
        ``autorotate=True`` turns frames upright as the ffmpeg CLI does (the
        default is the coded orientation; ``metadata.rotation_deg`` says which).
        ``on_damage``: what a read of frames that depend on damaged data does:
        ``"error"`` raises FluxonFsDamagedStreamError; ``"conceal"`` numbers
        and returns the frames a one-threaded decode from the start outputs
        (the first open of a file version decodes it once to find them).
        ``stream_index``: the container stream to read; None picks the video
        stream FFmpeg's ``av_find_best_stream`` picks (what torchcodec and
        decord read), skipping cover art; ``metadata.stream_index`` says
        which. The reader reads as ``identity`` (default: the patcher's current one)
        for its whole life.
        """
        t0 = time.perf_counter()
        require_native()
        height = None if height is None else positive_int("height", height)
        width = None if width is None else positive_int("width", width)
        num_threads = positive_int("num_threads", num_threads)
        export = self.config.export(export_name)
        relpath = check_relpath(relpath)
        who = self._who(identity)
        stream_index = stream_choice(stream_index)
        kind = blob_kind(stream_index)
        counters = ReadCounters()
        opened = self.client.open_file(who, export_name, relpath, kind, counters)
        return FluxonFsVideoReader(self.client, self.config.client, who, export, relpath,
                                   opened.version, height, width, num_threads,
                                   opened=(kind, opened), counters=counters,
                                   open_ms=(time.perf_counter() - t0) * 1e3,
                                   autorotate=bool(autorotate), on_read=self._stats.add_read,
                                   on_damage=check_policy(on_damage), stream_index=stream_index)

    def list_files(self, export_name: str, prefix: str = "", recursive: bool = True,
                   pattern: str | None = None, *,
                   identity: RequestIdentity | str | None = None) -> Iterator[FluxonFsFileEntry]:
        """The export's files (relpath, size, mtime_ns) under ``prefix``, in a fixed
        order, fetched a page at a time. ``pattern`` is an fnmatch pattern on the
        relpath (``*`` crosses ``/``); ``recursive=False`` lists one level,
        directories included (``is_dir``)."""
        return self.client.list_files(self._who(identity), export_name, prefix, recursive,
                                      pattern)

    def video_metadata(self, export_name: str, relpath: str, *,
                       identity: RequestIdentity | str | None = None,
                       on_damage: str = "error",
                       stream_index: int | None = None) -> FluxonFsVideoMetadata:
        """The video's metadata without opening a decoder.

        With the frame index already in the KV (another process or node built
        it) this is one authorised stat and one KV read; otherwise the index
        is built by a demux-only scan and stored for everyone else.
        ``on_damage="conceal"`` describes the frames such a reader numbers
        (surveying the file first if no reader has). ``stream_index`` as for
        ``open_video_reader``.
        """
        return self.video_metadata_with_stats(export_name, relpath, identity=identity,
                                              on_damage=on_damage, stream_index=stream_index)[0]

    def video_metadata_with_stats(
            self, export_name: str, relpath: str, *,
            identity: RequestIdentity | str | None = None, on_damage: str = "error",
            stream_index: int | None = None,
    ) -> tuple[FluxonFsVideoMetadata, FluxonFsVideoReadStats]:
        """``video_metadata`` and what it cost (index_source "kv" or "scan", KV and remote reads)."""
        _, metadata, stats = self._video_index(export_name, relpath, identity, on_damage,
                                               stream_index)
        return metadata, stats

    def video_timestamps_s(self, export_name: str, relpath: str, *,
                           identity: RequestIdentity | str | None = None,
                           on_damage: str = "error",
                           stream_index: int | None = None) -> np.ndarray:
        """Presentation time of every frame (float64 seconds, frame order), like
        ``reader.timestamps_s()``, without opening a decoder."""
        index, _, _ = self._video_index(export_name, relpath, identity, on_damage, stream_index)
        return timestamps_s(index, on_damage)

    def video_metadata_and_timestamps_s(
            self, export_name: str, relpath: str, *,
            identity: RequestIdentity | str | None = None, on_damage: str = "error",
            stream_index: int | None = None,
    ) -> tuple[FluxonFsVideoMetadata, np.ndarray]:
        """Both, from one load of the frame index (one KV read when it is warm)."""
        index, metadata, _ = self._video_index(export_name, relpath, identity, on_damage,
                                               stream_index)
        return metadata, timestamps_s(index, on_damage)

    def _video_index(self, export_name: str, relpath: str,
                     identity: RequestIdentity | str | None, on_damage: str = "error",
                     stream_index: int | None = None,
                     ) -> tuple[FrameIndex, FluxonFsVideoMetadata, FluxonFsVideoReadStats]:
        t0 = time.perf_counter()
        export = self.config.export(export_name)
        relpath = check_relpath(relpath)
        who = self._who(identity)
        stream_index = stream_choice(stream_index)
        kind = blob_kind(stream_index)
        counters = ReadCounters()
        opened = self.client.open_file(who, export_name, relpath, kind, counters)
        version = opened.version
        source = FluxonFsRangeSource(self.client, who, export_name, relpath, version,
                                     preloaded=(kind, opened.blob), counters=counters)
        scanned: list[Any] = []  # the scan's byte source, if one was made

        def scan_source() -> Any:
            scanned.append(make_byte_source(source, export.piece_size, self.config.client))
            return scanned[-1]

        index, where, index_ms = load_or_build_index(scan_source, source.name, source,
                                                     stream_index)
        if index is None:
            raise FluxonFsDecodeError(f"{source.name}: not a video FFmpeg can index")
        if check_policy(on_damage) == "conceal" and index.decoded_pts is None:
            survey_file(source, index, export.piece_size, self.config.client, kind)
        metadata = build_metadata(index, version.size, version.mtime_ns, source.name, on_damage)
        trips = open_round_trips(opened.round_trips, where, scanned[0] if scanned else None)
        stats = FluxonFsVideoReadStats(index_source=where, index_ms=index_ms,
                                       total_ms=(time.perf_counter() - t0) * 1e3,
                                       open_round_trips=trips, **source.counters.snapshot())
        self._stats.add_read(stats, metadata=True)
        return index, metadata, stats

    def stats(self) -> FluxonFsProcessStats:
        """What this patcher's readers and metadata calls did in this process, so far."""
        return self._stats.snapshot()

    def _who(self, identity: RequestIdentity | str | None) -> RequestIdentity:
        who = self._as_identity(identity) if identity is not None else self.identity
        if who is None:
            raise FluxonFsConfigError(
                "no request identity is set: pass identity= to FluxonFsPatcher or set patcher.identity")
        return who

    def open_video_reader_pool(self, max_readers: int = 32, autorotate: bool = False,
                               on_damage: str = "error") -> FluxonFsVideoReaderPool:
        """A per-process LRU of readers: the entry point for data loaders.
        ``autorotate`` and ``on_damage`` apply to every reader it opens."""
        return FluxonFsVideoReaderPool(self, max_readers, autorotate=autorotate,
                                       on_damage=on_damage)

    def close(self) -> None:
        """Stop the client (backfill threads, connections). Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._client.close()

    def __enter__(self) -> FluxonFsPatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
