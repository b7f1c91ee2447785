"""FluxonFsPatcher: the entry point. Holds the exports, the client and the identity."""

from __future__ import annotations

import contextlib
import contextvars
import os
import time
from collections.abc import Iterable, Iterator, Mapping

from fluxon_video.errors import FluxonFsClosedError, FluxonFsConfigError
from fluxon_video.fs.client import FluxonFsClient
from fluxon_video.fs.config import (
    ClientSettings,
    FluxonFsConfig,
    FluxonFsExport,
    RequestIdentity,
    load_config,
)
from fluxon_video.fs.kv import PieceStore
from fluxon_video.fs.storage import check_relpath
from fluxon_video.native import require_native
from fluxon_video.pool import FluxonFsVideoReaderPool
from fluxon_video.reader import FluxonFsVideoReader
from fluxon_video.validation import positive_int


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
        self.config = config
        self._client = FluxonFsClient(config, kv_store)
        self._closed = False
        self._identity: RequestIdentity | None = None
        self._temporary_identity: contextvars.ContextVar[RequestIdentity | None] = \
            contextvars.ContextVar(f"fluxon_identity_{id(self)}", default=None)
        if identity is not None:
            self.identity = identity  # type: ignore[assignment]

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

    def open_video_reader(self, export_name: str, relpath: str, height: int, width: int,
                          num_threads: int = 1, *,
                          identity: RequestIdentity | str | None = None) -> FluxonFsVideoReader:
        """Open a reader on ``export_name:relpath`` producing ``height`` x ``width`` RGB frames.

        The reader reads as ``identity`` (default: the patcher's current one)
        for its whole life.
        """
        t0 = time.perf_counter()
        require_native()
        height = positive_int("height", height)
        width = positive_int("width", width)
        num_threads = positive_int("num_threads", num_threads)
        export = self.config.export(export_name)
        check_relpath(relpath)
        who = self._as_identity(identity) if identity is not None else self.identity
        if who is None:
            raise FluxonFsConfigError(
                "no request identity is set: pass identity= to FluxonFsPatcher or set patcher.identity")
        version = self.client.stat(who, export_name, relpath)
        return FluxonFsVideoReader(self.client, self.config.client, who, export, relpath, version,
                                   height, width, num_threads,
                                   open_ms=(time.perf_counter() - t0) * 1e3)

    def open_video_reader_pool(self, max_readers: int = 32) -> FluxonFsVideoReaderPool:
        """A per-process LRU of readers: the entry point for data loaders."""
        return FluxonFsVideoReaderPool(self, max_readers)

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
