# cython: language_level=3
"""The byte source FFmpeg reads through.

ByteSource binds a range source (any object with ``read_range(offset, length)
-> bytes``) and a fixed file size to a C page cache. FFmpeg's AVIOContext
read/seek callbacks below are plain C: they copy from cached pages and, on a
miss, queue a fetch job and sleep on a condition variable, without the GIL.
Fetch workers are Python threads that take jobs, call the range source with
the GIL, and hand the bytes to the cache. A failed fetch keeps its exception
here until the decoder raises it after FFmpeg returns.
"""
import atexit
import os
import threading
import weakref

from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.errno cimport EINVAL, EIO, ETIMEDOUT
from libc.stdint cimport int64_t, uint8_t
from libc.stdio cimport SEEK_CUR, SEEK_END, SEEK_SET
from libc.stdlib cimport calloc, free, malloc

from fluxon_video._pagecache cimport (
    FX_ERR_CLOSED, FX_ERR_FETCH, FX_ERR_NOMEM, FX_ERR_TIMEOUT, fx_cache_stats, fx_cursor,
    fx_cursor_init, fx_pagecache, fx_pagecache_cached_pages, fx_pagecache_complete,
    fx_pagecache_cancel_speculative, fx_pagecache_free, fx_pagecache_get_stats,
    fx_pagecache_fetch_waits, fx_pagecache_new, fx_pagecache_next_job, fx_pagecache_note_wait,
    fx_pagecache_peek, fx_pagecache_prefetch, fx_pagecache_read, fx_pagecache_add_extents,
    fx_pagecache_shutdown,
)
from fluxon_video.libav.avformat cimport (
    AVIOContext, AVSEEK_FORCE, AVSEEK_SIZE, avio_alloc_context, avio_context_free,
)
from fluxon_video.libav.avutil cimport AVERROR, AVERROR_EOF, av_freep, av_malloc

from fluxon_video import defaults, errors

DEFAULT_PAGE_SIZE = defaults.PAGE_SIZE
DEFAULT_CACHE_BYTES = 64 << 20
DEFAULT_READAHEAD_PAGES = 2
DEFAULT_FETCH_WORKERS = 2
DEFAULT_FETCH_TIMEOUT_S = 120.0
# Exceptions of failures a later successful fetch superseded, kept for a
# reader that saw the failure but has not asked for its exception yet.
cdef int RECOVERED_ERRORS_KEPT = 16
# Most pages one fetch job carries: the queued pages right after a job's page
# are fetched with it (16 x 256 KiB = 4 MiB at the default page size).
cdef int64_t MAX_BATCH_PAGES = 16
# FFmpeg's own read buffer in front of the page cache.
cdef int AVIO_BUFFER_SIZE = 64 << 10

# Every live source, so interpreter exit can wake their workers.
_live_sources = weakref.WeakSet()


@atexit.register
def _shutdown_all_sources():
    for source in list(_live_sources):
        source.close()


cdef class _FetchCore:
    """Owns the C page cache; shared by the ByteSource and its fetch workers.

    Workers keep this object (not the ByteSource) alive, so a ByteSource that
    is dropped without close() still shuts its workers down from __dealloc__,
    and the cache is freed only after the last worker returned.
    """

    def __cinit__(self, object read_range, int64_t size, int64_t page_size,
                  int64_t cache_bytes, int readahead_pages, int64_t timeout_ms, str name):
        self.pc = fx_pagecache_new(size, page_size, cache_bytes, readahead_pages, timeout_ms)
        if self.pc == NULL:
            raise MemoryError(f"{name}: cannot allocate the page cache")
        self.read_range = read_range
        self.fetch_errors = {}
        self.recovered_errors = {}
        self.name = name
        self.pid = os.getpid()

    def __dealloc__(self):
        # After fork the child holds a copy whose mutex and condition variables
        # may look locked or waited on: destroying them could block, so the
        # copy is left alone (it is copy-on-write memory of the parent's).
        if self.pc != NULL and self.pid == os.getpid():
            fx_pagecache_free(self.pc)
        self.pc = NULL

    def run_worker(self):
        cdef int64_t page = 0, offset = 0, length = 0, pages = 0, k, page_len, at
        cdef int64_t page_size = self.pc.page_size
        cdef const uint8_t[::1] view
        while True:
            with nogil:
                # The queued pages right after the first ride along: one range
                # read serves them all (one pipelined KV read, one agent read).
                pages = fx_pagecache_next_job(self.pc, MAX_BATCH_PAGES, &page, &offset, &length)
            if pages == 0:
                return
            try:
                data = self.read_range(offset, length)
                view = memoryview(data).cast("B")
                if view.shape[0] != length:
                    cls = (errors.FluxonFsShortReadError if view.shape[0] < length
                           else errors.FluxonFsIOError)
                    raise cls(f"{self.name}: the source returned {view.shape[0]} bytes "
                              f"for {length} bytes at offset {offset}")
            except BaseException as exc:
                for k in range(page, page + pages):
                    # Record first: a waiting reader looks the exception up as
                    # soon as the page turns FAILED.
                    self.fetch_errors[k] = exc
                    self.recovered_errors.pop(k, None)
                    with nogil:
                        fx_pagecache_complete(self.pc, k, NULL, 0, 1)
                continue
            for k in range(page, page + pages):
                # The page is good now: an earlier failure of it (a readahead
                # nobody waited for, or one a reader already reported) is not
                # kept for good. A reader that saw that failure but has not
                # taken its exception yet still finds it among the last few
                # recovered.
                exc = self.fetch_errors.pop(k, None)
                if exc is not None:
                    self.recovered_errors[k] = exc
                    while len(self.recovered_errors) > RECOVERED_ERRORS_KEPT:
                        del self.recovered_errors[next(iter(self.recovered_errors))]
                    exc = None
                at = (k - page) * page_size
                page_len = min(page_size, length - at)
                with nogil:
                    fx_pagecache_complete(self.pc, k, &view[at] if page_len else NULL, page_len, 0)
            view = None


cdef class ByteSource:
    """A file of fixed size, read through a page cache filled by fetch workers."""

    def __cinit__(self, object range_source, int64_t size, *,
                  int64_t page_size=DEFAULT_PAGE_SIZE,
                  int64_t cache_bytes=DEFAULT_CACHE_BYTES,
                  int readahead_pages=DEFAULT_READAHEAD_PAGES,
                  int fetch_workers=DEFAULT_FETCH_WORKERS,
                  double fetch_timeout_s=DEFAULT_FETCH_TIMEOUT_S,
                  str name=None):
        self.name = name or getattr(range_source, "name", None) or repr(range_source)
        if size < 0:
            raise errors.FluxonFsConfigError(f"{self.name}: size must be >= 0, got {size}")
        if page_size <= 0 or cache_bytes <= 0:
            raise errors.FluxonFsConfigError(
                f"{self.name}: page_size and cache_bytes must be positive")
        if readahead_pages < 0 or fetch_workers <= 0:
            raise errors.FluxonFsConfigError(
                f"{self.name}: readahead_pages must be >= 0 and fetch_workers > 0")
        read_range = getattr(range_source, "read_range", None)
        if not callable(read_range):
            raise TypeError(f"{self.name}: a range source needs a read_range(offset, length) method")
        self.size = size
        self.page_size = page_size
        self.pid = os.getpid()
        self.range_source = range_source
        self.core = _FetchCore(read_range, size, page_size, cache_bytes, readahead_pages,
                               int(fetch_timeout_s * 1000), self.name)
        self.workers = []
        for i in range(fetch_workers):
            worker = threading.Thread(target=self.core.run_worker, daemon=True,
                                      name=f"fluxon-fetch-{i}")
            worker.start()
            self.workers.append(worker)
        _live_sources.add(self)

    def __dealloc__(self):
        # Never joins here: wake the workers and let them drop the core.
        if self.core is not None and self.core.pc != NULL and self.pid == os.getpid():
            fx_pagecache_shutdown(self.core.pc)

    def close(self):
        """Stop the fetch workers and refuse further reads. Safe to call twice."""
        if self.closed:
            return
        self.closed = True
        if os.getpid() == self.pid:  # a forked child must not touch the parent's state
            fx_pagecache_shutdown(self.core.pc)
            current = threading.current_thread()
            for worker in self.workers:
                if worker is not current:
                    worker.join()
        self.workers = []

    @property
    def is_closed(self):
        return self.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    cdef fx_pagecache *pagecache(self) except NULL:
        if self.closed:
            raise errors.FluxonFsClosedError(f"{self.name}: the byte source is closed")
        if os.getpid() != self.pid:
            raise errors.FluxonFsClosedError(
                f"{self.name}: the byte source was created in process {self.pid} and its "
                f"fetch workers do not exist after fork; open a new one in this process")
        return self.core.pc

    cdef object fetch_error(self, fx_cursor *cursor):
        """The exception for a failed read on cursor, or None."""
        cdef int code = cursor.error
        if code == 0:
            return None
        if code == FX_ERR_FETCH:
            exc = self.core.fetch_errors.pop(cursor.err_page, None)
            if exc is None:
                exc = self.core.recovered_errors.pop(cursor.err_page, None)
            if exc is not None:
                return exc
            return errors.FluxonFsIOError(f"{self.name}: fetching page {cursor.err_page} failed")
        if code == FX_ERR_TIMEOUT:
            return errors.FluxonFsTimeoutError(
                f"{self.name}: page {cursor.err_page} (offset "
                f"{cursor.err_page * self.page_size}) did not arrive in time")
        if code == FX_ERR_CLOSED:
            return errors.FluxonFsClosedError(f"{self.name}: the byte source was closed during a read")
        if code == FX_ERR_NOMEM:
            return MemoryError(f"{self.name}: out of memory in the page cache")
        return errors.FluxonFsIOError(f"{self.name}: read failed ({code})")

    def stats(self):
        """Cumulative page cache counters."""
        cdef fx_cache_stats s
        fx_pagecache_get_stats(self.core.pc, &s)
        return {
            "page_hits": s.page_hits,
            "page_misses": s.page_misses,
            "pages_fetched": s.pages_fetched,
            "bytes_fetched": s.bytes_fetched,
            "readahead_pages": s.readahead_pages,
            "readahead_cancelled": s.readahead_cancelled,
            "evictions": s.evictions,
            "fetch_errors": s.fetch_errors,
            "fetch_waits": s.fetch_waits,
            "ahead_pages": s.ahead_pages,
            "ahead_hits": s.ahead_hits,
            "ahead_wasted": s.ahead_wasted,
            "cached_pages": fx_pagecache_cached_pages(self.core.pc),
        }

    def held_fetch_errors(self):
        """Pages whose failed fetch's exception is still kept (for tests)."""
        return sorted(self.core.fetch_errors)

    def prefetch(self, int64_t offset, int64_t length):
        """Queue the pages of a byte range for the fetch workers; returns how many.
        They are planned: a decoder's seek does not drop them (cancel_prefetch does)."""
        return fx_pagecache_prefetch(self.pagecache(), offset, length, 1 << 30, 1)

    def cancel_prefetch(self):
        """Drop queued prefetch pages no worker has started, planned ones included;
        returns how many."""
        return fx_pagecache_cancel_speculative(self.pagecache(), 1)

    def set_extents(self, extents):
        """Serve these (offset, bytes) ranges without fetching: bytes of this file
        version known in advance (the container header a frame index recorded,
        or a probe of the file's end). Added to those set before: ranges that
        overlap or touch are joined (they are the same file's bytes). The page
        cache keeps the only copy.
        """
        extents = [(int(off), bytes(data)) for off, data in extents if len(data)]
        if any(off < 0 or off + len(data) > self.size for off, data in extents):
            raise ValueError(f"{self.name}: extents must lie inside the file")
        cdef fx_pagecache *pc = self.pagecache()
        cdef int64_t n = len(extents), i
        cdef int64_t *offsets = <int64_t *> malloc(max(n, 1) * sizeof(int64_t))
        cdef int64_t *lens = <int64_t *> malloc(max(n, 1) * sizeof(int64_t))
        cdef const uint8_t **datas = <const uint8_t **> malloc(max(n, 1) * sizeof(uint8_t *))
        cdef int ret
        try:
            if offsets == NULL or lens == NULL or datas == NULL:
                raise MemoryError(f"{self.name}: out of memory setting extents")
            for i in range(n):
                offsets[i] = extents[i][0]
                lens[i] = len(extents[i][1])
                datas[i] = <const uint8_t *> (<bytes> extents[i][1])
            # With the GIL held: two calls never replace the set at once.
            ret = fx_pagecache_add_extents(pc, offsets, lens, datas, n)
        finally:
            free(offsets)
            free(lens)
            free(datas)
        if ret == -2:
            raise MemoryError(f"{self.name}: out of memory setting extents")
        if ret < 0:
            raise ValueError(f"{self.name}: extents must lie inside the file")

    def fetch_extent(self, int64_t offset, int64_t length):
        """Read [offset, offset+length) from the range source now, bypassing the
        pages, and serve it as the extent (see set_extents): a probe for bytes
        the demuxer will ask for soon, fetched alongside the pages already in
        flight. Counted as one round trip. A range source may offer
        ``read_extent(offset, length)`` for reads that are not whole pages.
        Raises what the range source raised."""
        cdef fx_pagecache *pc = self.pagecache()
        if length <= 0 or offset < 0 or offset + length > self.size:
            raise ValueError(f"{self.name}: extent {offset}+{length} outside {self.size} bytes")
        read = getattr(self.range_source, "read_extent", None) or self.range_source.read_range
        data = read(offset, length)
        if len(data) != length:
            raise errors.FluxonFsShortReadError(
                f"{self.name}: the source returned {len(data)} bytes for {length} bytes at "
                f"offset {offset}")
        fx_pagecache_note_wait(pc)
        self.set_extents([(offset, data)])

    def peek(self, int64_t offset, int64_t length):
        """Bytes [offset, offset+length) if every byte of them is in an extent or a
        cached page, else None (never waits, never fetches)."""
        cdef fx_pagecache *pc = self.pagecache()
        if length < 0 or offset < 0 or offset + length > self.size:
            return None
        out = PyBytes_FromStringAndSize(NULL, length)
        if fx_pagecache_peek(pc, offset, <uint8_t *> (<char *> out), length) < 0:
            return None
        return out

    def open_cursor(self):
        """A read/seek cursor driving the same C callbacks FFmpeg uses."""
        return ByteCursor(self)


# ---- FFmpeg AVIOContext callbacks: plain C, no GIL, no Python ----

cdef int _avio_read(void *opaque, uint8_t *buf, int buf_size) noexcept nogil:
    cdef fx_avio_opaque *o = <fx_avio_opaque *> opaque
    cdef int64_t n
    if o.cursor.error:
        return AVERROR(EIO)
    if o.cursor.pos >= o.pc.file_size:
        return AVERROR_EOF
    n = fx_pagecache_read(o.pc, &o.cursor, buf, buf_size)
    if n < 0:
        return AVERROR(ETIMEDOUT) if o.cursor.error == FX_ERR_TIMEOUT else AVERROR(EIO)
    if n == 0:
        return AVERROR_EOF
    return <int> n


cdef int64_t _avio_seek(void *opaque, int64_t offset, int whence) noexcept nogil:
    cdef fx_avio_opaque *o = <fx_avio_opaque *> opaque
    cdef int64_t target
    if whence & AVSEEK_SIZE:
        return o.pc.file_size
    whence &= ~AVSEEK_FORCE
    if whence == SEEK_SET:
        target = offset
    elif whence == SEEK_CUR:
        target = o.cursor.pos + offset
    elif whence == SEEK_END:
        target = o.pc.file_size + offset
    else:
        return AVERROR(EINVAL)
    if target < 0:
        return AVERROR(EINVAL)
    o.cursor.seek_calls += 1
    o.cursor.pos = target
    return target


cdef AVIOContext *fx_avio_open(ByteSource source) except NULL:
    """An AVIOContext reading source; release it with fx_avio_close."""
    cdef fx_pagecache *pc = source.pagecache()
    cdef fx_avio_opaque *o = <fx_avio_opaque *> calloc(1, sizeof(fx_avio_opaque))
    cdef unsigned char *buffer = NULL
    cdef AVIOContext *pb = NULL
    if o == NULL:
        raise MemoryError()
    o.pc = pc
    fx_cursor_init(&o.cursor)
    buffer = <unsigned char *> av_malloc(AVIO_BUFFER_SIZE)
    if buffer != NULL:
        pb = avio_alloc_context(buffer, AVIO_BUFFER_SIZE, 0, o, _avio_read, NULL, _avio_seek)
    if pb == NULL:
        av_freep(&buffer)
        free(o)
        raise MemoryError()
    # Every seek reaches our callback (it costs nothing: it moves the cursor).
    # Otherwise FFmpeg reads through forward seeks shorter than 32 KiB, and
    # could fetch pages the demuxer then skips. (Ogg and NUT need the buffer:
    # _demux.fx_avformat_open turns this off for them.)
    pb.direct = 1
    return pb


cdef int64_t fx_source_prefetch(fx_pagecache *pc, int64_t offset, int64_t length) noexcept nogil:
    """Queue the pages of a byte range the decoder is about to read (speculative)."""
    return fx_pagecache_prefetch(pc, offset, length, 1 << 30, 0)


cdef int64_t fx_source_cancel_prefetch(fx_pagecache *pc) noexcept nogil:
    """Drop the decoder's queued speculative pages: it moved elsewhere (pages
    planned ahead stay: the plan's read comes)."""
    return fx_pagecache_cancel_speculative(pc, 0)


cdef int64_t fx_source_fetch_waits(fx_pagecache *pc) noexcept nogil:
    """Fetch jobs readers waited for so far (each one a round trip)."""
    return fx_pagecache_fetch_waits(pc)


cdef fx_cursor *fx_avio_cursor(AVIOContext *pb) noexcept nogil:
    return &(<fx_avio_opaque *> pb.opaque).cursor


cdef void fx_avio_limit_readahead(AVIOContext *pb, int64_t end) noexcept nogil:
    """Stop sequential readahead at byte end (0: no limit): the caller knows
    where the bytes it needs end."""
    fx_avio_cursor(pb).readahead_end = end


cdef void fx_avio_zero_fill(AVIOContext *pb, bint zero_fill) noexcept nogil:
    """While set, reads return zeros and fetch nothing (see fx_cursor)."""
    fx_avio_cursor(pb).zero_fill = zero_fill


cdef void fx_avio_close(AVIOContext **pb) noexcept nogil:
    """Free the context, its current buffer (FFmpeg may have replaced ours) and opaque."""
    if pb == NULL or pb[0] == NULL:
        return
    free(pb[0].opaque)
    pb[0].opaque = NULL
    av_freep(&pb[0].buffer)
    avio_context_free(pb)


cdef class ByteCursor:
    """Test and debugging access to the AVIO callbacks: read, seek, tell."""
    cdef ByteSource source
    cdef fx_avio_opaque state

    def __cinit__(self, ByteSource source):
        self.source = source
        self.state.pc = source.pagecache()
        fx_cursor_init(&self.state.cursor)

    def read(self, int n):
        """Bytes at the position, like one FFmpeg read callback; b'' at EOF."""
        cdef int got
        self.source.pagecache()
        out = PyBytes_FromStringAndSize(NULL, n)
        cdef uint8_t *buf = <uint8_t *> (<char *> out)
        with nogil:
            got = _avio_read(&self.state, buf, n)
        if got == AVERROR_EOF:
            return b""
        if got < 0:
            raise self.source.fetch_error(&self.state.cursor)
        return out[:got]

    def seek(self, int64_t offset, int whence=SEEK_SET):
        """Same contract as the seek callback, AVSEEK_SIZE included."""
        cdef int64_t res
        with nogil:
            res = _avio_seek(&self.state, offset, whence)
        if res < 0:
            raise ValueError(f"invalid seek ({offset}, {whence})")
        return res

    def tell(self):
        return self.state.cursor.pos

    @property
    def read_calls(self):
        return self.state.cursor.read_calls


AVSEEK_SIZE_FLAG = AVSEEK_SIZE
