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


# Scaler of a conversion: the swscale flag the CLI's `scale=...:flags=<name>`
# sets. In the order of fluxon_video/resize.py's INTERPOLATIONS (0: the default).
cdef enum:
    FX_INTERP_BILINEAR = 0
    FX_INTERP_BICUBIC = 1
    FX_INTERP_AREA = 2
    FX_INTERP_NEAREST = 3
    FX_INTERP_LANCZOS = 4


# How a frame fills the output size, in the order of fluxon_video/resize.py's
# RESIZE_MODES: scaled to it exactly; scaled keeping its aspect ratio to cover
# it, then the centre cropped; scaled to fit inside it, then padded with black.
cdef enum:
    FX_RESIZE_STRETCH = 0
    FX_RESIZE_SHORTER_SIDE_CROP = 1
    FX_RESIZE_LETTERBOX = 2


# What a converted pixel holds: RGB24 (3 bytes, the ffmpeg CLI's rgb24 output),
# or GRAY16 (2 bytes, little-endian: the sample of a 9- to 16-bit gray frame as
# coded, copied at the frame's size; depth maps are stored this way).
cdef enum:
    FX_SAMPLES_RGB24 = 0
    FX_SAMPLES_GRAY16 = 1


# A cached SwsContext and the inputs it was built for; a change rebuilds it.
# dst_w x dst_h is the size it scales to (the output's, or with crop or
# letterbox the intermediate size the CLI's scale filter computes).
cdef struct fx_converter:
    SwsContext *sws
    int src_w, src_h, src_fmt, dst_w, dst_h, colorspace, color_range
    int sws_interp         # the FX_INTERP_* sws was built with
    int interp             # FX_INTERP_* asked for (the decoder's owner sets it)
    int resize             # FX_RESIZE_* asked for
    uint8_t *scratch       # padded rows for unscaled conversions
    size_t scratch_size
    int scratch_stride
    int orient             # FX_ORIENT_* bits; 0: the coded orientation
    AVFrame *oriented      # the frame turned upright, before conversion
    int samples            # FX_SAMPLES_* the output holds (the decoder's owner sets it)


# Where decoded target frames go: slot i of an NHWC buffer (frame_bytes a slot).
cdef struct FrameSink:
    fx_converter *converter  # NULL: decode only, convert nothing (the decode floor)
    uint8_t *out
    int height
    int width
    int64_t frame_bytes


cdef int fx_convert(fx_converter *c, AVFrame *f, uint8_t *dst, int height, int width) noexcept nogil
cdef void fx_converter_free(fx_converter *c) noexcept nogil
cdef void fx_sink_init(FrameSink *sink, fx_converter *converter, uint8_t *out, int height,
                       int width, int pixel_bytes) noexcept nogil
cdef int fx_sink_put(FrameSink *sink, AVFrame *f, int64_t slot, DecodeProgress *p) noexcept nogil
