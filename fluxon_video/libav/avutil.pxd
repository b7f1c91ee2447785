# libavutil: the handful of utility types and functions the decoder touches.
# https://ffmpeg.org/doxygen/5.1/group__lavu.html
from libc.stdint cimport int64_t, uint8_t, uint64_t


cdef extern from "libavutil/avutil.h" nogil:
    int64_t AV_NOPTS_VALUE
    cdef enum AVMediaType:
        AVMEDIA_TYPE_VIDEO
        AVMEDIA_TYPE_AUDIO
        AVMEDIA_TYPE_SUBTITLE

    unsigned avutil_version()

    ctypedef struct AVRational:
        int num
        int den


# https://ffmpeg.org/doxygen/5.1/group__lavu__error.html
cdef extern from "libavutil/error.h" nogil:
    int AVERROR(int errnum)
    int AVERROR_EOF
    int AVERROR_INVALIDDATA
    int AVERROR_STREAM_NOT_FOUND
    int av_strerror(int errnum, char *errbuf, size_t errbuf_size)


# https://ffmpeg.org/doxygen/5.1/group__lavu__math.html
cdef extern from "libavutil/mathematics.h" nogil:
    # a * b / c rounded to nearest, halves away from zero: how the CLI's scale
    # filter keeps the aspect ratio (force_original_aspect_ratio)
    int64_t av_rescale(int64_t a, int64_t b, int64_t c)
    int64_t av_rescale_q(int64_t a, AVRational bq, AVRational cq)


# https://ffmpeg.org/doxygen/5.1/group__lavu__mem.html
cdef extern from "libavutil/mem.h" nogil:
    void *av_malloc(size_t size)
    void av_free(void *ptr)
    void av_freep(void *ptr)


# https://ffmpeg.org/doxygen/5.1/pixfmt_8h.html
cdef extern from "libavutil/pixfmt.h" nogil:
    cdef enum AVPixelFormat:
        AV_PIX_FMT_RGB24

    cdef enum AVColorSpace:
        AVCOL_SPC_BT470BG

    cdef enum AVColorRange:
        AVCOL_RANGE_UNSPECIFIED
        AVCOL_RANGE_JPEG


# https://ffmpeg.org/doxygen/5.1/pixdesc_8h.html
cdef extern from "libavutil/pixdesc.h" nogil:
    int AV_PIX_FMT_FLAG_PAL
    int AV_PIX_FMT_FLAG_BITSTREAM
    int AV_PIX_FMT_FLAG_HWACCEL
    int AV_PIX_FMT_FLAG_BE
    int AV_PIX_FMT_FLAG_FLOAT

    ctypedef struct AVComponentDescriptor:
        int plane
        int step
        int shift
        int depth

    ctypedef struct AVPixFmtDescriptor:
        const char *name
        uint8_t nb_components
        uint8_t log2_chroma_w
        uint8_t log2_chroma_h
        uint64_t flags
        AVComponentDescriptor comp[4]

    const AVPixFmtDescriptor *av_pix_fmt_desc_get(int pix_fmt)
    const char *av_color_range_name(AVColorRange range)
    const char *av_color_space_name(AVColorSpace space)


# https://ffmpeg.org/doxygen/5.1/group__lavu__audio__channels.html
cdef extern from "libavutil/channel_layout.h" nogil:
    cdef enum AVChannelOrder:
        AV_CHANNEL_ORDER_UNSPEC

    ctypedef struct AVChannelLayout:
        AVChannelOrder order
        int nb_channels

    void av_channel_layout_default(AVChannelLayout *ch_layout, int nb_channels)
    int av_channel_layout_copy(AVChannelLayout *dst, const AVChannelLayout *src)
    void av_channel_layout_uninit(AVChannelLayout *channel_layout)

    int av_channel_layout_describe(const AVChannelLayout *channel_layout, char *buf,
                                   size_t buf_size)


# https://ffmpeg.org/doxygen/5.1/structAVFrame.html
cdef extern from "libavutil/frame.h" nogil:
    ctypedef struct AVFrame:
        uint8_t *data[8]
        int linesize[8]
        int width
        int height
        int format
        int64_t pts
        AVColorRange color_range
        AVColorSpace colorspace
        int flags
        int decode_error_flags
        int64_t best_effort_timestamp
        # audio frames
        uint8_t **extended_data
        int nb_samples
        int sample_rate
        AVChannelLayout ch_layout

    int AV_FRAME_FLAG_CORRUPT

    AVFrame *av_frame_alloc()
    void av_frame_free(AVFrame **frame)
    void av_frame_unref(AVFrame *frame)
    int av_frame_get_buffer(AVFrame *frame, int align)
    int av_frame_copy_props(AVFrame *dst, const AVFrame *src)


# https://ffmpeg.org/doxygen/5.1/group__lavu__sampfmts.html
cdef extern from "libavutil/samplefmt.h" nogil:
    cdef enum AVSampleFormat:
        AV_SAMPLE_FMT_FLTP
