/* FFmpeg log routing that never touches Python: error lines are kept per
 * thread so exceptions can quote FFmpeg's own reason; nothing is printed
 * unless fx_avlog_set_forward_level asked for it. */
#ifndef FLUXON_AVLOG_H
#define FLUXON_AVLOG_H

void fx_avlog_install(void);
void fx_avlog_set_forward_level(int level);
int fx_avlog_get_forward_level(void);
void fx_avlog_clear(void);
const char *fx_avlog_last_error(void);

#endif
