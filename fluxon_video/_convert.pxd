from libc.stdint cimport int64_t, uint8_t

from fluxon_video._progress cimport DecodeProgress
from fluxon_video.libav.avutil cimport AVFrame
from fluxon_video.libav.swscale cimport SwsContext


# A cached SwsContext and the inputs it was built for; a change rebuilds it.
cdef struct fx_converter:
    SwsContext *sws
    int src_w, src_h, src_fmt, dst_w, dst_h, colorspace, color_range
    uint8_t *scratch       # padded rows for unscaled conversions
    size_t scratch_size
    int scratch_stride


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
