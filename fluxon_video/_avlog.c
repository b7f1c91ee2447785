#include "_avlog.h"

#include <libavutil/log.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static __thread char last_error[512];

static void fx_log_callback(void *avcl, int level, const char *fmt, va_list vl) {
    (void)avcl;
    if (level <= AV_LOG_ERROR) {
        va_list copy;
        va_copy(copy, vl);
        char line[sizeof(last_error)];
        vsnprintf(line, sizeof(line), fmt, copy);
        va_end(copy);
        size_t len = strlen(line);
        while (len && (line[len - 1] == '\n' || line[len - 1] == ' ')) line[--len] = 0;
        if (len) memcpy(last_error, line, len + 1);
    }
}

void fx_avlog_install(void) { av_log_set_callback(fx_log_callback); }
void fx_avlog_clear(void) { last_error[0] = 0; }
const char *fx_avlog_last_error(void) { return last_error; }
