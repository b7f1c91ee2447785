# libswresample: audio sample format conversion, channel mixing and resampling.
# https://ffmpeg.org/doxygen/5.1/group__lswr.html
from libc.stdint cimport int64_t, uint8_t

from fluxon_video.libav.avutil cimport AVChannelLayout, AVSampleFormat


cdef extern from "libswresample/swresample.h" nogil:
    struct SwrContext:
        pass

    int swr_alloc_set_opts2(SwrContext **ps,
                            const AVChannelLayout *out_ch_layout, AVSampleFormat out_sample_fmt,
                            int out_sample_rate,
                            const AVChannelLayout *in_ch_layout, AVSampleFormat in_sample_fmt,
                            int in_sample_rate, int log_offset, void *log_ctx)
    int swr_init(SwrContext *s)
    void swr_free(SwrContext **s)
    int swr_convert(SwrContext *s, uint8_t **out, int out_count,
                    const uint8_t **in_, int in_count)
