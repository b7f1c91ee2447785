"""Opening a video through FluxonFS: the one path that readers, metadata calls,
the pool, the dataset and the CLI take.

    FileMetadata.open   the authorised stat, and the frame index blob with it
      -> load_or_build_index   the blob parsed, or a demux-only scan (stored back)
      -> OpenedVideo           the version's range source, its index, what it cost

The blob flows one way: fetched with the stat, handed down, parsed or
replaced by a scan, and stored; nothing asks for it again.
"""

from __future__ import annotations

import os
import time
from typing import Any

from fluxon_video import defaults
from fluxon_video.damage import check_policy
from fluxon_video.errors import (FluxonFsBadRequestError, FluxonFsDecodeError,
                                 FluxonFsNoVideoStreamError, FluxonFsSourceTypeError, located)
from fluxon_video.frame_index import FrameIndex, blob_kind
from fluxon_video.fs.client import FluxonFsClient
from fluxon_video.fs.config import ClientSettings, RequestIdentity
from fluxon_video.fs.counters import ReadCounters
from fluxon_video.fs.file_ref import FileRef
from fluxon_video.fs.origin import FileStat
from fluxon_video.fs.paths import check_relpath
from fluxon_video.fs.range_source import FluxonFsRangeSource
from fluxon_video.fs.uris import is_uri, resolve_uri
from fluxon_video.identity import IdentityContext
from fluxon_video.indexing import load_or_build_index, open_round_trips
from fluxon_video.metadata import FluxonFsVideoMetadata, build_metadata
from fluxon_video.native import require_native
from fluxon_video.opened import OpenedVideo, PlainSource, VideoSource, make_byte_source
from fluxon_video.options import ReadOptions, options_from
from fluxon_video.reader import FluxonFsVideoReader
from fluxon_video.sources import BytesRangeSource, FileObjectRangeSource, LocalFileRangeSource
from fluxon_video.stats import FluxonFsProcessStats, FluxonFsVideoReadStats, StatsAccumulator
from fluxon_video.validation import Threads, stream_choice


def open_fluxonfs_video(client: FluxonFsClient, ref: FileRef, stream_index: int | None, *,
                        for_reader: bool) -> OpenedVideo:
    """Open ``ref`` and get its frame index. ``for_reader``: the byte source the
    scan reads stays open for the reader (else the scan's is closed after it)."""
    export = client.config.export(ref.export)
    counters = ReadCounters()
    opened = client.files.open(ref, blob_kind(stream_index), counters)
    file = opened.file
    if opened.head is not None:
        client.pieces.backfill_head(file, opened.head, counters)
    return indexed_video(FluxonFsRangeSource(client, file, counters), stream_index,
                         export.piece_size, client.config.client, keep_open=for_reader,
                         stored=opened.blob, stored_from="kv", stat_round_trips=opened.round_trips,
                         head=opened.head, export=file.export, relpath=file.relpath,
                         identity=file.identity, version=file.version)


def open_source(source: Any, stream_index: int | None, settings: ClientSettings,
                page_size: int = defaults.PAGE_SIZE, *,
                index: FrameIndex | str = "load") -> OpenedVideo:
    """Open a video that is not in FluxonFS: a path, bytes, a file object or a
    range source (fluxon_video/sources.py), with its frame index from this
    process's index cache or a scan (``index="load"``); ``index``: a
    FrameIndex of this very file instead, or ``"none"`` (no index: the
    sequential reference path)."""
    plain = PlainSource(*as_range_source(source))
    try:
        return indexed_video(plain, stream_index, page_size, settings, keep_open=True,
                             stored=plain.load_blob(blob_kind(stream_index))
                             if index == "load" else None,
                             stored_from="process", stat_round_trips=None, relpath=plain.name,
                             version=FileStat(plain.size,
                                              int(getattr(plain.inner, "mtime_ns", 0))),
                             index=index)
    except BaseException:
        plain.close()
        raise


def indexed_video(source: VideoSource, stream_index: int | None, page_size: int,
                  settings: ClientSettings, *, keep_open: bool, stored: bytes | None,
                  stored_from: str, stat_round_trips: int | None,
                  index: FrameIndex | str = "load", head: bytes | None = None,
                  **where: Any) -> OpenedVideo:
    """The one open path: ``source``'s frame index (``stored``, else a scan),
    and the OpenedVideo built complete from it. ``keep_open``: the byte source
    the scan read stays open for the reader; ``stat_round_trips``: what the
    stat and index fetch waited for (None: a source with no network, whose
    opens count no round trips); ``index``: ``"load"`` (``stored``, else a
    scan), ``"none"`` (no index) or a FrameIndex given (neither); ``head``:
    the file's first bytes, already fetched (with a cold open's stat): the byte
    sources serve them without a fetch; ``where``: which file (OpenedVideo's
    fields)."""
    scanned: list[Any] = []  # the byte source the scan read, if one was made

    def scan_source() -> Any:
        scanned.append(make_byte_source(source, page_size, settings))
        if head:
            scanned[-1].set_extents([(0, head)])
        return scanned[-1]

    kept = scan_source() if keep_open else None
    why: list[Exception] = []
    try:
        loaded: FrameIndex | None
        if isinstance(index, FrameIndex):
            loaded, index_source, index_ms = index, "given", 0.0
        elif index == "none":
            loaded, index_source, index_ms = None, "none", 0.0
        else:
            loaded, index_source, index_ms = load_or_build_index(
                kept if kept is not None else scan_source, source.name, stream_index,
                stored=stored, stored_from=stored_from, blobs=source, why_none=why,
                head=head)
    except BaseException:
        if kept is not None:
            kept.close()
        raise
    round_trips = 0 if stat_round_trips is None else open_round_trips(
        stat_round_trips, index_source, scanned[0] if scanned else None)
    return OpenedVideo(source, stream_index, loaded, index_source, index_ms, round_trips,
                       page_size, settings, byte_source=kept,
                       why_no_index=str(why[0]) if why else "",
                       audio_only=bool(why) and isinstance(why[0], FluxonFsNoVideoStreamError),
                       **where)


def as_range_source(source: Any) -> tuple[Any, bool]:
    """(a range source for source, whether it was opened here and is ours to close)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return BytesRangeSource(bytes(source)), True
    if isinstance(source, (str, os.PathLike)):
        return LocalFileRangeSource(source), True
    if callable(getattr(source, "read_range", None)) and hasattr(source, "size"):
        return source, False
    if hasattr(source, "read") and hasattr(source, "seek"):
        return FileObjectRangeSource(source), False
    raise FluxonFsSourceTypeError(
        "a video source is a path, bytes, a seekable binary file object or a range source "
        f"(read_range and size), got {type(source).__name__}")


def make_reader(options: ReadOptions, video: OpenedVideo, t0: float,
                on_read: Any = None) -> FluxonFsVideoReader:
    """The reader of an opened video; if it cannot be made, what the open
    holds is released (the reader releases it too if it got that far: both
    are safe twice)."""
    try:
        return FluxonFsVideoReader(video, options, open_ms=(time.perf_counter() - t0) * 1e3,
                                   on_read=on_read)
    except BaseException:
        video.byte_source.close()
        video.close()
        raise


def open_video(source: Any, height: int | None = None, width: int | None = None,
               num_threads: Threads = 1, *, autorotate: bool = False, on_damage: str = "error",
               stream_index: int | None = None, resize: str = "stretch",
               interpolation: str = "bilinear", options: ReadOptions | None = None,
               settings: ClientSettings | None = None) -> FluxonFsVideoReader:
    """A reader of a video outside FluxonFS: a local path, bytes, a seekable
    binary file object, or a range source. The same reader, methods,
    metadata, errors and frames as ``FluxonFsPatcher.open_video_reader``;
    ``options`` (a ReadOptions) instead of the separate arguments;
    ``settings`` sizes its page cache and fetch workers (ClientSettings)."""
    t0 = time.perf_counter()
    path = source if isinstance(source, (str, os.PathLike)) else None
    with located(path=path):
        require_native()
        options = options_from(options, "open_video", height=height, width=width,
                               num_threads=num_threads, autorotate=autorotate,
                               on_damage=on_damage, stream_index=stream_index, resize=resize,
                               interpolation=interpolation)
        video = open_source(source, options.stream_index, settings or ClientSettings())
        return make_reader(options, video, t0)


class VideoOpener:
    """Opens readers and reads metadata for one client and identity context:
    what the patcher serves its calls with, and the pool's reader factory."""

    def __init__(self, client: FluxonFsClient, identities: IdentityContext,
                 stats: StatsAccumulator) -> None:
        self.client = client
        self.config = client.config
        self.identities = identities
        self.stats = stats

    # ---- pickling: configuration and identity only; the receiver builds its own client ----

    def __getstate__(self) -> dict[str, object]:
        if self.client.piece_store is not None:
            raise TypeError("a FluxonFsPatcher built with kv_store= does not pickle (the store "
                            "belongs to this process); configure client.redis_url instead")
        return {"config": self.config, "identity": self.identities.default}

    def __setstate__(self, state: dict[str, Any]) -> None:
        identities = IdentityContext(state["config"], state["identity"])
        self.__init__(FluxonFsClient(state["config"]), identities,  # type: ignore[misc]
                      StatsAccumulator())

    def resolve(self, export_name: str | None, relpath: str,
                identity: RequestIdentity | str | None = None) -> tuple[str, str]:
        """(export, relpath) of what a call names: ``export_name`` and a relpath as
        given, or a URI (or absolute path) as the relpath mapped by the configured
        roots (fs/uris.py): under ``export_name``'s root when it is given, else
        under the root that holds it (ties settled by the identity's access)."""
        if is_uri(relpath):
            who = identity if identity is not None else self.identities.current
            name = who.name if isinstance(who, RequestIdentity) else who
            return resolve_uri(self.config, relpath, export_name, name)
        if export_name is None:
            raise FluxonFsBadRequestError(
                f"no export named for relpath {relpath!r}: with export_name=None the "
                "relpath must be a URI (s3://bucket/key, /abs/path) under a configured root")
        return export_name, relpath

    def ref(self, export_name: str | None, relpath: str,
            identity: RequestIdentity | str | None) -> FileRef:
        export_name, relpath = self.resolve(export_name, relpath, identity)
        self.config.export(export_name)
        return FileRef(export_name, check_relpath(relpath), self.identities.resolve(identity))

    def open_reader(self, export_name: str | None, relpath: str, options: ReadOptions, *,
                    identity: RequestIdentity | str | None = None) -> FluxonFsVideoReader:
        """A reader (see FluxonFsPatcher.open_video_reader for the arguments)."""
        t0 = time.perf_counter()
        with located(export_name, relpath):
            require_native()
            ref = self.ref(export_name, relpath, identity)
            with located(ref.export, ref.relpath):
                video = open_fluxonfs_video(self.client, ref, options.stream_index,
                                            for_reader=True)
                return make_reader(options, video, t0, self.stats.add_read)

    def video_index(self, export_name: str | None, relpath: str,
                    identity: RequestIdentity | str | None, on_damage: str = "error",
                    stream_index: int | None = None,
                    ) -> tuple[FrameIndex, FluxonFsVideoMetadata, FluxonFsVideoReadStats]:
        """The frame index and metadata without a decoder, and what they cost."""
        t0 = time.perf_counter()
        with located(export_name, relpath):
            ref = self.ref(export_name, relpath, identity)
        with located(ref.export, ref.relpath):
            return self._video_index(ref, t0, on_damage, stream_index)

    def _video_index(self, ref: Any, t0: float, on_damage: str, stream_index: int | None,
                     ) -> tuple[FrameIndex, FluxonFsVideoMetadata, FluxonFsVideoReadStats]:
        video = open_fluxonfs_video(self.client, ref, stream_choice(stream_index),
                                    for_reader=False)
        index = video.index
        if index is None:
            if video.audio_only:
                raise FluxonFsNoVideoStreamError(video.why_no_index)
            raise FluxonFsDecodeError(video.why_no_index or f"{ref.name}: not a video FFmpeg "
                                      "can index")
        if check_policy(on_damage) == "conceal" and index.decoded_pts is None:
            video.survey()
        version = video.version
        metadata = build_metadata(index, version.size, version.mtime_ns, ref.name, on_damage)
        fetched: dict[str, Any] = video.source.counters.snapshot()
        stats = FluxonFsVideoReadStats(index_source=video.index_source, index_ms=video.index_ms,
                                       total_ms=(time.perf_counter() - t0) * 1e3,
                                       open_round_trips=video.round_trips, **fetched)
        self.stats.add_read(stats, metadata=True)
        return index, metadata, stats

    def process_stats(self) -> FluxonFsProcessStats:
        return self.stats.snapshot()
