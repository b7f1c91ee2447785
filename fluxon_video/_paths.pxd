from libc.stdint cimport int64_t, uint8_t

from fluxon_video._convert cimport FrameSink
from fluxon_video._pipeline cimport Pipeline
from fluxon_video._progress cimport DecodeProgress


# Returned by the indexed path when the stream disagrees with the index.
cdef enum:
    FX_FALLBACK = 1


# What the indexed path reads: views of FrameIndex arrays and of the plan.
cdef struct IndexedPlan:
    const int64_t *frame_pts     # sorted pts of frames in presentation order
    int64_t n_frames
    const int64_t *pos_sorted    # packet byte positions, sorted
    const int64_t *pos_dec       # decode position of each sorted position
    int64_t n_packets
    const int64_t *targets       # sorted unique presentation indices
    const int64_t *slots         # output slot of each target
    const int64_t *target_dec    # decode position of each target's packet
    uint8_t *done
    int64_t n_targets
    const int64_t *bounds        # cluster c covers targets[bounds[c]:bounds[c+1]]
    const int64_t *key_dec
    const int64_t *key_pos
    const int64_t *seek_ts
    const int64_t *reach_dec
    const int64_t *end_byte
    int64_t *left                # targets still to convert, per cluster
    int64_t n_clusters
    bint skip_nonref


cdef object make_plan(IndexedPlan *plan, index, targets, first_slot, bint skip_nonref)
cdef int decode_sequential(Pipeline pipe, const int64_t *targets, const int64_t *slots,
                           int64_t ntargets, FrameSink *sink, DecodeProgress *p) noexcept nogil
cdef int decode_indexed(Pipeline pipe, IndexedPlan *plan, FrameSink *sink,
                        DecodeProgress *p) noexcept nogil
