"""A batch's camera frames: every item's times per video file, read as one
batched read per file, the files decoded in parallel.

LeRobot decodes each item's cameras on their own (a thread per camera);
items of a batch that share a shard file share its reader here, and a frame
several items ask for is decoded once.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from fluxon_video.batch_plan import dataloader_worker
from fluxon_video.errors import FluxonFsError, FluxonFsFrameIndexError
from fluxon_video.lerobot.files import DatasetFiles
from fluxon_video.logs import get_logger
from fluxon_video.reader import FluxonFsVideoReader
from fluxon_video.validation import thread_count

log = get_logger("lerobot")
T = TypeVar("T")


def nearest_frames(reader: FluxonFsVideoReader, times: np.ndarray, tolerance_s: float,
                   name: str) -> np.ndarray:
    """For each time, the frame whose pts is nearest, which must be within
    ``tolerance_s`` (LeRobot's rule: a row whose time no frame is near is an
    error, not another frame)."""
    indices = np.asarray(reader.indices_at_times(times, tolerance_s=tolerance_s), np.int64)
    gap = np.abs(reader.timestamps_s()[indices] - times)
    far = gap > tolerance_s
    if far.any():
        k = int(np.flatnonzero(far)[0])
        raise FluxonFsFrameIndexError(
            f"{name}: no frame within tolerance_s={tolerance_s:g} of {float(times[k])!r} s "
            f"(the nearest is {float(gap[k]):.6g} s away); the row's timestamp and the "
            "video disagree")
    return indices


# Threads of a main process's ShardReaders at most, however many cores it has.
MAIN_PROCESS_THREADS = 4


def _parallel(cameras: int) -> int:
    """ShardReaders' threads in this process (see ShardReaders)."""
    if dataloader_worker() is not None:
        return max(1, cameras)
    return max(1, cameras, min(thread_count("auto"), MAIN_PROCESS_THREADS))


class ShardReaders:
    """The readers of one process, a reader per video file (kept open: a
    worker reads the same few shards all epoch), and the threads that decode
    a batch's files side by side. Fork-safe: a child starts empty.

    The threads: one per camera in a DataLoader worker (the loader's processes
    already share the cores out); outside one (``num_workers=0``, a plain
    ``ds[i]``), at least one per core this process may run on (at most
    MAIN_PROCESS_THREADS), since nothing else decodes the batch's other files
    and images meanwhile."""

    def __init__(self, files: DatasetFiles, tolerance_s: float, num_threads: int,
                 max_readers: int, cameras: int) -> None:
        self.files, self.tolerance_s = files, tolerance_s
        self.num_threads, self.max_readers, self.cameras = num_threads, max_readers, cameras
        self.parallel = _parallel(cameras)
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._readers: OrderedDict[str, tuple[FluxonFsVideoReader, threading.Lock]] = OrderedDict()
        self._executor: ThreadPoolExecutor | None = None
        self._ahead: threading.Thread | None = None

    def _check_fork(self) -> None:
        if self._pid != os.getpid():  # the parent's readers and threads are not ours
            self._pid, self._readers, self._executor = os.getpid(), OrderedDict(), None
            self._lock, self._ahead = threading.Lock(), None
            self.parallel = _parallel(self.cameras)  # a DataLoader worker's, now

    def prefetch(self, wanted: dict[str, np.ndarray], last: Collection[str] = ()) -> None:
        """Start fetching what ``read(wanted)`` will read, on a thread of its own
        (in the caller's context): each file's reader opened, the pages of its
        frames queued on its fetch workers (``reader.prefetch_frames``), within
        its page cache; the files in ``last`` (being read now) after the others.
        A failure is logged: the read of those times says why."""
        self._check_fork()
        self.wait_prefetch()
        ahead = threading.Thread(target=contextvars.copy_context().run,
                                 args=(self._prefetch_all, wanted, last),
                                 daemon=True, name="fluxon-lerobot-ahead")
        self._ahead = ahead
        ahead.start()

    def cancel_prefetch(self) -> int:
        """Drop the pages queued ahead that no fetch worker has started, on every
        reader (after the lookahead has queued); how many."""
        self._check_fork()
        self.wait_prefetch()
        with self._lock:
            entries = list(self._readers.values())
        dropped = 0
        for reader, lock in entries:
            with lock:
                dropped += reader.cancel_prefetch()
        return dropped

    def wait_prefetch(self) -> None:
        """Wait until the lookahead has queued its pages (they arrive later)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.join()

    def _prefetch_all(self, wanted: dict[str, np.ndarray], last: Collection[str]) -> None:
        # No reader lock: prefetch_frames runs beside a read of the same file
        # (its pages queue behind the read's); pages queued are the plan's and
        # survive the read's seeks.
        for relpath in sorted(wanted, key=lambda r: r in last):
            times = wanted[relpath]
            try:
                reader, _ = self._reader(relpath)
                indices = nearest_frames(reader, times, self.tolerance_s, self.files.name(relpath))
                reader.prefetch_frames(np.unique(indices))
            except FluxonFsError as exc:
                log.debug("lookahead of %s failed (%s); its read will say why", relpath, exc)

    def _reader(self, relpath: str) -> tuple[FluxonFsVideoReader, threading.Lock]:
        with self._lock:
            entry = self._readers.get(relpath)
            if entry is not None:
                self._readers.move_to_end(relpath)
                return entry
        reader = self.files.open_reader(relpath, self.num_threads)
        with self._lock:
            entry = self._readers.setdefault(relpath, (reader, threading.Lock()))
            evicted = []
            while len(self._readers) > self.max_readers:
                evicted.append(self._readers.popitem(last=False)[1][0])
        if entry[0] is not reader:
            reader.close()  # another thread opened it first
        for old in evicted:
            old.close()
        return entry

    def read(self, wanted: dict[str, np.ndarray], ahead: dict[str, np.ndarray] | None = None,
             gray: Collection[str] = ()) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """For each video file, its times' frames: (frames of the distinct
        indices, in order; each time's row in them). ``ahead``: the next read's
        times, fetched meanwhile (``prefetch``); the files both read last.
        ``gray``: files of depth cameras, read as their gray samples
        (``read_gray16_numpy``) instead of RGB."""
        self._check_fork()
        if ahead:
            self.prefetch(ahead, last=wanted.keys())
        if len(wanted) <= 1 or self.parallel <= 1:
            return {relpath: self._read_one(relpath, times, relpath in gray)
                    for relpath, times in wanted.items()}
        executor = self._threads()
        futures = {relpath: executor.submit(self._read_one, relpath, times, relpath in gray)
                   for relpath, times in wanted.items()}
        return {relpath: future.result() for relpath, future in futures.items()}

    def map(self, fn: Callable[..., T], tasks: list[tuple[Any, ...]]) -> list[T]:
        """``fn(*task)`` for each task, in order, on the decode threads: for work
        that releases the GIL (turning a batch's frames into tensors)."""
        self._check_fork()
        if len(tasks) <= 1 or self.parallel <= 1:
            return [fn(*task) for task in tasks]
        return list(self._threads().map(lambda task: fn(*task), tasks))

    def _threads(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.parallel,
                                                    thread_name_prefix="fluxon-lerobot")
            return self._executor

    def _read_one(self, relpath: str, times: np.ndarray, gray: bool
                  ) -> tuple[np.ndarray, np.ndarray]:
        reader, lock = self._reader(relpath)
        with lock:
            indices = nearest_frames(reader, times, self.tolerance_s, self.files.name(relpath))
            distinct, rows = np.unique(indices, return_inverse=True)
            frames = reader.read_gray16_numpy(distinct) if gray \
                else reader.read_frames_numpy(distinct)
            return frames, rows.reshape(-1)

    def close(self) -> None:
        """Close the readers and stop the threads (idempotent)."""
        if self._pid == os.getpid():
            self.wait_prefetch()
        with self._lock:
            readers, self._readers = list(self._readers.values()), OrderedDict()
            executor, self._executor = self._executor, None
        if self._pid != os.getpid():
            return  # a forked child's copies: the parent's to close
        if executor is not None:
            executor.shutdown(wait=True)
        for reader, _ in readers:
            reader.close()

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("ShardReaders belong to one process")
