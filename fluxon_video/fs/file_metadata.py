"""File metadata: authorised stats (cached per identity), opening a version, listing.

The version rule, in one place: a file's bytes are served for a version only
under a stat that authorised the identity for it. ``open`` makes that stat
and returns the version with this client's grant; a reader calls
``check_current`` once at the start of every read (so a file changed since
it was opened fails the next read, even one its page cache could serve);
range reads inside that read, and those of an open (the index scan), rely
on it and do not stat again. KV bytes are keyed by version, so they can
only be the opened version's; a remote read names the version and the
storage refuses it if the file is at another, which no metadata cache can
hide.
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from fluxon_video import errors
from fluxon_video.fs.blobs import VersionBlobs
from fluxon_video.fs.client_state import ClientService, ClientState, log, warn
from fluxon_video.fs.config import FluxonFsConfig, FluxonFsExport, RequestIdentity
from fluxon_video.fs.counters import ReadCounters
from fluxon_video.fs.file_ref import FileRef, VersionedFile
from fluxon_video.fs.kv import UNREACHABLE, Fields, read_stat_body, stat_body, stat_key
from fluxon_video.fs.listing import FluxonFsFileEntry
from fluxon_video.fs.origin import FileStat
from fluxon_video.fs.routes import is_unreachable


@dataclass(frozen=True)
class OpenedFile:
    """What opening a file learnt: its version (granted), its blob of the kind
    asked for (None: absent), the network round trips that took one after
    another, and the version's first bytes when the stat brought them (a cold
    open: no blob in the KV)."""

    file: VersionedFile
    blob: bytes | None
    round_trips: int
    head: bytes | None = None


class FileMetadata(ClientService):
    """Stats through the process cache, the shared KV stat and the agent."""

    def __init__(self, config: FluxonFsConfig, state: Callable[[], ClientState],
                 grant: object, blobs: VersionBlobs) -> None:
        super().__init__(config, state, grant)  # its versions carry the grant
        self._blobs = blobs

    # ---- the version rule ----

    def _granted(self, ref: FileRef, version: FileStat) -> VersionedFile:
        return VersionedFile(ref.export, ref.relpath, ref.identity, version, self._grant)

    def stat(self, ref: FileRef, counters: ReadCounters | None = None) -> VersionedFile:
        """The file's current version as ref's identity sees it; cached for the
        export's TTL (in this process, and with metadata_cache_shared in the KV too)."""
        export = self.config.export(ref.export)
        cached = self._cached(ref)
        if cached is not None:
            return self._granted(ref, cached)
        shared_body: bytes | None = None
        if export.metadata_cache_shared:
            skey = self._stat_key(export, ref)
            reachable, entry = self._state().kv.get(skey)
            if reachable and counters is not None:
                counters.add(kv_round_trips=1)
            shared_body = self._open_shared(export, skey, entry)
            shared = self._shared(ref, export, shared_body)
            if shared is not None:
                return self._granted(ref, shared)
        return self._granted(ref, self._agent_stat(ref, export, counters, shared_body)[0])

    def check_current(self, file: VersionedFile) -> None:
        """Raise FluxonFsFileChangedError if the file is no longer at file.version
        (or a permission error if the identity may no longer read it)."""
        current = self.stat(file.file).version
        if current != file.version:
            raise errors.FluxonFsFileChangedError(
                f"{file.name}: the file changed since the reader opened it "
                f"({file.version.describe_change(current)})")

    def open(self, ref: FileRef, kind: str, counters: ReadCounters) -> OpenedFile:
        """The file's version and its blob of ``kind``, in one round trip where the
        caches allow: with a stat cached in this process, one KV read; with
        metadata_cache_shared, the stat another process had authorised for this
        identity comes in the same KV pipeline as the blob (no agent request);
        otherwise the blob is read while the agent answers the stat. The blob
        is only returned after the stat (fetched alongside, never used before).

        A cold open (the KV answers that it has no blob before the stat is
        back) also asks the agent for the stat with the file's first piece,
        beside the plain stat: the scan then starts from bytes in hand, in the
        time of one round trip. Not on exports that claim fetches across nodes
        (single_flight_across_nodes), where every piece is fetched by one
        process after a claim.
        """
        export = self.config.export(ref.export)
        state = self._state()
        bkey = self._blobs.key(ref, kind)
        version = self._cached(ref)
        entry: Fields | None = None
        shared_body: bytes | None = None
        fetched = False
        trips = kv_reads = kv_asked = 0  # one after another; KV reads answered, asked
        if version is None and export.metadata_cache_shared:
            skey = self._stat_key(export, ref)
            reachable, (stat_entry, entry) = state.kv.get_many([skey, bkey])
            fetched = reachable and entry is not UNREACHABLE
            trips, kv_reads, kv_asked = 1, int(reachable), 1
            shared_body = self._open_shared(export, skey, stat_entry)
            version = self._shared(ref, export, shared_body)
        head: bytes | None = None
        if version is None:
            heads = not export.claims_fetches
            pending = None if fetched else state.alongside.submit(state.kv.get, bkey)
            # The blob known absent (the shared stat's pipeline): the stat brings the
            # head. Else the head is asked beside the stat once the KV says so.
            cold = heads and fetched and entry is None
            asked = (None if pending is None or not heads
                     else state.heads.submit(self._head_if_cold, ref, export, pending, counters))
            try:
                version, head = self._agent_stat(ref, export, counters, shared_body,
                                                 export.piece_size if cold else 0)
            finally:
                if pending is not None:
                    reachable, entry = pending.result()
                    fetched = reachable
                    kv_reads += int(reachable)
                    kv_asked += 1
                if asked is not None:
                    head = self._head_of(asked, ref, version)
            trips += 1  # the stat (the blob read alongside, the head beside it)
        file = self._granted(ref, version)
        if version.size > export.cache_max_bytes:  # the file stays out of the KV entirely
            counters.add(kv_round_trips=kv_reads, kv_errors=kv_asked - kv_reads)
            return OpenedFile(file, None, trips, head)
        if not fetched:
            reachable, entry = state.kv.get(bkey)
            trips += 1
            kv_reads += int(reachable)
            kv_asked += 1
        counters.add(kv_round_trips=kv_reads, kv_errors=kv_asked - kv_reads)
        return OpenedFile(file, self._blobs.from_entry(export, bkey, version, entry), trips, head)

    def _head_if_cold(self, ref: FileRef, export: FluxonFsExport, blob: concurrent.futures.Future,
                      counters: ReadCounters) -> tuple[FileStat, bytes | None] | None:
        """The agent's stat with the file's first piece, if the KV has no blob for
        it (then the scan reads that piece first; else it is not needed)."""
        reachable, entry = blob.result()
        if reachable and entry is not None:
            return None
        answer = self._ask_head(ref, export.piece_size, False, counters)
        counters.add(stat_requests=1)
        return answer

    def _ask_head(self, ref: FileRef, length: int, wait: bool,
                  counters: ReadCounters | None) -> tuple[FileStat, bytes | None]:
        """The agent's stat with the version's first ``length`` bytes, counted."""
        st, head = self._state().routes[ref.export].stat_head(
            ref.export, ref.relpath, ref.identity.token, length, wait=wait)
        if counters is not None:
            counters.add(remote_bytes=len(head or b""), head_bytes=len(head or b""))
        return st, head

    def _head_of(self, asked: concurrent.futures.Future, ref: FileRef,
                 version: FileStat | None) -> bytes | None:
        """The head asked beside the stat, if it came and is of ``version``. One
        still queued is dropped: waiting for it would cost a round trip."""
        if asked.cancel() or version is None:
            return None
        try:
            got = asked.result()
        except errors.FluxonFsError as exc:  # the plain stat answered: read it as before
            log.debug("%s: the stat with the head failed (%s)", ref.name, exc)
            return None
        if got is None:
            return None
        st, head = got
        return head if st == version else None

    # ---- the three sources of a stat ----

    def _cached(self, ref: FileRef) -> FileStat | None:
        state = self._state()
        with state.lock:
            cached = state.stats.get((ref.identity, ref.export, ref.relpath))
        return None if cached is None else cached[1]

    def _stat_key(self, export: FluxonFsExport, ref: FileRef) -> str:
        who = self._state().seal.identity_tag(export.name, ref.identity.token)
        return stat_key(export.cache_kv_key_prefix, export.name, ref.relpath, who)

    def _open_shared(self, export: FluxonFsExport, skey: str,
                     entry: Fields | None) -> bytes | None:
        """The verified bytes of a shared stat entry (None: absent, unreachable, forged)."""
        if entry is UNREACHABLE:
            return None
        return self._state().open_entry(export, skey, entry, None)

    def _shared(self, ref: FileRef, export: FluxonFsExport,
                body: bytes | None) -> FileStat | None:
        """A stat the agent authorised for this identity in some process, while it
        is younger than metadata_cache_ttl_ms; cached here for what is left."""
        state = self._state()
        shared = read_stat_body(body, time.time(), export.metadata_cache_ttl_ms / 1000)
        if shared is None:
            return None
        version, left = shared
        with state.lock:
            state.stats[(ref.identity, ref.export, ref.relpath)] = (time.monotonic() + left,
                                                                     version)
        return version

    def _agent_stat(self, ref: FileRef, export: FluxonFsExport,
                    counters: ReadCounters | None, shared_body: bytes | None = None,
                    head_length: int = 0) -> tuple[FileStat, bytes | None]:
        """The agent's stat, and with ``head_length`` the version's first bytes in
        the same answer (None: not asked, or not sent). While no agent answers, a
        stat authorised within stale_if_error_s (this process's, else the shared
        entry's bytes) is served at once; without one, the route retries for
        agent_retry_window_s."""
        state = self._state()
        key = (ref.identity, ref.export, ref.relpath)
        stale = self._stale(state, export, key, shared_body)
        if counters is not None:
            counters.add(stat_requests=1)
        try:
            # With a stale stat to fall back on, one round of the replicas: warm
            # reads go on at once rather than after the retry window.
            head = None
            if head_length:
                st, head = self._ask_head(ref, head_length, stale is None, counters)
            else:
                st = state.routes[ref.export].stat(ref.export, ref.relpath, ref.identity.token,
                                                   wait=stale is None)
        except errors.FluxonFsIOError as exc:
            if stale is None or not is_unreachable(exc):
                if is_unreachable(exc):
                    warn.warning("agent", "%s: stat failed: %s", ref.name, exc)
                raise
            version, age, source = stale
            # (exc names the file: "export:relpath: agent URL unreachable (...)")
            warn.warning("stale", "%s; no agent answers: serving the stat an agent authorised "
                         "%.1f s ago (%s; stale_if_error_s = %g)", exc, age, source,
                         export.stale_if_error_s)
            # Reused like an answer for the TTL (never past the stale bound), so reads
            # do not ask an absent agent each time.
            left = min(export.metadata_cache_ttl_ms / 1000, export.stale_if_error_s - age)
            if left > 0:
                with state.lock:
                    state.stats[key] = (time.monotonic() + left, version)
            return version, None
        now = time.monotonic()
        ttl = export.metadata_cache_ttl_ms / 1000
        with state.lock:
            if ttl > 0:
                state.stats[key] = (now + ttl, st)
            if export.stale_if_error_s > 0:
                state.last_good[key] = (now, st)
        if ttl > 0 and export.metadata_cache_shared:
            # Shared for other processes; nobody here waits for the write. Used as
            # an answer for the TTL (expires_at); Redis keeps it for stale_if_error_s
            # if longer, for processes that start while no agent answers.
            skey = self._stat_key(export, ref)
            now_wall = time.time()
            body = stat_body(st, now_wall + ttl, now_wall)
            state.alongside.submit(state.kv.put, skey, state.seal.seal(
                export.name, skey, body, export.cache_bytes_field_key),
                math.ceil(max(ttl, export.stale_if_error_s)))
        return st, head

    @staticmethod
    def _stale(state: ClientState, export: FluxonFsExport, key: tuple,
               shared_body: bytes | None) -> tuple[FileStat, float, str] | None:
        """With stale_if_error_s, the youngest stat an agent authorised for this
        identity within it: (version, its age in seconds, where it came from)."""
        bound = export.stale_if_error_s
        if bound <= 0:
            return None
        found: list[tuple[FileStat, float, str]] = []
        with state.lock:
            good = state.last_good.get(key)
        if good is not None and time.monotonic() - good[0] <= bound:
            found.append((good[1], time.monotonic() - good[0], "in this process"))
        shared = _stale_shared_stat(shared_body, time.time(), bound)
        if shared is not None:
            found.append((*shared, "shared through the KV"))
        return min(found, key=lambda f: f[1]) if found else None

    # ---- listing ----

    def list_files(self, identity: RequestIdentity, export_name: str, prefix: str = "",
                   recursive: bool = True, pattern: str | None = None,
                   page_size: int = 1000) -> Iterator[FluxonFsFileEntry]:
        """The export's files under prefix, fetched a page at a time as you iterate."""
        self.config.export(export_name)
        cursor: str | None = None
        while True:
            entries, cursor = self._state().routes[export_name].list(
                export_name, prefix, recursive, pattern, cursor, page_size, identity.token)
            yield from entries
            if cursor is None:
                return


def _stale_shared_stat(body: bytes | None, now: float,
                       bound_s: float) -> tuple[FileStat, float] | None:
    """(version, age) of a shared stat entry's verified bytes, whatever its expiry,
    if the agent authorised it within bound_s (a written_at in the future counts
    as now); for use only while no agent answers."""
    if body is None:
        return None
    try:
        d = json.loads(body)
        age = now - min(float(d["written_at"]), now)
        version = FileStat.from_fields(d)
    except (ValueError, KeyError, TypeError):
        return None
    return (version, age) if 0 <= age <= bound_s else None
