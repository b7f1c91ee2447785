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
from dataclasses import dataclass
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
from fluxon_video.opened import OpenedVideo, PlainSource
from fluxon_video.reader import FluxonFsVideoReader
from fluxon_video.resize import check_interpolation, check_resize
from fluxon_video.sources import BytesRangeSource, FileObjectRangeSource, LocalFileRangeSource
from fluxon_video.stats import FluxonFsProcessStats, FluxonFsVideoReadStats, StatsAccumulator
from fluxon_video.validation import (Threads, check_output_size, positive_int, stream_choice,
                                     thread_count)


def open_fluxonfs_video(client: FluxonFsClient, ref: FileRef, stream_index: int | None, *,
                        for_reader: bool) -> OpenedVideo:
    """Open ``ref`` and get its frame index. ``for_reader``: the byte source the
    scan reads stays open for the reader (else the scan's is closed after it)."""
    export = client.config.export(ref.export)
    counters = ReadCounters()
    opened = client.files.open(ref, blob_kind(stream_index), counters)
    file = opened.file
    video = OpenedVideo(FluxonFsRangeSource(client, file, counters), stream_index, None,
                        "none", 0.0, opened.round_trips, export.piece_size, client.config.client,
                        export=file.export, relpath=file.relpath, identity=file.identity,
                        version=file.version)
    scanned: list[Any] = []  # the byte source the scan read, if one was made

    def scan_source() -> Any:
        scanned.append(video.make_byte_source())
        return scanned[-1]

    if for_reader:
        video.byte_source = scan_source()
    why: list[Exception] = []
    try:
        video.index, video.index_source, video.index_ms = load_or_build_index(
            video.byte_source if for_reader else scan_source, video.source.name, stream_index,
            stored=opened.blob, blobs=video.source, why_none=why)
    except BaseException:
        if video.byte_source is not None:
            video.byte_source.close()
        raise
    video.round_trips = open_round_trips(opened.round_trips, video.index_source,
                                         scanned[0] if scanned else None)
    video.no_index(why)
    return video


def open_source(source: Any, stream_index: int | None, settings: ClientSettings,
                page_size: int = defaults.PAGE_SIZE) -> OpenedVideo:
    """Open a video that is not in FluxonFS: a path, bytes, a file object or a
    range source (fluxon_video/sources.py), with its frame index from a scan."""
    plain = PlainSource(*as_range_source(source))
    version = FileStat(plain.size, int(getattr(plain.inner, "mtime_ns", 0)))
    video = OpenedVideo(plain, stream_index, None, "none", 0.0, 0, page_size, settings,
                        relpath=plain.name, version=version)
    try:
        video.byte_source = video.make_byte_source()
        why: list[Exception] = []
        video.index, video.index_source, video.index_ms = load_or_build_index(
            video.byte_source, plain.name, stream_index, why_none=why, blobs=plain,
            stored=plain.load_blob(blob_kind(stream_index)), stored_from="process")
        video.no_index(why)
    except BaseException:
        if video.byte_source is not None:
            video.byte_source.close()
        video.close()
        raise
    return video


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


@dataclass(frozen=True)
class ReaderOptions:
    """What a reader is asked for, checked: output size, threads, policies."""

    height: int | None
    width: int | None
    num_threads: int
    autorotate: bool
    on_damage: str
    resize: str
    interpolation: str

    @classmethod
    def check(cls, height: int | None, width: int | None, num_threads: Threads, autorotate: bool,
              on_damage: str, resize: str, interpolation: str) -> ReaderOptions:
        require_native()
        if height is not None and width is not None:
            check_output_size(height, width)
        return cls(None if height is None else positive_int("height", height),
                   None if width is None else positive_int("width", width),
                   thread_count(num_threads), bool(autorotate),
                   check_policy(on_damage), check_resize(resize),
                   check_interpolation(interpolation))

    def make_reader(self, video: OpenedVideo, t0: float,
                    on_read: Any = None) -> FluxonFsVideoReader:
        """The reader of an opened video; if it cannot be made, what the open
        holds is released (the reader releases it too if it got that far:
        both are safe twice)."""
        try:
            return FluxonFsVideoReader(video, self.height, self.width, self.num_threads,
                                       open_ms=(time.perf_counter() - t0) * 1e3,
                                       autorotate=self.autorotate, on_read=on_read,
                                       on_damage=self.on_damage, resize=self.resize,
                                       interpolation=self.interpolation)
        except BaseException:
            video.byte_source.close()
            video.close()
            raise


def open_video(source: Any, height: int | None = None, width: int | None = None,
               num_threads: Threads = 1, *, autorotate: bool = False, on_damage: str = "error",
               stream_index: int | None = None, resize: str = "stretch",
               interpolation: str = "bilinear",
               settings: ClientSettings | None = None) -> FluxonFsVideoReader:
    """A reader of a video outside FluxonFS: a local path, bytes, a seekable
    binary file object, or a range source. The same reader, methods,
    metadata, errors and frames as ``FluxonFsPatcher.open_video_reader``;
    ``settings`` sizes its page cache and fetch workers (ClientSettings)."""
    t0 = time.perf_counter()
    path = source if isinstance(source, (str, os.PathLike)) else None
    with located(path=path):
        options = ReaderOptions.check(height, width, num_threads, autorotate, on_damage, resize,
                                      interpolation)
        video = open_source(source, stream_choice(stream_index), settings or ClientSettings())
        return options.make_reader(video, t0)


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

    def open_reader(self, export_name: str | None, relpath: str, height: int | None,
                    width: int | None, num_threads: Threads = 1, *,
                    identity: RequestIdentity | str | None = None, autorotate: bool = False,
                    on_damage: str = "error", stream_index: int | None = None,
                    resize: str = "stretch",
                    interpolation: str = "bilinear") -> FluxonFsVideoReader:
        """A reader (see FluxonFsPatcher.open_video_reader for the arguments)."""
        t0 = time.perf_counter()
        with located(export_name, relpath):
            options = ReaderOptions.check(height, width, num_threads, autorotate, on_damage,
                                          resize, interpolation)
            ref = self.ref(export_name, relpath, identity)
            with located(ref.export, ref.relpath):
                video = open_fluxonfs_video(self.client, ref, stream_choice(stream_index),
                                            for_reader=True)
                return options.make_reader(video, t0, self.stats.add_read)

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
        stats = FluxonFsVideoReadStats(index_source=video.index_source, index_ms=video.index_ms,
                                       total_ms=(time.perf_counter() - t0) * 1e3,
                                       open_round_trips=video.round_trips,
                                       **video.source.counters.snapshot())
        self.stats.add_read(stats, metadata=True)
        return index, metadata, stats

    def process_stats(self) -> FluxonFsProcessStats:
        return self.stats.snapshot()
