"""The byte source: the C page cache and the AVIO callbacks, driven through ByteCursor."""

from __future__ import annotations

import os
import threading
import time
import tracemalloc
from collections import Counter

import pytest

from fluxon_video import errors
from fluxon_video.sources import BytesRangeSource, LocalFileRangeSource
from tests.helpers import RaisingSource, run_in_threads

avio = pytest.importorskip("fluxon_video._avio")

SEEK_SET, SEEK_CUR, SEEK_END = os.SEEK_SET, os.SEEK_CUR, os.SEEK_END
PAGE = 4096
DATA = os.urandom(PAGE * 5 + 123)  # not a whole number of pages


class CountingSource(BytesRangeSource):
    """Counts calls per offset; optionally slow, to make concurrent misses overlap."""

    def __init__(self, data: bytes, delay: float = 0.0) -> None:
        super().__init__(data, "counting")
        self.calls: Counter[int] = Counter()
        self.pages_read: Counter[int] = Counter()  # pages covered by the calls (PAGE-sized)
        self.delay = delay
        self._lock = threading.Lock()

    def read_range(self, offset: int, length: int) -> bytes:
        with self._lock:
            self.calls[offset] += 1
            for page in range(offset // PAGE, (offset + max(length, 1) - 1) // PAGE + 1):
                self.pages_read[page] += 1
        if self.delay:
            time.sleep(self.delay)
        return super().read_range(offset, length)


class ShortSource(BytesRangeSource):
    def read_range(self, offset: int, length: int) -> bytes:
        return super().read_range(offset, length)[:-1]


def read_n(cursor, n: int) -> bytes:
    """Read as FFmpeg's avio_read does: call again until n bytes or EOF (a read
    returns short at a page that is not cached yet)."""
    out = b""
    while len(out) < n and (chunk := cursor.read(n - len(out))):
        out += chunk
    return out


def make(source, **kw):
    kw.setdefault("page_size", PAGE)
    kw.setdefault("readahead_pages", 0)
    return avio.ByteSource(source, source.size, **kw)


def test_read_whole_file_in_odd_chunks_across_pages():
    with make(BytesRangeSource(DATA)) as bs:
        cur = bs.open_cursor()
        chunks = []
        while chunk := cur.read(1000):
            chunks.append(chunk)
        assert b"".join(chunks) == DATA
        assert cur.read(10) == b""  # EOF stays EOF
        assert cur.tell() == len(DATA)


def test_a_read_spanning_pages_never_waits_once_it_has_bytes():
    source = CountingSource(DATA)
    with make(source) as bs:
        cur = bs.open_cursor()
        cur.seek(PAGE - 10)
        # Page 0 arrives; page 1 is not there: the read returns what it has
        # (FFmpeg asks again if it wants more) and fetches nothing for it.
        assert cur.read(PAGE * 2 + 20) == DATA[PAGE - 10:PAGE]
        assert sorted(source.pages_read) == [0]
        assert cur.read(PAGE * 2 + 10) == DATA[PAGE:PAGE * 2]
        bs.prefetch(PAGE * 2, PAGE * 2)
        deadline = time.monotonic() + 5
        while bs.peek(PAGE * 2, PAGE * 2) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        # Cached pages: one read spans them.
        cur.seek(PAGE - 10)
        assert cur.read(PAGE * 3) == DATA[PAGE - 10:PAGE * 4 - 10]


def test_seek_whence_modes_and_size():
    with make(BytesRangeSource(DATA)) as bs:
        cur = bs.open_cursor()
        assert cur.seek(0, avio.AVSEEK_SIZE_FLAG) == len(DATA)
        assert cur.seek(100, SEEK_SET) == 100
        assert cur.read(5) == DATA[100:105]
        assert cur.seek(10, SEEK_CUR) == 115
        assert cur.read(5) == DATA[115:120]
        assert cur.seek(-7, SEEK_END) == len(DATA) - 7
        assert cur.read(100) == DATA[-7:]  # short at EOF: what is left
        assert cur.read(100) == b""
        assert cur.seek(len(DATA) + 50) == len(DATA) + 50  # past EOF is allowed...
        assert cur.read(10) == b""  # ...and reads as EOF
        with pytest.raises(ValueError):
            cur.seek(-1, SEEK_SET)


def test_repeat_read_is_served_by_the_cache():
    src = CountingSource(DATA)
    with make(src) as bs:
        first = read_n(bs.open_cursor(), len(DATA))
        after_first = bs.stats()
        second = read_n(bs.open_cursor(), len(DATA))
        after_second = bs.stats()
    assert first == second == DATA
    assert after_first["page_misses"] == 6 and after_first["bytes_fetched"] == len(DATA)
    assert after_second["page_hits"] - after_first["page_hits"] == 6
    assert after_second["page_misses"] == after_first["page_misses"]
    assert after_second["bytes_fetched"] == after_first["bytes_fetched"]
    assert all(n == 1 for n in src.calls.values())


def test_concurrent_misses_for_one_page_are_fetched_once():
    src = CountingSource(DATA, delay=0.2)
    with make(src, fetch_workers=4) as bs:
        results = []
        start = threading.Barrier(6)

        def read(_):
            cur = bs.open_cursor()
            cur.seek(PAGE + 7)
            start.wait()
            results.append(cur.read(100))

        assert run_in_threads(read, 6) == []
    assert results == [DATA[PAGE + 7:PAGE + 107]] * 6
    assert src.calls == Counter({PAGE: 1})


def test_sequential_reads_trigger_bounded_readahead():
    src = CountingSource(DATA)
    with make(src, readahead_pages=2) as bs:
        cur = bs.open_cursor()
        cur.read(10)  # page 0: a forward scan from the start
        deadline = time.time() + 5
        while bs.stats()["pages_fetched"] < 3 and time.time() < deadline:
            time.sleep(0.01)
        stats = bs.stats()
    assert stats["readahead_pages"] == 2
    # Pages 0-2, each fetched once (queued neighbours may share one range read).
    assert src.pages_read == Counter({0: 1, 1: 1, 2: 1})


def test_random_access_does_not_read_ahead():
    with make(BytesRangeSource(DATA), readahead_pages=2) as bs:
        cur = bs.open_cursor()
        cur.seek(3 * PAGE)
        cur.read(10)
        cur.seek(0)
        cur.read(10)
        assert bs.stats()["readahead_pages"] == 0


def test_cache_is_bounded_and_evicts_least_recently_used():
    src = CountingSource(DATA)
    with make(src, cache_bytes=2 * PAGE) as bs:
        cur = bs.open_cursor()
        assert read_n(cur, len(DATA)) == DATA
        stats = bs.stats()
        assert stats["cached_pages"] == 2
        assert stats["evictions"] == 4
        # The two most recent pages are still there, the first one is gone.
        cur = bs.open_cursor()
        cur.seek(len(DATA) - 10)
        cur.read(10)
        assert bs.stats()["page_hits"] == stats["page_hits"] + 1
        cur.seek(0)
        cur.read(10)
        assert src.calls[0] == 2


def test_raising_source_surfaces_its_exception():
    with make(RaisingSource(DATA, fail_from=2 * PAGE)) as bs:
        cur = bs.open_cursor()
        assert cur.read(PAGE) == DATA[:PAGE]
        cur.seek(3 * PAGE)
        with pytest.raises(RaisingSource.Boom, match="storage exploded at 12288"):
            cur.read(10)
        # The error is sticky for this cursor (FFmpeg must not see later bytes)...
        with pytest.raises(Exception):
            cur.read(10)
        # ...but a new cursor retries the page rather than caching the failure.
        with pytest.raises(RaisingSource.Boom):
            read_n(bs.open_cursor(), len(DATA))
        assert bs.stats()["fetch_errors"] >= 2


def test_short_source_is_an_error():
    with make(ShortSource(DATA, "short")) as bs:
        with pytest.raises(errors.FluxonFsShortReadError, match="4095 bytes for 4096"):
            bs.open_cursor().read(10)


def test_slow_source_times_out_instead_of_hanging():
    src = CountingSource(DATA, delay=2.0)
    with make(src, fetch_timeout_s=0.2) as bs:
        t0 = time.monotonic()
        with pytest.raises(errors.FluxonFsTimeoutError, match="did not arrive in time"):
            bs.open_cursor().read(10)
        assert time.monotonic() - t0 < 1.5


def test_close_is_idempotent_and_fails_later_reads():
    bs = make(BytesRangeSource(DATA))
    cur = bs.open_cursor()
    bs.close()
    bs.close()
    assert bs.is_closed
    with pytest.raises(errors.FluxonFsClosedError):
        bs.open_cursor()
    with pytest.raises(errors.FluxonFsClosedError):
        cur.read(10)


def test_close_wakes_a_reader_waiting_for_a_page():
    src = CountingSource(DATA, delay=1.0)
    bs = make(src)
    caught = []

    def read():
        try:
            bs.open_cursor().read(10)
        except Exception as exc:  # noqa: BLE001 - recorded for the assertion
            caught.append(exc)

    t = threading.Thread(target=read)
    t.start()
    time.sleep(0.1)
    bs.close()
    t.join(5)
    assert not t.is_alive()
    assert caught and isinstance(caught[0], errors.FluxonFsClosedError)


def test_fetch_workers_stop_on_close_and_when_dropped():
    before = threading.active_count()
    bs = make(BytesRangeSource(DATA), fetch_workers=3)
    assert threading.active_count() == before + 3
    bs.close()
    assert threading.active_count() == before
    dropped = make(BytesRangeSource(DATA), fetch_workers=3)
    del dropped  # no close(): __dealloc__ wakes the workers
    deadline = time.time() + 5
    while threading.active_count() > before and time.time() < deadline:
        time.sleep(0.01)
    assert threading.active_count() == before


def test_local_file_source(tmp_path):
    path = tmp_path / "blob"
    path.write_bytes(DATA)
    with LocalFileRangeSource(path) as src, make(src) as bs:
        assert src.size == len(DATA)
        assert read_n(bs.open_cursor(), len(DATA)) == DATA


def test_bad_arguments():
    src = BytesRangeSource(DATA)
    with pytest.raises(errors.FluxonFsConfigError):
        avio.ByteSource(src, -1)
    with pytest.raises(errors.FluxonFsConfigError):
        avio.ByteSource(src, src.size, page_size=0)
    with pytest.raises(errors.FluxonFsConfigError):
        avio.ByteSource(src, src.size, fetch_workers=0)
    with pytest.raises(TypeError, match="read_range"):
        avio.ByteSource(object(), 10)


def test_extents_are_served_without_fetching_and_reads_stop_at_them():
    source = CountingSource(DATA)
    head, tail = (0, DATA[:100]), (PAGE * 4 + 10, DATA[PAGE * 4 + 10:])
    with avio.ByteSource(source, len(DATA), page_size=PAGE, readahead_pages=0) as bs:
        bs.set_extents([head, tail])
        cursor = bs.open_cursor()
        assert cursor.read(64) == DATA[:64]
        assert cursor.read(PAGE) == DATA[64:100]  # short: the extent ends there
        cursor.seek(PAGE * 4 + 500)
        assert cursor.read(10 * PAGE) == DATA[PAGE * 4 + 500:]
        assert not source.calls
        # A read that runs into an extent stops where it starts; the next one is served from it.
        cursor.seek(PAGE * 4)
        assert cursor.read(PAGE) == DATA[PAGE * 4:PAGE * 4 + 10]
        assert cursor.read(PAGE) == DATA[PAGE * 4 + 10:PAGE * 5 + 10]
        assert source.pages_read == Counter({4: 1})  # the 10 bytes before the tail extent
        cursor.seek(100)
        assert cursor.read(100) == DATA[100:200]  # past the head extent: from the pages


def test_extents_are_checked_and_later_ones_join_the_earlier():
    source = CountingSource(DATA)
    with avio.ByteSource(source, len(DATA), page_size=PAGE, readahead_pages=0) as bs:
        for bad in ([(len(DATA) - 1, b"ab")], [(-1, b"a")]):
            with pytest.raises(ValueError, match="extents"):
                bs.set_extents(bad)
        bs.set_extents([(0, DATA[:10])])
        # Overlapping, touching and separate ranges: all of them are served.
        bs.set_extents([(5, DATA[5:30]), (30, DATA[30:40]), (PAGE * 3, DATA[PAGE * 3:PAGE * 3 + 7])])
        bs.set_extents([(20, DATA[20:25])])  # inside one already there
        assert bs.peek(0, 40) == DATA[:40]
        assert bs.peek(PAGE * 3, 7) == DATA[PAGE * 3:PAGE * 3 + 7]
        cursor = bs.open_cursor()
        assert cursor.read(100) == DATA[:40]  # short: the joined extent ends at 40
        cursor.seek(PAGE * 3)
        assert cursor.read(7) == DATA[PAGE * 3:PAGE * 3 + 7]
        assert not source.calls


def test_extents_in_any_order_join_across_calls():
    source = CountingSource(DATA)
    with avio.ByteSource(source, len(DATA), page_size=PAGE, readahead_pages=0) as bs:
        bs.set_extents([(PAGE * 2, DATA[PAGE * 2:PAGE * 2 + 50]), (100, DATA[100:200])])
        # Unsorted and overlapping within one call, and bridging the two before.
        bs.set_extents([(PAGE, DATA[PAGE:PAGE * 2 + 10]), (150, DATA[150:PAGE + 5])])
        assert bs.peek(100, PAGE * 2 - 50) == DATA[100:PAGE * 2 + 50]
        cursor = bs.open_cursor()
        cursor.seek(100)
        assert cursor.read(3 * PAGE) == DATA[100:PAGE * 2 + 50]  # one extent now
        assert not source.calls


def test_the_page_cache_keeps_the_only_copy_of_extents():
    size = 4 << 20
    source = BytesRangeSource(bytes(size))
    with avio.ByteSource(source, size) as bs:
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            bs.set_extents([(0, bytes(size // 2)), (size // 2, bytes(size // 4))])
            kept = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert kept < size // 16  # not the extents' bytes again beside the C copy
        assert bs.peek(size // 2 - 10, 20) == bytes(20)


@pytest.mark.parametrize("delay", [0.0, 0.05])
def test_a_fetched_extent_is_one_round_trip_with_the_pages_in_flight(delay):
    # Without a delay the extent is read before a worker takes page 0: it was
    # asked for first all the same, so it is the extent's round trip.
    source = CountingSource(DATA, delay=delay)
    tail = len(DATA) - 200
    with avio.ByteSource(source, len(DATA), page_size=PAGE, readahead_pages=0) as bs:
        bs.prefetch(0, 1)  # page 0 on its way while the extent is read
        bs.fetch_extent(tail, 200)
        assert source.calls[tail] == 1 and bs.peek(tail, 200) == DATA[tail:]
        cursor = bs.open_cursor()
        assert read_n(cursor, PAGE) == DATA[:PAGE]
        cursor.seek(tail)
        assert read_n(cursor, 200) == DATA[tail:]
        # Page 0 was asked for before the extent's wait ended: the same round trip.
        assert bs.stats()["fetch_waits"] == 1
        assert sum(source.calls.values()) == 2
        # peek joins pages and the extent.
        assert bs.peek(PAGE * 4, len(DATA) - PAGE * 4) is None  # page 4 not fetched
        cursor.seek(PAGE * 4)
        assert read_n(cursor, tail - PAGE * 4) == DATA[PAGE * 4:tail]
        assert bs.peek(PAGE * 4, len(DATA) - PAGE * 4) == DATA[PAGE * 4:]
        with pytest.raises(ValueError, match="outside"):
            bs.fetch_extent(tail, 201)
    with avio.ByteSource(ShortSource(DATA), len(DATA), page_size=PAGE) as bs:
        with pytest.raises(errors.FluxonFsShortReadError):
            bs.fetch_extent(0, 100)
        assert bs.peek(0, 100) is None  # nothing kept of a short read


def test_peek_returns_only_cached_bytes_and_never_fetches():
    source = CountingSource(DATA)
    with avio.ByteSource(source, len(DATA), page_size=PAGE, readahead_pages=0) as bs:
        assert bs.peek(10, 100) is None
        cursor = bs.open_cursor()
        read_n(cursor, PAGE + 10)  # pages 0 and 1
        assert bs.peek(10, PAGE) == DATA[10:PAGE + 10]
        assert bs.peek(PAGE, PAGE + 1) is None  # reaches page 2
        assert bs.peek(len(DATA), 1) is None
        assert sum(source.calls.values()) == 2


def test_lookahead_pages_are_counted_as_used_or_wasted():
    """Pages prefetch() queued: a read that touches one counts a hit; one dropped
    before any read touched it (cancelled here) counts as wasted."""
    src = CountingSource(DATA, delay=1.0)  # page 0 stays in flight while we cancel
    with make(src, fetch_workers=1) as bs:
        # Pages apart: one fetch job each (a job takes a run of adjacent pages).
        assert [bs.prefetch(page * PAGE, PAGE) for page in (0, 2, 4)] == [1, 1, 1]
        deadline = time.monotonic() + 10
        while not src.calls:  # the worker took page 0: it is in flight, not cancellable
            assert time.monotonic() < deadline
            time.sleep(0.005)
        assert bs.cancel_prefetch() == 2
        assert bs.open_cursor().read(10) == DATA[:10]
        stats = bs.stats()
        assert (stats["ahead_pages"], stats["ahead_hits"], stats["ahead_wasted"]) == (3, 1, 2)
