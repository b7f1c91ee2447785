/* FFmpeg log routing that never touches Python and prints nothing: the
 * last error line is kept per thread so exceptions can quote FFmpeg's own
 * reason. */
#ifndef FLUXON_AVLOG_H
#define FLUXON_AVLOG_H

void fx_avlog_install(void);
void fx_avlog_clear(void);
const char *fx_avlog_last_error(void);

#endif
