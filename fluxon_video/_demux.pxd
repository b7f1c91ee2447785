from fluxon_video.libav.avformat cimport AVFormatContext, AVIOContext

cdef int fx_open_input(AVIOContext *pb, AVFormatContext **fmt, bint find_stream_info,
                       int *stream_index, const char **failed_call) noexcept nogil
