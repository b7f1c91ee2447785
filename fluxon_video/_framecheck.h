/* Pictures a decoder output without writing them whole, seen from outside it.
 *
 * A decoder that loses the rest of a damaged slice may still output the
 * picture: HEVC's ends the slice where the garbage says it ends, and the
 * coding tree blocks after it keep whatever the pooled buffer held before
 * (another frame's pixels, which depend on what was decoded earlier), with
 * no error, no flag and no log line. To see that, the pipeline's decoder
 * gets its buffers through fx_framecheck_get_buffer2: FFmpeg's default
 * allocator, then an 8-byte stamp in every 16x16 cell of the luma plane, 4
 * samples in from its left and 8 rows down, where no in-loop filter of a
 * neighbouring block reaches. Decoding a block overwrites the stamps inside
 * it; fx_framecheck_unwritten counts the stamps left in a frame's picture.
 *
 * Plain C: the callback runs on the decoder's threads, never calls Python. */
#ifndef FLUXON_FRAMECHECK_H
#define FLUXON_FRAMECHECK_H

#include <libavcodec/avcodec.h>

/* Whether codec is one whose decoder writes every pixel of every picture it
 * outputs from an undamaged stream into a buffer from get_buffer2 (h264,
 * hevc, vp8, vp9): only those get the stamps. */
int fx_framecheck_applies(const AVCodec *codec);
/* Installs the stamping allocator on avctx (before avcodec_open2). */
void fx_framecheck_install(AVCodecContext *avctx);
/* How many stamps are left inside frame's picture (0: every 16x16 cell of
 * it was written); when some are, says so in an error line logged for
 * log_ctx (NULL: none). Only for frames of an avctx it was installed on. */
int fx_framecheck_unwritten(void *log_ctx, const AVFrame *frame);

#endif
