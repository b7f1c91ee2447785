# cython: language_level=3
"""Pipeline: the lifetime of one FFmpeg demux+decode chain over a ByteSource.

It owns the AVIOContext, the format and codec contexts, one packet and one
frame, and knows where the decoder stands (for the indexed path's "continue
without seeking"). open() builds the whole chain or nothing; release() frees
it and is safe to call twice. The decode paths drive it through
next_packet/send/receive/seek without the GIL.
"""
import os

from libc.errno cimport EAGAIN, EINVAL, ENOMEM
from libc.stdint cimport int64_t, uint64_t

from fluxon_video._avio cimport (
    ByteSource, fx_avio_close, fx_avio_cursor, fx_avio_limit_readahead, fx_avio_open,
)
from fluxon_video._demux cimport fx_open_input, only_stream, raise_missing_stream
from fluxon_video._errors cimport FX_ERROR_OUT_OF_MEMORY, err_check
from fluxon_video._progress cimport now_ms
from fluxon_video.libav.avcodec cimport (
    AVCodec, AVCodecContext, AVDISCARD_DEFAULT, AVDISCARD_NONREF, AV_EF_EXPLODE, FF_THREAD_FRAME,
    FF_THREAD_SLICE,
    av_packet_alloc, av_packet_free, av_packet_unref,
    avcodec_alloc_context3, avcodec_find_decoder, avcodec_flush_buffers, avcodec_free_context,
    avcodec_get_name, avcodec_open2, avcodec_parameters_to_context, avcodec_receive_frame,
    avcodec_send_packet,
)
from fluxon_video.libav.avformat cimport (
    AVFMT_FLAG_GENPTS, AVSEEK_FLAG_BACKWARD, AVStream, av_read_frame, av_seek_frame,
    avformat_close_input,
)
from fluxon_video.libav.avutil cimport (
    AV_FRAME_FLAG_CORRUPT, AVERROR, AVERROR_EOF, AVERROR_STREAM_NOT_FOUND, AVFrame, av_frame_alloc,
    av_frame_free,
)


cdef extern from "_avlog.h" nogil:
    void fx_avlog_install()
    void fx_avlog_clear()
    fx_avlog_buf *fx_avlog_buf_new()
    void fx_avlog_buf_free(fx_avlog_buf **buf)
    void fx_avlog_buf_clear(fx_avlog_buf *buf)
    void fx_avlog_last_error_for(fx_avlog_buf *buf, char *out, size_t size)
    uint64_t fx_avlog_concealments(fx_avlog_buf *buf)


cdef extern from "_framecheck.h" nogil:
    int fx_framecheck_applies(const AVCodec *codec)
    void fx_framecheck_install(AVCodecContext *avctx)
    int fx_framecheck_unwritten(void *log_ctx, const AVFrame *frame)


fx_avlog_install()

# Decoders report a bad packet and carry on; so do we, like the ffmpeg CLI.
# This many bad packets in a row means the stream is garbage.
cdef int MAX_CONSECUTIVE_DECODE_ERRORS = 64


cdef inline int _count_decode_error(int ret, int *consecutive_errors,
                                    DecodeProgress *p) noexcept nogil:
    """A bad packet or frame: counted and skipped (0), like the ffmpeg CLI does,
    unless memory ran out or too many came in a row (ret)."""
    if ret == AVERROR(ENOMEM):
        return ret
    p.decode_errors += 1
    consecutive_errors[0] += 1
    return ret if consecutive_errors[0] > MAX_CONSECUTIVE_DECODE_ERRORS else 0


cdef class Pipeline:
    """One demux+decode chain over a ByteSource; open() is all or nothing."""

    def __cinit__(self, ByteSource source, int num_threads, str name):
        self.source = source
        self.name = name
        self.num_threads = num_threads
        self.stream_index = -1
        self.wanted_stream = -1
        self.probe_streams = True
        self.pid = os.getpid()

    def __dealloc__(self):
        # In a forked child, FFmpeg's decoder threads do not exist: freeing
        # the context would wait for them forever. Leave the parent's copy.
        if self.pid == os.getpid():
            self.release()

    cdef bint is_open(self) noexcept nogil:
        return self.codec != NULL

    cdef fx_cursor *cursor(self) noexcept nogil:
        return fx_avio_cursor(self.pb) if self.pb != NULL else NULL

    cdef void limit_readahead(self, int64_t end) noexcept nogil:
        """Readahead stops at byte end (0: no limit); needs an open pipeline."""
        fx_avio_limit_readahead(self.pb, end)

    cdef void skip_nonref(self, bint skip) noexcept nogil:
        """Whether the decoder skips the non-reference frames of the packets
        sent from now on; needs an open pipeline."""
        self.codec.skip_frame = AVDISCARD_NONREF if skip else AVDISCARD_DEFAULT

    cdef void clear_log(self) noexcept nogil:
        fx_avlog_clear()
        fx_avlog_buf_clear(self.log)

    cdef void release(self) noexcept nogil:
        cdef fx_cursor *cursor
        av_frame_free(&self.frame)
        av_packet_free(&self.pkt)
        avcodec_free_context(&self.codec)
        if self.fmt != NULL:
            avformat_close_input(&self.fmt)  # CUSTOM_IO: pb stays ours
        if self.pb != NULL:
            cursor = fx_avio_cursor(self.pb)
            self.retired_read_calls += cursor.read_calls
            self.retired_seek_calls += cursor.seek_calls
            self.retired_bytes_read += cursor.bytes_read
            fx_avio_close(&self.pb)
        # After the contexts: nothing can log into it any more (and a line
        # logged for a context pointing at a freed buffer would go per-thread).
        fx_avlog_buf_free(&self.log)
        self.stream_index = -1
        self.fresh = False
        self.positioned = False
        self.displaced = False
        self.run_key_dec = -1
        self.packet_pending = False

    cdef int open(self, DecodeProgress *p) except -1:
        """Open the container and the decoder, or raise with nothing left open."""
        cdef int ret
        cdef double t0
        if self.is_open():
            return 0
        self.release()
        # Where FFmpeg's error lines for our contexts go, from any thread.
        self.log = fx_avlog_buf_new()
        self.concealments_seen = 0
        if self.log == NULL:
            raise MemoryError(f"{self.name}: cannot allocate the FFmpeg log buffer")
        self.pb = fx_avio_open(self.source)
        with nogil:
            self.clear_log()
            t0 = now_ms()
            ret = self._open_nogil(p)
            p.open_ms += now_ms() - t0
        if ret < 0:
            try:
                self.raise_error(ret, p)
            finally:
                self.release()
        self.opens += 1
        self.codec_name = avcodec_get_name(self.fmt.streams[self.stream_index].codecpar.codec_id).decode()
        return 0

    cdef int _open_nogil(self, DecodeProgress *p) noexcept nogil:
        cdef int ret
        cdef AVStream *st
        cdef const AVCodec *dec
        # Lines logged while the container opens go to this thread's buffer
        # (opening runs here; its probe decoders are single-threaded).
        ret = fx_open_input(self.pb, &self.fmt, self.probe_streams, self.input_format,
                            self.wanted_stream, &self.stream_index, &p.failed_call)
        if ret < 0:
            return ret
        self.fmt.opaque = self.log
        if self.genpts:
            self.fmt.flags |= AVFMT_FLAG_GENPTS
        p.failed_call = "av_packet_alloc"
        self.pkt = av_packet_alloc()
        if self.pkt == NULL:
            return FX_ERROR_OUT_OF_MEMORY
        p.failed_call = "av_frame_alloc"
        self.frame = av_frame_alloc()
        if self.frame == NULL:
            return FX_ERROR_OUT_OF_MEMORY
        st = self.fmt.streams[self.stream_index]
        p.failed_call = "avcodec_find_decoder"
        dec = avcodec_find_decoder(st.codecpar.codec_id)
        if dec == NULL:
            return AVERROR(EINVAL)
        p.failed_call = "avcodec_alloc_context3"
        self.codec = avcodec_alloc_context3(dec)
        if self.codec == NULL:
            return FX_ERROR_OUT_OF_MEMORY
        # Set before avcodec_open2: frame-threading copies of the context keep it.
        self.codec.opaque = self.log
        self.framecheck = fx_framecheck_applies(dec)
        if self.framecheck:
            fx_framecheck_install(self.codec)
        p.failed_call = "avcodec_parameters_to_context"
        ret = avcodec_parameters_to_context(self.codec, st.codecpar)
        if ret >= 0:
            self.codec.pkt_timebase = st.time_base
            self.codec.thread_count = self.num_threads
            self.codec.thread_type = FF_THREAD_FRAME | FF_THREAD_SLICE
            if self.explode:
                self.codec.err_recognition |= AV_EF_EXPLODE
            p.failed_call = "avcodec_open2"
            ret = avcodec_open2(self.codec, dec, NULL)
        if ret < 0:
            avcodec_free_context(&self.codec)  # is_open() means a usable codec
            return ret
        p.failed_call = NULL
        self.fresh = True
        self.positioned = False
        self.packet_pending = False
        return 0

    cdef void last_error(self, char *out, size_t size) noexcept nogil:
        """FFmpeg's last error line for this pipeline's contexts ("" if none)."""
        fx_avlog_last_error_for(self.log, out, size)

    cdef int raise_error(self, int ret, DecodeProgress *p) except -1:
        """Raise for a failed call: the byte source's own error first, else FFmpeg's."""
        cdef fx_cursor *cursor = self.cursor()
        if cursor != NULL and cursor.error:
            raise self.source.fetch_error(cursor)
        cdef char line[512]
        if ret == AVERROR_STREAM_NOT_FOUND:
            return raise_missing_stream(self.fmt, self.wanted_stream, self.name)
        fx_avlog_last_error_for(self.log, line, sizeof(line))
        detail = line.decode("utf-8", "replace")
        what = p.failed_call.decode() if p.failed_call != NULL else "decode"
        return err_check(ret, what, self.name, detail)

    cdef tuple io_totals(self):
        """Lifetime (read callbacks, seek callbacks, bytes returned to FFmpeg)."""
        cdef fx_cursor *cursor = self.cursor()
        return (self.retired_read_calls + (cursor.read_calls if cursor != NULL else 0),
                self.retired_seek_calls + (cursor.seek_calls if cursor != NULL else 0),
                self.retired_bytes_read + (cursor.bytes_read if cursor != NULL else 0))

    cdef int next_packet(self, bint *draining, DecodeProgress *p) noexcept nogil:
        """Read our stream's next packet into pkt: 1; 0 once the stream ends
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

    cdef int send(self, bint draining, int *consecutive_errors, DecodeProgress *p) noexcept nogil:
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

    cdef int receive(self, int *consecutive_errors, DecodeProgress *p) noexcept nogil:
        """Next frame into frame: 1, or 0 when the decoder needs input
        (AVERROR_EOF once drained), or another AVERROR."""
        cdef int ret
        cdef bint corrupt
        cdef uint64_t concealments
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
            corrupt = ((self.frame.flags & AV_FRAME_FLAG_CORRUPT) or self.frame.decode_error_flags
                       or (self.framecheck and fx_framecheck_unwritten(self.codec, self.frame) > 0))
            if self.num_threads > 1:
                # Frame threads can hand a frame out before its flags are set;
                # the concealment was logged before any later frame came out.
                concealments = fx_avlog_concealments(self.log)
                corrupt = corrupt or concealments != self.concealments_seen
                self.concealments_seen = concealments
            if corrupt:
                p.corrupt_frames += 1
            return 1

    cdef int seek(self, int64_t timestamp, DecodeProgress *p) noexcept nogil:
        """Flush the decoder and seek the demuxer to the keyframe at or before timestamp."""
        cdef int ret
        if self.packet_pending:
            av_packet_unref(self.pkt)
            self.packet_pending = False
        avcodec_flush_buffers(self.codec)
        p.failed_call = "av_seek_frame"
        ret = av_seek_frame(self.fmt, self.stream_index, timestamp, AVSEEK_FLAG_BACKWARD)
        if ret < 0:
            return ret
        p.seeks += 1
        self.fresh = False
        self.positioned = True
        self.displaced = False
        self.run_key_dec = -1
        self.last_skipped_dec = -1
        self.last_pkt_dec = -1
        self.last_out_idx = -1
        return 0


cdef class DemuxerLoan:
    """The frames' demuxer (a Pipeline's), lent to an audio decoder for one
    turn, so one demuxer reads both streams of a file as the ffmpeg CLI does.

    The loan owns what a turn changes in the pipeline: lending marks it
    displaced (its next read puts the demuxer back first) and no longer
    fresh, makes the demuxer return the guest's stream only, without the
    generated pts and readahead limit the frames' reads use; giving it back
    returns the demuxer to the frames' stream and flags. The guest reads the
    format context and never writes a pipeline field.
    """

    @staticmethod
    cdef DemuxerLoan lend(Pipeline pipe, int guest_stream):
        cdef DemuxerLoan loan = DemuxerLoan.__new__(DemuxerLoan)
        loan.pipe = pipe
        loan.fmt, loan.pb = pipe.fmt, pipe.pb
        loan.was_fresh = pipe.fresh
        loan.was_displaced = pipe.displaced
        pipe.displaced = True
        pipe.fresh = False
        only_stream(loan.fmt, guest_stream)
        loan.fmt.flags &= ~AVFMT_FLAG_GENPTS
        fx_avio_limit_readahead(loan.pb, 0)
        return loan

    cdef bint give_back(self) noexcept:
        """End the turn: the demuxer reads the frames' stream again. False when
        the pipeline closed or reopened during the turn (nothing to give back)."""
        cdef Pipeline pipe = self.pipe
        cdef bint kept = pipe.is_open() and pipe.fmt == self.fmt
        if kept:
            only_stream(self.fmt, pipe.stream_index)
            if pipe.genpts:
                self.fmt.flags |= AVFMT_FLAG_GENPTS
            self.opens_left = pipe.opens
        self.fmt = NULL
        self.pb = NULL
        return kept

    cdef bint host_moved(self, uint64_t opens_left_before) noexcept:
        """Whether the frames moved the demuxer since the turn that ended with
        the pipeline at ``opens_left_before`` opens (0: no such turn): it
        reopened, or read (which clears ``displaced``)."""
        return not (opens_left_before != 0 and self.pipe.opens == opens_left_before
                    and self.was_displaced)

    cdef int host_stream(self) noexcept:
        """The frames' stream (their index, e.g. Matroska's Cues, seeks it)."""
        return self.pipe.stream_index

    cdef void close_host(self) noexcept:
        """Close the lent demuxer (after a failed read, or to reopen it at the
        start): the frames' next read, or the next turn, opens it anew."""
        if self.fmt != NULL and self.pipe.is_open() and self.pipe.fmt == self.fmt:
            self.pipe.release()
        self.fmt = NULL
        self.pb = NULL
