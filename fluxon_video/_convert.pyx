# cython: language_level=3
"""Frame conversion: swscale into RGB24 rows, with the ffmpeg CLI's colour policy.

fx_converter owns one SwsContext, the frame properties it was built for,
and a scratch buffer of padded rows; fx_sink_put is the one place a decoded
target frame becomes pixels in the caller's NHWC buffer, for every decode
path.
"""
from libc.errno cimport EINVAL, ENOMEM
from libc.stdint cimport int64_t, uint8_t
from libc.string cimport memcmp, memcpy, memset

from fluxon_video.libav.avutil cimport (
    AVCOL_RANGE_JPEG, AVCOL_RANGE_UNSPECIFIED, AVCOL_SPC_BT470BG, AVERROR, AV_PIX_FMT_RGB24,
    av_free, av_malloc,
)
from fluxon_video.libav.swscale cimport (
    SWS_BILINEAR, sws_freeContext, sws_getCoefficients, sws_getColorspaceDetails,
    sws_getContext, sws_isSupportedInput, sws_scale, sws_setColorspaceDetails,
)


cdef void fx_converter_free(fx_converter *c) noexcept nogil:
    if c.sws != NULL:
        sws_freeContext(c.sws)
        c.sws = NULL
    av_free(c.scratch)
    c.scratch = NULL
    c.scratch_size = 0


cdef int _build(fx_converter *c, AVFrame *f, int height, int width) noexcept nogil:
    """A SwsContext for f's size, format and colours, scaling to width x height."""
    cdef int cs, src_range, want_range, dst_range, brightness, contrast, saturation
    cdef int *inv_table
    cdef int *table
    cdef const int *want_table
    if c.sws != NULL:
        sws_freeContext(c.sws)
        c.sws = NULL
    if not sws_isSupportedInput(f.format):
        return AVERROR(EINVAL)
    c.sws = sws_getContext(f.width, f.height, f.format, width, height, AV_PIX_FMT_RGB24,
                           SWS_BILINEAR, NULL, NULL, NULL)
    if c.sws == NULL:
        return AVERROR(EINVAL)
    # The frame's own matrix and range, chosen as the ffmpeg CLI's scale filter
    # does, so our pixels match its output bit for bit. Setting them slows
    # swscale's unscaled YUV->RGB converter down, so only do it when they
    # differ from what the context already uses.
    cs = <int> f.colorspace
    if cs < 1 or cs > 10 or cs == 8:
        cs = AVCOL_SPC_BT470BG
    sws_getColorspaceDetails(c.sws, &inv_table, &src_range, &table, &dst_range,
                             &brightness, &contrast, &saturation)
    want_table = sws_getCoefficients(cs)
    want_range = src_range
    if f.color_range != AVCOL_RANGE_UNSPECIFIED:
        want_range = f.color_range == AVCOL_RANGE_JPEG
    if want_range != src_range or memcmp(want_table, inv_table, 4 * sizeof(int)) != 0:
        sws_setColorspaceDetails(c.sws, want_table, want_range, want_table, dst_range,
                                 brightness, contrast, saturation)
    c.src_w = f.width
    c.src_h = f.height
    c.src_fmt = f.format
    c.dst_w = width
    c.dst_h = height
    c.colorspace = <int> f.colorspace
    c.color_range = <int> f.color_range
    return 0


cdef int _ensure_scratch(fx_converter *c, int height, int row_bytes) noexcept nogil:
    cdef int stride = ((row_bytes + 64) + 63) & ~63
    cdef size_t need = <size_t> stride * height + 64
    if need > c.scratch_size:
        av_free(c.scratch)
        c.scratch = <uint8_t *> av_malloc(need)
        c.scratch_size = need if c.scratch != NULL else 0
        if c.scratch == NULL:
            return AVERROR(ENOMEM)
    c.scratch_stride = stride
    return 0


cdef int fx_convert(fx_converter *c, AVFrame *f, uint8_t *dst, int height, int width) noexcept nogil:
    """Scale and convert f to RGB24 rows of stride width*3 at dst."""
    cdef uint8_t *dst_planes[4]
    cdef int dst_strides[4]
    cdef int ret, y
    cdef int row_bytes = width * 3
    if (c.sws == NULL or f.width != c.src_w or f.height != c.src_h or f.format != c.src_fmt
            or width != c.dst_w or height != c.dst_h or <int> f.colorspace != c.colorspace
            or <int> f.color_range != c.color_range):
        ret = _build(c, f, height, width)
        if ret < 0:
            return ret
    memset(dst_planes, 0, sizeof(dst_planes))
    memset(dst_strides, 0, sizeof(dst_strides))
    if f.width == width and f.height == height:
        # swscale's unscaled YUV->RGB converter works in 8-pixel blocks: with a
        # row stride of exactly width*3 it leaves the last width%8 pixels
        # unwritten and stores past the end of a row. Give it padded rows (as
        # the CLI's frames have) and copy them out.
        ret = _ensure_scratch(c, height, row_bytes)
        if ret < 0:
            return ret
        dst_planes[0] = c.scratch
        dst_strides[0] = c.scratch_stride
    else:
        dst_planes[0] = dst
        dst_strides[0] = row_bytes
    if sws_scale(c.sws, <const uint8_t * const *> f.data, f.linesize, 0, f.height,
                 dst_planes, dst_strides) != height:
        return AVERROR(EINVAL)
    if dst_planes[0] != dst:
        for y in range(height):
            memcpy(dst + <int64_t> y * row_bytes, c.scratch + <int64_t> y * c.scratch_stride,
                   row_bytes)
    return 0


cdef void fx_sink_init(FrameSink *sink, fx_converter *converter, uint8_t *out, int height,
                       int width) noexcept nogil:
    sink.converter = converter
    sink.out = out
    sink.height = height
    sink.width = width
    sink.frame_bytes = <int64_t> height * width * 3


cdef int fx_sink_put(FrameSink *sink, AVFrame *f, int64_t slot, DecodeProgress *p) noexcept nogil:
    """Convert target frame f into output slot; 0 or an AVERROR."""
    cdef int ret
    if sink.converter == NULL:
        return 0
    p.failed_call = "sws_scale"
    ret = fx_convert(sink.converter, f, sink.out + slot * sink.frame_bytes, sink.height,
                     sink.width)
    if ret < 0:
        return ret
    p.frames_converted += 1
    return 0
