# cython: language_level=3
"""Frame conversion: orientation, then swscale into RGB24 rows, with the ffmpeg
CLI's colour policy; or, for gray16 reads (depth maps), orientation, then the
gray samples copied as coded.

fx_converter owns one SwsContext, the frame properties it was built for, a
scratch buffer of padded rows and a frame for the oriented picture (the CLI
turns frames upright before it scales them, so we do too); fx_sink_put is the one place a decoded
target frame becomes pixels in the caller's NHWC buffer, for every decode
path.

The scaler (c.interp) is the flag the CLI's `scale=...:flags=<name>` passes;
c.resize says how the frame fills the output, as these CLI filters do after
`scale=W:H:flags=<name>` (see docs/frame-index.md):
  stretch            nothing more: W x H exactly
  shorter_side_crop  `:force_original_aspect_ratio=increase,crop=W:H`
  letterbox          `:force_original_aspect_ratio=decrease,pad=W:H:(ow-iw)/2:(oh-ih)/2:black`
followed by `format=rgb24`, which makes crop and pad work on the RGB rows.
"""
from libc.errno cimport EINVAL, ENOMEM, ENOSYS
from libc.limits cimport INT_MAX
from libc.math cimport lrint
from libc.stdint cimport int64_t, uint8_t
from libc.string cimport memcmp, memcpy, memset

from fluxon_video._errors cimport FX_ERROR_OUT_OF_MEMORY
from fluxon_video.libav.avutil cimport (
    AVCOL_RANGE_JPEG, AVCOL_RANGE_UNSPECIFIED, AVCOL_SPC_BT470BG, AVERROR, AVPixFmtDescriptor,
    AV_PIX_FMT_FLAG_BE, AV_PIX_FMT_FLAG_BITSTREAM, AV_PIX_FMT_FLAG_FLOAT, AV_PIX_FMT_FLAG_HWACCEL,
    AV_PIX_FMT_FLAG_PAL, AV_PIX_FMT_RGB24,
    av_frame_alloc, av_frame_copy_props, av_frame_free, av_frame_get_buffer, av_frame_unref,
    av_free, av_malloc,
    av_pix_fmt_desc_get, av_rescale,
)
from fluxon_video.libav.swscale cimport (
    SWS_AREA, SWS_BICUBIC, SWS_BILINEAR, SWS_LANCZOS, SWS_POINT, sws_freeContext,
    sws_getCoefficients, sws_getColorspaceDetails, sws_getContext, sws_isSupportedInput,
    sws_scale, sws_setColorspaceDetails,
)


cdef void fx_converter_free(fx_converter *c) noexcept nogil:
    av_frame_free(&c.oriented)
    if c.sws != NULL:
        sws_freeContext(c.sws)
        c.sws = NULL
    av_free(c.scratch)
    c.scratch = NULL
    c.scratch_size = 0


cdef int _sws_flags(int interp) noexcept nogil:
    """The flags `scale=...:flags=<name>` gives swscale: the scaler alone."""
    if interp == FX_INTERP_BICUBIC:
        return SWS_BICUBIC
    if interp == FX_INTERP_AREA:
        return SWS_AREA
    if interp == FX_INTERP_NEAREST:
        return SWS_POINT
    if interp == FX_INTERP_LANCZOS:
        return SWS_LANCZOS
    return SWS_BILINEAR


cdef int _build(fx_converter *c, AVFrame *f, int height, int width) noexcept nogil:
    """A SwsContext for f's size, format and colours, scaling to width x height
    with c.interp's scaler."""
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
                           _sws_flags(c.interp), NULL, NULL, NULL)
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
    c.sws_interp = c.interp
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


cdef int _scaled_size(int resize, int in_w, int in_h, int height, int width, int *scaled_h,
                      int *scaled_w) noexcept nogil:
    """The size the CLI's scale filter scales an in_w x in_h frame to for this
    resize mode (ff_scale_adjust_dimensions with force_original_aspect_ratio:
    av_rescale keeps the aspect ratio of the pixels, not the display's; no
    rounding to even). 0 or AVERROR(EINVAL) for a size no buffer can hold."""
    cdef int64_t w = width, h = height, keep_w, keep_h
    if resize != FX_RESIZE_STRETCH:
        keep_w = av_rescale(height, in_w, in_h)
        keep_h = av_rescale(width, in_h, in_w)
        if resize == FX_RESIZE_LETTERBOX:  # decrease: fit inside
            w = keep_w if keep_w < w else w
            h = keep_h if keep_h < h else h
        else:  # increase: cover
            w = keep_w if keep_w > w else w
            h = keep_h if keep_h > h else h
    # A side the CLI would round to 0 (a sliver of a frame) is one pixel here:
    # the CLI fails there, a data loader should not.
    w = w if w > 0 else 1
    h = h if h > 0 else 1
    if w * 3 + 128 > INT_MAX or h > INT_MAX // (w * 3 + 128):
        return AVERROR(EINVAL)
    scaled_h[0] = <int> h
    scaled_w[0] = <int> w
    return 0


cdef void _place(fx_converter *c, uint8_t *dst, int height, int width, int scaled_h,
                 int scaled_w) noexcept nogil:
    """Copy the scaled picture in c.scratch into dst's height x width rows: where
    it is larger, its centre as `crop=W:H` takes it (the offset rounded by
    lrint, halves to even); where smaller, centred on black as
    `pad=W:H:(ow-iw)/2:(oh-ih)/2:black` puts it (the offset truncated), black
    being RGB 0,0,0 since pad works on the RGB rows."""
    cdef int x0 = 0, y0 = 0, px = 0, py = 0, y
    cdef int copy_w = scaled_w if scaled_w < width else width
    cdef int copy_h = scaled_h if scaled_h < height else height
    cdef int row_bytes = width * 3
    cdef uint8_t *row
    if scaled_w > width:
        x0 = <int> lrint((scaled_w - width) / 2.0)
    else:
        px = (width - scaled_w) // 2
    if scaled_h > height:
        y0 = <int> lrint((scaled_h - height) / 2.0)
    else:
        py = (height - scaled_h) // 2
    memset(dst, 0, <size_t> py * row_bytes)
    for y in range(copy_h):
        row = dst + <int64_t> (py + y) * row_bytes
        memset(row, 0, px * 3)
        memcpy(row + px * 3, c.scratch + <int64_t> (y0 + y) * c.scratch_stride + x0 * 3,
               copy_w * 3)
        memset(row + (px + copy_w) * 3, 0, (width - px - copy_w) * 3)
    memset(dst + <int64_t> (py + copy_h) * row_bytes, 0,
           <size_t> (height - py - copy_h) * row_bytes)


cdef int _copy_gray16(AVFrame *f, uint8_t *dst, int height, int width) noexcept nogil:
    """f's gray samples as coded, little-endian 16-bit, into rows of stride width*2
    at dst: only for a 9- to 16-bit gray frame of exactly height x width (nothing
    is scaled: a depth code is a measurement, not a colour to interpolate)."""
    cdef const AVPixFmtDescriptor *desc = av_pix_fmt_desc_get(f.format)
    cdef int y
    if (desc == NULL or desc.nb_components != 1 or desc.comp[0].plane != 0
            or desc.comp[0].step != 2 or desc.comp[0].shift != 0 or desc.comp[0].depth <= 8
            or desc.flags & (AV_PIX_FMT_FLAG_BE | AV_PIX_FMT_FLAG_FLOAT | AV_PIX_FMT_FLAG_PAL
                             | AV_PIX_FMT_FLAG_BITSTREAM | AV_PIX_FMT_FLAG_HWACCEL)):
        return AVERROR(ENOSYS)
    if f.width != width or f.height != height:
        return AVERROR(EINVAL)
    for y in range(height):
        memcpy(dst + <int64_t> y * width * 2, f.data[0] + <int64_t> y * f.linesize[0],
               <size_t> width * 2)
    return 0


cdef int fx_convert(fx_converter *c, AVFrame *f, uint8_t *dst, int height, int width) noexcept nogil:
    """Orient (if asked), scale and convert f to RGB24 rows of stride width*3 at
    dst, filling them as c.resize says (c.samples GRAY16: orient, then the gray
    samples as coded, rows of stride width*2)."""
    cdef uint8_t *dst_planes[4]
    cdef int dst_strides[4]
    cdef int ret, scaled_h = 0, scaled_w = 0
    if c.orient:
        ret = _orient(c, f)
        if ret < 0:
            return ret
        f = c.oriented
    if c.samples == FX_SAMPLES_GRAY16:
        return _copy_gray16(f, dst, height, width)
    ret = _scaled_size(c.resize, f.width, f.height, height, width, &scaled_h, &scaled_w)
    if ret < 0:
        return ret
    if (c.sws == NULL or f.width != c.src_w or f.height != c.src_h or f.format != c.src_fmt
            or scaled_w != c.dst_w or scaled_h != c.dst_h or c.interp != c.sws_interp
            or <int> f.colorspace != c.colorspace or <int> f.color_range != c.color_range):
        ret = _build(c, f, scaled_h, scaled_w)
        if ret < 0:
            return ret
    memset(dst_planes, 0, sizeof(dst_planes))
    memset(dst_strides, 0, sizeof(dst_strides))
    if (f.width == scaled_w and f.height == scaled_h) or scaled_w != width or scaled_h != height:
        # swscale's unscaled YUV->RGB converter works in 8-pixel blocks: with a
        # row stride of exactly width*3 it leaves the last width%8 pixels
        # unwritten and stores past the end of a row. Give it padded rows (as
        # the CLI's frames have) and copy them out; a picture to crop or pad
        # goes there too, as the CLI's scale filter writes a frame of its own.
        ret = _ensure_scratch(c, scaled_h, scaled_w * 3)
        if ret < 0:
            return ret
        dst_planes[0] = c.scratch
        dst_strides[0] = c.scratch_stride
    else:
        dst_planes[0] = dst
        dst_strides[0] = width * 3
    if sws_scale(c.sws, <const uint8_t * const *> f.data, f.linesize, 0, f.height,
                 dst_planes, dst_strides) != scaled_h:
        return AVERROR(EINVAL)
    if dst_planes[0] != dst:
        _place(c, dst, height, width, scaled_h, scaled_w)
    return 0


cdef void fx_sink_init(FrameSink *sink, fx_converter *converter, uint8_t *out, int height,
                       int width, int pixel_bytes) noexcept nogil:
    sink.converter = converter
    sink.out = out
    sink.height = height
    sink.width = width
    sink.frame_bytes = <int64_t> height * width * pixel_bytes


cdef int fx_sink_put(FrameSink *sink, AVFrame *f, int64_t slot, DecodeProgress *p) noexcept nogil:
    """Convert target frame f into output slot; 0 or an AVERROR."""
    cdef int ret
    if sink.converter == NULL:
        return 0
    if sink.converter.samples == FX_SAMPLES_GRAY16:
        p.failed_call = "copying the gray samples"
    else:
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
