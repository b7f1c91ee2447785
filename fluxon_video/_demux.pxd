from fluxon_video.libav.avformat cimport AVFormatContext, AVInputFormat, AVIOContext

cdef int fx_open_input(AVIOContext *pb, AVFormatContext **fmt, bint find_stream_info,
                       const AVInputFormat *input_format, int *stream_index,
                       const char **failed_call) noexcept nogil
