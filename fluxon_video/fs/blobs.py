"""Per-version blobs in the KV: opaque bytes (the video layer keeps a frame index there).

One entry per (export, relpath, kind), holding the version it belongs to
in the clear and sealed with the bytes (fs/kv_seal.py): a blob of another
version reads as absent, and a new version's blob replaces the old one's.
A blob is written in the background; until the write is over, this process
reads it from PendingWrites (a second reader of the file does not scan it again).
"""

from __future__ import annotations

from functools import partial

from fluxon_video.fs.client_state import ClientService
from fluxon_video.fs.config import FluxonFsExport
from fluxon_video.fs.counters import ReadCounters
from fluxon_video.fs.file_ref import FileRef, VersionedFile
from fluxon_video.fs.kv import UNREACHABLE, Fields, blob_key
from fluxon_video.fs.origin import FileStat


class VersionBlobs(ClientService):
    """Load and store the blob of one kind for a file version."""

    def key(self, ref: FileRef, kind: str) -> str:
        export = self.config.export(ref.export)
        return blob_key(export.cache_kv_key_prefix, kind, ref.export, ref.relpath)

    def load(self, file: VersionedFile, kind: str, counters: ReadCounters) -> bytes | None:
        """The blob stored for this version; None if absent."""
        file.require(self._grant)
        export = self.config.export(file.export)
        if file.size > export.cache_max_bytes:  # the file stays out of the KV entirely
            return None
        key = self.key(file.file, kind)
        held = self._held(key, file.version)
        if held is not None:
            return held
        counters.add(kv_round_trips=1)
        reachable, entry = self._state().kv.get(key)
        return self._opened(export, key, file.version, entry if reachable else None)

    def from_entry(self, export: FluxonFsExport, key: str, version: FileStat,
                   entry: Fields | None) -> bytes | None:
        """The blob in a KV entry read for key, if it is this version's and intact
        (or the one this process is still writing there)."""
        held = self._held(key, version)
        return held if held is not None else self._opened(export, key, version, entry)

    def _opened(self, export: FluxonFsExport, key: str, version: FileStat,
                entry: Fields | None) -> bytes | None:
        """The blob in a KV entry read for key, if it is this version's and intact."""
        if entry is UNREACHABLE or not entry:
            return None
        if entry.get("version") != version.key().encode():
            return None  # another version's: the next scan replaces it
        state = self._state()
        data = state.open_entry(export, key, entry, None, bound=f"@{version.key()}")
        if data is not None:
            state.refresh_ttl(export, key)  # as for pieces: an index in use does not expire
        return data

    def _held(self, key: str, version: FileStat) -> bytes | None:
        """The blob this process is writing under key for version, until written."""
        return self._state().pending.get(_pending_key(key, version), 0)

    def store(self, file: VersionedFile, kind: str, data: bytes) -> None:
        """Store this version's blob of kind (replacing any other version's), in the
        background: the caller does not wait (the client's close() does)."""
        file.require(self._grant)
        export = self.config.export(file.export)
        if file.size > export.cache_max_bytes:
            return
        key = self.key(file.file, kind)
        state = self._state()
        version = file.version.key()
        entry = {**state.seal.seal(export.name, key, data, export.cache_bytes_field_key,
                                   bound=f"@{version}"),
                 "version": version.encode()}
        pending = _pending_key(key, file.version)
        held = state.pending.hold(pending, data)
        state.alongside.submit(state.pending.write_then_release, pending, held,
                               partial(state.kv.put, key, entry, export.cache_ttl_s))


def _pending_key(key: str, version: FileStat) -> str:
    return f"{key}@{version.key()}"
