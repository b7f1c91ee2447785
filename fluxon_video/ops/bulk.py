"""`index` and `warm`: put an export's frame indexes (and pieces) into the KV.

Both run over the files ``patcher.list_files`` yields (filtered by a glob),
on a thread pool (the scan and the fetches release the GIL), with a tqdm
progress bar, and end with a report: files done and skipped, bytes, seconds,
errors. One bad file is reported and skipped, never fatal. Both are
resumable: a file whose index is in the KV at its current version is
skipped, and so is every piece already there. Ctrl-C stops cleanly: no new
work starts, running work finishes, and the report says what was done.

Each file lands in exactly one of done, skipped, not_video and errors (an
uninterrupted run's counts add up to ``files``). A file counts as done only
when what the run stored is in the KV: an index is read back after it is
stored, so a KV that is down or refuses writes makes each file an error
("the KV is unreachable"), as it does for warm's pieces, not "indexed".
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


from fluxon_video.errors import FluxonFsDecodeError, FluxonFsError, FluxonFsIOError
from fluxon_video.frame_index import blob_kind
from fluxon_video.fs.file_ref import FileRef
from fluxon_video.fs.listing import FluxonFsFileEntry
from fluxon_video.ops.report import progress
from fluxon_video.patcher import FluxonFsPatcher


# How long a run waits to read back an index it stored (the store is queued
# behind the read that built it); a healthy KV takes milliseconds.
STORED_WITHIN_S = 5.0


@dataclass
class BulkReport:
    files: int = 0            # files looked at
    done: int = 0             # files indexed / warmed by this run
    skipped: int = 0          # already in the KV at their current version
    # Files FFmpeg could not index (skipped, not errors): (relpath, FFmpeg's reason).
    # Neither done nor skipped (warm stored their bytes all the same).
    not_video: list[tuple[str, str]] = field(default_factory=list)
    bytes: int = 0            # bytes fetched from the agent
    pieces: int = 0           # pieces stored (warm)
    errors: list[tuple[str, str]] = field(default_factory=list)  # (relpath, message)
    seconds: float = 0.0
    interrupted: bool = False

    def as_dict(self) -> dict[str, object]:
        return {"files": self.files, "done": self.done, "skipped": self.skipped,
                "not_video": [{"relpath": r, "message": m} for r, m in self.not_video],
                "bytes": self.bytes, "pieces": self.pieces,
                "errors": [{"relpath": r, "message": m} for r, m in self.errors],
                "seconds": round(self.seconds, 3), "interrupted": self.interrupted}


class BulkRun:
    """One index or warm run over an export."""

    def __init__(self, patcher: FluxonFsPatcher, export_name: str, pattern: str | None,
                 workers: int = 4, progress: str = "bar", prefix: str = "") -> None:
        self.patcher = patcher
        self.export = patcher.config.export(export_name)
        self.identity = patcher.identity
        self.pattern = pattern
        self.prefix = prefix
        self.workers = workers
        self.progress = progress  # "bar", "lines" or "off" (ops/report.progress)
        self.report = BulkReport()
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def files(self) -> list[FluxonFsFileEntry]:
        return list(self.patcher.list_files(self.export.name, self.prefix, True, self.pattern))

    def index(self) -> BulkReport:
        """Build and store the frame index of every video not indexed yet."""
        entries = self.files()
        with progress(len(entries), "index", False, self.progress) as bar:
            self._run(entries, lambda entry: self._index_one(entry, bar))
        return self.report

    def warm(self, index_only: bool = False) -> BulkReport:
        """Every piece (and the index) of every file into the KV."""
        if index_only:
            return self.index()
        entries = self.files()
        total = sum(e.size for e in entries)
        with progress(total, "warm", True, self.progress) as bar:
            self._run(entries, lambda entry: self._warm_one(entry, bar))
        return self.report

    # ---- per file ----

    def _index_one(self, entry: FluxonFsFileEntry, bar: Any) -> None:
        try:
            stats = self._index(entry)
        except FluxonFsDecodeError as exc:
            self._not_video(entry, exc)
        else:
            self._count(**({"skipped": 1} if stats.index_source == "kv" else
                           {"done": 1, "bytes": stats.remote_bytes}))
        finally:
            bar.update(1)

    def _index(self, entry: FluxonFsFileEntry) -> Any:
        """The file's frame index, built and stored unless the KV has it: its
        stats. FluxonFsIOError when the KV cannot be reached or did not keep the
        index (checked before the scan, and by reading the index back)."""
        kv = self.patcher.client.kv
        name = f"{self.export.name}:{entry.relpath}"
        kept = entry.size <= self.export.cache_max_bytes  # else it stays out of the KV
        key = self.patcher.client.blobs.key(
            FileRef(self.export.name, entry.relpath, self.identity), blob_kind(None))
        if kept and not kv.exists(key)[0]:  # no scan whose index could not be stored
            raise FluxonFsIOError(f"{name}: the KV is unreachable")
        _, stats = self.patcher.video_metadata_with_stats(self.export.name, entry.relpath,
                                                         identity=self.identity)
        if kept and stats.index_source != "kv":
            self._read_back(kv, key, name, entry.relpath)
        return stats

    def _read_back(self, kv: Any, key: str, name: str, relpath: str) -> None:
        """Wait until the KV holds the index just stored (the store is queued)."""
        version = self.patcher.file_version(self.export.name, relpath,
                                            identity=self.identity).key().encode()
        deadline = time.monotonic() + STORED_WITHIN_S
        while True:
            reachable, found = kv.get(key)
            if not reachable:
                raise FluxonFsIOError(f"{name}: the KV is unreachable: the frame index "
                                      "was not stored")
            if found and found.get("version") == version:
                return
            if time.monotonic() > deadline:
                raise FluxonFsIOError(f"{name}: the KV did not keep the frame index within "
                                      f"{STORED_WITHIN_S:.0f} s (a Redis at maxmemory under "
                                      "noeviction refuses writes: see its log)")
            time.sleep(0.01)

    def _warm_one(self, entry: FluxonFsFileEntry, bar: Any) -> None:
        def on_piece(stored: int, piece_bytes: int) -> None:
            if stored:  # counted as it happens, so an interrupted run reports what it did
                self._count(bytes=stored, pieces=1)
            bar.update(piece_bytes)

        warmed = self.patcher.warm_file(self.export.name, entry.relpath, identity=self.identity,
                                        on_piece=on_piece, stop=self._stop.is_set)
        if self._stop.is_set():
            return
        stored = warmed.pieces
        try:  # the index too: a warm read then opens with one KV round trip
            self._index(entry)
        except FluxonFsDecodeError as exc:
            self._not_video(entry, exc)  # its bytes are warm; it counts as not video only
            return
        self._count(**({"done": 1} if stored else {"skipped": 1}))

    # ---- the pool ----

    def _not_video(self, entry: FluxonFsFileEntry, exc: FluxonFsDecodeError) -> None:
        reason = str(exc).removeprefix(f"{self.export.name}:{entry.relpath}: ")
        with self._lock:
            self.report.not_video.append((entry.relpath, reason))

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self.report, name, getattr(self.report, name) + delta)

    def _run(self, entries: Iterable[FluxonFsFileEntry],
             work: Callable[[FluxonFsFileEntry], None]) -> None:
        t0 = time.perf_counter()
        entries = list(entries)
        self.report.files = len(entries)
        executor = concurrent.futures.ThreadPoolExecutor(self.workers, "fluxon-bulk")
        futures = {executor.submit(self._guarded, work, e): e for e in entries}
        try:
            for _ in concurrent.futures.as_completed(futures):
                pass
        except KeyboardInterrupt:
            self._stop.set()
            self.report.interrupted = True
            executor.shutdown(wait=True, cancel_futures=True)
        else:
            executor.shutdown(wait=True)
        self.report.seconds = time.perf_counter() - t0

    def _guarded(self, work: Callable[[FluxonFsFileEntry], None], entry: FluxonFsFileEntry) -> None:
        if self._stop.is_set():
            return
        try:
            work(entry)
        except FluxonFsError as exc:
            # The relpath is said once, by the report: not again in the message.
            message = str(exc).removeprefix(f"{self.export.name}:{entry.relpath}: ")
            with self._lock:
                self.report.errors.append((entry.relpath, message))
