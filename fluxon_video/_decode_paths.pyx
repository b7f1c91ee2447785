# cython: language_level=3, boundscheck=False, wraparound=False
"""The two ways to produce frame i, both without the GIL.

- sequential: decode from frame 0, count output frames, convert the targets.
  It is the reference, and the path whenever no trusted index exists.
- indexed: with a trusted FrameIndex, seek to the keyframe each cluster of
  targets needs, decode forward, and identify every output frame by its pts.
  Any disagreement with the index (landing after the keyframe, a pts the
  index lacks, frames out of order, targets that never appear) returns
  FX_FALLBACK so the caller redoes the call sequentially.
"""
import numpy as np

from libc.stdint cimport INT64_MAX, INT64_MIN, int64_t, uint8_t

from fluxon_video._avio cimport fx_source_cancel_prefetch, fx_source_fetch_waits, fx_source_prefetch
from fluxon_video._convert cimport fx_sink_put
from fluxon_video._pagecache cimport fx_pagecache
from fluxon_video.libav.avcodec cimport (
    AV_PKT_FLAG_CORRUPT, AV_PKT_FLAG_KEY, AVPacket, av_packet_alloc, av_packet_free,
    av_packet_unref,
)
from fluxon_video.libav.avformat cimport AVSEEK_FLAG_BACKWARD, av_read_frame, av_seek_frame
from fluxon_video.libav.avutil cimport AV_NOPTS_VALUE, AVERROR_EOF, av_frame_unref

# _check_packet's word for a packet known to be damaged: do not feed it, drain.
cdef int FX_DRAIN = 3

# The indexed path gives up (and decodes sequentially) when this many packets
# past a cluster's last target did not produce its frames: far more than any
# decoder's reorder delay plus frame-threading latency.
cdef int64_t TARGET_SLACK_PACKETS = 48
# Codecs where skipping non-reference frames that are not targets is exact:
# nothing references them, and these decoders keep their ordering state
# (POC, DPB output) from reference pictures only. MPEG-4 part 2 skips only
# B-VOPs, never references, after reading their header (VOP timing).
SKIP_NONREF_CODECS = frozenset({"h264", "hevc", "mpeg4"})


cdef inline int64_t _find(const int64_t *values, int64_t n, int64_t x) noexcept nogil:
    """Position of x in sorted values, or -1."""
    cdef int64_t lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if values[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < n and values[lo] == x else -1


cdef inline bint _damaged(DecodeProgress *p) noexcept nogil:
    """Whether a strict decode has met damage: a packet the decoder rejected
    or a frame it flagged corrupt."""
    return p.strict and (p.decode_errors > 0 or p.corrupt_frames > 0)


cdef inline bint _cut_short(Pipeline pipe, DecodeProgress *p) noexcept nogil:
    """Whether a strict decode holds a packet the file ends inside of: no
    frame, as in the index (FrameIndex.pkt_truncated: flagged corrupt and
    reaching the end of the file), and nothing follows it, so the decode
    drains instead of feeding it. A packet flagged corrupt inside the file
    (MPEG-TS flags the one after a continuity break) is fed like any other."""
    cdef AVPacket *pkt = pipe.pkt
    return (p.strict and (pkt.flags & AV_PKT_FLAG_CORRUPT) != 0
            and pkt.pos >= 0 and pkt.pos + pkt.size >= pipe.source.core.pc.file_size
            and not pipe.cursor().error)  # a failed source is not the file's end


cdef inline void _note_converted(Pipeline pipe, DecodeProgress *p) noexcept nogil:
    """After a target was converted: remember the fetch waits when the first one was."""
    if p.frames_converted == 1:
        p.waits_at_first_frame = fx_source_fetch_waits(pipe.source.core.pc)


# ---- sequential ----

# Packets whose pts the sequential path remembers (a frame comes out within
# the decoder's reorder delay and thread count of its packet).
cdef enum:
    SENT_RING = 64


cdef int decode_sequential(Pipeline pipe, const int64_t *targets, const int64_t *slots,
                           int64_t ntargets, FrameSink *sink, DecodeProgress *p) noexcept nogil:
    """Decode from the start until every target is converted or the stream
    ends, then until every frame decoded before the last target came out."""
    cdef int ret
    cdef bint draining = False
    cdef int consecutive_errors = 0
    cdef int64_t frame_no = 0, next_target = 0
    # Each packet's pts and the largest pts up to it, for the last SENT_RING
    # packets read: a frame decoded before a target may be shown after it
    # (a B-frame's anchor); the decode is done when the last of those is out.
    cdef int64_t sent_pts[SENT_RING]
    cdef int64_t sent_max[SENT_RING]
    cdef int64_t n_sent = 0, run_max = INT64_MIN, settle_pts = INT64_MIN
    cdef bint pts_known = True, settling = False
    pipe.fresh = False
    pipe.positioned = False  # frames are counted, not matched to the index
    while next_target < ntargets or settling:
        if not draining and not pipe.packet_pending:
            ret = pipe.next_packet(&draining, p)
            if ret < 0:
                return ret
            pipe.packet_pending = ret == 1
            if pipe.packet_pending and _cut_short(pipe, p):
                av_packet_unref(pipe.pkt)
                pipe.packet_pending = False
                draining = True
            if pipe.packet_pending:
                if pipe.pkt.pts == AV_NOPTS_VALUE:
                    pts_known = False
                elif pipe.pkt.pts > run_max:
                    run_max = pipe.pkt.pts
                sent_pts[n_sent % SENT_RING] = pipe.pkt.pts
                sent_max[n_sent % SENT_RING] = run_max
                n_sent += 1
        ret = pipe.send(draining, &consecutive_errors, p)
        if ret < 0:
            return ret
        if _damaged(p):
            return FX_DAMAGED
        while next_target < ntargets or settling:
            ret = pipe.receive(&consecutive_errors, p)
            if ret == 0:
                if draining:
                    return 0
                break
            if ret == AVERROR_EOF:
                return 0
            if ret < 0:
                return ret
            if _damaged(p):
                # A frame decoded before the targets (or one of them) is
                # damaged: the targets may reference it.
                av_frame_unref(pipe.frame)
                return FX_DAMAGED
            if settling:
                if pipe.frame.pts == AV_NOPTS_VALUE or pipe.frame.pts >= settle_pts:
                    settling = False
            elif frame_no == targets[next_target]:
                ret = fx_sink_put(sink, pipe.frame, slots[next_target], p)
                if ret < 0:
                    av_frame_unref(pipe.frame)
                    return ret
                _note_converted(pipe, p)
                next_target += 1
                p.targets_left -= 1
                if next_target == ntargets and p.strict and pts_known:
                    settle_pts = _settle_pts(sent_pts, sent_max, n_sent, pipe.frame.pts, run_max)
                    settling = settle_pts > pipe.frame.pts
            frame_no += 1
            av_frame_unref(pipe.frame)
    p.failed_call = NULL
    return 0


cdef inline int64_t _settle_pts(const int64_t *sent_pts, const int64_t *sent_max, int64_t n_sent,
                                int64_t pts, int64_t run_max) noexcept nogil:
    """The largest pts of the packets up to the one whose pts is pts (the
    frame just output); run_max (every packet read) if it is not remembered."""
    cdef int64_t k
    if pts == AV_NOPTS_VALUE:
        return INT64_MIN
    for k in range(n_sent - 1, max(n_sent - SENT_RING, 0) - 1, -1):
        if sent_pts[k % SENT_RING] == pts:
            return sent_max[k % SENT_RING]
    return run_max


# ---- indexed ----

cdef object make_plan(IndexedPlan *plan, index, targets, first_slot, bint skip_nonref,
                      bint seek_each=False):
    """Fill plan for sorted unique targets; returns the arrays it points into
    (keep them alive until the decode returns)."""
    clusters = index.plan(targets)
    arrays = {
        "frame_pts": np.ascontiguousarray(index.frame_pts, np.int64),
        "frame_dec": np.ascontiguousarray(index.frame_dec, np.int64),
        "pos_sorted": np.ascontiguousarray(index.pos_sorted, np.int64),
        "pos_dec": np.ascontiguousarray(index.pos_dec, np.int64),
        "targets": targets, "slots": first_slot,
        "target_dec": np.ascontiguousarray(index.frame_dec[targets], np.int64),
        "done": np.zeros(targets.shape[0], np.uint8),
        "left": np.diff(clusters["bounds"]).astype(np.int64),
        "known_damage": np.ascontiguousarray(index.pkt_damaged, np.uint8),
        "skipped": np.zeros(index.frame_count, np.uint8),
        **{k: np.ascontiguousarray(v, np.int64) for k, v in clusters.items()},
    }
    # Where each cluster's keyframe is shown (frame_pts is sorted).
    arrays["key_idx"] = np.ascontiguousarray(
        np.searchsorted(arrays["frame_pts"], index.pkt_pts[arrays["key_dec"]]), np.int64)
    cdef const int64_t[::1] v
    cdef uint8_t[::1] done = arrays["done"]
    cdef uint8_t[::1] skipped = arrays["skipped"]
    cdef int64_t[::1] left = arrays["left"]
    v = arrays["frame_pts"]; plan.frame_pts = &v[0]; plan.n_frames = v.shape[0]
    v = arrays["frame_dec"]; plan.frame_dec = &v[0]
    v = arrays["pos_sorted"]; plan.pos_sorted = &v[0]; plan.n_packets = v.shape[0]
    v = arrays["pos_dec"]; plan.pos_dec = &v[0]
    v = arrays["targets"]; plan.targets = &v[0]; plan.n_targets = v.shape[0]
    v = arrays["slots"]; plan.slots = &v[0]
    v = arrays["target_dec"]; plan.target_dec = &v[0]
    v = arrays["bounds"]; plan.bounds = &v[0]; plan.n_clusters = v.shape[0] - 1
    v = arrays["key_dec"]; plan.key_dec = &v[0]
    v = arrays["key_pos"]; plan.key_pos = &v[0]
    v = arrays["key_idx"]; plan.key_idx = &v[0]
    plan.skipped = &skipped[0] if skipped.shape[0] else NULL
    plan.first_out = -1
    v = arrays["seek_ts"]; plan.seek_ts = &v[0]
    v = arrays["reach_dec"]; plan.reach_dec = &v[0]
    v = arrays["settle_idx"]; plan.settle_idx = &v[0]
    v = arrays["end_byte"]; plan.end_byte = &v[0]
    cdef const uint8_t[::1] known = arrays["known_damage"]
    cdef const uint8_t[::1] v8
    plan.known_damage = &known[0] if index.pkt_damaged.any() else NULL
    plan.done = &done[0]
    plan.left = &left[0]
    plan.skip_nonref = skip_nonref and index.codec_name in SKIP_NONREF_CODECS
    plan.seek_each = seek_each
    if plan.skip_nonref:
        arrays["witness"] = index.order_witnesses(targets)
        arrays["witness"][arrays["settle_idx"]] = 1  # waited for: never skipped
        v8 = arrays["witness"]
        plan.witness = &v8[0]
    plan.confirm_order = bool(index.header.get("reorders", True))
    return arrays


cdef inline void _cluster_done(IndexedPlan *plan, int64_t j) noexcept nogil:
    """Count target j off its cluster."""
    cdef int64_t lo = 0, hi = plan.n_clusters, mid
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if plan.bounds[mid] <= j:
            lo = mid
        else:
            hi = mid
    plan.left[lo] -= 1


cdef int _position(Pipeline pipe, IndexedPlan *plan, int64_t c, bint *landing,
                   DecodeProgress *p) noexcept nogil:
    """Seek to cluster c's keyframe unless the decoder can simply continue.

    It continues when no keyframe lies between it and the cluster, and nothing
    the cluster needs is behind it (nor was fed while non-reference frames
    were being skipped). After a seek, *landing is set and the cluster's
    bytes are prefetched.
    """
    cdef int ret
    cdef int64_t j, first_left = -1, first_dec = INT64_MAX
    cdef fx_pagecache *pc = pipe.source.core.pc
    for j in range(plan.bounds[c], plan.bounds[c + 1]):
        if not plan.done[j]:
            if first_left < 0:
                first_left = plan.targets[j]
            if plan.target_dec[j] < first_dec:
                first_dec = plan.target_dec[j]
    landing[0] = False
    if (pipe.positioned and not plan.seek_each and plan.key_dec[c] <= pipe.last_pkt_dec + 1
            and first_left > pipe.last_out_idx and first_dec > pipe.last_skipped_dec):
        ret = _resume(pipe, plan, p) if pipe.displaced else 1
        if ret < 0:
            return ret
        if ret == 1:
            # Going on without a seek: the cluster's bytes still come in one go
            # (pages already cached or queued are not queued again).
            if plan.key_dec[c] > pipe.run_key_dec:
                pipe.run_key_dec = plan.key_dec[c]
                pipe.run_seek_ts = plan.seek_ts[c]
            fx_source_prefetch(pc, plan.key_pos[c], plan.end_byte[c] - plan.key_pos[c])
            return 0
    fx_source_cancel_prefetch(pc)
    ret = pipe.seek(plan.seek_ts[c], p)
    if ret < 0:
        if pipe.cursor().error:
            return ret  # the byte source failed: that error is the answer
        # The demuxer would not seek there (a damaged index): the sequential
        # path may still serve these frames.
        p.fallback_reason = "the demuxer could not seek to the keyframe the index names"
        return FX_FALLBACK
    pipe.run_key_dec = plan.key_dec[c]
    pipe.run_seek_ts = plan.seek_ts[c]
    fx_source_prefetch(pc, plan.key_pos[c], plan.end_byte[c] - plan.key_pos[c])
    landing[0] = True
    return 0


cdef int _resume(Pipeline pipe, IndexedPlan *plan, DecodeProgress *p) noexcept nogil:
    """The demuxer moved under a decoder that could go on (an audio read took
    a turn on it): seek back to the keyframe before the packets fed since the
    last seek, without flushing the decoder, and read (not feed) up to the
    last packet read. 1: the next packet is the one after it; 0: that packet
    did not come again (the caller seeks and decodes from the keyframe);
    or the AVERROR of a failed byte source."""
    cdef int ret
    cdef int64_t idx
    cdef AVPacket *pkt
    if pipe.run_key_dec < 0 or pipe.last_pkt_dec < 0:
        return 0
    p.failed_call = "av_seek_frame"
    ret = av_seek_frame(pipe.fmt, pipe.stream_index, pipe.run_seek_ts, AVSEEK_FLAG_BACKWARD)
    if ret < 0:
        return ret if pipe.cursor().error else 0
    p.seeks += 1
    pipe.displaced = False
    pkt = av_packet_alloc()  # pipe.pkt may hold a packet still to send
    if pkt == NULL:
        return 0
    while True:
        p.failed_call = "av_read_frame"
        ret = av_read_frame(pipe.fmt, pkt)
        if ret < 0:
            if not pipe.cursor().error:
                ret = 0
            break
        if pkt.stream_index != pipe.stream_index:
            av_packet_unref(pkt)
            continue
        idx = _find(plan.pos_sorted, plan.n_packets, pkt.pos)
        av_packet_unref(pkt)
        ret = 0
        if idx < 0 or plan.pos_dec[idx] > pipe.last_pkt_dec:
            break  # past it: it did not come again
        if plan.pos_dec[idx] == pipe.last_pkt_dec:
            ret = 1
            break
    av_packet_free(&pkt)
    if ret >= 0:
        p.failed_call = NULL
    return ret


cdef int _check_packet(Pipeline pipe, IndexedPlan *plan, int64_t c, bint *landing,
                       int64_t stop_dec, DecodeProgress *p) noexcept nogil:
    """Place the packet just read in the index; choose whether to skip it."""
    cdef int64_t idx, dec
    idx = _find(plan.pos_sorted, plan.n_packets, pipe.pkt.pos)
    if idx < 0:
        p.fallback_reason = "a packet's position is not in the index"
        return FX_FALLBACK
    dec = plan.pos_dec[idx]
    if landing[0]:
        landing[0] = False
        if dec == plan.key_dec[c] and not (pipe.pkt.flags & AV_PKT_FLAG_KEY) and p.strict:
            # The packet the index names, but the parser found no keyframe in
            # its bytes (the sample table says it is one): damaged, most likely;
            # a one-threaded decode of it tells.
            p.damage_cluster = c
            p.damage_upto_dec = dec
            p.fallback_reason = "the keyframe the index names is no keyframe to the parser"
            return FX_DAMAGED
        if dec > plan.key_dec[c] or not (pipe.pkt.flags & AV_PKT_FLAG_KEY):
            p.fallback_reason = "the seek landed after the keyframe the index names"
            return FX_FALLBACK
    if dec > stop_dec:
        p.fallback_reason = "target frames did not appear where the index put them"
        return FX_FALLBACK
    if plan.known_damage != NULL and plan.known_damage[dec]:
        # No target depends on it (the caller refused those reads): the
        # targets' packets were all fed, so draining the decoder gives them.
        return FX_DRAIN
    pipe.last_pkt_dec = dec
    if plan.skip_nonref:
        # Skip non-reference frames shown before the last target that neither
        # are targets nor witness one's place; decode the rest, so a later
        # call can continue from here.
        idx = _find(plan.frame_pts, plan.n_frames, pipe.pkt.pts)
        if idx >= 0 and idx < plan.targets[plan.n_targets - 1] and not plan.witness[idx]:
            pipe.skip_nonref(True)
            plan.skipped[idx] = 1
            if dec > pipe.last_skipped_dec:
                pipe.last_skipped_dec = dec
        else:
            pipe.skip_nonref(False)
    return 0


cdef int _take_frame(Pipeline pipe, IndexedPlan *plan, int64_t c, FrameSink *sink,
                     DecodeProgress *p) noexcept nogil:
    """Identify the decoded frame by its pts; put it in the sink if it is a target."""
    cdef int ret
    cdef int64_t idx, j
    idx = _find(plan.frame_pts, plan.n_frames, pipe.frame.pts)
    if idx < 0 or idx <= pipe.last_out_idx:
        p.fallback_reason = ("a decoded frame's pts is not in the index" if idx < 0
                             else "frames came out of presentation order")
        return FX_FALLBACK
    # Between two frames of this call from the keyframe on (leading frames
    # of an open GOP may not come out after a seek), every frame whose packet
    # was fed came out, or was skipped on purpose.
    if 0 <= plan.first_out <= pipe.last_out_idx and pipe.last_out_idx >= plan.key_idx[c]:
        for j in range(pipe.last_out_idx + 1, idx):
            if not plan.skipped[j] and plan.frame_dec[j] <= pipe.last_pkt_dec:
                p.fallback_reason = "the decoder output no frame where the index lists one"
                return FX_FALLBACK
    if plan.first_out < 0:
        plan.first_out = idx
    pipe.last_out_idx = idx
    j = _find(plan.targets, plan.n_targets, idx)
    if j >= 0 and not plan.done[j]:
        ret = fx_sink_put(sink, pipe.frame, plan.slots[j], p)
        if ret < 0:
            return ret
        _note_converted(pipe, p)
        plan.done[j] = 1
        p.targets_left -= 1
        _cluster_done(plan, j)
    return 0


cdef inline int _stop_damaged(Pipeline pipe, int64_t c, DecodeProgress *p) noexcept nogil:
    """Give up on cluster c at damage: say how far the decode got."""
    p.damage_cluster = c
    p.damage_upto_dec = pipe.last_pkt_dec
    pipe.positioned = False
    return FX_DAMAGED


cdef int _decode_cluster(Pipeline pipe, IndexedPlan *plan, int64_t c, FrameSink *sink,
                         DecodeProgress *p) noexcept nogil:
    cdef int ret
    cdef bint draining = False, landing
    cdef bint confirmed = not plan.confirm_order
    cdef int consecutive_errors = 0
    cdef int64_t stop_dec, left_before
    cdef int64_t settle = plan.settle_idx[c]
    ret = _position(pipe, plan, c, &landing, p)
    if ret < 0:
        return ret
    pipe.limit_readahead(plan.end_byte[c])
    stop_dec = plan.reach_dec[c] + TARGET_SLACK_PACKETS + 2 * pipe.num_threads
    while plan.left[c] > 0 or not confirmed or pipe.last_out_idx < settle:
        if not draining and not pipe.packet_pending:
            ret = pipe.next_packet(&draining, p)
            if ret < 0:
                return ret
            if ret == 1:
                ret = (FX_DRAIN if _cut_short(pipe, p)
                       else _check_packet(pipe, plan, c, &landing, stop_dec, p))
                if ret == FX_DRAIN:
                    av_packet_unref(pipe.pkt)
                    draining = True
                    pipe.positioned = False  # the next use must seek
                elif ret != 0:
                    return ret
                else:
                    pipe.packet_pending = True
        ret = pipe.send(draining, &consecutive_errors, p)
        if ret < 0:
            return ret
        if _damaged(p):
            return _stop_damaged(pipe, c, p)
        while plan.left[c] > 0 or not confirmed or pipe.last_out_idx < settle:
            ret = pipe.receive(&consecutive_errors, p)
            if ret == 0 and not draining:
                break
            if ret == 0 or ret == AVERROR_EOF:
                pipe.positioned = False  # drained: the next use must seek
                if plan.left[c] == 0:
                    return 0  # nothing came after the targets
                p.fallback_reason = "the stream ended before the frames the index lists"
                return FX_FALLBACK
            if ret < 0:
                return ret
            if _damaged(p):
                av_frame_unref(pipe.frame)
                return _stop_damaged(pipe, c, p)
            left_before = plan.left[c]
            ret = _take_frame(pipe, plan, c, sink, p)
            av_frame_unref(pipe.frame)
            if ret != 0:
                return ret
            confirmed = confirmed or left_before == 0
    return 0


cdef int decode_indexed(Pipeline pipe, IndexedPlan *plan, FrameSink *sink,
                        DecodeProgress *p) noexcept nogil:
    """Seek per cluster, decode forward, match output frames by pts.

    Returns 0, an AVERROR, or FX_FALLBACK with p.fallback_reason set.
    """
    cdef int ret = 0
    cdef int64_t c
    for c in range(plan.n_clusters):
        if plan.left[c] > 0:
            ret = _decode_cluster(pipe, plan, c, sink, p)
            if ret != 0:
                break
    if plan.skip_nonref:
        pipe.skip_nonref(False)
    pipe.limit_readahead(0)
    if ret == 0:
        p.failed_call = NULL
    return ret


# ---- damage survey ----

cdef inline int64_t _dec_of(Survey *s, int64_t pos) noexcept nogil:
    """Decode position of the packet at byte pos (-1: no index, or not in it)."""
    cdef int64_t idx
    if s.pos_sorted == NULL:
        return -1
    idx = _find(s.pos_sorted, s.n_packets, pos)
    return s.pos_dec[idx] if idx >= 0 else -1


cdef void _mark_damaged(Pipeline pipe, Survey *s, int64_t dec, int64_t pos) noexcept nogil:
    if dec >= 0 and s.damaged != NULL:
        if s.damaged[dec]:
            return
        s.damaged[dec] = 1
    s.n_damaged += 1
    if s.first_dec < 0 and s.first_pos < 0:
        s.first_dec = dec
        s.first_pos = pos
        pipe.last_error(s.first_message, sizeof(s.first_message))


cdef int survey_damage(Pipeline pipe, Survey *s, DecodeProgress *p) noexcept nogil:
    """Decode with the pipeline (one thread: each error is the packet just
    sent) from the start or a keyframe, through upto_dec or the end, and
    record damaged packets and every output frame's time. Returns 0 or an
    AVERROR; the pipeline is spent (release it)."""
    cdef int ret
    cdef bint draining = False
    cdef int consecutive_errors = 0
    cdef int64_t errors_before, corrupt_before, idx, dec = -1, pos = -1
    s.n_out = s.n_damaged = 0
    s.first_dec = s.first_pos = -1
    s.first_message[0] = 0
    pipe.fresh = False
    pipe.positioned = False
    if not s.from_start:
        ret = pipe.seek(s.seek_ts, p)
        if ret < 0:
            return ret
        pipe.positioned = False
    while True:
        if not draining and not pipe.packet_pending:
            ret = pipe.next_packet(&draining, p)
            if ret < 0:
                return ret
            if ret == 1:
                pos = pipe.pkt.pos
                dec = _dec_of(s, pos)
                pipe.packet_pending = True
        errors_before = p.decode_errors
        ret = pipe.send(draining, &consecutive_errors, p)
        if ret < 0:
            return ret
        if p.decode_errors > errors_before:
            _mark_damaged(pipe, s, dec, pos)
        while True:
            errors_before = p.decode_errors
            corrupt_before = p.corrupt_frames
            ret = pipe.receive(&consecutive_errors, p)
            if ret == AVERROR_EOF or (ret == 0 and draining):
                return 0
            if ret == 0:
                break
            if ret < 0:
                return ret
            if p.decode_errors > errors_before:
                _mark_damaged(pipe, s, dec, pos)
            if s.n_out < s.out_cap:
                s.out_pts[s.n_out] = pipe.frame.best_effort_timestamp
            s.n_out += 1
            if p.corrupt_frames > corrupt_before:  # receive() read the frame's flags
                # The frame's own packet, found by its time (else the last one fed).
                idx = (_find(s.frame_pts, s.n_frames, pipe.frame.pts) if s.frame_pts != NULL
                       else -1)
                if idx >= 0:
                    _mark_damaged(pipe, s, s.frame_dec[idx], -1)
                else:
                    _mark_damaged(pipe, s, dec, pos)
            av_frame_unref(pipe.frame)
        if s.stop_at_damage and s.n_damaged:
            return 0
        if s.upto_dec >= 0 and dec >= s.upto_dec and not pipe.packet_pending:
            draining = True  # fed what was asked: flush the frames still inside
