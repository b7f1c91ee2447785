"""Small concurrency tools of the client: one fetch per key, bounded background work,
and state built once per process."""

from __future__ import annotations

import concurrent.futures
import os
import queue
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

# Serialises building per-process state (PerProcess); a fresh one in a forked
# child, where a thread of the parent may have held it at the fork.
_build_lock = threading.RLock()


def _new_build_lock() -> None:
    global _build_lock
    _build_lock = threading.RLock()


os.register_at_fork(after_in_child=_new_build_lock)


class PerProcess(Generic[T]):
    """A value built on first use in each process (after a fork too), by one thread.

    Double-checked: the common call reads one attribute; only the first calls
    of a process take the lock, so threads racing to a fresh client (a
    DataLoader worker's first batch) share one state instead of each building
    one whose threads would then leak.
    """

    def __init__(self, build: Callable[[], T]) -> None:
        self._build = build
        self._value: tuple[int, T] | None = None

    def get(self) -> T:
        value = self._value
        if value is not None and value[0] == os.getpid():
            return value[1]
        with _build_lock:
            value = self._value
            if value is None or value[0] != os.getpid():
                value = self._value = (os.getpid(), self._build())
            return value[1]

    def take(self) -> T | None:
        """This process's value, forgotten (to close it); None if none was built here."""
        with _build_lock:
            value, self._value = self._value, None
        return value[1] if value is not None and value[0] == os.getpid() else None


class SingleFlight:
    """Runs one call per key at a time; concurrent callers share its result."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[Hashable, concurrent.futures.Future[Any]] = {}

    def do(self, key: Hashable, fn: Callable[[], T]) -> tuple[T, bool]:
        """(result, ran): ran is False when another caller's result was shared."""
        with self._lock:
            future = self._calls.get(key)
            leader = future is None
            if leader:
                future = self._calls[key] = concurrent.futures.Future()
        if not leader:
            return future.result(), False
        try:
            result = fn()
        except BaseException as exc:
            future.set_exception(exc)
            raise
        else:
            future.set_result(result)
            return result, True
        finally:
            with self._lock:
                del self._calls[key]


class PendingWrites:
    """Bytes on their way into the KV, held in this process from the fetch that
    brings them until the write that stores them is over.

    The write is in the background (a backfill, an index blob), so a reader
    of the same piece in the meantime (a second reader of the file: a split
    read, a scan racing the first reader's backfill) would miss in the KV and
    fetch it again; it takes the bytes here instead, waiting for a fetch
    still in flight. Held no longer than the write's queue holds its job.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, concurrent.futures.Future[bytes]] = {}

    def expect(self, keys: list[str]) -> dict[str, concurrent.futures.Future[bytes]]:
        """Futures for the keys nobody holds yet (the caller fetches them: it
        sets each one, or fails it, and releases it once stored)."""
        with self._lock:
            made = {key: concurrent.futures.Future() for key in keys if key not in self._held}
            self._held.update(made)
        return made

    def hold(self, key: str, data: bytes) -> concurrent.futures.Future[bytes]:
        """Hold data under key now, in place of anything held there."""
        future: concurrent.futures.Future[bytes] = concurrent.futures.Future()
        future.set_result(data)
        with self._lock:
            self._held[key] = future
        return future

    def get(self, key: str, timeout: float) -> bytes | None:
        """The bytes held for key, once fetched; None if none are (or the fetch failed)."""
        with self._lock:
            future = self._held.get(key)
        if future is None:
            return None
        try:
            return future.result(timeout)
        except Exception:  # noqa: BLE001 - its fetcher raises it; this reader fetches again
            return None

    def release(self, key: str, future: concurrent.futures.Future[bytes]) -> None:
        """Stop holding future (if it is still what key holds)."""
        with self._lock:
            if self._held.get(key) is future:
                del self._held[key]

    def write_then_release(self, key: str, future: concurrent.futures.Future[bytes],
                           write: Callable[[], object]) -> None:
        """``write()`` (it stores key's bytes in the KV), then stop holding future
        whatever it did: the background job of a write whose bytes are held."""
        try:
            write()
        finally:
            self.release(key, future)


class Backfiller:
    """Bounded, deduplicated background work; drops jobs when the queue is full."""

    def __init__(self, workers: int, queue_size: int) -> None:
        self._queue: queue.Queue[tuple[str, Callable[[], None]] | None] = queue.Queue(queue_size)
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, name=f"fluxon-backfill-{i}", daemon=True)
                         for i in range(workers)]
        for thread in self._threads:
            thread.start()
        self.done = 0

    def submit(self, key: str, job: Callable[[], None]) -> bool | None:
        """True queued, None already pending, False dropped (queue full)."""
        with self._lock:
            if key in self._pending:
                return None
            try:
                self._queue.put_nowait((key, job))
            except queue.Full:
                return False
            self._pending.add(key)
            return True

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            key, job = item
            try:
                job()
                self.done += 1
            except Exception:  # noqa: BLE001 - a backfill is an optimisation; reads retry
                pass
            finally:
                with self._lock:
                    self._pending.discard(key)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """For tests and demos: wait until nothing is queued or running."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._pending:
                    return True
            time.sleep(0.005)
        return False

    def close(self) -> None:
        for _ in self._threads:
            try:
                self._queue.put_nowait(None)
            except queue.Full:
                break
        for thread in self._threads:
            thread.join(timeout=5)
