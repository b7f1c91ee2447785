from libc.stdint cimport int64_t, uint8_t

from fluxon_video._convert cimport FrameSink
from fluxon_video._pipeline cimport Pipeline
from fluxon_video._progress cimport DecodeProgress


# Returned by the indexed path when the stream disagrees with the index.
cdef enum:
    FX_FALLBACK = 1
    # Returned by either path with p.strict when the decoder rejected a packet
    # or flagged a frame corrupt (p.damage_* say where the indexed path was).
    FX_DAMAGED = 2


# What the indexed path reads: views of FrameIndex arrays and of the plan.
cdef struct IndexedPlan:
    const int64_t *frame_pts     # sorted pts of frames in presentation order
    const int64_t *frame_dec     # decode position of each frame's packet
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
    # Per cluster, the last frame (presentation index) decoded at or before its
    # last target: the cluster is done once it came out (FrameIndex.plan).
    const int64_t *settle_idx
    const int64_t *end_byte
    int64_t *left                # targets still to convert, per cluster
    int64_t n_clusters
    bint skip_nonref
    # Per frame, 1 if it must be output even when skip_nonref: the targets and
    # the frames that witness their place (FrameIndex.order_witnesses).
    const uint8_t *witness
    # Every cluster seeks to its keyframe, even where the decoder could go on
    # from the last one: a cluster then decodes exactly as a survey of it does.
    bint seek_each
    # The codec outputs frames out of decode order: a cluster also takes the
    # first frame after its targets, so a frame the decoder puts before them
    # (its pts says otherwise: a damaged timestamp) is seen, not missed.
    bint confirm_order
    # Per frame (presentation index), 1 if its packet was fed with
    # skip_frame=NONREF: the one reason a frame whose packet was fed may not
    # come out. Any other such frame the decoder skips makes its numbering differ.
    uint8_t *skipped
    const int64_t *key_idx       # presentation index of each cluster's keyframe
    int64_t first_out            # first frame output in this call (-1: none yet)
    # Per decode position, 1 for packets known to be damaged: never fed (the
    # cluster drains instead; no target depends on them).
    const uint8_t *known_damage


# What a damage survey does and finds: a one-threaded decode from a keyframe
# (or the start) that names the packets the decoder rejects or whose frames it
# flags corrupt, and records every output frame's time.
cdef struct Survey:
    bint from_start              # else seek to seek_ts first
    int64_t seek_ts
    int64_t upto_dec             # stop after feeding this packet (-1: the whole stream)
    bint stop_at_damage          # stop at the first damaged packet
    const int64_t *pos_sorted    # the index's packet positions (NULL: no index)
    const int64_t *pos_dec
    int64_t n_packets
    const int64_t *frame_pts     # the index's frame pts and their packets
    const int64_t *frame_dec
    int64_t n_frames
    uint8_t *damaged             # out, per decode position
    int64_t *out_pts             # out: best-effort time of every frame output
    int64_t out_cap
    int64_t n_out
    int64_t n_damaged
    int64_t first_dec            # the first damaged packet found (-1: none)
    int64_t first_pos            # ... its byte position
    char first_message[256]      # FFmpeg's line for it


cdef object make_plan(IndexedPlan *plan, index, targets, first_slot, bint skip_nonref,
                      bint seek_each=*)
cdef int decode_sequential(Pipeline pipe, const int64_t *targets, const int64_t *slots,
                           int64_t ntargets, FrameSink *sink, DecodeProgress *p) noexcept nogil
cdef int decode_indexed(Pipeline pipe, IndexedPlan *plan, FrameSink *sink,
                        DecodeProgress *p) noexcept nogil
cdef int survey_damage(Pipeline pipe, Survey *s, DecodeProgress *p) noexcept nogil
