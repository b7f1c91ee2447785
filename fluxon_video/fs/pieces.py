"""Piece reads: a byte range of a file version from the KV piece cache, misses from the route.

    KV piece cache (verified; bypassed for files over cache_max_bytes)
      -> on a miss, the export's miss policy:
           RemoteRead         read the range from the route; backfill the piece later
           StageToKvThenRead  fetch the whole piece, store it, serve from it
      -> route: the agent over HTTP, or the export in-process

Concurrent misses for one piece are fetched once per process (SingleFlight;
PendingWrites for reads of other ranges that cover it), and a piece fetched
whole is served from this process until its backfill stores it. Backfill is
bounded and deduplicated and drops work when full; no read waits for it.
The version was checked by whoever holds the VersionedFile (fs/file_metadata.py
says when): a read only requires its grant.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from functools import partial

from fluxon_video import errors
from fluxon_video.fs import shared_fetch
from fluxon_video.fs.client_state import ClientService
from fluxon_video.fs.config import FluxonFsExport, MissPolicy
from fluxon_video.fs.counters import ReadCounters
from fluxon_video.fs.file_ref import VersionedFile
from fluxon_video.fs.kv import UNREACHABLE
from fluxon_video.fs.piece_layout import key_of, piece_len


class PieceReads(ClientService):
    """read_range over the KV and the routes."""

    def read_range(self, file: VersionedFile, offset: int, length: int, counters: ReadCounters,
                   *, stage_partial: bool = True) -> bytes:
        """Bytes [offset, offset+length): pieces from the KV, runs of missing pieces
        in one agent read each, backfilled. A piece the read only partly covers is
        staged by fetching it whole in the background, unless stage_partial is
        False (a small probe of a file's end would otherwise cost a whole piece)."""
        export = self.config.export(file.export)
        if offset < 0 or length < 0 or offset + length > file.size:
            raise errors.FluxonFsBadRequestError(
                f"{file.name}: range {offset}+{length} outside {file.size} bytes")
        if length == 0:
            return b""
        file.require(self._grant)
        if file.size > export.cache_max_bytes:
            return self._state().remote_read(file, offset, length, counters)
        ps = export.piece_size
        indices = list(range(offset // ps, (offset + length - 1) // ps + 1))
        # Every piece of the range in one KV round trip (per node on a cluster),
        # then what this process fetched and has not stored there yet.
        pieces = self._from_kv(export, file, indices, counters)
        pieces = [piece if piece is not None else self._pending(export, file, index)
                  for index, piece in zip(indices, pieces)]
        parts = []
        k = 0
        while k < len(indices):
            index, piece = indices[k], pieces[k]
            lo, hi = max(offset, index * ps), min(offset + length, (index + 1) * ps)
            if piece is not None:
                parts.append(piece[lo - index * ps:hi - index * ps])
            elif export.kv_miss_policy is MissPolicy.StageToKvThenRead:
                parts.append(self._stage(export, file, index, counters)[lo - index * ps:
                                                                         hi - index * ps])
            else:
                # A run of missing pieces is one read from the agent.
                run = k + 1
                while run < len(indices) and pieces[run] is None:
                    run += 1
                hi = min(offset + length, (indices[run - 1] + 1) * ps)
                parts.append(self._remote_with_backfill(export, file, indices[k:run], lo, hi,
                                                        counters, stage_partial))
                k = run
                continue
            k += 1
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _from_kv(self, export: FluxonFsExport, file: VersionedFile, indices: list[int],
                 counters: ReadCounters) -> list[bytes | None]:
        """The verified bytes of each piece, None where the KV cannot serve it."""
        state = self._state()
        keys = [key_of(export, file, index) for index in indices]
        reachable, entries = state.kv.get_many(keys)
        if not reachable:
            counters.add(kv_errors=len(keys))
            return [None] * len(keys)
        counters.add(kv_round_trips=1)
        out: list[bytes | None] = []
        for key, index, entry in zip(keys, indices, entries):
            if entry is UNREACHABLE:
                counters.add(kv_errors=1)
                out.append(None)
                continue
            data = state.open_entry(export, key, entry, counters, what=file.name,
                                    expected_len=piece_len(file, export.piece_size, index))
            if data is None:
                counters.add(kv_misses=1)
            else:
                counters.add(kv_hits=1, kv_bytes=len(data))
                state.refresh_ttl(export, key)
            out.append(data)
        return out

    def _pending(self, export: FluxonFsExport, file: VersionedFile, index: int) -> bytes | None:
        """A piece this process is fetching or storing (PendingWrites), once it is here."""
        return self._state().pending.get(key_of(export, file, index),
                                         self.config.client.agent_timeout_s)

    def _stage(self, export: FluxonFsExport, file: VersionedFile, index: int,
               counters: ReadCounters) -> bytes:
        """The whole piece, fetched once per process however many ask, and stored."""
        state = self._state()
        start, length = index * export.piece_size, piece_len(file, export.piece_size, index)

        def fetch_and_store() -> bytes:
            data = state.remote_read(file, start, length, counters)
            state.put_verified(export, key_of(export, file, index), data)
            return data

        data, _ = state.flights.do(key_of(export, file, index), fetch_and_store)
        return data

    def _remote_with_backfill(self, export: FluxonFsExport, file: VersionedFile,
                              indices: list[int], lo: int, hi: int, counters: ReadCounters,
                              stage_partial: bool) -> bytes:
        """Bytes [lo, hi) of consecutive missing pieces, in one remote read; each
        piece is backfilled (from these bytes when they hold all of it)."""
        state = self._state()
        if export.claims_fetches and state.kv.shared:
            return shared_fetch.read_run(state, export, file, indices, lo, hi, counters)
        ps = export.piece_size
        whole = {key_of(export, file, index): (index * ps - lo, index * ps - lo
                                                + piece_len(file, ps, index))
                 for index in indices if lo <= index * ps
                 and index * ps + piece_len(file, ps, index) <= hi}
        # The whole pieces are held for other readers from now until stored.
        held = state.pending.expect(list(whole)) if export.async_backfill_enabled else {}
        first = key_of(export, file, indices[0])
        try:
            data, _ = state.flights.do((first, lo, hi), lambda: state.remote_read(
                file, lo, hi - lo, counters))
        except BaseException as exc:
            for key, future in held.items():
                future.set_exception(exc)
                state.pending.release(key, future)
            raise
        if not export.async_backfill_enabled:
            return data
        pieces = {key: data[start:end] for key, (start, end) in whole.items()}
        for key, future in held.items():  # the readers waiting for them go on now
            future.set_result(pieces[key])
        for index in indices:
            key = key_of(export, file, index)
            if key in pieces:  # we hold the whole piece: store it, no second fetch
                job = partial(state.put_verified, export, key, pieces[key])
            elif not stage_partial:
                continue
            else:
                job = partial(self._stage, export, file, index, ReadCounters())
            self._backfill(key, job, counters, held.get(key))
        return data

    def backfill_head(self, file: VersionedFile, head: bytes, counters: ReadCounters) -> None:
        """Store the first piece that came with the stat of a cold open
        (fs/file_metadata.py) for other readers, as a read from the route would."""
        export = self.config.export(file.export)
        if (not export.async_backfill_enabled or file.size > export.cache_max_bytes
                or len(head) != piece_len(file, export.piece_size, 0)):
            return
        key = key_of(export, file, 0)
        state = self._state()
        self._backfill(key, partial(state.put_verified, export, key, head), counters,
                       state.pending.hold(key, head))

    def _backfill(self, key: str, job: Callable[[], object], counters: ReadCounters,
                  held: Future[bytes] | None = None) -> None:
        """Queue job (it stores key in the KV); ``held``: the bytes PendingWrites
        holds for key, released when the job is over, or now if it is not queued."""
        state = self._state()
        if held is not None:
            job = partial(state.pending.write_then_release, key, held, job)
        queued = state.backfill.submit(key, job)
        if queued:
            counters.add(backfills_queued=1)
            return
        if queued is False:
            counters.add(backfills_dropped=1)
        if held is not None:  # nothing of ours will store it
            state.pending.release(key, held)
