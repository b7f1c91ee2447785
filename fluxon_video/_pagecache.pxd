# Declarations of the C page cache (_pagecache.h); logic lives in _pagecache.c.
from libc.stdint cimport int64_t, uint8_t


cdef extern from "_pagecache.h" nogil:
    cdef enum fx_read_error:
        FX_OK
        FX_ERR_FETCH
        FX_ERR_TIMEOUT
        FX_ERR_CLOSED
        FX_ERR_NOMEM

    ctypedef struct fx_cache_stats:
        int64_t page_hits
        int64_t page_misses
        int64_t pages_fetched
        int64_t bytes_fetched
        int64_t readahead_pages
        int64_t readahead_cancelled
        int64_t ahead_pages
        int64_t ahead_hits
        int64_t ahead_wasted
        int64_t evictions
        int64_t fetch_errors
        int64_t fetch_waits

    ctypedef struct fx_cursor:
        int64_t pos
        int64_t last_page
        int error
        int64_t err_page
        int64_t read_calls
        int64_t seek_calls
        int64_t bytes_read
        int zero_fill
        int64_t readahead_end

    ctypedef struct fx_pagecache:
        int64_t file_size
        int64_t page_size
        int64_t num_pages
        int64_t capacity_pages
        int readahead_pages

    fx_pagecache *fx_pagecache_new(int64_t file_size, int64_t page_size, int64_t capacity_bytes,
                                   int readahead_pages, int64_t wait_timeout_ms)
    void fx_pagecache_shutdown(fx_pagecache *pc)
    void fx_pagecache_free(fx_pagecache *pc)
    int64_t fx_pagecache_next_job(fx_pagecache *pc, int64_t max_pages, int64_t *page,
                                  int64_t *offset, int64_t *length)
    void fx_pagecache_complete(fx_pagecache *pc, int64_t page, const uint8_t *data, int64_t len,
                               int failed)
    void fx_cursor_init(fx_cursor *c)
    int64_t fx_pagecache_read(fx_pagecache *pc, fx_cursor *c, uint8_t *buf, int64_t n)
    int fx_pagecache_add_extents(fx_pagecache *pc, const int64_t *offsets, const int64_t *lens,
                                 const uint8_t *const *datas, int64_t n)
    int64_t fx_pagecache_peek(fx_pagecache *pc, int64_t offset, uint8_t *buf, int64_t n)
    void fx_pagecache_note_wait(fx_pagecache *pc)
    int64_t fx_pagecache_prefetch(fx_pagecache *pc, int64_t offset, int64_t length,
                                  int64_t max_pages, int planned)
    int64_t fx_pagecache_cancel_speculative(fx_pagecache *pc, int include_planned)
    void fx_pagecache_get_stats(fx_pagecache *pc, fx_cache_stats *out)
    int64_t fx_pagecache_cached_pages(fx_pagecache *pc)
    int64_t fx_pagecache_fetch_waits(fx_pagecache *pc)
