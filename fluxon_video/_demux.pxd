from fluxon_video.libav.avformat cimport AVFormatContext, AVInputFormat, AVIOContext
from fluxon_video.libav.avutil cimport AVChannelLayout

cdef int fx_avformat_open(AVIOContext *pb, AVFormatContext **fmt,
                          const AVInputFormat *input_format) noexcept nogil
cdef int fx_open_input(AVIOContext *pb, AVFormatContext **fmt, bint find_stream_info,
                       const AVInputFormat *input_format, int wanted_stream, int *stream_index,
                       const char **failed_call) noexcept nogil

cdef void only_stream(AVFormatContext *fmt, int index) noexcept nogil
cdef str describe_streams(AVFormatContext *fmt)
cdef int raise_missing_stream(AVFormatContext *fmt, int wanted, str name) except -1
cdef dict describe_audio(AVFormatContext *fmt, int index, const AVChannelLayout *decoder=*)
