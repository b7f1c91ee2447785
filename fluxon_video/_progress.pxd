# What one decode call did, filled in by the pipeline and both decode paths
# without the GIL; VideoDecoder turns it into a DecodeStats record.
from libc.stdint cimport int64_t
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec


cdef struct DecodeProgress:
    int64_t frames_decoded
    int64_t frames_converted
    int64_t targets_left
    int64_t decode_errors
    int64_t seeks
    double open_ms
    int64_t waits_at_first_frame  # the page cache's fetch_waits when the first target was converted
    double decode_ms
    const char *failed_call      # the libav call that returned the error, if any
    const char *fallback_reason  # why the indexed path gave up, if it did


cdef inline double now_ms() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6
