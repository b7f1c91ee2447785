# libavcodec: decoder contexts and packets.
# https://ffmpeg.org/doxygen/5.1/group__libavc.html
from libc.stdint cimport int64_t, uint8_t, uint32_t

from fluxon_video.libav.avutil cimport (
    AVChannelLayout, AVColorRange, AVColorSpace, AVFrame, AVMediaType, AVRational,
)


cdef extern from "libavcodec/codec_id.h" nogil:
    cdef enum AVCodecID:
        AV_CODEC_ID_MPEG4
        AV_CODEC_ID_VP8
        AV_CODEC_ID_VP9

    const char *avcodec_get_name(AVCodecID id)


# https://ffmpeg.org/doxygen/5.1/structAVCodecDescriptor.html
cdef extern from "libavcodec/codec_desc.h" nogil:
    int AV_CODEC_PROP_REORDER

    ctypedef struct AVCodecDescriptor:
        int props

    const AVCodecDescriptor *avcodec_descriptor_get(AVCodecID id)


# https://ffmpeg.org/doxygen/5.1/structAVCodec.html
cdef extern from "libavcodec/codec.h" nogil:
    ctypedef struct AVCodec:
        pass

    const AVCodec *avcodec_find_decoder(AVCodecID id)


# https://ffmpeg.org/doxygen/5.1/structAVCodecParameters.html
cdef extern from "libavcodec/codec_par.h" nogil:
    ctypedef struct AVCodecParameters:
        AVMediaType codec_type
        AVCodecID codec_id
        uint32_t codec_tag
        uint8_t *extradata
        int extradata_size
        int format
        int64_t bit_rate
        int bits_per_raw_sample
        int width
        int height
        AVRational sample_aspect_ratio
        AVColorRange color_range
        AVColorSpace color_space
        int sample_rate
        AVChannelLayout ch_layout
        int seek_preroll


# https://ffmpeg.org/doxygen/5.1/group__lavc__packet.html
cdef extern from "libavcodec/packet.h" nogil:
    int AV_PKT_FLAG_KEY
    int AV_PKT_FLAG_DISCARD
    int AV_PKT_FLAG_CORRUPT

    cdef enum AVPacketSideDataType:
        AV_PKT_DATA_DISPLAYMATRIX

    ctypedef struct AVPacket:
        int64_t pts
        int64_t dts
        uint8_t *data
        int size
        int stream_index
        int flags
        int64_t duration
        int64_t pos

    AVPacket *av_packet_alloc()
    void av_packet_free(AVPacket **pkt)
    void av_packet_unref(AVPacket *pkt)


# https://ffmpeg.org/doxygen/5.1/group__lavc__core.html
cdef extern from "libavcodec/avcodec.h" nogil:
    cdef enum AVDiscard:
        AVDISCARD_DEFAULT
        AVDISCARD_NONREF
        AVDISCARD_ALL

    int FF_THREAD_FRAME
    int FF_THREAD_SLICE
    int AV_EF_EXPLODE

    ctypedef struct AVCodecContext:
        void *opaque
        AVChannelLayout ch_layout
        int thread_count
        int thread_type
        AVRational pkt_timebase
        AVDiscard skip_frame
        int err_recognition

    unsigned avcodec_version()
    AVCodecContext *avcodec_alloc_context3(const AVCodec *codec)
    void avcodec_free_context(AVCodecContext **avctx)
    int avcodec_parameters_to_context(AVCodecContext *codec, const AVCodecParameters *par)
    int avcodec_open2(AVCodecContext *avctx, const AVCodec *codec, void *options)
    int avcodec_send_packet(AVCodecContext *avctx, const AVPacket *avpkt)
    int avcodec_receive_frame(AVCodecContext *avctx, AVFrame *frame)
    void avcodec_flush_buffers(AVCodecContext *avctx)
