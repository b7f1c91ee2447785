/* FFmpeg log routing that never touches Python and prints nothing: the last
 * error line is kept so exceptions can quote FFmpeg's own reason.
 *
 * A line logged for a codec or format context whose opaque field is a live
 * fx_avlog_buf goes into that buffer, whatever thread logs it: a Pipeline
 * owns one and points its contexts at it, so lines from frame-threading
 * decoder threads (whose context copies keep opaque) reach the Pipeline.
 * Every other line goes into a per-thread buffer. */
#ifndef FLUXON_AVLOG_H
#define FLUXON_AVLOG_H

#include <stddef.h>
#include <stdint.h>

typedef struct fx_avlog_buf fx_avlog_buf;

void fx_avlog_install(void);
/* Clears the calling thread's line. */
void fx_avlog_clear(void);

/* A registered buffer (NULL when out of memory); the log callback writes into
 * it only while it is registered. */
fx_avlog_buf *fx_avlog_buf_new(void);
/* Unregisters and frees *buf, sets it to NULL; NULL is a no-op. Call after the
 * contexts pointing at it are freed (a late line then goes per-thread). */
void fx_avlog_buf_free(fx_avlog_buf **buf);
/* Clears buf's line (NULL: nothing). */
void fx_avlog_buf_clear(fx_avlog_buf *buf);
/* Copies the most recent line logged into buf or on the calling thread
 * ("" if neither holds one) into out, NUL-terminated. buf may be NULL. */
void fx_avlog_last_error_for(fx_avlog_buf *buf, char *out, size_t size);
/* How many frames libavcodec's error resilience said it concealed damage in,
 * for contexts pointing at buf (0 for NULL). */
uint64_t fx_avlog_concealments(fx_avlog_buf *buf);

#endif
