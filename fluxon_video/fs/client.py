"""The FluxonFS client in the training process: one small service per job.

    files    authorised stats (cached per identity), opening a version, listing
    pieces   byte ranges from the KV piece cache, misses from the route
    blobs    per-version blobs (a frame index)
    warming  a version's pieces into the KV ahead of reads

Each takes the value objects of fs/file_ref.py ("this file, as this
identity"; "this version of it"), and all share one per-process state
(fs/client_state.py), which the client builds on first use in each process.
"""

from __future__ import annotations

from fluxon_video import errors
from fluxon_video.fs.blobs import VersionBlobs
from fluxon_video.fs.client_state import ClientState, make_sealer
from fluxon_video.fs.concurrency import Backfiller, PerProcess
from fluxon_video.fs.config import FluxonFsConfig
from fluxon_video.fs.file_metadata import FileMetadata
from fluxon_video.fs.kv import GuardedPieceStore, PieceStore
from fluxon_video.fs.kv_seal import EntrySealer
from fluxon_video.fs.pieces import PieceReads
from fluxon_video.fs.warming import Warming


class FluxonFsClient:
    """The services over one config, with fork-safe per-process state.

    Fork-safe in the style of redis-py's connection pool: every service asks
    for the state through the pid check, and a forked child builds its own
    connections, threads and caches without touching the parent's.
    """

    def __init__(self, config: FluxonFsConfig, store: PieceStore | None = None) -> None:
        self.config = config
        self.piece_store = store  # None: make one per process from the config
        # The KV keys load (and a shared KV without one is refused) here, not at first read.
        make_sealer(config, store.shared if store is not None else bool(config.client.redis_urls))
        self._state = PerProcess(self._build_state)
        self._closed = False
        grant = object()  # what versions authorised by this client's stats carry
        self.blobs = VersionBlobs(config, self._checkpid, grant)
        self.files = FileMetadata(config, self._checkpid, grant, self.blobs)
        self.pieces = PieceReads(config, self._checkpid, grant)
        self.warming = Warming(config, self._checkpid, grant)

    def _build_state(self) -> ClientState:
        if self._closed:
            raise errors.FluxonFsClosedError("the FluxonFS client is closed")
        return ClientState.build(self.config, self.piece_store)

    def _checkpid(self) -> ClientState:
        """This process's state, built on first use here (after fork too)."""
        return self._state.get()

    @property
    def kv(self) -> GuardedPieceStore:
        return self._checkpid().kv

    @property
    def seal(self) -> EntrySealer:
        """What seals this process's KV entries (fs/kv_seal.py)."""
        return self._checkpid().seal

    @property
    def backfill(self) -> Backfiller:
        return self._checkpid().backfill

    def close(self) -> None:
        """Stop this process's threads and connections; later calls raise. Safe to call twice."""
        self._closed = True
        state = self._state.take()
        if state is not None:
            state.close()
