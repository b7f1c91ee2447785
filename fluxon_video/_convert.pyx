# cython: language_level=3
"""Frame conversion: orientation, then swscale into RGB24 rows, with the ffmpeg
CLI's colour policy.

fx_converter owns one SwsContext, the frame properties it was built for, a
scratch buffer of padded rows and a frame for the oriented picture (the CLI
turns frames upright before it scales them, so we do too); fx_sink_put is the one place a decoded
target frame becomes pixels in the caller's NHWC buffer, for every decode
path.
"""
from libc.errno cimport EINVAL, ENOMEM, ENOSYS
from libc.stdint cimport int64_t, uint8_t
from libc.string cimport memcmp, memcpy, memset

from fluxon_video._errors cimport FX_ERROR_OUT_OF_MEMORY
from fluxon_video.libav.avutil cimport (
    AVCOL_RANGE_JPEG, AVCOL_RANGE_UNSPECIFIED, AVCOL_SPC_BT470BG, AVERROR, AVPixFmtDescriptor,
    AV_PIX_FMT_FLAG_BITSTREAM, AV_PIX_FMT_FLAG_HWACCEL, AV_PIX_FMT_FLAG_PAL, AV_PIX_FMT_RGB24,
    av_frame_alloc, av_frame_copy_props, av_frame_free, av_frame_get_buffer, av_frame_unref,
    av_free, av_malloc,
    av_pix_fmt_desc_get,
)
from fluxon_video.libav.swscale cimport (
    SWS_BILINEAR, sws_freeContext, sws_getCoefficients, sws_getColorspaceDetails,
    sws_getContext, sws_isSupportedInput, sws_scale, sws_setColorspaceDetails,
)


cdef void fx_converter_free(fx_converter *c) noexcept nogil:
    av_frame_free(&c.oriented)
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


cdef int _plane_sizes(const AVPixFmtDescriptor *desc, int width, int height, int *widths,
                      int *heights, int *steps) noexcept nogil:
    """Per plane: width and height in pixels and bytes per pixel; returns the plane count."""
    cdef int k, plane, planes = 0
    for k in range(4):
        widths[k] = heights[k] = steps[k] = 0
    for k in range(desc.nb_components):
        plane = desc.comp[k].plane
        planes = plane + 1 if plane + 1 > planes else planes
        if desc.comp[k].step > steps[plane]:
            steps[plane] = desc.comp[k].step
        if k == 1 or k == 2:  # chroma: subsampled, rounding up as FFmpeg does
            widths[plane] = -((-width) >> desc.log2_chroma_w)
            heights[plane] = -((-height) >> desc.log2_chroma_h)
        else:
            widths[plane] = width
            heights[plane] = height
    return planes


cdef int _orient(fx_converter *c, AVFrame *f) noexcept nogil:
    """c.oriented = f transposed and/or mirrored per c.orient (a pixel permutation per plane)."""
    cdef const AVPixFmtDescriptor *desc = av_pix_fmt_desc_get(f.format)
    cdef int widths[4]
    cdef int heights[4]
    cdef int steps[4]
    cdef int planes, plane, ret, x, y, u, v, step, src_w, src_h
    cdef bint transpose = c.orient & FX_ORIENT_TRANSPOSE
    cdef const uint8_t *src
    cdef uint8_t *row
    if desc == NULL or desc.flags & (AV_PIX_FMT_FLAG_PAL | AV_PIX_FMT_FLAG_BITSTREAM
                                     | AV_PIX_FMT_FLAG_HWACCEL):
        return AVERROR(ENOSYS)
    if transpose and desc.log2_chroma_w != desc.log2_chroma_h:
        return AVERROR(ENOSYS)  # 4:2:2 turned by 90 degrees is not 4:2:2
    if c.oriented == NULL:
        c.oriented = av_frame_alloc()
        if c.oriented == NULL:
            return AVERROR(ENOMEM)
    if (c.oriented.format != f.format or c.oriented.width != (f.height if transpose else f.width)
            or c.oriented.height != (f.width if transpose else f.height)):
        av_frame_unref(c.oriented)
        c.oriented.format = f.format
        c.oriented.width = f.height if transpose else f.width
        c.oriented.height = f.width if transpose else f.height
        ret = av_frame_get_buffer(c.oriented, 0)
        if ret < 0:
            return ret
    ret = av_frame_copy_props(c.oriented, f)
    if ret < 0:
        return ret
    planes = _plane_sizes(desc, f.width, f.height, widths, heights, steps)
    for plane in range(planes):
        step = steps[plane]
        src_w, src_h = widths[plane], heights[plane]
        src = f.data[plane]
        for y in range(src_w if transpose else src_h):
            row = c.oriented.data[plane] + <int64_t> y * c.oriented.linesize[plane]
            for x in range(src_h if transpose else src_w):
                u, v = (y, x) if transpose else (x, y)
                if c.orient & FX_ORIENT_MIRROR_X:
                    u = src_w - 1 - u
                if c.orient & FX_ORIENT_MIRROR_Y:
                    v = src_h - 1 - v
                memcpy(row + x * step, src + <int64_t> v * f.linesize[plane] + u * step, step)
    return 0


cdef int fx_convert(fx_converter *c, AVFrame *f, uint8_t *dst, int height, int width) noexcept nogil:
    """Orient (if asked), scale and convert f to RGB24 rows of stride width*3 at dst."""
    cdef uint8_t *dst_planes[4]
    cdef int dst_strides[4]
    cdef int ret, y
    cdef int row_bytes = width * 3
    if c.orient:
        ret = _orient(c, f)
        if ret < 0:
            return ret
        f = c.oriented
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
        if ret == AVERROR(ENOMEM):
            # Every allocation conversion makes is ours, sized by the frame
            # and the output (the oriented frame, the scratch rows): not a
            # refusal of what the file's data asks for.
            p.failed_call = "allocating conversion buffers"
            ret = FX_ERROR_OUT_OF_MEMORY
        return ret
    p.frames_converted += 1
    return 0
