/*
 * Reader-level page cache behind FFmpeg's AVIOContext callbacks.
 *
 * Plain C with pthreads, no Python: the read path (fx_pagecache_read) runs
 * inside FFmpeg callbacks with the GIL released. Pages that are not cached are
 * queued as jobs; fetch workers (Python threads, see _avio.pyx) take jobs with
 * fx_pagecache_next_job, fetch the bytes from the range source and hand them
 * back with fx_pagecache_complete. A reader waiting for a page sleeps on a
 * condition variable.
 *
 * Page life cycle: absent -> QUEUED -> FETCHING -> READY (in the LRU) or
 * FAILED (kept until a reader sees the failure). Only READY pages are evicted.
 */
#ifndef FLUXON_PAGECACHE_H
#define FLUXON_PAGECACHE_H

#include <pthread.h>
#include <stdint.h>

enum fx_page_state {
    FX_PAGE_QUEUED = 0,
    FX_PAGE_FETCHING = 1,
    FX_PAGE_READY = 2,
    FX_PAGE_FAILED = 3,
};

/* Why a read stopped early; the caller maps it to an exception. */
enum fx_read_error {
    FX_OK = 0,
    FX_ERR_FETCH = 1,   /* the range source failed for err_page */
    FX_ERR_TIMEOUT = 2, /* no fetch worker delivered err_page in time */
    FX_ERR_CLOSED = 3,  /* the cache was shut down while waiting */
    FX_ERR_NOMEM = 4,
};

typedef struct fx_page {
    int64_t index;
    int state;
    int from_readahead; /* queued speculatively, nobody waited for it yet */
    int retried;        /* a failed readahead page gets one demand retry */
    int ahead;          /* queued by fx_pagecache_prefetch and not read yet (lookahead) */
    int planned;        /* queued for a planned read (a lookahead, an index scan): a
                         * decoder's seek does not drop it, only an explicit cancel */
    int64_t job_seq;    /* which fetch job carries it: jobs are numbered as they start */
    int outside_trip;   /* queued before an outside wait ended: part of that round trip */
    uint8_t *data;
    int64_t len;
    struct fx_page *lru_prev, *lru_next; /* READY pages */
    struct fx_page *job_next;            /* QUEUED pages */
} fx_page;

typedef struct fx_cache_stats {
    int64_t page_hits;       /* page READY when a read touched it */
    int64_t page_misses;     /* page absent or still in flight */
    int64_t pages_fetched;   /* completed fetch jobs */
    int64_t bytes_fetched;   /* bytes delivered by the range source */
    int64_t readahead_pages; /* jobs queued speculatively */
    int64_t readahead_cancelled;
    int64_t evictions;
    int64_t fetch_errors;
    int64_t fetch_waits;     /* waits for a job that started after the previous wait ended */
    int64_t ahead_pages;     /* pages fx_pagecache_prefetch queued (a plan's, ahead of its reads) */
    int64_t ahead_hits;      /* of them, pages a read then touched */
    int64_t ahead_wasted;    /* of them, pages evicted or cancelled before any read touched them */
} fx_cache_stats;

/* Per-AVIOContext read position and error slot. */
typedef struct fx_cursor {
    int64_t pos;
    int64_t last_page; /* -1 before the first read */
    int error;         /* sticky fx_read_error once a read failed */
    int64_t err_page;
    int64_t read_calls;
    int64_t seek_calls;
    int64_t bytes_read;
    /* Index scans of containers whose sample table is already parsed read
     * packets only for their metadata: with zero_fill set, reads return
     * zeros without touching the cache, so no payload byte is fetched. */
    int zero_fill;
    /* Sequential readahead stops at this byte offset (0: no limit): the
     * decoder knows where the packets it needs end. */
    int64_t readahead_end;
} fx_cursor;

/* Bytes known before any page is fetched (the container header a frame index
 * recorded): reads inside an extent are served from it and never wait. */
typedef struct fx_extent {
    int64_t offset;
    int64_t len;
    uint8_t *data;
} fx_extent;

typedef struct fx_pagecache {
    pthread_mutex_t mu;
    pthread_cond_t page_changed; /* readers wait here */
    pthread_cond_t job_queued;   /* fetch workers wait here */
    int64_t file_size;
    int64_t page_size;
    int64_t num_pages;
    int64_t capacity_pages;
    int readahead_pages;
    int64_t wait_timeout_ms; /* <= 0: wait forever */
    fx_page **slots;         /* num_pages entries, NULL when absent */
    fx_page lru;             /* sentinel; most recently used at lru.lru_next */
    int64_t ready_pages;
    fx_page *job_head, *job_tail;
    int closed;
    int64_t jobs_started;    /* fetch jobs taken by workers so far */
    int64_t jobs_at_last_wait; /* jobs_started when the last wait ended */
    fx_extent *extents;      /* sorted by offset, disjoint */
    int64_t n_extents;
    fx_cache_stats stats;
} fx_pagecache;

/* Returns NULL on bad arguments or out of memory. */
fx_pagecache *fx_pagecache_new(int64_t file_size, int64_t page_size, int64_t capacity_bytes,
                               int readahead_pages, int64_t wait_timeout_ms);
/* Wakes every waiter and worker; later reads fail with FX_ERR_CLOSED. Idempotent. */
void fx_pagecache_shutdown(fx_pagecache *pc);
/* Frees everything. Call once, after every worker has returned. */
void fx_pagecache_free(fx_pagecache *pc);

/* Blocks until a job is available or the cache is shut down (returns 0). The
 * job is the first queued page plus the queued pages right after it (page+1,
 * page+2, ... while queued, at most max_pages in all), so one range fetch
 * serves them all (one pipelined KV read, one agent read for a run of misses).
 * Returns how many pages it holds; they are FETCHING and *offset, *length
 * cover them all. Complete each page. */
int64_t fx_pagecache_next_job(fx_pagecache *pc, int64_t max_pages, int64_t *page,
                              int64_t *offset, int64_t *length);
/* Delivers a job's bytes (copied) or its failure (data NULL, failed 1). */
void fx_pagecache_complete(fx_pagecache *pc, int64_t page, const uint8_t *data, int64_t len,
                           int failed);

void fx_cursor_init(fx_cursor *c);
/* Copies up to n bytes at c->pos into buf, waiting for pages as needed.
 * Returns the bytes copied (0 at EOF) or -1 with c->error set. */
int64_t fx_pagecache_read(fx_pagecache *pc, fx_cursor *c, uint8_t *buf, int64_t n);

/* Adds extents (copied; in any order, inside the file) to those set before;
 * ranges that overlap or touch are joined. The cache keeps the only copy.
 * Returns 0, -1 for bad extents (nothing changes), -2 out of memory. Calls
 * must not run at the same time. */
int fx_pagecache_add_extents(fx_pagecache *pc, const int64_t *offsets, const int64_t *lens,
                             const uint8_t *const *datas, int64_t n);
/* Copies [offset, offset+n) into buf if every byte of it is in an extent or a
 * cached page, without waiting or touching the statistics; returns n, or -1
 * if any page is not. */
int64_t fx_pagecache_peek(fx_pagecache *pc, int64_t offset, uint8_t *buf, int64_t n);
/* A reader waited for bytes fetched outside the cache (an extent read from the
 * range source): one more round trip, and jobs started or queued before it
 * ended (asked for at the same time, however late a worker takes them) belong
 * to it. */
void fx_pagecache_note_wait(fx_pagecache *pc);

/* Queue the absent pages of [offset, offset+length) as speculative jobs, at
 * most max_pages of them; returns how many were queued. planned: for a read
 * planned ahead (kept by a decoder's seek, see below). */
int64_t fx_pagecache_prefetch(fx_pagecache *pc, int64_t offset, int64_t length, int64_t max_pages,
                              int planned);
/* Drop speculative jobs no worker has started: the decoder's own (a far seek
 * made them moot), and with include_planned the planned ones too (the plan
 * changed). */
int64_t fx_pagecache_cancel_speculative(fx_pagecache *pc, int include_planned);

void fx_pagecache_get_stats(fx_pagecache *pc, fx_cache_stats *out);
int64_t fx_pagecache_cached_pages(fx_pagecache *pc);
/* stats.fetch_waits, read under the lock. */
int64_t fx_pagecache_fetch_waits(fx_pagecache *pc);

#endif
