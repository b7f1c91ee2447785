"""One origin read per piece across processes: claims on fetching, in the shared KV.

Several trainer nodes that miss the same piece at the same moment would each
read it from the origin. Instead, each claims the pieces of its run (SET NX
with a TTL, one pipeline) and looks in the KV once more (a piece may have
landed between its miss and its claim): the pieces it holds and still lacks
it reads whole, in one read per consecutive run, and stores for everyone
before releasing the claim; the
pieces another process holds it waits for in the KV, and reads itself only
if that claim goes away without an entry (its holder died or failed) or the
wait outlasts the claim's TTL.

Reading whole pieces (not just the bytes asked for) is the price: the bytes
a process reads are the bytes every other process then finds in the KV.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from fluxon_video.fs.client_state import ClientState
from fluxon_video.fs.config import FluxonFsExport
from fluxon_video.fs.counters import ReadCounters
from fluxon_video.fs.file_ref import VersionedFile
from fluxon_video.fs.kv import claim_key
from fluxon_video.fs.piece_layout import key_of, piece_len

FIRST_POLL_S, MAX_POLL_S = 0.005, 0.05


def read_run(state: ClientState, export: FluxonFsExport, file: VersionedFile,
             indices: list[int], lo: int, hi: int, counters: ReadCounters) -> bytes:
    """Bytes [lo, hi) of the consecutive missing pieces ``indices``."""
    keys = [key_of(export, file, index) for index in indices]
    held = state.kv.claim_many(keys, state.owner, export.fetch_claim_ms)
    mine = {index: key for index, key, h in zip(indices, keys, held) if h}
    # Another process may have stored a piece between our miss and our claim.
    pieces: dict[int, bytes] = {}
    if mine and _collect(state, export, file, mine, pieces, counters):
        for index in pieces:
            state.kv.release(mine[index], state.owner)
    pieces.update(_fetch_and_share(state, export, file,
                                   [index for index in mine if index not in pieces],
                                   counters, state.owner))
    theirs = [index for index, h in zip(indices, held) if not h]
    if theirs:
        pieces.update(_wait_for(state, export, file, theirs, counters))
        gave_up = [index for index in theirs if index not in pieces]
        pieces.update(_fetch_and_share(state, export, file, gave_up, counters, None))
    ps = export.piece_size
    return b"".join(pieces[i][max(lo, i * ps) - i * ps:min(hi, (i + 1) * ps) - i * ps]
                    for i in indices)


def _runs(indices: list[int]) -> Iterator[list[int]]:
    run: list[int] = []
    for index in indices:
        if run and index != run[-1] + 1:
            yield run
            run = []
        run.append(index)
    if run:
        yield run


def _fetch_and_share(state: ClientState, export: FluxonFsExport, file: VersionedFile,
                     indices: list[int], counters: ReadCounters,
                     owner: str | None) -> dict[int, bytes]:
    """Whole pieces, one origin read per consecutive run, stored in the KV before
    the claims on them (``owner``'s) are released."""
    ps, out = export.piece_size, {}
    for run in _runs(indices):
        start, end = run[0] * ps, run[-1] * ps + piece_len(file, ps, run[-1])
        first = key_of(export, file, run[0])
        try:
            data, _ = state.flights.do((first, start, end), lambda: state.remote_read(
                file, start, end - start, counters))
        except BaseException:
            if owner is not None:
                for index in run:  # let the waiting processes read for themselves
                    state.kv.release(key_of(export, file, index), owner)
            raise
        for index in run:
            out[index] = piece = data[index * ps - start:index * ps - start
                                      + piece_len(file, ps, index)]
            key = key_of(export, file, index)
            # Stored before the claim goes, so a waiting process finds the entry.
            state.put_verified(export, key, piece)
            if owner is not None:
                state.kv.release(key, owner)
    return out


def _wait_for(state: ClientState, export: FluxonFsExport, file: VersionedFile,
              indices: list[int], counters: ReadCounters) -> dict[int, bytes]:
    """The pieces other processes are fetching, as their entries appear. A piece
    whose claim goes away without its entry (its holder gave up or died) is
    left out, for the caller to read, while the others are still waited for:
    their holders are still fetching them."""
    keys = {index: key_of(export, file, index) for index in indices}
    deadline = time.monotonic() + export.fetch_claim_ms / 1000
    out: dict[int, bytes] = {}
    left: set[int] = set()  # released without an entry: the caller reads them
    delay = FIRST_POLL_S
    while time.monotonic() < deadline:
        time.sleep(delay)
        delay = min(2 * delay, MAX_POLL_S)
        if not _collect(state, export, file, keys, out, counters):
            return out  # the KV went away: read the rest ourselves
        still = [index for index in indices if index not in out and index not in left]
        if not still:
            return out
        # One claim looked at per poll (one round trip): the first piece awaited.
        reachable, claimed = state.kv.exists(claim_key(keys[still[0]]))
        if reachable and not claimed:
            # Let go: stored just now (the entry comes before the release), or
            # given up. One more look; if it is still missing, it is ours.
            _collect(state, export, file, keys, out, counters)
            if still[0] not in out:
                left.add(still[0])
            delay = FIRST_POLL_S
    return out


def _collect(state: ClientState, export: FluxonFsExport, file: VersionedFile,
             keys: dict[int, str], out: dict[int, bytes], counters: ReadCounters) -> bool:
    """Add to out the awaited pieces now in the KV; False if the KV did not answer."""
    waiting = [index for index in keys if index not in out]
    reachable, entries = state.kv.get_many([keys[i] for i in waiting])
    counters.add(kv_round_trips=1)
    if not reachable:
        return False
    for index, entry in zip(waiting, entries):
        data = state.open_entry(export, keys[index], entry, counters, what=file.name,
                                expected_len=piece_len(file, export.piece_size, index))
        if data is not None:
            out[index] = data
            counters.add(kv_hits=1, kv_bytes=len(data))
    return True
