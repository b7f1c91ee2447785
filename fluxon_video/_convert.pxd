from libc.stdint cimport int64_t, uint8_t

from fluxon_video._progress cimport DecodeProgress
from fluxon_video.libav.avutil cimport AVFrame
from fluxon_video.libav.swscale cimport SwsContext


# Orientation of output frames (what the ffmpeg CLI's autorotate inserts):
# transpose, then mirror x and/or y. Output pixel (x, y) is input pixel
# (u, v) = (y, x) if TRANSPOSE else (x, y), mirrored where asked.
cdef enum:
    FX_ORIENT_TRANSPOSE = 1
    FX_ORIENT_MIRROR_X = 2
    FX_ORIENT_MIRROR_Y = 4


# A cached SwsContext and the inputs it was built for; a change rebuilds it.
cdef struct fx_converter:
    SwsContext *sws
    int src_w, src_h, src_fmt, dst_w, dst_h, colorspace, color_range
    uint8_t *scratch       # padded rows for unscaled conversions
    size_t scratch_size
    int scratch_stride
    int orient             # FX_ORIENT_* bits; 0: the coded orientation
    AVFrame *oriented      # the frame turned upright, before conversion


# Where decoded target frames go: slot i of an NHWC uint8 buffer.
cdef struct FrameSink:
    fx_converter *converter  # NULL: decode only, convert nothing (the decode floor)
    uint8_t *out
    int height
    int width
    int64_t frame_bytes


cdef int fx_convert(fx_converter *c, AVFrame *f, uint8_t *dst, int height, int width) noexcept nogil
cdef void fx_converter_free(fx_converter *c) noexcept nogil
cdef void fx_sink_init(FrameSink *sink, fx_converter *converter, uint8_t *out, int height,
                       int width) noexcept nogil
cdef int fx_sink_put(FrameSink *sink, AVFrame *f, int64_t slot, DecodeProgress *p) noexcept nogil
