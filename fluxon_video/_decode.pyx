# cython: language_level=3
"""Demux, decode and convert frames straight into a caller-owned NHWC buffer.

VideoDecoder owns one FFmpeg pipeline over a ByteSource: the AVIOContext,
format and codec contexts, a packet, a frame and a cached SwsContext. The
whole open/demux/decode/scale runs without the GIL; failures are recorded as
AVERROR codes and turned into exceptions by err_check once the GIL is back.

Frame i is the i-th frame the decoder outputs (presentation order) when the
first video stream is read from the start: this module decodes sequentially
from frame 0 to the largest target and converts only the targets.
"""
import operator
import time

import numpy as np

from libc.errno cimport EAGAIN, EINVAL, ENOMEM
from libc.stdint cimport int64_t, uint8_t
from libc.string cimport memcmp, memset
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from fluxon_video._avio cimport ByteSource, fx_avio_close, fx_avio_cursor, fx_avio_open
from fluxon_video._errors cimport err_check
from fluxon_video._pagecache cimport fx_cursor
from fluxon_video.libav.avcodec cimport (
    AVCodec, AVCodecContext, AVDISCARD_ALL, AVPacket, FF_THREAD_FRAME, FF_THREAD_SLICE,
    av_packet_alloc, av_packet_free, av_packet_unref, avcodec_alloc_context3,
    avcodec_find_decoder, avcodec_free_context, avcodec_get_name, avcodec_open2,
    avcodec_parameters_to_context, avcodec_receive_frame, avcodec_send_packet,
)
from fluxon_video.libav.avformat cimport (
    AVFMT_FLAG_CUSTOM_IO, AVFormatContext, AVIOContext, AVStream, AV_DISPOSITION_ATTACHED_PIC,
    avformat_alloc_context, avformat_close_input, avformat_find_stream_info, avformat_open_input,
    av_read_frame,
)
from fluxon_video.libav.avutil cimport (
    AVCOL_RANGE_JPEG, AVCOL_RANGE_UNSPECIFIED, AVCOL_SPC_BT470BG, AVERROR, AVERROR_EOF,
    AVERROR_INVALIDDATA, AVERROR_STREAM_NOT_FOUND, AVFrame, AVMEDIA_TYPE_VIDEO,
    AV_PIX_FMT_RGB24, av_frame_alloc, av_frame_free, av_frame_unref,
)
from fluxon_video.libav.swscale cimport (
    SWS_BILINEAR, SwsContext, sws_freeContext, sws_getCoefficients, sws_getColorspaceDetails,
    sws_getContext, sws_isSupportedInput, sws_scale, sws_setColorspaceDetails,
)

from fluxon_video.libav.avcodec cimport avcodec_version
from fluxon_video.libav.avformat cimport avformat_version
from fluxon_video.libav.avutil cimport avutil_version
from fluxon_video.libav.swscale cimport swscale_version

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
    int64_t next_target      # position in the sorted target list
    int64_t decode_errors
    double open_ms
    double decode_ms
    const char *failed_call  # the libav call that returned the error, if any


def _as_frame_indices(indices):
    """indices as an int64 array; rejects non-integers and negatives."""
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
    cdef AVIOContext *pb
    cdef AVFormatContext *fmt
    cdef AVCodecContext *codec
    cdef AVPacket *pkt
    cdef AVFrame *frame
    cdef int stream_index
    cdef SwsContext *sws
    # The inputs sws was built for; a change rebuilds it.
    cdef int sws_src_w, sws_src_h, sws_src_fmt, sws_dst_w, sws_dst_h, sws_cs, sws_range

    def __cinit__(self, ByteSource source, int num_threads=1, str name=None):
        self.source = source
        self.name = name or source.name
        self.num_threads = num_threads
        self.stream_index = -1

    def __dealloc__(self):
        self._release()

    cdef void _release(self) noexcept nogil:
        if self.sws != NULL:
            sws_freeContext(self.sws)
            self.sws = NULL
        av_frame_free(&self.frame)
        av_packet_free(&self.pkt)
        avcodec_free_context(&self.codec)
        if self.fmt != NULL:
            # CUSTOM_IO: closing the input leaves pb to us.
            avformat_close_input(&self.fmt)
        fx_avio_close(&self.pb)
        self.stream_index = -1

    def close(self):
        with nogil:
            self._release()

    cdef int _open(self, DecodeProgress *p) noexcept nogil:
        """Open the container and decoder; returns 0 or an AVERROR code."""
        cdef int ret, i
        cdef AVStream *st
        cdef const AVCodec *dec
        p.failed_call = "avformat_alloc_context"
        self.fmt = avformat_alloc_context()
        self.pkt = av_packet_alloc()
        self.frame = av_frame_alloc()
        if self.fmt == NULL or self.pkt == NULL or self.frame == NULL:
            return AVERROR(ENOMEM)
        self.fmt.pb = self.pb
        self.fmt.flags |= AVFMT_FLAG_CUSTOM_IO
        p.failed_call = "avformat_open_input"
        ret = avformat_open_input(&self.fmt, "", NULL, NULL)
        if ret < 0:
            return ret
        p.failed_call = "avformat_find_stream_info"
        ret = avformat_find_stream_info(self.fmt, NULL)
        if ret < 0:
            return ret
        p.failed_call = "finding a video stream"
        self.stream_index = -1
        for i in range(<int> self.fmt.nb_streams):
            st = self.fmt.streams[i]
            if (self.stream_index < 0 and st.codecpar.codec_type == AVMEDIA_TYPE_VIDEO
                    and not (st.disposition & AV_DISPOSITION_ATTACHED_PIC)):
                self.stream_index = i
            else:
                st.discard = AVDISCARD_ALL
        if self.stream_index < 0:
            return AVERROR_STREAM_NOT_FOUND
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
        return 0

    cdef int _convert(self, AVFrame *f, uint8_t *dst, int height, int width) noexcept nogil:
        """Scale and convert f to RGB24 rows of stride width*3 at dst."""
        cdef int cs, src_range, want_range, dst_range, brightness, contrast, saturation
        cdef int *inv_table
        cdef int *table
        cdef const int *want_table
        cdef uint8_t *dst_planes[4]
        cdef int dst_strides[4]
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
            # them disables swscale's fast unscaled converters, so only do it
            # when they differ from what the context already uses.
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
        dst_planes[0] = dst
        dst_strides[0] = width * 3
        if sws_scale(self.sws, <const uint8_t * const *> f.data, f.linesize, 0, f.height,
                     dst_planes, dst_strides) != height:
            return AVERROR(EINVAL)
        return 0

    cdef int _decode_sequential(self, const int64_t *targets, const int64_t *slots,
                                int64_t ntargets, uint8_t *out, int height, int width,
                                DecodeProgress *p) noexcept nogil:
        """Decode from the start until every target is converted or the stream ends."""
        cdef int ret
        cdef bint draining = False
        cdef bint packet_pending = False
        cdef int consecutive_errors = 0
        cdef int64_t frame_bytes = <int64_t> height * width * 3
        cdef fx_cursor *cursor = fx_avio_cursor(self.pb)
        while p.next_target < ntargets:
            if not draining and not packet_pending:
                p.failed_call = "av_read_frame"
                ret = av_read_frame(self.fmt, self.pkt)
                if ret < 0:
                    if cursor.error:
                        return ret
                    # End of data, or a demux error the ffmpeg CLI would also
                    # treat as the end: flush the decoder.
                    draining = True
                elif self.pkt.stream_index != self.stream_index:
                    av_packet_unref(self.pkt)
                    continue
                else:
                    packet_pending = True
            if packet_pending or draining:
                p.failed_call = "avcodec_send_packet"
                ret = avcodec_send_packet(self.codec, self.pkt if packet_pending else NULL)
                if ret == AVERROR(EAGAIN):
                    pass  # receive first, then send the same packet again
                else:
                    if packet_pending:
                        av_packet_unref(self.pkt)
                        packet_pending = False
                    if ret < 0 and ret != AVERROR_EOF:
                        if ret == AVERROR(ENOMEM):
                            return ret
                        p.decode_errors += 1
                        consecutive_errors += 1
                        if consecutive_errors > MAX_CONSECUTIVE_DECODE_ERRORS:
                            return ret
            while p.next_target < ntargets:
                p.failed_call = "avcodec_receive_frame"
                ret = avcodec_receive_frame(self.codec, self.frame)
                if ret == AVERROR(EAGAIN):
                    if draining:
                        return 0
                    break
                if ret == AVERROR_EOF:
                    return 0
                if ret < 0:
                    if ret == AVERROR(ENOMEM):
                        return ret
                    p.decode_errors += 1
                    consecutive_errors += 1
                    if consecutive_errors > MAX_CONSECUTIVE_DECODE_ERRORS:
                        return ret
                    continue
                consecutive_errors = 0
                if p.frames_decoded == targets[p.next_target]:
                    p.failed_call = "sws_scale"
                    ret = self._convert(self.frame, out + slots[p.next_target] * frame_bytes,
                                        height, width)
                    if ret < 0:
                        av_frame_unref(self.frame)
                        return ret
                    p.frames_converted += 1
                    p.next_target += 1
                p.frames_decoded += 1
                av_frame_unref(self.frame)
        p.failed_call = NULL
        return 0

    def decode(self, indices, int height, int width):
        """Frames at indices as uint8 (N, height, width, 3) RGB, plus stats of this call."""
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
        cdef const int64_t[::1] targets_view = targets
        cdef const int64_t[::1] slots_view = first_slot
        cdef int64_t ntargets = targets.shape[0]
        cdef uint8_t[:, :, :, ::1] out_view = out
        cdef uint8_t *out_ptr = &out_view[0, 0, 0, 0]
        cdef DecodeProgress p
        cdef int ret = 0
        cdef double t0
        memset(&p, 0, sizeof(p))
        cache_before = self.source.stats()
        if self.pb == NULL:
            self.pb = fx_avio_open(self.source, 64 << 10)
        with nogil:
            fx_avlog_clear()
            t0 = _now_ms()
            if self.fmt == NULL:
                ret = self._open(&p)
            p.open_ms = _now_ms() - t0
            if ret == 0:
                t0 = _now_ms()
                ret = self._decode_sequential(&targets_view[0], &slots_view[0], ntargets,
                                              out_ptr, height, width, &p)
                p.decode_ms = _now_ms() - t0
        cdef fx_cursor *cursor = fx_avio_cursor(self.pb)
        stats = self._stats(&p, cursor, cache_before)
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
            if p.next_target < ntargets:
                missing = int(targets[p.next_target])
                raise errors.FluxonFsFrameIndexError(
                    f"{self.name}: frame index {missing} is out of range: the video has "
                    f"{p.frames_decoded} frames")
        except BaseException:
            # A failed pipeline is not reusable.
            self.close()
            raise
        duplicates = np.nonzero(first_slot[inverse] != np.arange(requested.shape[0]))[0]
        if duplicates.size:
            out[duplicates] = out[first_slot[inverse[duplicates]]]
        return out, stats

    cdef dict _stats(self, DecodeProgress *p, fx_cursor *cursor, dict cache_before):
        cache_after = self.source.stats()
        return {
            "read_calls": cursor.read_calls,
            "seek_calls": cursor.seek_calls,
            "bytes_read": cursor.bytes_read,
            "page_hits": cache_after["page_hits"] - cache_before["page_hits"],
            "page_misses": cache_after["page_misses"] - cache_before["page_misses"],
            "bytes_fetched": cache_after["bytes_fetched"] - cache_before["bytes_fetched"],
            "frames_decoded": p.frames_decoded,
            "frames_converted": p.frames_converted,
            "decode_errors": p.decode_errors,
            "open_ms": p.open_ms,
            "decode_ms": p.decode_ms,
        }


def decode_frames(ByteSource source, indices, int height, int width, int num_threads=1,
                  str name=None):
    """Decode frames at indices from source sequentially; returns (frames, stats)."""
    check_output_size(height, width, num_threads)
    cdef VideoDecoder decoder = VideoDecoder(source, num_threads, name)
    try:
        return decoder.decode(indices, height, width)
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
