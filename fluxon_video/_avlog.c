#include "_avlog.h"

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/log.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FX_LINE 512

struct fx_avlog_buf {
    char line[FX_LINE];
    uint64_t seq; /* when line was written (0: empty) */
    uint64_t concealments; /* error-resilience concealments logged, ever */
    struct fx_avlog_buf *next;
};

/* Live buffers: the callback writes into an opaque pointer only if it is one
 * of them, so a context of other code (opaque NULL or its own) is never
 * written through, and a freed buffer never is. Lines are written and read
 * under the lock (decoder threads may log while the owner reads). */
static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static fx_avlog_buf *registry = NULL;
static uint64_t next_seq = 0; /* under registry_mu, or atomically */

static __thread char thread_line[FX_LINE];
static __thread uint64_t thread_seq;

static uint64_t take_seq(void) { return __atomic_add_fetch(&next_seq, 1, __ATOMIC_RELAXED); }

/* The buffer avcl's context points at, or NULL; registry_mu held. */
static fx_avlog_buf *owner_locked(void *avcl) {
    if (!avcl) return NULL;
    const AVClass *cls = *(const AVClass **)avcl;
    void *opaque;
    if (cls == avcodec_get_class())
        opaque = ((AVCodecContext *)avcl)->opaque;
    else if (cls == avformat_get_class())
        opaque = ((AVFormatContext *)avcl)->opaque;
    else
        return NULL;
    if (!opaque) return NULL;
    for (fx_avlog_buf *b = registry; b; b = b->next)
        if (b == opaque) return b;
    return NULL;
}

/* What libavcodec's error resilience logs (at info level) for every frame it
 * conceals damage in: the one trace of that damage a frame-threaded decode
 * leaves (the frame's error flags can be copied out before they are set). */
static const char CONCEALING[] = "concealing ";

static void count_concealment(void *avcl) {
    pthread_mutex_lock(&registry_mu);
    fx_avlog_buf *owner = owner_locked(avcl);
    if (owner) owner->concealments++;
    pthread_mutex_unlock(&registry_mu);
}

static void fx_log_callback(void *avcl, int level, const char *fmt, va_list vl) {
    if (level > AV_LOG_ERROR) {
        if (level == AV_LOG_INFO && fmt && strncmp(fmt, CONCEALING, sizeof(CONCEALING) - 1) == 0)
            count_concealment(avcl);
        return;
    }
    char line[FX_LINE];
    va_list copy;
    va_copy(copy, vl);
    vsnprintf(line, sizeof(line), fmt, copy);
    va_end(copy);
    size_t len = strlen(line);
    while (len && (line[len - 1] == '\n' || line[len - 1] == ' ')) line[--len] = 0;
    if (!len) return;
    pthread_mutex_lock(&registry_mu);
    fx_avlog_buf *owner = owner_locked(avcl);
    if (owner) {
        memcpy(owner->line, line, len + 1);
        owner->seq = take_seq();
    }
    pthread_mutex_unlock(&registry_mu);
    if (!owner) {
        memcpy(thread_line, line, len + 1);
        thread_seq = take_seq();
    }
}

/* A child forked while another thread held the lock must not inherit it locked. */
static void before_fork(void) { pthread_mutex_lock(&registry_mu); }
static void after_fork(void) { pthread_mutex_unlock(&registry_mu); }

void fx_avlog_install(void) {
    static int installed = 0;
    if (!installed) {
        installed = 1;
        pthread_atfork(before_fork, after_fork, after_fork);
    }
    av_log_set_callback(fx_log_callback);
}

void fx_avlog_clear(void) {
    thread_line[0] = 0;
    thread_seq = 0;
}

fx_avlog_buf *fx_avlog_buf_new(void) {
    fx_avlog_buf *b = calloc(1, sizeof(*b));
    if (!b) return NULL;
    pthread_mutex_lock(&registry_mu);
    b->next = registry;
    registry = b;
    pthread_mutex_unlock(&registry_mu);
    return b;
}

void fx_avlog_buf_free(fx_avlog_buf **buf) {
    if (!buf || !*buf) return;
    pthread_mutex_lock(&registry_mu);
    for (fx_avlog_buf **p = &registry; *p; p = &(*p)->next) {
        if (*p == *buf) {
            *p = (*buf)->next;
            break;
        }
    }
    pthread_mutex_unlock(&registry_mu);
    free(*buf);
    *buf = NULL;
}

void fx_avlog_buf_clear(fx_avlog_buf *buf) {
    if (!buf) return;
    pthread_mutex_lock(&registry_mu);
    buf->line[0] = 0;
    buf->seq = 0;
    pthread_mutex_unlock(&registry_mu);
}

uint64_t fx_avlog_concealments(fx_avlog_buf *buf) {
    if (!buf) return 0;
    pthread_mutex_lock(&registry_mu);
    uint64_t n = buf->concealments;
    pthread_mutex_unlock(&registry_mu);
    return n;
}

void fx_avlog_last_error_for(fx_avlog_buf *buf, char *out, size_t size) {
    if (!size) return;
    const char *src = thread_seq ? thread_line : "";
    pthread_mutex_lock(&registry_mu);
    if (buf && buf->seq && buf->seq > thread_seq) src = buf->line;
    snprintf(out, size, "%s", src);
    pthread_mutex_unlock(&registry_mu);
}
