#include "_framecheck.h"

#include <libavutil/log.h>
#include <libavutil/pixdesc.h>
#include <string.h>

#define FX_CELL 16      /* smallest block every codec here writes whole */
#define FX_STAMP_ROW 8  /* the stamp's row within its cell */
#define FX_STAMP_COL 4  /* its first sample within the cell */

/* Irregular bytes: no flat, gradient or periodic picture holds them. */
static const uint8_t STAMP[8] = {0x5a, 0x03, 0xc1, 0x7e, 0x19, 0xe4, 0x36, 0x8b};

int fx_framecheck_applies(const AVCodec *codec) {
    static const char *const names[] = {"h264", "hevc", "vp8", "vp9"};
    if (!codec || !(codec->capabilities & AV_CODEC_CAP_DR1)) return 0;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(codec->name, names[i]) == 0) return 1;
    return 0;
}

/* Bytes per luma sample of a planar software format (0: not one we stamp). */
static int luma_step(int format) {
    const AVPixFmtDescriptor *desc = av_pix_fmt_desc_get(format);
    const uint64_t unusual = AV_PIX_FMT_FLAG_HWACCEL | AV_PIX_FMT_FLAG_PAL |
                             AV_PIX_FMT_FLAG_BITSTREAM;
    if (!desc || desc->nb_components < 1 || (desc->flags & unusual) ||
        !(desc->flags & AV_PIX_FMT_FLAG_PLANAR) || desc->comp[0].plane != 0)
        return 0;
    int step = desc->comp[0].step;
    return step == 1 || step == 2 ? step : 0;
}

/* The stamps of the plane that starts at base (linesize bytes a row, step
 * bytes a sample), each checked or written. Only stamps inside
 * [x0, x0 + w) x [y0, y0 + h) (bytes, rows) are visited; *cells counts them.
 * Returns how many of them were intact (checking). */
static int visit(uint8_t *base, int linesize, int step, int x0, int y0, int w, int h, int write,
                 int *cells) {
    int intact = 0, n = 0;
    int first_row = y0 + ((FX_STAMP_ROW - y0 % FX_CELL) + FX_CELL) % FX_CELL;
    int cell = FX_CELL * step;
    for (int y = first_row; y < y0 + h; y += FX_CELL) {
        uint8_t *row = base + (ptrdiff_t)y * linesize;
        int x = x0 + ((cell - x0 % cell) % cell); /* the first cell boundary at or after x0 */
        for (; x + cell <= x0 + w; x += cell, n++) {
            uint8_t *at = row + x + FX_STAMP_COL * step;
            if (write)
                memcpy(at, STAMP, sizeof(STAMP));
            else
                intact += memcmp(at, STAMP, sizeof(STAMP)) == 0;
        }
    }
    *cells = n;
    return intact;
}

static int get_buffer2(AVCodecContext *avctx, AVFrame *frame, int flags) {
    int ret = avcodec_default_get_buffer2(avctx, frame, flags);
    if (ret < 0) return ret;
    int step = luma_step(frame->format), cells;
    if (step && frame->data[0] && frame->buf[0] && frame->linesize[0] > 0)
        visit(frame->data[0], frame->linesize[0], step, 0, 0, frame->width * step, frame->height, 1,
              &cells);
    return 0;
}

void fx_framecheck_install(AVCodecContext *avctx) {
    avctx->get_buffer2 = get_buffer2;
}

int fx_framecheck_unwritten(void *log_ctx, const AVFrame *frame) {
    int step = luma_step(frame->format), cells;
    if (!step || !frame->data[0] || !frame->buf[0] || frame->linesize[0] <= 0) return 0;
    /* Cropping moved data[0] into the buffer; the stamps sit on the buffer's grid. */
    uint8_t *base = frame->buf[0]->data;
    ptrdiff_t off = frame->data[0] - base;
    if (off < 0 || (size_t)off >= frame->buf[0]->size) return 0;
    int y0 = (int)(off / frame->linesize[0]), x0 = (int)(off % frame->linesize[0]);
    int n = visit(base, frame->linesize[0], step, x0, y0, frame->width * step, frame->height, 0,
                  &cells);
    if (n && log_ctx)
        av_log(log_ctx, AV_LOG_ERROR,
               "the decoder output a picture with %d of its %d 16x16 blocks unwritten "
               "(damaged data it did not report)\n", n, cells);
    return n;
}
