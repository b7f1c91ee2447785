# What one decode call did, filled in by the pipeline and both decode paths
# without the GIL; VideoDecoder turns it into a DecodeStats record.
from libc.stdint cimport int64_t
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec


cdef struct DecodeProgress:
    int64_t frames_decoded
    int64_t frames_converted
    int64_t targets_left
    int64_t decode_errors
    int64_t corrupt_frames       # frames the decoder flagged corrupt or concealed
    # Stop at the first damage (a rejected packet or a corrupt frame) instead
    # of carrying on like the ffmpeg CLI: FX_DAMAGED (see _decode_paths).
    bint strict
    bint failed_in_one_thread    # the run was on the decoder's one-threaded pipeline
    int64_t damage_cluster       # indexed path: the cluster being decoded then
    int64_t damage_upto_dec      # ... and the last packet fed (decode position)
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
