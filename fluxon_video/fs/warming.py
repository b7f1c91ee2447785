"""Warming: putting a file version's pieces into the KV before anyone reads them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fluxon_video import errors
from fluxon_video.fs.client_state import ClientService
from fluxon_video.fs.counters import ReadCounters
from fluxon_video.fs.file_ref import VersionedFile
from fluxon_video.fs.piece_layout import key_of, piece_count, piece_len


@dataclass
class WarmResult:
    """What warming one file did: pieces fetched and stored, and their bytes."""

    pieces: int = 0
    bytes: int = 0


class Warming(ClientService):
    """Fetches the pieces the KV lacks, one piece at a time, and stores them."""

    def warm_file(self, file: VersionedFile, counters: ReadCounters | None = None, *,
                  on_piece: Callable[[int, int], None] | None = None,
                  stop: Callable[[], bool] | None = None) -> WarmResult:
        """Every piece of the file version into the KV. ``on_piece(stored_bytes,
        piece_bytes)`` after each piece (stored_bytes 0: it was there already);
        ``stop()`` true ends the run between pieces (what was stored counts)."""
        file.require(self._grant)
        counters = counters if counters is not None else ReadCounters()
        export = self.config.export(file.export)
        result = WarmResult()
        for index in range(piece_count(file, export.piece_size)):
            if stop is not None and stop():
                break
            got = self.warm_piece(file, index, counters)
            if got:
                result.pieces += 1
                result.bytes += got
            if on_piece is not None:
                on_piece(got, piece_len(file, export.piece_size, index))
        return result

    def warm_piece(self, file: VersionedFile, index: int, counters: ReadCounters) -> int:
        """Make sure piece ``index`` is in the KV: bytes fetched for it (0: it was there).

        Raises FluxonFsIOError when the KV cannot be reached or refuses the write,
        so a warm run does not report pieces it did not store.
        """
        file.require(self._grant)
        export = self.config.export(file.export)
        if file.size > export.cache_max_bytes:
            return 0  # the file stays out of the KV
        state = self._state()
        key = key_of(export, file, index)
        reachable, present = state.kv.exists(key)
        if not reachable:
            raise errors.FluxonFsIOError(f"{file.name}: the KV is unreachable")
        if present:
            # What a warm run finds stays another TTL, like a piece a read hits.
            state.refresh_ttl(export, key)
            return 0
        start, length = index * export.piece_size, piece_len(file, export.piece_size, index)
        data = state.remote_read(file, start, length, counters)
        if not state.put_verified(export, key, data):
            raise errors.FluxonFsIOError(f"{file.name}: the KV refused piece {index}")
        return len(data)
