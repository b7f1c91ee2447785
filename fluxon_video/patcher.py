"""FluxonFsPatcher: the entry point. Holds the exports, the client and the identity."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterable, Iterator, Mapping

from typing import Any, TypeVar, cast

import numpy as np

from fluxon_video.errors import (FluxonFsBadRequestError, FluxonFsClosedError, FluxonFsConfigError,
                                 located)
from fluxon_video.frame_index import FrameIndex
from fluxon_video.fs.client import FluxonFsClient
from fluxon_video.fs.config import (
    ClientSettings,
    FluxonFsConfig,
    FluxonFsExport,
    RequestIdentity,
    load_config,
)
from fluxon_video.fs.counters import ReadCounters
from fluxon_video.fs.file_ref import VersionedFile
from fluxon_video.fs.kv import PieceStore
from fluxon_video.fs.listing import FluxonFsFileEntry
from fluxon_video.fs.origin import FileStat
from fluxon_video.fs.range_source import FluxonFsRangeSource
from fluxon_video.fs.uris import is_uri
from fluxon_video.fs.warming import WarmResult
from fluxon_video.identity import IdentityContext
from fluxon_video.metadata import FluxonFsVideoMetadata, timestamps_s
from fluxon_video.opening import VideoOpener
from fluxon_video.options import ReadOptions, options_from
from fluxon_video.pool import FluxonFsVideoReaderPool
from fluxon_video.reader import FluxonFsVideoReader
from fluxon_video.stats import FluxonFsProcessStats, FluxonFsVideoReadStats, StatsAccumulator
from fluxon_video.validation import Threads


Method = TypeVar("Method", bound=Callable[..., Any])


def _about_a_file(method: Method) -> Method:
    """A patcher call about ``(export_name, relpath)``: its FluxonFsErrors carry
    them as fields (errors.located), as a reader's do."""

    @functools.wraps(method)
    def call(self: FluxonFsPatcher, export_name: str | None, relpath: str, *args: Any,
             **kwargs: Any) -> Any:
        with located(export_name, relpath):
            return method(self, export_name, relpath, *args, **kwargs)

    return cast(Method, call)


def _located_entries(entries: Iterator[FluxonFsFileEntry],
                     export_name: str) -> Iterator[FluxonFsFileEntry]:
    """A listing whose errors, raised as its pages are fetched, name the export."""
    with located(export_name):
        yield from entries

class FluxonFsPatcher:
    """Exports, the FluxonFS client and the current request identity of this process.

    The identity is settable (``patcher.identity = ...``) and can be swapped
    temporarily with ``with patcher.using_identity(...)`` (per thread/task), or
    given per call (``open_video_reader(..., identity=...)``). Readers capture
    the identity current when they are opened.

    The client is fork-safe: after ``fork`` the child builds its own
    connections and backfill threads on first use; the parent's are never
    touched.

    Every call that takes ``(export_name, relpath)`` also takes a URI as the
    relpath (``s3://bucket/prefix/a.mp4``, ``/data/videos/a.mp4``, what
    manifests hold): with ``export_name=None`` it names the file of the
    export whose root holds it, with an export name it must lie under that
    export's root. ``resolve(uri)`` gives the pair (rules: fs/uris.py).
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
        # Exports served by this process get the agent's start-up checks, but for
        # token strength: no network boundary here (FluxonFsConfig.check_served).
        config.check_served((e for e in config.exports.values() if e.in_process),
                            over_network=False)
        self.config = config
        self._client = FluxonFsClient(config, kv_store)
        self._closed = False
        self._identities = IdentityContext(config, identity)
        self._opener = VideoOpener(self._client, self._identities, StatsAccumulator())

    # ---- pickling: configuration only; the receiver builds its own client ----

    def __getstate__(self) -> dict[str, object]:
        # The opener carries the configuration and identity; a pool pickled
        # with this patcher shares it on the other side, as it does here.
        return {"opener": self._opener}

    def __setstate__(self, state: dict[str, object]) -> None:
        opener: VideoOpener = state["opener"]  # type: ignore[assignment]
        opener.config.check_served((e for e in opener.config.exports.values() if e.in_process),
                                   over_network=False)
        self.config, self._closed = opener.config, False
        self._client, self._identities, self._opener = opener.client, opener.identities, opener

    @classmethod
    def from_config_file(cls, path: str | os.PathLike[str],
                         identity: RequestIdentity | str | None = None) -> FluxonFsPatcher:
        return cls(load_config(path), identity=identity)

    # ---- identity ----

    @property
    def identity(self) -> RequestIdentity | None:
        """The request identity new readers capture."""
        return self._identities.current

    @identity.setter
    def identity(self, identity: RequestIdentity | str) -> None:
        self._identities.default = identity

    @contextlib.contextmanager
    def using_identity(self, identity: RequestIdentity | str) -> Iterator[RequestIdentity]:
        """Make identity current in this thread/task for the ``with`` block."""
        with self._identities.using(identity) as current:
            yield current

    # ---- the client ----

    @property
    def client(self) -> FluxonFsClient:
        if self._closed:
            raise FluxonFsClosedError("the FluxonFsPatcher is closed")
        return self._client

    # ---- URIs ----

    def resolve(self, uri: str, export_name: str | None = None, *,
                identity: RequestIdentity | str | None = None) -> tuple[str, str]:
        """(export name, relpath) of ``uri`` (``s3://bucket/prefix/a.mp4``, an
        absolute path, ``file:///...``): the export whose root is the longest
        one it starts with (or ``export_name``'s, which it must start with),
        and the rest of it. Several exports with that root: the one the
        identity (default: the current one) is allowed, if only one is.
        FluxonFsBadRequestError, naming the exports whose roots come closest,
        when no root holds it. The rules: fs/uris.py."""
        if not is_uri(uri):
            raise FluxonFsBadRequestError(
                f"{uri!r} is not a URI (scheme://...) or an absolute path")
        return self._live().resolve(export_name, uri, identity)

    # ---- readers ----

    def open_video_reader(self, export_name: str | None, relpath: str, height: int | None = None,
                          width: int | None = None, num_threads: Threads = 1, *,
                          identity: RequestIdentity | str | None = None,
                          autorotate: bool = False, on_damage: str = "error",
                          stream_index: int | None = None, resize: str = "stretch",
                          interpolation: str = "bilinear",
                          options: ReadOptions | None = None) -> FluxonFsVideoReader:
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
        for its whole life. ``relpath`` may be a URI (see ``resolve``), with
        ``export_name=None`` or the name of the export whose root holds it.
        ``resize``: how a frame fills ``height`` x ``width``: ``"stretch"``
        scales it to exactly that; ``"shorter_side_crop"`` scales it keeping
        its aspect ratio to cover that size, then crops the centre;
        ``"letterbox"`` scales it to fit inside, centred on black.
        ``interpolation``: ``"bilinear"``, ``"bicubic"``, ``"area"``,
        ``"nearest"`` or ``"lanczos"``. Each pair is one ffmpeg CLI command's
        bytes (docs/api.md). ``options``: all of these but ``identity`` in one
        ReadOptions value, instead of the separate arguments.
        """
        options = options_from(options, "open_video_reader", height=height, width=width,
                               num_threads=num_threads, autorotate=autorotate,
                               on_damage=on_damage, stream_index=stream_index, resize=resize,
                               interpolation=interpolation)
        return self._live().open_reader(export_name, relpath, options, identity=identity)

    def list_files(self, export_name: str | None, prefix: str = "", recursive: bool = True,
                   pattern: str | None = None, *,
                   identity: RequestIdentity | str | None = None) -> Iterator[FluxonFsFileEntry]:
        """The export's files (relpath, size, mtime_ns) under ``prefix``, in a fixed
        order, fetched a page at a time. ``pattern`` is an fnmatch pattern on the
        relpath (``*`` crosses ``/``); ``recursive=False`` lists one level,
        directories included (``is_dir``). ``prefix`` may be a URI (see ``resolve``);
        the entries' relpaths are the export's."""
        with located(export_name):
            export_name, prefix = self._live().resolve(export_name, prefix, identity) \
                if prefix or export_name is None else (export_name, prefix)
            entries = self.client.files.list_files(self._identities.resolve(identity),
                                                   export_name, prefix, recursive, pattern)
        return _located_entries(entries, export_name)

    def video_metadata(self, export_name: str | None, relpath: str, *,
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
            self, export_name: str | None, relpath: str, *,
            identity: RequestIdentity | str | None = None, on_damage: str = "error",
            stream_index: int | None = None,
    ) -> tuple[FluxonFsVideoMetadata, FluxonFsVideoReadStats]:
        """``video_metadata`` and what it cost (index_source "kv" or "scan", KV and remote reads)."""
        _, metadata, stats = self._video_index(export_name, relpath, identity, on_damage,
                                               stream_index)
        return metadata, stats

    @_about_a_file
    def video_timestamps_s(self, export_name: str | None, relpath: str, *,
                           identity: RequestIdentity | str | None = None,
                           on_damage: str = "error",
                           stream_index: int | None = None) -> np.ndarray:
        """Presentation time of every frame (float64 seconds, frame order), like
        ``reader.timestamps_s()``, without opening a decoder."""
        export_name, relpath = self._live().resolve(export_name, relpath, identity)
        index, _, _ = self._video_index(export_name, relpath, identity, on_damage, stream_index)
        return timestamps_s(index, on_damage, f"{export_name}:{relpath}")

    @_about_a_file
    def video_metadata_and_timestamps_s(
            self, export_name: str | None, relpath: str, *,
            identity: RequestIdentity | str | None = None, on_damage: str = "error",
            stream_index: int | None = None,
    ) -> tuple[FluxonFsVideoMetadata, np.ndarray]:
        """Both, from one load of the frame index (one KV read when it is warm)."""
        export_name, relpath = self._live().resolve(export_name, relpath, identity)
        index, metadata, _ = self._video_index(export_name, relpath, identity, on_damage,
                                               stream_index)
        return metadata, timestamps_s(index, on_damage, f"{export_name}:{relpath}")

    def _video_index(self, export_name: str | None, relpath: str,
                     identity: RequestIdentity | str | None, on_damage: str = "error",
                     stream_index: int | None = None
                     ) -> tuple[FrameIndex, FluxonFsVideoMetadata, FluxonFsVideoReadStats]:
        return self._live().video_index(export_name, relpath, identity, on_damage, stream_index)

    @_about_a_file
    def file_version(self, export_name: str | None, relpath: str, *,
                     identity: RequestIdentity | str | None = None) -> FileStat:
        """The file's current version (size, mtime_ns, ctime_ns, inode), by an
        authorised stat (cached for the export's metadata TTL)."""
        return self._current(export_name, relpath, identity).version

    @_about_a_file
    def read_range(self, export_name: str | None, relpath: str, offset: int, length: int, *,
                   identity: RequestIdentity | str | None = None) -> bytes:
        """Bytes [offset, offset + length) of the file's current version, through
        the KV and the agent as a reader reads them."""
        return self.client.pieces.read_range(self._current(export_name, relpath, identity),
                                             offset, length, ReadCounters())

    @_about_a_file
    def open_range_source(self, export_name: str | None, relpath: str, *,
                          identity: RequestIdentity | str | None = None) -> FluxonFsRangeSource:
        """The file's current version, held: its ``read_range(offset, length)``
        reads that version through the KV and the agent as a reader does, and
        its ``check_current()`` raises FluxonFsFileChangedError once the file
        has changed (for a reader of your own, e.g. a parquet file's columns)."""
        return FluxonFsRangeSource(self.client, self._current(export_name, relpath, identity))

    @_about_a_file
    def warm_file(self, export_name: str | None, relpath: str, *,
                  identity: RequestIdentity | str | None = None,
                  on_piece: Callable[[int, int], None] | None = None,
                  stop: Callable[[], bool] | None = None) -> WarmResult:
        """Every piece of the file's current version into the KV: pieces and bytes
        fetched. ``on_piece(stored_bytes, piece_bytes)`` after each piece (0
        stored: it was there); ``stop()`` true ends the run between pieces."""
        return self.client.warming.warm_file(self._current(export_name, relpath, identity),
                                             on_piece=on_piece, stop=stop)

    def _current(self, export_name: str | None, relpath: str,
                 identity: RequestIdentity | str | None) -> VersionedFile:
        """The file's current version, by an authorised stat."""
        return self.client.files.stat(self._live().ref(export_name, relpath, identity))

    def _live(self) -> VideoOpener:
        if self._closed:
            raise FluxonFsClosedError("the FluxonFsPatcher is closed")
        return self._opener

    def stats(self) -> FluxonFsProcessStats:
        """What this patcher's readers and metadata calls did in this process, so far."""
        return self._opener.process_stats()

    def open_video_reader_pool(self, max_readers: int = 32, autorotate: bool = False,
                               on_damage: str = "error") -> FluxonFsVideoReaderPool:
        """A per-process LRU of readers: the entry point for data loaders.
        ``autorotate`` and ``on_damage`` apply to every reader it opens."""
        return FluxonFsVideoReaderPool(self._live(), max_readers, autorotate=autorotate,
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
