# libavformat: demuxing and custom I/O.
# https://ffmpeg.org/doxygen/5.1/group__libavf.html
from libc.stdint cimport int64_t, uint8_t

from fluxon_video.libav.avcodec cimport AVCodecParameters, AVDiscard, AVPacket, AVPacketSideDataType
from fluxon_video.libav.avutil cimport AVMediaType, AVRational


# https://ffmpeg.org/doxygen/5.1/structAVIOContext.html
cdef extern from "libavformat/avio.h" nogil:
    int AVSEEK_SIZE
    int AVSEEK_FORCE

    ctypedef struct AVIOContext:
        unsigned char *buffer
        void *opaque
        int direct

    AVIOContext *avio_alloc_context(
        unsigned char *buffer,
        int buffer_size,
        int write_flag,
        void *opaque,
        int (*read_packet)(void *opaque, uint8_t *buf, int buf_size) noexcept nogil,
        int (*write_packet)(void *opaque, uint8_t *buf, int buf_size) noexcept nogil,
        int64_t (*seek)(void *opaque, int64_t offset, int whence) noexcept nogil,
    )
    void avio_context_free(AVIOContext **s)
    int64_t avio_seek(AVIOContext *s, int64_t offset, int whence)


# https://ffmpeg.org/doxygen/5.1/structAVFormatContext.html
cdef extern from "libavformat/avformat.h" nogil:
    int AVFMT_FLAG_CUSTOM_IO
    int AVFMT_FLAG_GENPTS
    int AV_DISPOSITION_ATTACHED_PIC
    int AVSEEK_FLAG_BACKWARD
    int AVINDEX_KEYFRAME

    # https://ffmpeg.org/doxygen/5.1/structAVIndexEntry.html (flags and size are bitfields)
    ctypedef struct AVIndexEntry:
        int64_t pos
        int64_t timestamp
        int flags
        int size

    # https://ffmpeg.org/doxygen/5.1/structAVInputFormat.html
    ctypedef struct AVInputFormat:
        const char *name

    ctypedef struct AVStream:
        AVCodecParameters *codecpar
        AVRational time_base
        int64_t start_time
        int64_t duration
        int disposition
        AVDiscard discard
        AVRational sample_aspect_ratio
        AVRational avg_frame_rate

    ctypedef struct AVFormatContext:
        const AVInputFormat *iformat
        AVIOContext *pb
        unsigned int nb_streams
        AVStream **streams
        int64_t bit_rate
        int flags
        void *opaque

    unsigned avformat_version()
    AVFormatContext *avformat_alloc_context()
    int avformat_open_input(AVFormatContext **ps, const char *url, const AVInputFormat *fmt,
                            void *options)
    const AVInputFormat *av_find_input_format(const char *short_name)
    void avformat_close_input(AVFormatContext **s)
    int avformat_find_stream_info(AVFormatContext *ic, void *options)
    int av_read_frame(AVFormatContext *s, AVPacket *pkt)
    int av_find_best_stream(AVFormatContext *ic, AVMediaType type, int wanted_stream_nb,
                            int related_stream, const void **decoder_ret, int flags)
    int av_seek_frame(AVFormatContext *s, int stream_index, int64_t timestamp, int flags)
    uint8_t *av_stream_get_side_data(const AVStream *stream, AVPacketSideDataType type,
                                     size_t *size)
    int avformat_index_get_entries_count(const AVStream *st)
    const AVIndexEntry *avformat_index_get_entry(AVStream *st, int idx)
