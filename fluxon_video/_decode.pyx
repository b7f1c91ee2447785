# cython: language_level=3, boundscheck=False, wraparound=False
"""Decode frames straight into a caller-owned NHWC buffer.

VideoDecoder owns one FFmpeg pipeline over a ByteSource: the AVIOContext,
format and codec contexts, a packet, a frame and a cached SwsContext. It
lives as long as its reader, so a later request that lies ahead of where the
decoder stands continues without seeking. All demux/decode/scale work runs
without the GIL; failures are AVERROR codes turned into exceptions by
err_check once the GIL is back.

Frame i is the i-th frame the decoder outputs when the first video stream
is read from the start (presentation order). Two paths produce it:

- sequential: decode from frame 0, count output frames, convert the targets.
  It is the reference, and the path whenever no trusted index exists.
- indexed: with a trusted FrameIndex, seek to the keyframe each cluster of
  targets needs, decode forward, and identify every output frame by its pts.
  Any disagreement with the index (landing after the keyframe, a pts the
  index lacks, frames out of order, targets that never appear) abandons the
  call and redoes it sequentially, so the result is always the reference's.
"""
import operator
import os

import numpy as np

from libc.errno cimport EAGAIN, EINVAL, ENOMEM
from libc.stdint cimport INT64_MAX, int64_t, uint8_t
from libc.string cimport memcmp, memcpy, memset
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from fluxon_video._avio cimport (
    ByteSource, fx_avio_close, fx_avio_cursor, fx_avio_open, fx_source_cancel_prefetch,
    fx_source_prefetch,
)
from fluxon_video._demux cimport fx_open_input
from fluxon_video._errors cimport err_check
from fluxon_video._pagecache cimport fx_cursor, fx_pagecache
from fluxon_video.libav.avcodec cimport (
    AVCodec, AVCodecContext, AVDISCARD_DEFAULT, AVDISCARD_NONREF, AVPacket, AV_PKT_FLAG_KEY,
    FF_THREAD_FRAME, FF_THREAD_SLICE, av_packet_alloc, av_packet_free, av_packet_unref,
    avcodec_alloc_context3, avcodec_find_decoder, avcodec_flush_buffers, avcodec_free_context,
    avcodec_get_name, avcodec_open2, avcodec_parameters_to_context, avcodec_receive_frame,
    avcodec_send_packet, avcodec_version,
)
from fluxon_video.libav.avformat cimport (
    AVFormatContext, AVIOContext, AVSEEK_FLAG_BACKWARD, AVStream, av_read_frame, av_seek_frame,
    avformat_close_input, avformat_version,
)
from fluxon_video.libav.avutil cimport (
    AVCOL_RANGE_JPEG, AVCOL_RANGE_UNSPECIFIED, AVCOL_SPC_BT470BG, AVERROR, AVERROR_EOF,
    AVERROR_INVALIDDATA, AVERROR_STREAM_NOT_FOUND, AVFrame, AV_NOPTS_VALUE, AV_PIX_FMT_RGB24,
    av_frame_alloc, av_frame_free, av_frame_unref, av_free, av_malloc, avutil_version,
)
from fluxon_video.libav.swscale cimport (
    SWS_BILINEAR, SwsContext, sws_freeContext, sws_getCoefficients, sws_getColorspaceDetails,
    sws_getContext, sws_isSupportedInput, sws_scale, sws_setColorspaceDetails, swscale_version,
)

from fluxon_video import errors


cdef extern from "_avlog.h" nogil:
    void fx_avlog_install()
    void fx_avlog_set_forward_level(int level)
    int fx_avlog_get_forward_level()
    void fx_avlog_clear()
    const char *fx_avlog_last_error()


fx_avlog_install()

# Decoders report a bad packet and carry on; so do we, like the ffmpeg CLI.
# This many bad packets in a row means the stream is garbage.
cdef int MAX_CONSECUTIVE_DECODE_ERRORS = 64
# The indexed path gives up (and decodes sequentially) when this many packets
# past a cluster's last target did not produce its frames: far more than any
# decoder's reorder delay plus frame-threading latency.
cdef int64_t TARGET_SLACK_PACKETS = 48
# Returned by the indexed path when the stream disagrees with the index.
cdef int FX_FALLBACK = 1
# Codecs where skipping non-reference frames that are not targets is exact:
# nothing references them, and these decoders keep their ordering state
# (POC, DPB output) from reference pictures only.
SKIP_NONREF_CODECS = frozenset({"h264", "hevc"})


def set_ffmpeg_log_level(int level):
    """Print FFmpeg messages at or above this av_log level (default: none)."""
    fx_avlog_set_forward_level(level)


def get_ffmpeg_log_level():
    return fx_avlog_get_forward_level()


cdef inline double _now_ms() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6


cdef struct DecodeProgress:
    int64_t frames_decoded
    int64_t frames_converted
    int64_t targets_left
    int64_t decode_errors
    int64_t seeks
    double open_ms
    double decode_ms
    const char *failed_call  # the libav call that returned the error, if any
    const char *fallback_reason


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
    bint convert                 # False: decode only (the decode-floor measurement)


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


cdef inline int _count_decode_error(int ret, int *consecutive_errors,
                                    DecodeProgress *p) noexcept nogil:
    """A bad packet or frame: counted and skipped (0), like the ffmpeg CLI does,
    unless memory ran out or too many came in a row (ret)."""
    if ret == AVERROR(ENOMEM):
        return ret
    p.decode_errors += 1
    consecutive_errors[0] += 1
    return ret if consecutive_errors[0] > MAX_CONSECUTIVE_DECODE_ERRORS else 0


def _as_frame_indices(indices):
    """indices as an int64 array; rejects non-integers and negatives."""
    if isinstance(indices, np.ndarray) and indices.dtype.kind in "iu":
        array = indices.astype(np.int64, copy=False).reshape(-1)
    else:
        values = []
        for position, value in enumerate(indices):
            if isinstance(value, (bool, np.bool_)):
                raise TypeError(f"frame index at position {position} is a bool, not an int")
            try:
                values.append(operator.index(value))
            except TypeError:
                raise TypeError(f"frame index at position {position} is {type(value).__name__}, "
                                f"not an int") from None
        array = np.asarray(values, dtype=np.int64)
    if array.size and array.min() < 0:
        bad = int(array[array < 0][0])
        raise errors.FluxonFsFrameIndexError(f"frame index {bad} is negative")
    return array


def check_output_size(int height, int width, int num_threads):
    if height <= 0 or width <= 0:
        raise errors.FluxonFsConfigError(
            f"height and width must be positive, got height={height} width={width}")
    if num_threads <= 0:
        raise errors.FluxonFsConfigError(f"num_threads must be positive, got {num_threads}")


cdef class VideoDecoder:
    """One FFmpeg demux+decode pipeline over a ByteSource. close() is idempotent."""
    cdef ByteSource source
    cdef readonly str name
    cdef int num_threads
    cdef int pid
    cdef AVIOContext *pb
    cdef AVFormatContext *fmt
    cdef AVCodecContext *codec
    cdef AVPacket *pkt
    cdef AVFrame *frame
    cdef int stream_index
    cdef readonly str codec_name
    cdef SwsContext *sws
    # The inputs sws was built for; a change rebuilds it.
    cdef int sws_src_w, sws_src_h, sws_src_fmt, sws_dst_w, sws_dst_h, sws_cs, sws_range
    # Read counters of AVIO cursors already closed (stats report per-call deltas).
    cdef int64_t retired_read_calls, retired_seek_calls, retired_bytes_read
    cdef uint8_t *scratch      # padded rows for unscaled conversions (see _convert)
    cdef size_t scratch_size
    cdef int scratch_stride
    # Where the pipeline stands, for the indexed path:
    cdef bint fresh            # opened, nothing read yet (the sequential path may start here)
    cdef bint positioned       # fed packets since the last seek and not drained
    cdef bint packet_pending   # self.pkt holds a packet the decoder refused with EAGAIN
    cdef int64_t last_skipped_dec  # decode position of the last packet fed with skip_frame=NONREF
    cdef int64_t last_pkt_dec  # decode position of the last packet fed
    cdef int64_t last_out_idx  # presentation index of the last frame output
    cdef public object index   # FrameIndex or None

    def __cinit__(self, ByteSource source, int num_threads=1, str name=None):
        self.source = source
        self.name = name or source.name
        self.num_threads = num_threads
        self.stream_index = -1
        self.pid = os.getpid()
        self.index = None

    def __dealloc__(self):
        # In a forked child, FFmpeg's decoder threads do not exist: freeing
        # the context would wait for them forever. Leave the parent's copy.
        if self.pid == os.getpid():
            self._release()

    cdef void _retire_cursor(self) noexcept nogil:
        """Fold the AVIO cursor's counters into the decoder's before pb goes."""
        cdef fx_cursor *cursor
        if self.pb != NULL:
            cursor = fx_avio_cursor(self.pb)
            self.retired_read_calls += cursor.read_calls
            self.retired_seek_calls += cursor.seek_calls
            self.retired_bytes_read += cursor.bytes_read

    cdef void _release(self) noexcept nogil:
        if self.sws != NULL:
            sws_freeContext(self.sws)
            self.sws = NULL
        av_free(self.scratch)
        self.scratch = NULL
        self.scratch_size = 0
        av_frame_free(&self.frame)
        av_packet_free(&self.pkt)
        avcodec_free_context(&self.codec)
        if self.fmt != NULL:
            # CUSTOM_IO: closing the input leaves pb to us.
            avformat_close_input(&self.fmt)
        self._retire_cursor()
        fx_avio_close(&self.pb)
        self.stream_index = -1
        self.fresh = False
        self.positioned = False
        self.packet_pending = False

    def close(self):
        """Release every FFmpeg resource. Safe to call twice."""
        if self.pid != os.getpid():
            return
        with nogil:
            self._release()

    @property
    def is_open(self):
        return self.fmt != NULL

    cdef int _open(self, DecodeProgress *p) noexcept nogil:
        """Open the container and decoder; returns 0 or an AVERROR code."""
        cdef int ret
        cdef AVStream *st
        cdef const AVCodec *dec
        ret = fx_open_input(self.pb, &self.fmt, True, &self.stream_index, &p.failed_call)
        if ret < 0:
            return ret
        self.pkt = av_packet_alloc()
        self.frame = av_frame_alloc()
        if self.pkt == NULL or self.frame == NULL:
            return AVERROR(ENOMEM)
        st = self.fmt.streams[self.stream_index]
        p.failed_call = "avcodec_find_decoder"
        dec = avcodec_find_decoder(st.codecpar.codec_id)
        if dec == NULL:
            return AVERROR(EINVAL)
        self.codec = avcodec_alloc_context3(dec)
        if self.codec == NULL:
            return AVERROR(ENOMEM)
        p.failed_call = "avcodec_parameters_to_context"
        ret = avcodec_parameters_to_context(self.codec, st.codecpar)
        if ret < 0:
            return ret
        self.codec.pkt_timebase = st.time_base
        self.codec.thread_count = self.num_threads
        self.codec.thread_type = FF_THREAD_FRAME | FF_THREAD_SLICE
        p.failed_call = "avcodec_open2"
        ret = avcodec_open2(self.codec, dec, NULL)
        if ret < 0:
            return ret
        p.failed_call = NULL
        self.fresh = True
        self.positioned = False
        self.packet_pending = False
        return 0

    cdef int _convert(self, AVFrame *f, uint8_t *dst, int height, int width) noexcept nogil:
        """Scale and convert f to RGB24 rows of stride width*3 at dst."""
        cdef int cs, src_range, want_range, dst_range, brightness, contrast, saturation
        cdef int *inv_table
        cdef int *table
        cdef const int *want_table
        cdef uint8_t *dst_planes[4]
        cdef int dst_strides[4]
        cdef int ret, y
        cdef int row_bytes = width * 3
        if (self.sws == NULL or f.width != self.sws_src_w or f.height != self.sws_src_h
                or f.format != self.sws_src_fmt or width != self.sws_dst_w
                or height != self.sws_dst_h or <int> f.colorspace != self.sws_cs
                or <int> f.color_range != self.sws_range):
            if self.sws != NULL:
                sws_freeContext(self.sws)
                self.sws = NULL
            if not sws_isSupportedInput(f.format):
                return AVERROR(EINVAL)
            self.sws = sws_getContext(f.width, f.height, f.format, width, height,
                                      AV_PIX_FMT_RGB24, SWS_BILINEAR, NULL, NULL, NULL)
            if self.sws == NULL:
                return AVERROR(EINVAL)
            # The frame's own matrix and range, chosen as the ffmpeg CLI's scale
            # filter does, so our pixels match its output bit for bit. Setting
            # them slows swscale's unscaled YUV->RGB converter down, so only do
            # it when they differ from what the context already uses.
            cs = <int> f.colorspace
            if cs < 1 or cs > 10 or cs == 8:
                cs = AVCOL_SPC_BT470BG
            sws_getColorspaceDetails(self.sws, &inv_table, &src_range, &table, &dst_range,
                                     &brightness, &contrast, &saturation)
            want_table = sws_getCoefficients(cs)
            want_range = src_range
            if f.color_range != AVCOL_RANGE_UNSPECIFIED:
                want_range = f.color_range == AVCOL_RANGE_JPEG
            if want_range != src_range or memcmp(want_table, inv_table, 4 * sizeof(int)) != 0:
                sws_setColorspaceDetails(self.sws, want_table, want_range, want_table, dst_range,
                                         brightness, contrast, saturation)
            self.sws_src_w = f.width
            self.sws_src_h = f.height
            self.sws_src_fmt = f.format
            self.sws_dst_w = width
            self.sws_dst_h = height
            self.sws_cs = <int> f.colorspace
            self.sws_range = <int> f.color_range
        memset(dst_planes, 0, sizeof(dst_planes))
        memset(dst_strides, 0, sizeof(dst_strides))
        if f.width == width and f.height == height:
            # swscale's unscaled YUV->RGB converter works in 8-pixel blocks: with
            # a row stride of exactly width*3 it leaves the last width%8 pixels
            # unwritten and stores past the end of a row. Give it padded rows
            # (as the CLI's frames have) and copy them out.
            ret = self._ensure_scratch(height, row_bytes)
            if ret < 0:
                return ret
            dst_planes[0] = self.scratch
            dst_strides[0] = self.scratch_stride
        else:
            dst_planes[0] = dst
            dst_strides[0] = row_bytes
        if sws_scale(self.sws, <const uint8_t * const *> f.data, f.linesize, 0, f.height,
                     dst_planes, dst_strides) != height:
            return AVERROR(EINVAL)
        if dst_planes[0] != dst:
            for y in range(height):
                memcpy(dst + <int64_t> y * row_bytes,
                       self.scratch + <int64_t> y * self.scratch_stride, row_bytes)
        return 0

    cdef int _ensure_scratch(self, int height, int row_bytes) noexcept nogil:
        cdef int stride = ((row_bytes + 64) + 63) & ~63
        cdef size_t need = <size_t> stride * height + 64
        if need > self.scratch_size:
            av_free(self.scratch)
            self.scratch = <uint8_t *> av_malloc(need)
            self.scratch_size = need if self.scratch != NULL else 0
            if self.scratch == NULL:
                return AVERROR(ENOMEM)
        self.scratch_stride = stride
        return 0

    cdef int _next_packet(self, bint *draining, DecodeProgress *p) noexcept nogil:
        """Read our stream's next packet into self.pkt: 1; 0 once the stream ends
        (*draining set); or the AVERROR of a failed byte source."""
        cdef int ret
        while True:
            p.failed_call = "av_read_frame"
            ret = av_read_frame(self.fmt, self.pkt)
            if ret < 0:
                if fx_avio_cursor(self.pb).error:
                    return ret
                # End of data, or a demux error the ffmpeg CLI would also treat
                # as the end: flush the decoder.
                draining[0] = True
                return 0
            if self.pkt.stream_index == self.stream_index:
                return 1
            av_packet_unref(self.pkt)

    cdef int _send(self, bint draining, int *consecutive_errors, DecodeProgress *p) noexcept nogil:
        """Send the pending packet (or the drain signal); keeps it on EAGAIN."""
        cdef int ret
        p.failed_call = "avcodec_send_packet"
        ret = avcodec_send_packet(self.codec, self.pkt if self.packet_pending else NULL)
        if ret == AVERROR(EAGAIN):
            return 0  # receive first, then send the same packet again
        if self.packet_pending:
            av_packet_unref(self.pkt)
            self.packet_pending = False
        if ret < 0 and ret != AVERROR_EOF:
            return _count_decode_error(ret, consecutive_errors, p)
        return 0

    cdef int _receive(self, int *consecutive_errors, DecodeProgress *p) noexcept nogil:
        """Next frame into self.frame: 1, or 0 when the decoder needs input
        (AVERROR_EOF once drained), or another AVERROR."""
        cdef int ret
        while True:
            p.failed_call = "avcodec_receive_frame"
            ret = avcodec_receive_frame(self.codec, self.frame)
            if ret == AVERROR(EAGAIN):
                return 0
            if ret == AVERROR_EOF:
                return ret
            if ret < 0:
                ret = _count_decode_error(ret, consecutive_errors, p)
                if ret < 0:
                    return ret
                continue
            consecutive_errors[0] = 0
            p.frames_decoded += 1
            return 1

    cdef int _decode_sequential(self, const int64_t *targets, const int64_t *slots,
                                int64_t ntargets, uint8_t *out, int height, int width,
                                DecodeProgress *p) noexcept nogil:
        """Decode from the start until every target is converted or the stream ends."""
        cdef int ret
        cdef bint draining = False
        cdef int consecutive_errors = 0
        cdef int64_t frame_no = 0, next_target = 0
        cdef int64_t frame_bytes = <int64_t> height * width * 3
        self.fresh = False
        self.positioned = False  # frames are counted, not matched to the index
        while next_target < ntargets:
            if not draining and not self.packet_pending:
                ret = self._next_packet(&draining, p)
                if ret < 0:
                    return ret
                self.packet_pending = ret == 1
            ret = self._send(draining, &consecutive_errors, p)
            if ret < 0:
                return ret
            while next_target < ntargets:
                ret = self._receive(&consecutive_errors, p)
                if ret == 0:
                    if draining:
                        return 0
                    break
                if ret == AVERROR_EOF:
                    return 0
                if ret < 0:
                    return ret
                if frame_no == targets[next_target]:
                    p.failed_call = "sws_scale"
                    ret = self._convert(self.frame, out + slots[next_target] * frame_bytes,
                                        height, width)
                    if ret < 0:
                        av_frame_unref(self.frame)
                        return ret
                    p.frames_converted += 1
                    next_target += 1
                    p.targets_left -= 1
                frame_no += 1
                av_frame_unref(self.frame)
        p.failed_call = NULL
        return 0

    cdef int _seek(self, IndexedPlan *plan, int64_t c, DecodeProgress *p) noexcept nogil:
        """Flush and seek the demuxer to cluster c's keyframe; prefetch its bytes."""
        cdef int ret
        if self.packet_pending:
            av_packet_unref(self.pkt)
            self.packet_pending = False
        avcodec_flush_buffers(self.codec)
        p.failed_call = "av_seek_frame"
        ret = av_seek_frame(self.fmt, self.stream_index, plan.seek_ts[c], AVSEEK_FLAG_BACKWARD)
        if ret < 0:
            return ret
        p.seeks += 1
        self.fresh = False
        self.positioned = True
        self.last_skipped_dec = -1
        self.last_pkt_dec = -1
        self.last_out_idx = -1
        return 0

    cdef int _decode_indexed(self, IndexedPlan *plan, fx_pagecache *pc, uint8_t *out,
                             int height, int width, DecodeProgress *p) noexcept nogil:
        """Seek per cluster, decode forward, match output frames by pts.

        Returns 0, an AVERROR, or FX_FALLBACK with p.fallback_reason set.
        """
        cdef int ret
        cdef int64_t c, j, idx, dec, first_left, first_dec, stop_dec
        cdef int64_t frame_bytes = <int64_t> height * width * 3
        cdef bint draining, landing
        cdef int consecutive_errors = 0
        cdef fx_cursor *cursor = fx_avio_cursor(self.pb)
        for c in range(plan.n_clusters):
            if plan.left[c] == 0:
                continue
            first_left = -1
            first_dec = INT64_MAX
            for j in range(plan.bounds[c], plan.bounds[c + 1]):
                if not plan.done[j]:
                    if first_left < 0:
                        first_left = plan.targets[j]
                    if plan.target_dec[j] < first_dec:
                        first_dec = plan.target_dec[j]
            landing = False
            # Continue without seeking when no keyframe lies between the decoder
            # and the cluster, and nothing the cluster needs is behind it (nor
            # was fed while non-reference frames were being skipped).
            if not (self.positioned and plan.key_dec[c] <= self.last_pkt_dec + 1
                    and first_left > self.last_out_idx
                    and first_dec > self.last_skipped_dec):
                # A keyframe lies ahead of the decoder, or the target is behind it.
                fx_source_cancel_prefetch(pc)
                ret = self._seek(plan, c, p)
                if ret < 0:
                    return ret
                fx_source_prefetch(pc, plan.key_pos[c], plan.end_byte[c] - plan.key_pos[c])
                landing = True
            cursor.readahead_end = plan.end_byte[c]
            stop_dec = plan.reach_dec[c] + TARGET_SLACK_PACKETS + 2 * self.num_threads
            draining = False
            while plan.left[c] > 0:
                if not draining and not self.packet_pending:
                    ret = self._next_packet(&draining, p)
                    if ret < 0:
                        return ret
                    if ret == 1:
                        idx = _find(plan.pos_sorted, plan.n_packets, self.pkt.pos)
                        if idx < 0:
                            p.fallback_reason = "a packet's position is not in the index"
                            return FX_FALLBACK
                        dec = plan.pos_dec[idx]
                        if landing:
                            landing = False
                            if dec > plan.key_dec[c] or not (self.pkt.flags & AV_PKT_FLAG_KEY):
                                p.fallback_reason = "the seek landed after the keyframe the index names"
                                return FX_FALLBACK
                        if dec > stop_dec:
                            p.fallback_reason = "target frames did not appear where the index put them"
                            return FX_FALLBACK
                        self.last_pkt_dec = dec
                        if plan.skip_nonref:
                            # Skip non-reference frames shown before the last target
                            # that are not targets; decode the rest, so a later call
                            # can continue from here.
                            idx = _find(plan.frame_pts, plan.n_frames, self.pkt.pts)
                            if (idx >= 0 and idx < plan.targets[plan.n_targets - 1]
                                    and _find(plan.targets, plan.n_targets, idx) < 0):
                                self.codec.skip_frame = AVDISCARD_NONREF
                                if dec > self.last_skipped_dec:
                                    self.last_skipped_dec = dec
                            else:
                                self.codec.skip_frame = AVDISCARD_DEFAULT
                        self.packet_pending = True
                ret = self._send(draining, &consecutive_errors, p)
                if ret < 0:
                    return ret
                while plan.left[c] > 0:
                    ret = self._receive(&consecutive_errors, p)
                    if ret == 0 and not draining:
                        break
                    if ret == 0 or ret == AVERROR_EOF:
                        self.positioned = False  # drained: the next use must seek
                        p.fallback_reason = "the stream ended before the frames the index lists"
                        return FX_FALLBACK
                    if ret < 0:
                        return ret
                    idx = _find(plan.frame_pts, plan.n_frames, self.frame.pts)
                    if idx < 0 or idx <= self.last_out_idx:
                        av_frame_unref(self.frame)
                        p.fallback_reason = ("a decoded frame's pts is not in the index" if idx < 0
                                             else "frames came out of presentation order")
                        return FX_FALLBACK
                    self.last_out_idx = idx
                    j = _find(plan.targets, plan.n_targets, idx)
                    if j >= 0 and not plan.done[j]:
                        if plan.convert:
                            p.failed_call = "sws_scale"
                            ret = self._convert(self.frame, out + plan.slots[j] * frame_bytes,
                                                height, width)
                            if ret < 0:
                                av_frame_unref(self.frame)
                                return ret
                            p.frames_converted += 1
                        plan.done[j] = 1
                        p.targets_left -= 1
                        _cluster_done(plan, j)
                    av_frame_unref(self.frame)
        if plan.skip_nonref:
            self.codec.skip_frame = AVDISCARD_DEFAULT
        cursor.readahead_end = 0
        p.failed_call = NULL
        return 0

    def decode(self, indices, int height, int width):
        """Frames at indices as uint8 (N, height, width, 3) RGB, plus stats of this call.

        Uses self.index when it is trusted, else (and on any disagreement
        with it) the sequential path.
        """
        check_output_size(height, width, self.num_threads)
        requested = _as_frame_indices(indices)
        out = np.empty((requested.shape[0], height, width, 3), dtype=np.uint8)
        if requested.shape[0] == 0:
            return out, {}
        # Decode each distinct frame once, into its first slot; copy duplicates after.
        targets, first_slot, inverse = np.unique(requested, return_index=True,
                                                 return_inverse=True)
        targets = np.ascontiguousarray(targets, dtype=np.int64)
        first_slot = np.ascontiguousarray(first_slot, dtype=np.int64)
        cache_before = self.source.stats()
        io_before = self._io_totals()
        index = self.index
        p_stats = {"path": "sequential", "fallback": ""}
        if index is not None and index.trusted and int(targets[-1]) >= index.frame_count:
            self._raise_out_of_range(int(targets[-1]), index.frame_count)
        cdef DecodeProgress p
        memset(&p, 0, sizeof(p))
        p.targets_left = targets.shape[0]
        if index is not None and index.trusted:
            p_stats["path"] = "indexed"
            ret = self._run(targets, first_slot, out, height, width, index, &p)
            if ret == FX_FALLBACK:
                reason = p.fallback_reason.decode()
                index.untrust(f"decode disagreed with the index: {reason}")
                p_stats["fallback"] = reason
                p_stats["path"] = "sequential"
                self.close()  # the sequential path starts from a fresh pipeline
                p.targets_left = targets.shape[0]
                p.frames_converted = 0
                ret = self._run(targets, first_slot, out, height, width, None, &p)
        else:
            if self.fmt != NULL and not self.fresh:
                self.close()
            ret = self._run(targets, first_slot, out, height, width, None, &p)
        cdef fx_cursor *cursor = fx_avio_cursor(self.pb)
        stats = self._stats(&p, io_before, cache_before)
        stats.update(p_stats)
        try:
            if cursor.error:
                raise self.source.fetch_error(cursor)
            if ret < 0:
                detail = fx_avlog_last_error().decode("utf-8", "replace")
                what = p.failed_call.decode() if p.failed_call != NULL else "decode"
                if ret == AVERROR_STREAM_NOT_FOUND:
                    raise errors.FluxonFsNoVideoStreamError(f"{self.name}: no video stream")
                if what == "avformat_open_input" and (
                        ret == AVERROR_INVALIDDATA or ret == AVERROR_EOF):
                    raise errors.FluxonFsDecodeError(
                        f"{self.name}: not a recognised video container"
                        + (f" ({detail})" if detail else ""))
                err_check(ret, what, self.name, detail)
            if p.targets_left:
                missing = int(targets[targets.shape[0] - p.targets_left])
                self._raise_out_of_range(missing, p.frames_decoded)
        except BaseException:
            # A failed pipeline is not reusable.
            self.close()
            raise
        duplicates = np.nonzero(first_slot[inverse] != np.arange(requested.shape[0]))[0]
        if duplicates.size:
            out[duplicates] = out[first_slot[inverse[duplicates]]]
        return out, stats

    def decode_floor(self, indices):
        """Decode what the indexed path would for indices, without skipping
        non-reference frames and without converting: the time libavcodec alone
        needs (a benchmark's lower bound). Needs a trusted index."""
        if self.index is None or not self.index.trusted:
            raise errors.FluxonFsDecodeError(f"{self.name}: the decode floor needs a trusted index")
        targets = np.ascontiguousarray(np.unique(_as_frame_indices(indices)), dtype=np.int64)
        if targets.size == 0:
            return {"decode_ms": 0.0, "frames_decoded": 0, "decoder_seeks": 0}
        if int(targets[-1]) >= self.index.frame_count:
            self._raise_out_of_range(int(targets[-1]), self.index.frame_count)
        cdef DecodeProgress p
        memset(&p, 0, sizeof(p))
        p.targets_left = targets.shape[0]
        ret = self._run(targets, np.zeros_like(targets), np.empty((1, 1, 1, 3), np.uint8), 1, 1,
                        self.index, &p, True)
        if ret == FX_FALLBACK:
            raise errors.FluxonFsDecodeError(f"{self.name}: {p.fallback_reason.decode()}")
        if ret < 0:
            err_check(ret, p.failed_call.decode() if p.failed_call != NULL else "decode", self.name)
        return {"decode_ms": p.decode_ms, "frames_decoded": p.frames_decoded,
                "decoder_seeks": p.seeks}

    def _raise_out_of_range(self, int64_t frame, int64_t count):
        raise errors.FluxonFsFrameIndexError(
            f"{self.name}: frame index {frame} is out of range: the video has {count} frames")

    cdef int _run(self, targets, first_slot, out, int height, int width, index,
                  DecodeProgress *p, bint floor=False) except? -1:
        """Open if needed, then run one path with the GIL released."""
        cdef const int64_t[::1] targets_view = targets
        cdef const int64_t[::1] slots_view = first_slot
        cdef uint8_t[:, :, :, ::1] out_view = out
        cdef uint8_t *out_ptr = &out_view[0, 0, 0, 0]
        cdef int64_t ntargets = targets.shape[0]
        cdef int ret = 0
        cdef double t0
        cdef IndexedPlan plan
        cdef fx_pagecache *pc = self.source.pagecache()
        if self.pb == NULL:
            self.pb = fx_avio_open(self.source, 64 << 10)
        if self.fmt == NULL:
            with nogil:
                fx_avlog_clear()
                t0 = _now_ms()
                ret = self._open(p)
                p.open_ms += _now_ms() - t0
            if ret < 0:
                return ret
        # The arrays the plan points into stay alive until the call returns.
        keep = None
        if index is not None:
            if self.stream_index != index.stream_index:
                p.fallback_reason = "the decoder chose another stream than the index"
                return FX_FALLBACK
            keep = self._make_plan(&plan, index, targets, first_slot)
            if floor:
                plan.convert = False
                plan.skip_nonref = False
        with nogil:
            fx_avlog_clear()
            t0 = _now_ms()
            if index is None:
                ret = self._decode_sequential(&targets_view[0], &slots_view[0], ntargets,
                                              out_ptr, height, width, p)
            else:
                ret = self._decode_indexed(&plan, pc, out_ptr, height, width, p)
            p.decode_ms += _now_ms() - t0
        del keep
        return ret

    cdef object _make_plan(self, IndexedPlan *plan, index, targets, first_slot):
        clusters = index.plan(targets)
        arrays = {
            "frame_pts": np.ascontiguousarray(index.frame_pts, np.int64),
            "pos_sorted": np.ascontiguousarray(index.pos_sorted, np.int64),
            "pos_dec": np.ascontiguousarray(index.pos_dec, np.int64),
            "targets": targets, "slots": first_slot,
            "target_dec": np.ascontiguousarray(index.frame_dec[targets], np.int64),
            "done": np.zeros(targets.shape[0], np.uint8),
            "left": np.diff(clusters["bounds"]).astype(np.int64),
            **{k: np.ascontiguousarray(v, np.int64) for k, v in clusters.items()},
        }
        cdef const int64_t[::1] v
        cdef uint8_t[::1] done = arrays["done"]
        cdef int64_t[::1] left = arrays["left"]
        v = arrays["frame_pts"]; plan.frame_pts = &v[0]; plan.n_frames = v.shape[0]
        v = arrays["pos_sorted"]; plan.pos_sorted = &v[0]; plan.n_packets = v.shape[0]
        v = arrays["pos_dec"]; plan.pos_dec = &v[0]
        v = arrays["targets"]; plan.targets = &v[0]; plan.n_targets = v.shape[0]
        v = arrays["slots"]; plan.slots = &v[0]
        v = arrays["target_dec"]; plan.target_dec = &v[0]
        v = arrays["bounds"]; plan.bounds = &v[0]; plan.n_clusters = v.shape[0] - 1
        v = arrays["key_dec"]; plan.key_dec = &v[0]
        v = arrays["key_pos"]; plan.key_pos = &v[0]
        v = arrays["seek_ts"]; plan.seek_ts = &v[0]
        v = arrays["reach_dec"]; plan.reach_dec = &v[0]
        v = arrays["end_byte"]; plan.end_byte = &v[0]
        plan.done = &done[0]
        plan.left = &left[0]
        plan.skip_nonref = index.codec_name in SKIP_NONREF_CODECS
        plan.convert = True
        return arrays

    cdef tuple _io_totals(self):
        """Lifetime (read callbacks, seek callbacks, bytes returned to FFmpeg)."""
        cdef fx_cursor *cursor = fx_avio_cursor(self.pb) if self.pb != NULL else NULL
        return (self.retired_read_calls + (cursor.read_calls if cursor != NULL else 0),
                self.retired_seek_calls + (cursor.seek_calls if cursor != NULL else 0),
                self.retired_bytes_read + (cursor.bytes_read if cursor != NULL else 0))

    cdef dict _stats(self, DecodeProgress *p, tuple io_before, dict cache_before):
        cache_after = self.source.stats()
        io_after = self._io_totals()
        return {
            "read_calls": io_after[0] - io_before[0],
            "seek_calls": io_after[1] - io_before[1],
            "bytes_read": io_after[2] - io_before[2],
            "page_hits": cache_after["page_hits"] - cache_before["page_hits"],
            "page_misses": cache_after["page_misses"] - cache_before["page_misses"],
            "bytes_fetched": cache_after["bytes_fetched"] - cache_before["bytes_fetched"],
            "frames_decoded": p.frames_decoded,
            "frames_converted": p.frames_converted,
            "decode_errors": p.decode_errors,
            "decoder_seeks": p.seeks,
            "open_ms": p.open_ms,
            "decode_ms": p.decode_ms,
        }


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


def decode_frames(ByteSource source, indices, int height, int width, int num_threads=1,
                  str name=None, index=None):
    """Decode frames at indices from source; returns (frames, stats).

    With a trusted FrameIndex the indexed path is used, else the sequential one.
    """
    check_output_size(height, width, num_threads)
    cdef VideoDecoder decoder = VideoDecoder(source, num_threads, name)
    decoder.index = index
    try:
        return decoder.decode(indices, height, width)
    finally:
        decoder.close()


def decode_floor(ByteSource source, indices, int num_threads=1, str name=None):
    """Milliseconds (and frames) libavcodec alone needs for indices: the same
    keyframe seeks as the indexed path, every frame decoded, nothing converted."""
    from fluxon_video._demux import scan_packets

    cdef VideoDecoder decoder = VideoDecoder(source, num_threads, name)
    decoder.index = scan_packets(source, name)
    try:
        return decoder.decode_floor(indices)
    finally:
        decoder.close()


def _version_text(unsigned v):
    return f"{v >> 16}.{(v >> 8) & 0xff}.{v & 0xff}"


def library_versions():
    """The libav* versions this extension runs against."""
    return {"libavutil": _version_text(avutil_version()),
            "libavcodec": _version_text(avcodec_version()),
            "libavformat": _version_text(avformat_version()),
            "libswscale": _version_text(swscale_version())}
