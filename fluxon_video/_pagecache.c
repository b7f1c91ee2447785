#include "_pagecache.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- LRU list of READY pages (caller holds mu) ---- */

static void lru_unlink(fx_page *e) {
    e->lru_prev->lru_next = e->lru_next;
    e->lru_next->lru_prev = e->lru_prev;
    e->lru_prev = e->lru_next = NULL;
}

static void lru_push_front(fx_pagecache *pc, fx_page *e) {
    e->lru_prev = &pc->lru;
    e->lru_next = pc->lru.lru_next;
    pc->lru.lru_next->lru_prev = e;
    pc->lru.lru_next = e;
}

static void page_free(fx_page *e) {
    if (e) {
        free(e->data);
        free(e);
    }
}

static void evict_over_capacity(fx_pagecache *pc) {
    while (pc->ready_pages > pc->capacity_pages) {
        fx_page *victim = pc->lru.lru_prev;
        if (victim == &pc->lru) break;
        lru_unlink(victim);
        pc->slots[victim->index] = NULL;
        pc->ready_pages--;
        pc->stats.evictions++;
        if (victim->ahead) pc->stats.ahead_wasted++;
        page_free(victim);
    }
}

/* ---- job queue (caller holds mu) ---- */

static void job_push(fx_pagecache *pc, fx_page *e, int urgent) {
    e->job_next = NULL;
    if (!pc->job_head) {
        pc->job_head = pc->job_tail = e;
    } else if (urgent) {
        e->job_next = pc->job_head;
        pc->job_head = e;
    } else {
        pc->job_tail->job_next = e;
        pc->job_tail = e;
    }
    pthread_cond_signal(&pc->job_queued);
}

static void job_promote(fx_pagecache *pc, fx_page *e) {
    /* A reader now waits for a speculative job: move it to the front. */
    fx_page *prev = NULL, *it = pc->job_head;
    while (it && it != e) {
        prev = it;
        it = it->job_next;
    }
    if (!it || it == pc->job_head) return;
    prev->job_next = e->job_next;
    if (pc->job_tail == e) pc->job_tail = prev;
    e->job_next = pc->job_head;
    pc->job_head = e;
}

static void job_unlink(fx_pagecache *pc, fx_page *e) {
    fx_page *prev = NULL, *it = pc->job_head;
    while (it && it != e) {
        prev = it;
        it = it->job_next;
    }
    if (!it) return;
    if (prev) prev->job_next = e->job_next;
    else pc->job_head = e->job_next;
    if (pc->job_tail == e) pc->job_tail = prev;
    e->job_next = NULL;
}

static fx_page *queue_page(fx_pagecache *pc, int64_t index, int speculative) {
    fx_page *e = calloc(1, sizeof(fx_page));
    if (!e) return NULL;
    e->index = index;
    e->state = FX_PAGE_QUEUED;
    e->from_readahead = speculative;
    pc->slots[index] = e;
    job_push(pc, e, !speculative);
    if (speculative) pc->stats.readahead_pages++;
    return e;
}

/* ---- life cycle ---- */

fx_pagecache *fx_pagecache_new(int64_t file_size, int64_t page_size, int64_t capacity_bytes,
                               int readahead_pages, int64_t wait_timeout_ms) {
    if (file_size < 0 || page_size <= 0 || capacity_bytes <= 0 || readahead_pages < 0)
        return NULL;
    fx_pagecache *pc = calloc(1, sizeof(fx_pagecache));
    if (!pc) return NULL;
    pc->file_size = file_size;
    pc->page_size = page_size;
    pc->num_pages = (file_size + page_size - 1) / page_size;
    pc->capacity_pages = capacity_bytes / page_size;
    /* Readahead must never evict the page being read. */
    if (pc->capacity_pages < readahead_pages + 2) pc->capacity_pages = readahead_pages + 2;
    pc->readahead_pages = readahead_pages;
    pc->wait_timeout_ms = wait_timeout_ms;
    pc->slots = calloc(pc->num_pages ? pc->num_pages : 1, sizeof(fx_page *));
    if (!pc->slots) {
        free(pc);
        return NULL;
    }
    pc->lru.lru_next = pc->lru.lru_prev = &pc->lru;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&pc->mu, NULL);
    pthread_cond_init(&pc->page_changed, &attr);
    pthread_cond_init(&pc->job_queued, &attr);
    pthread_condattr_destroy(&attr);
    return pc;
}

void fx_pagecache_shutdown(fx_pagecache *pc) {
    pthread_mutex_lock(&pc->mu);
    pc->closed = 1;
    pthread_cond_broadcast(&pc->page_changed);
    pthread_cond_broadcast(&pc->job_queued);
    pthread_mutex_unlock(&pc->mu);
}

void fx_pagecache_free(fx_pagecache *pc) {
    if (!pc) return;
    for (int64_t i = 0; i < pc->num_pages; i++) page_free(pc->slots[i]);
    free(pc->slots);
    for (int64_t i = 0; i < pc->n_extents; i++) free(pc->extents[i].data);
    free(pc->extents);
    pthread_cond_destroy(&pc->page_changed);
    pthread_cond_destroy(&pc->job_queued);
    pthread_mutex_destroy(&pc->mu);
    free(pc);
}

/* ---- fetch worker side ---- */

int64_t fx_pagecache_next_job(fx_pagecache *pc, int64_t max_pages, int64_t *page,
                              int64_t *offset, int64_t *length) {
    pthread_mutex_lock(&pc->mu);
    while (!pc->closed && !pc->job_head) pthread_cond_wait(&pc->job_queued, &pc->mu);
    if (pc->closed) {
        pthread_mutex_unlock(&pc->mu);
        return 0;
    }
    fx_page *e = pc->job_head;
    pc->job_head = e->job_next;
    if (!pc->job_head) pc->job_tail = NULL;
    e->job_next = NULL;
    e->state = FX_PAGE_FETCHING;
    /* Asked for before an outside wait ended (note_wait): that round trip's. */
    e->job_seq = e->outside_trip ? 0 : ++pc->jobs_started;
    /* Claimed under the same lock as the first page: a second worker woken by
     * the same queueing cannot split the run by taking page+1 in between. */
    int64_t taken = 1;
    for (int64_t p = e->index + 1; p < pc->num_pages && taken < max_pages; p++) {
        fx_page *f = pc->slots[p];
        if (!f || f->state != FX_PAGE_QUEUED) break;
        job_unlink(pc, f);
        f->state = FX_PAGE_FETCHING;
        f->job_seq = e->job_seq;
        taken++;
    }
    *page = e->index;
    *offset = e->index * pc->page_size;
    int64_t end = *offset + taken * pc->page_size;
    *length = (end < pc->file_size ? end : pc->file_size) - *offset;
    pthread_mutex_unlock(&pc->mu);
    return taken;
}

void fx_pagecache_complete(fx_pagecache *pc, int64_t page, const uint8_t *data, int64_t len,
                           int failed) {
    uint8_t *copy = NULL;
    if (!failed) {
        /* Copy outside the lock: readers keep going on other pages meanwhile. */
        copy = malloc(len ? len : 1);
        if (!copy) failed = 1;
        else memcpy(copy, data, len);
    }
    pthread_mutex_lock(&pc->mu);
    fx_page *e = (page >= 0 && page < pc->num_pages) ? pc->slots[page] : NULL;
    if (!e || e->state != FX_PAGE_FETCHING || pc->closed) {
        pthread_mutex_unlock(&pc->mu);
        free(copy);
        return;
    }
    if (failed) {
        e->state = FX_PAGE_FAILED;
        pc->stats.fetch_errors++;
    } else {
        e->data = copy;
        e->len = len;
        e->state = FX_PAGE_READY;
        lru_push_front(pc, e);
        pc->ready_pages++;
        pc->stats.pages_fetched++;
        pc->stats.bytes_fetched += len;
        evict_over_capacity(pc);
    }
    pthread_cond_broadcast(&pc->page_changed);
    pthread_mutex_unlock(&pc->mu);
}

/* ---- reader side (FFmpeg callbacks, GIL released) ---- */

void fx_cursor_init(fx_cursor *c) {
    memset(c, 0, sizeof(*c));
    c->last_page = -1;
    c->err_page = -1;
}

/* The first extent that ends after pos (it may start after pos), or NULL. */
static const fx_extent *next_extent(const fx_pagecache *pc, int64_t pos) {
    int64_t lo = 0, hi = pc->n_extents;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (pc->extents[mid].offset + pc->extents[mid].len <= pos) lo = mid + 1;
        else hi = mid;
    }
    return lo < pc->n_extents ? &pc->extents[lo] : NULL;
}

/* The whole page is in one extent: nothing to fetch for it. */
static int page_in_extent(const fx_pagecache *pc, int64_t page) {
    if (!pc->n_extents) return 0;
    int64_t start = page * pc->page_size, end = start + pc->page_size;
    if (end > pc->file_size) end = pc->file_size;
    const fx_extent *x = next_extent(pc, start);
    return x && x->offset <= start && end <= x->offset + x->len;
}

static void queue_readahead(fx_pagecache *pc, const fx_cursor *c, int64_t page) {
    int64_t end = pc->num_pages;
    if (c->readahead_end > 0) {
        int64_t limit = (c->readahead_end + pc->page_size - 1) / pc->page_size;
        if (limit < end) end = limit;
    }
    for (int64_t q = page + 1; q <= page + pc->readahead_pages && q < end; q++) {
        if (!pc->slots[q] && !page_in_extent(pc, q) && !queue_page(pc, q, 1)) return;
    }
}

static int wait_for_change(fx_pagecache *pc, const struct timespec *deadline) {
    if (pc->wait_timeout_ms <= 0) return pthread_cond_wait(&pc->page_changed, &pc->mu);
    return pthread_cond_timedwait(&pc->page_changed, &pc->mu, deadline);
}

/* Waits until page is READY; returns it, or NULL with c->error set. */
static fx_page *acquire_page(fx_pagecache *pc, fx_cursor *c, int64_t page) {
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += pc->wait_timeout_ms / 1000;
    deadline.tv_nsec += (pc->wait_timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    int counted = 0;
    for (;;) {
        if (pc->closed) {
            c->error = FX_ERR_CLOSED;
            return NULL;
        }
        fx_page *e = pc->slots[page];
        if (!e) {
            e = queue_page(pc, page, 0);
            if (!e) {
                c->error = FX_ERR_NOMEM;
                return NULL;
            }
        }
        if (e->ahead) {
            e->ahead = 0;
            pc->stats.ahead_hits++;
        }
        if (e->state == FX_PAGE_READY) {
            if (!counted) {
                pc->stats.page_hits++;
            } else {
                /* One round trip per wait for a job that started after the previous
                 * wait ended: pages of one job, and jobs in flight together,
                 * arrive in the same round trip. */
                if (e->job_seq > pc->jobs_at_last_wait) pc->stats.fetch_waits++;
                pc->jobs_at_last_wait = pc->jobs_started;
            }
            return e;
        }
        if (!counted) {
            pc->stats.page_misses++;
            counted = 1;
        }
        if (e->state == FX_PAGE_FAILED) {
            if (e->from_readahead && !e->retried) {
                /* Nobody asked for it when it failed; give the demand one try. */
                e->state = FX_PAGE_QUEUED;
                e->from_readahead = 0;
                e->retried = 1;
                job_push(pc, e, 1);
                continue;
            }
            pc->slots[page] = NULL; /* the next read call retries */
            page_free(e);
            c->error = FX_ERR_FETCH;
            c->err_page = page;
            return NULL;
        }
        if (e->state == FX_PAGE_QUEUED && e->from_readahead) {
            e->from_readahead = 0;
            job_promote(pc, e);
        }
        e->from_readahead = 0;
        if (wait_for_change(pc, &deadline) == ETIMEDOUT && pc->slots[page] &&
            pc->slots[page]->state != FX_PAGE_READY && pc->slots[page]->state != FX_PAGE_FAILED) {
            c->error = FX_ERR_TIMEOUT;
            c->err_page = page;
            return NULL;
        }
    }
}

static int extent_cmp(const void *a, const void *b) {
    int64_t x = ((const fx_extent *)a)->offset, y = ((const fx_extent *)b)->offset;
    return (x > y) - (x < y);
}

int fx_pagecache_add_extents(fx_pagecache *pc, const int64_t *offsets, const int64_t *lens,
                             const uint8_t *const *datas, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (offsets[i] < 0 || lens[i] <= 0 || offsets[i] + lens[i] > pc->file_size) return -1;
    }
    if (n == 0) return 0;
    /* Only this function replaces the set (callers take turns): reading it
     * here without the lock sees what the last call installed. */
    int64_t total = pc->n_extents + n, groups = 0;
    fx_extent *parts = malloc((size_t)total * sizeof(fx_extent));  /* borrowed data */
    fx_extent *xs = calloc((size_t)total, sizeof(fx_extent));
    if (!parts || !xs) {
        free(parts);
        free(xs);
        return -2;
    }
    if (pc->n_extents) memcpy(parts, pc->extents, (size_t)pc->n_extents * sizeof(fx_extent));
    for (int64_t i = 0; i < n; i++) {
        fx_extent *x = &parts[pc->n_extents + i];
        x->offset = offsets[i];
        x->len = lens[i];
        x->data = (uint8_t *)datas[i];
    }
    qsort(parts, (size_t)total, sizeof(fx_extent), extent_cmp);
    /* Ranges that overlap or touch become one: they are the same file's bytes. */
    for (int64_t i = 0; i < total; i++) {
        fx_extent *last = groups ? &xs[groups - 1] : NULL;
        if (last && parts[i].offset <= last->offset + last->len) {
            int64_t end = parts[i].offset + parts[i].len;
            if (end > last->offset + last->len) last->len = end - last->offset;
        } else {
            xs[groups].offset = parts[i].offset;
            xs[groups].len = parts[i].len;
            groups++;
        }
    }
    for (int64_t i = 0; i < groups; i++) {
        xs[i].data = malloc((size_t)xs[i].len);
        if (!xs[i].data) {
            for (int64_t j = 0; j < i; j++) free(xs[j].data);
            free(parts);
            free(xs);
            return -2;
        }
    }
    for (int64_t i = 0, g = 0; i < total; i++) {
        while (parts[i].offset >= xs[g].offset + xs[g].len) g++;
        memcpy(xs[g].data + (parts[i].offset - xs[g].offset), parts[i].data, (size_t)parts[i].len);
    }
    free(parts);
    /* Readers copy from extents under the lock only: the old set can go once
     * the new one is in place. */
    pthread_mutex_lock(&pc->mu);
    fx_extent *old = pc->extents;
    int64_t n_old = pc->n_extents;
    pc->extents = xs;
    pc->n_extents = groups;
    pthread_mutex_unlock(&pc->mu);
    for (int64_t i = 0; i < n_old; i++) free(old[i].data);
    free(old);
    return 0;
}

int64_t fx_pagecache_peek(fx_pagecache *pc, int64_t offset, uint8_t *buf, int64_t n) {
    if (offset < 0 || n < 0 || offset + n > pc->file_size) return -1;
    pthread_mutex_lock(&pc->mu);
    int64_t done = 0;
    while (done < n) {
        int64_t pos = offset + done, k;
        const fx_extent *x = pc->n_extents ? next_extent(pc, pos) : NULL;
        if (x && x->offset <= pos) {
            k = x->offset + x->len - pos;
            if (k > n - done) k = n - done;
            memcpy(buf + done, x->data + (pos - x->offset), (size_t)k);
        } else {
            int64_t page = pos / pc->page_size;
            fx_page *e = pc->slots[page];
            if (!e || e->state != FX_PAGE_READY) break;
            int64_t off = pos - page * pc->page_size;
            k = e->len - off;
            if (k > n - done) k = n - done;
            if (x && pos + k > x->offset) k = x->offset - pos;
            memcpy(buf + done, e->data + off, (size_t)k);
        }
        done += k;
    }
    pthread_mutex_unlock(&pc->mu);
    return done == n ? n : -1;
}

void fx_pagecache_note_wait(fx_pagecache *pc) {
    pthread_mutex_lock(&pc->mu);
    pc->stats.fetch_waits++;
    pc->jobs_at_last_wait = pc->jobs_started;
    for (fx_page *e = pc->job_head; e; e = e->job_next) e->outside_trip = 1;
    pthread_mutex_unlock(&pc->mu);
}

int64_t fx_pagecache_read(fx_pagecache *pc, fx_cursor *c, uint8_t *buf, int64_t n) {
    if (c->error) return -1;
    if (c->zero_fill) {
        int64_t k = pc->file_size - c->pos;
        if (k > n) k = n;
        if (k < 0) k = 0;
        memset(buf, 0, (size_t)k);
        c->pos += k;
        c->read_calls++;
        return k;
    }
    int64_t done = 0;
    pthread_mutex_lock(&pc->mu);
    c->read_calls++;
    const fx_extent *x = pc->n_extents ? next_extent(pc, c->pos) : NULL;
    if (x && x->offset <= c->pos) {
        /* A short read: FFmpeg asks again at the extent's end if it needs more. */
        done = x->offset + x->len - c->pos;
        if (done > n) done = n;
        memcpy(buf, x->data + (c->pos - x->offset), (size_t)done);
        c->pos += done;
        n = done;
    } else if (x && c->pos + n > x->offset) {
        n = x->offset - c->pos;  /* stop where the extent starts: never fetch its pages */
    }
    while (done < n && c->pos < pc->file_size) {
        int64_t page = c->pos / pc->page_size;
        if (page != c->last_page) {
            /* With bytes in hand, never wait for the next page: FFmpeg fills its
             * buffer past what it needs; it asks again if it wants more, so no
             * page is fetched for bytes the demuxer never looks at. */
            if (done > 0 && (!pc->slots[page] || pc->slots[page]->state != FX_PAGE_READY))
                break;
            /* Entering the next page in order means a forward scan: fetch ahead. */
            int sequential = page == c->last_page + 1;
            fx_page *e = acquire_page(pc, c, page);
            if (!e) break;
            if (sequential) queue_readahead(pc, c, page);
            c->last_page = page;
        }
        fx_page *e = pc->slots[page];
        if (!e || e->state != FX_PAGE_READY) {
            /* Evicted since last touched (cache smaller than the working set). */
            c->last_page = -2;
            continue;
        }
        int64_t off = c->pos - page * pc->page_size;
        int64_t k = e->len - off;
        if (k > n - done) k = n - done;
        memcpy(buf + done, e->data + off, (size_t)k);
        if (e != pc->lru.lru_next) {
            lru_unlink(e);
            lru_push_front(pc, e);
        }
        done += k;
        c->pos += k;
    }
    pthread_mutex_unlock(&pc->mu);
    if (c->error) return -1;
    c->bytes_read += done;
    return done;
}

int64_t fx_pagecache_prefetch(fx_pagecache *pc, int64_t offset, int64_t length, int64_t max_pages,
                              int planned) {
    int64_t queued = 0;
    if (offset < 0) offset = 0;
    if (length <= 0 || offset >= pc->file_size) return 0;
    int64_t last = (offset + length - 1) / pc->page_size;
    if (last >= pc->num_pages) last = pc->num_pages - 1;
    /* Never queue more than the cache can hold next to the page being read. */
    if (max_pages > pc->capacity_pages - 2) max_pages = pc->capacity_pages - 2;
    pthread_mutex_lock(&pc->mu);
    for (int64_t q = offset / pc->page_size; q <= last && queued < max_pages && !pc->closed; q++) {
        if (pc->slots[q] || page_in_extent(pc, q)) continue;
        fx_page *e = queue_page(pc, q, 1);
        if (!e) break;
        e->ahead = 1;
        e->planned = planned;
        pc->stats.ahead_pages++;
        queued++;
    }
    pthread_mutex_unlock(&pc->mu);
    return queued;
}

int64_t fx_pagecache_cancel_speculative(fx_pagecache *pc, int include_planned) {
    int64_t dropped = 0;
    pthread_mutex_lock(&pc->mu);
    fx_page *prev = NULL, *e = pc->job_head;
    while (e) {
        fx_page *next = e->job_next;
        if (e->from_readahead && e->state == FX_PAGE_QUEUED && (include_planned || !e->planned)) {
            if (prev) prev->job_next = next;
            else pc->job_head = next;
            if (pc->job_tail == e) pc->job_tail = prev;
            if (e->ahead) pc->stats.ahead_wasted++;
            pc->slots[e->index] = NULL;
            page_free(e);
            dropped++;
        } else {
            prev = e;
        }
        e = next;
    }
    pc->stats.readahead_cancelled += dropped;
    pthread_mutex_unlock(&pc->mu);
    return dropped;
}

void fx_pagecache_get_stats(fx_pagecache *pc, fx_cache_stats *out) {
    pthread_mutex_lock(&pc->mu);
    *out = pc->stats;
    pthread_mutex_unlock(&pc->mu);
}

int64_t fx_pagecache_cached_pages(fx_pagecache *pc) {
    pthread_mutex_lock(&pc->mu);
    int64_t n = pc->ready_pages;
    pthread_mutex_unlock(&pc->mu);
    return n;
}

int64_t fx_pagecache_fetch_waits(fx_pagecache *pc) {
    pthread_mutex_lock(&pc->mu);
    int64_t n = pc->stats.fetch_waits;
    pthread_mutex_unlock(&pc->mu);
    return n;
}
