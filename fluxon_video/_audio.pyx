# cython: language_level=3
"""Audio side: decode one audio stream over the reader's byte source, at the
stream's own rate and channels, as float32 planes placed by sample position.

A sample's position counts samples from the first one the decoder outputs
for the stream (after the codec's priming samples and the edit list are
dropped): the numbering the ``ffmpeg`` CLI's ``-map 0:a:0 -f f32le`` output
has. audio.py turns seconds into positions; this unit only decodes and
converts, the GIL released around every libav call.

Where a seek lands must be known to the sample. It is, when the container
stores timestamps in units that resolve one sample (MP4/MOV, WAV, FLAC,
Matroska at a rate whose samples fall on its millisecond ticks); anywhere
else a read decodes the stream from its first packet and counts.

In a file with video (MP4/MOV, Matroska/WebM, AVI, FLV) the decoder has no
demuxer of its own: it takes turns on the frames' (the VideoDecoder's main pipeline),
so one demuxer reads both streams of the file. A turn sets which stream the
demuxer returns; when the frames moved the demuxer since the last turn, the
turn seeks back to the last packet this decoder was fed and replays up to it
(dropping what it already had), so the decoder continues as if it had never
been interrupted; when it cannot find that packet again, the read restarts
as a read with no decode to continue would. Elsewhere (audio-only files,
other containers) the decoder opens a demuxer of its own on the byte source.
"""
from libc.errno cimport EAGAIN
from libc.stdint cimport INT64_MAX, int64_t, uint8_t, uint64_t
from libc.string cimport memcpy, strncmp

import numpy as np

from fluxon_video._avio cimport (
    ByteSource, fx_avio_close, fx_avio_cursor, fx_avio_limit_readahead, fx_avio_open,
)
from fluxon_video._demux cimport describe_audio, fx_avformat_open, only_stream
from fluxon_video._errors cimport err_check
from fluxon_video._pipeline cimport DemuxerLoan
from fluxon_video.libav.avcodec cimport (
    AVCodec, AVCodecContext, AVPacket, av_packet_alloc, av_packet_free, av_packet_unref,
    avcodec_alloc_context3, avcodec_find_decoder, avcodec_flush_buffers, avcodec_free_context,
    avcodec_get_name, avcodec_open2, avcodec_parameters_to_context, avcodec_receive_frame,
    avcodec_send_packet,
)
from fluxon_video.libav.avformat cimport (
    AVFMT_FLAG_GENPTS, AVFormatContext, AVIOContext, AVSEEK_FLAG_BACKWARD,
    AVStream,
    av_find_best_stream, av_read_frame, av_seek_frame,
    avformat_close_input, avformat_find_stream_info,
)
from fluxon_video.libav.avutil cimport (
    AV_CHANNEL_ORDER_UNSPEC, AV_NOPTS_VALUE, AV_SAMPLE_FMT_FLTP, AVChannelLayout, AVERROR,
    AVERROR_EOF, AVERROR_STREAM_NOT_FOUND, AVFrame, AVMEDIA_TYPE_AUDIO, AVSampleFormat,
    av_channel_layout_copy, av_channel_layout_default, av_channel_layout_uninit, av_frame_alloc,
    av_frame_free, av_rescale_q,
)
from fluxon_video.libav.swresample cimport (
    SwrContext, swr_alloc_set_opts2, swr_convert, swr_free, swr_init,
)

from fluxon_video import errors

# Containers whose seeks land on packets with exact timestamps (a sample
# table, or a constant number of bytes per sample). Elsewhere a seek
# estimates by bytes (MP3, ADTS, Ogg) or lands on rounded times (Matroska's
# millisecond ticks: a 20 ms Opus packet after a 6.5 ms pre-skip is stamped 14).
EXACT_SEEK_FORMATS = ("mov", "mp4", "wav", "flac", "w64", "aiff")
# Decoders whose output after a pre-roll is what a decode from the start
# gives, bit for bit: no state outlives MIN_PREROLL_SAMPLES. AAC's noise
# substitution and Opus's CELT draw from a random generator that runs for
# the whole stream, so only a decode from the start reproduces them exactly.
FORGETFUL_CODECS = ("flac", "mp3", "mp2", "vorbis", "alac")
# Samples decoded before the first one a read wants, so that decoders whose
# output depends on earlier packets (MDCT overlap, MP3's bit reservoir,
# Opus's pre-roll) reach the state a decode from the start has there.
MIN_PREROLL_SAMPLES = 8192
# A read this close ahead of where the decoder stands continues instead of seeking.
CONTINUE_WITHIN_SAMPLES = 1 << 17
# Demuxers whose turns the decoder can share with the frames: a seek there
# lands at or before a packet it names, so the replay finds the packet again.
# (MPEG-TS seeks by bisecting timestamps and lands after it: there the audio
# keeps a demuxer of its own, so that clips in order continue its decode.)
SHARED_DEMUXERS = ("mov", "matroska", "avi", "flv")
# Far enough before any stream's first packet to seek to it, with room for
# the demuxer's own offsets (MP4's seek subtracts the edit list's shift).
cdef int64_t BEFORE_EVERY_PACKET = -(1LL << 62)
# _next_frame: the replay after a turn did not meet the last packet fed.
cdef int FX_LOST_PLACE = -0x4c4f5354


cdef int layout_of(AVChannelLayout *out, const AVChannelLayout *src) noexcept nogil:
    """src, or the default layout for its channel count when it names no order."""
    if src.order == AV_CHANNEL_ORDER_UNSPEC:
        av_channel_layout_default(out, src.nb_channels)
        return 0
    return av_channel_layout_copy(out, src)


cdef bint has_described_audio(AVFormatContext *fmt) noexcept nogil:
    """Every audio stream's header gives its rate and channels (av_find_best_stream
    passes over one that does not)."""
    cdef unsigned i
    for i in range(fmt.nb_streams):
        if (fmt.streams[i].codecpar.codec_type == AVMEDIA_TYPE_AUDIO
                and (fmt.streams[i].codecpar.sample_rate <= 0
                     or fmt.streams[i].codecpar.ch_layout.nb_channels <= 0)):
            return False
    return True


cdef bint needs_probe(AVFormatContext *fmt) noexcept nogil:
    """Whether the open must read the first packets, as the CLI does. Only
    MP4/MOV headers say all a decode needs: without the probe a Matroska AAC
    stream's first packets come without timestamps, and FLAC's header leaves
    the rate and channels out."""
    return not (has_described_audio(fmt) and strncmp(fmt.iformat.name, "mov,", 4) == 0)


cdef class AudioDecoder:
    """One audio stream of a byte source, decoded to float32 planes.

    Owns its codec context, packet, frame and sample converter, and (without
    a host to share with) its AVIOContext, a cursor on the source's shared
    page cache, and format context; ``close()`` releases them and is safe to
    call twice. With a host (a VideoDecoder of the same source) it borrows
    the host's demuxer for the length of each call (a turn).
    """
    cdef ByteSource source
    cdef object host            # the VideoDecoder whose demuxer this decoder shares, or None
    cdef DemuxerLoan loan       # the host's demuxer, during a turn
    cdef AVIOContext *pb        # own, or the host's during a turn
    cdef AVFormatContext *fmt   # own, or the host's during a turn
    cdef AVCodecContext *codec
    cdef AVPacket *pkt
    cdef AVFrame *frame
    cdef SwrContext *to_planar
    cdef int to_planar_format
    cdef int stream_index
    cdef bint draining
    cdef bint closed
    cdef readonly str name
    cdef readonly str codec_name
    cdef readonly int sample_rate
    cdef readonly int channels
    cdef readonly bint seeks_exactly   # the container's seeks land to the sample
    cdef readonly bint forgets         # a pre-roll gives the decode-from-start output
    cdef readonly bint shares_demuxer  # reads through the host's demuxer
    cdef bint owns_demuxer     # pb and fmt are this decoder's to close
    # How reads began, since the open: a seek back and replay after the host
    # moved the demuxer, a replay that lost its place, a seek to a pre-roll,
    # a decode from the start.
    cdef readonly int resumed, lost_place, sought, started
    cdef bint needs_probe       # the container's header alone does not describe the stream
    cdef bint is_mov
    cdef int codec_seek_preroll
    cdef int64_t tb_num, tb_den
    cdef object first_pts      # pts of the stream's first decoded sample (None: not known yet)
    cdef int64_t next_position  # where the decoder's next frame starts (-1: unknown)
    # The first position from which the current decode gives what a decode
    # from the stream's start gives: 0 for a decode from the start, the
    # pre-roll's end after a seek where the decoder forgets, never (INT64_MAX)
    # after a seek where it does not. An exact read continues the decode only
    # from there on, whatever read began it.
    cdef int64_t exact_from
    cdef object carry           # (position, planes) of the last frame a read did not use up
    cdef object header_fields   # describe_audio's, read once at open
    # Where the last turn left the host's pipeline: its count of opens (0: no turn yet).
    cdef uint64_t left_opens
    # The host's pipeline had read nothing when this turn began (a read from the
    # start needs no seek); cleared once this decoder has put the demuxer there.
    cdef bint fresh_turn
    # The last packet fed to the codec: its byte position, its rank among the
    # packets sharing that position (a Matroska lace), its pts, and the pts
    # of the last one fed that had one.
    cdef int64_t fed_pos, fed_pts, fed_timed_pts
    cdef int fed_rank
    # Replaying after a turn's seek: packets are dropped until the last one fed.
    cdef bint replaying
    cdef int64_t read_pos
    cdef int read_rank

    def __cinit__(self):
        self.pb = NULL
        self.fmt = NULL
        self.codec = NULL
        self.pkt = NULL
        self.frame = NULL
        self.to_planar = NULL

    def __init__(self, ByteSource source, str name=None, int stream_index=-1, host=None):
        self.source = source
        self.name = name or source.name
        self.stream_index = stream_index
        self.first_pts = None
        self.next_position = -1
        self.exact_from = 0  # the open decodes from the start
        self.carry = None
        self.host = host
        self._forget_fed()
        try:
            if self.host is not None:
                try:
                    self._take_turn()
                except errors.FluxonFsDecodeError:
                    # The frames' decoder will not open (no decoder for the
                    # video's codec, say): the audio needs none of it.
                    self.host = None
            if self.host is not None and not self._shareable():
                self._end_turn()
                self.host = None
            if self.host is None:
                self._open_container()
            try:
                self._choose_stream()
                self._open_codec()
                self.shares_demuxer = self.host is not None
                if self.shares_demuxer:
                    self._seek_to_start()
                self.first_pts = self._first_pts()
                self.header_fields = describe_audio(self.fmt, self.stream_index,
                                                    &self.codec.ch_layout)
            except BaseException:
                self._drop_demuxer()
                raise
            finally:
                self._end_turn()
        except BaseException:
            self.close()
            raise

    def close(self):
        """Release every libav object this decoder holds. Safe to call twice."""
        self._end_turn()
        swr_free(&self.to_planar)
        av_frame_free(&self.frame)
        av_packet_free(&self.pkt)
        avcodec_free_context(&self.codec)
        if self.owns_demuxer:
            avformat_close_input(&self.fmt)
            fx_avio_close(&self.pb)
        self.fmt = NULL
        self.pb = NULL
        self.carry = None
        self.closed = True

    def __dealloc__(self):
        self.close()

    def _require_open(self):
        if self.closed:
            raise errors.FluxonFsClosedError(f"{self.name}: the audio decoder is closed")

    def header(self):
        """The stream as its header says it (FluxonFsAudioMetadata's fields)."""
        self._require_open()
        return dict(self.header_fields)

    @property
    def first_time_s(self):
        """The stream's first sample on the container's clock, in seconds."""
        return self.first_pts * self.tb_num / self.tb_den

    # ---- the demuxer: its own, or turns on the host's ----

    cdef int _raise(self, int ret, str what) except -1:
        if self.pb != NULL and fx_avio_cursor(self.pb).error:
            raise self.source.fetch_error(fx_avio_cursor(self.pb))
        if ret == AVERROR_STREAM_NOT_FOUND:
            raise errors.FluxonFsNoAudioStreamError(f"{self.name}: no audio stream")
        return err_check(ret, what, self.name)

    cdef _open_container(self):
        cdef int ret = 0
        cdef const char *what = "avformat_open_input"
        self.owns_demuxer = True
        self.pb = fx_avio_open(self.source)
        with nogil:
            ret = fx_avformat_open(self.pb, &self.fmt, NULL)
            if ret >= 0 and needs_probe(self.fmt):
                what = "avformat_find_stream_info"
                ret = avformat_find_stream_info(self.fmt, NULL)
        if ret < 0:
            self._raise(ret, what.decode())

    cdef bint _shareable(self) except -1:
        """Whether the host's demuxer can serve this decoder's turns (then
        opened with the probe the stream needs)."""
        if self.fmt.iformat.name.decode().split(",")[0] not in SHARED_DEMUXERS:
            return False
        self.needs_probe = needs_probe(self.fmt)
        if self.needs_probe:
            self._end_turn()
            self._take_turn()  # the host's pipeline now reopens with the probe
        return True

    cdef int _take_turn(self) except -1:
        """Borrow the host's demuxer: it returns this decoder's stream only,
        packets as the CLI reads them; the host finds its place again (or
        seeks) before its next packet."""
        self.loan = DemuxerLoan.lend(self.host.guest_pipeline(self.needs_probe),
                                     self.stream_index)
        self.fmt, self.pb = self.loan.fmt, self.loan.pb
        self.fresh_turn = self.loan.was_fresh
        return 0

    cdef bint _displaced(self):
        """Whether the host read from (so cleared ``displaced``) or reopened its
        demuxer since the last turn."""
        return self.loan.host_moved(self.left_opens)

    cdef void _end_turn(self):
        """Give the demuxer back as the host reads it."""
        if self.loan is None:
            return
        if self.loan.give_back():
            self.left_opens = self.loan.opens_left
        self.loan = None
        self.fmt = NULL
        self.pb = NULL

    cdef int _seek_to_start(self) except -1:
        """Put the shared demuxer before the stream's first packet. MP4's seek
        to a time before every sample lands on the first (and re-arms the
        priming samples' skip, as an open does); elsewhere seeks land where
        the video's index says (Matroska's Cues name clusters that need not
        hold the first audio packet), so the host's pipeline reopens (its
        header pages are cached)."""
        cdef int ret
        if self.is_mov:
            with nogil:
                ret = av_seek_frame(self.fmt, self.stream_index, BEFORE_EVERY_PACKET,
                                    AVSEEK_FLAG_BACKWARD)
            if ret < 0:
                self._raise(ret, "av_seek_frame")
        elif not self.fresh_turn:
            self.loan.close_host()
            self._take_turn()
        self.fresh_turn = False
        self._forget_fed()
        return 0

    cdef int _resume(self) except -1:
        """After the host moved the demuxer: seek back to the last packet fed
        and replay up to it. False when there is nothing to find it by."""
        cdef int ret, index = self.stream_index
        cdef int64_t target = self.fed_timed_pts
        if self.fed_pos < 0 or target == AV_NOPTS_VALUE:
            return False
        if not self.is_mov:
            # Matroska's Cues (AVI's, FLV's index) index the video: seek it to
            # that time, back.
            index = self.loan.host_stream()
            target = av_rescale_q(target, self.fmt.streams[self.stream_index].time_base,
                                  self.fmt.streams[index].time_base)
        with nogil:
            ret = av_seek_frame(self.fmt, index, target, AVSEEK_FLAG_BACKWARD)
        if ret < 0:
            return False
        self.replaying = True
        self.read_pos = -1
        self.read_rank = 0
        self.resumed += 1
        return True

    cdef void _forget_fed(self):
        self.fed_pos = self.read_pos = -1
        self.fed_pts = self.fed_timed_pts = AV_NOPTS_VALUE
        self.fed_rank = self.read_rank = 0
        self.replaying = False

    # ---- opening the stream ----

    cdef _choose_stream(self):
        cdef int index = self.stream_index
        with nogil:
            index = av_find_best_stream(self.fmt, AVMEDIA_TYPE_AUDIO, index, -1, NULL, 0)
        if index < 0:
            self._raise(index, "finding an audio stream")
        self.stream_index = index
        only_stream(self.fmt, index)
        self.is_mov = strncmp(self.fmt.iformat.name, "mov,", 4) == 0
        st = self.fmt.streams[index]
        self.tb_num, self.tb_den = st.time_base.num, st.time_base.den
        self.codec_name = avcodec_get_name(st.codecpar.codec_id).decode()
        self.sample_rate = st.codecpar.sample_rate
        self.channels = st.codecpar.ch_layout.nb_channels
        self.codec_seek_preroll = st.codecpar.seek_preroll
        self.seeks_exactly = (
            any(name in self.fmt.iformat.name.decode().split(",") for name in EXACT_SEEK_FORMATS)
            and self.tb_num == 1 and self.sample_rate > 0 and self.tb_den % self.sample_rate == 0)
        self.forgets = (self.codec_name in FORGETFUL_CODECS or self.codec_name.startswith("pcm_"))

    cdef _open_codec(self):
        """A new codec context (a decode from the start needs one: a flushed
        decoder keeps state, such as AAC's noise generator, that a new one has not)."""
        cdef int ret
        cdef AVStream *st = self.fmt.streams[self.stream_index]
        cdef const AVCodec *dec = avcodec_find_decoder(st.codecpar.codec_id)
        avcodec_free_context(&self.codec)
        if dec == NULL:
            raise errors.FluxonFsDecodeError(
                f"{self.name}: this FFmpeg has no decoder for {self.codec_name} audio")
        self.codec = avcodec_alloc_context3(dec)
        if self.pkt == NULL:
            self.pkt = av_packet_alloc()
        if self.frame == NULL:
            self.frame = av_frame_alloc()
        if self.codec == NULL or self.pkt == NULL or self.frame == NULL:
            raise MemoryError(f"{self.name}: allocating the audio decoder: out of memory")
        ret = avcodec_parameters_to_context(self.codec, st.codecpar)
        if ret >= 0:
            self.codec.pkt_timebase = st.time_base
            with nogil:
                ret = avcodec_open2(self.codec, dec, NULL)
        if ret < 0:
            self._raise(ret, "avcodec_open2")
        self.draining = False

    cdef object _first_pts(self):
        """The pts the decoder gives the stream's first sample."""
        ret = self._next_frame()
        if ret == AVERROR_EOF:
            return 0  # a stream without samples: every position is padding
        if ret < 0:
            self._raise(ret, "decoding audio")
        pts = self.frame.best_effort_timestamp
        if pts == AV_NOPTS_VALUE:
            pts = 0
        self.sample_rate = self.frame.sample_rate or self.sample_rate
        self.channels = self.frame.ch_layout.nb_channels
        self.carry = (0, self._planes())
        self.next_position = self.frame.nb_samples
        return pts

    # ---- decoding ----

    cdef int _next_frame(self) except? -2:
        """Decode the next frame of the stream into self.frame: 0, AVERROR_EOF
        after the last one, FX_LOST_PLACE when a replay passed the last packet
        fed without meeting it, or the failing call's AVERROR."""
        cdef int ret
        with nogil:
            while True:
                ret = avcodec_receive_frame(self.codec, self.frame)
                if ret != AVERROR(EAGAIN) or self.draining:
                    break
                ret = av_read_frame(self.fmt, self.pkt)
                if ret == AVERROR_EOF:
                    if self.replaying:
                        ret = FX_LOST_PLACE
                        break
                    self.draining = True
                    avcodec_send_packet(self.codec, NULL)
                    continue
                if ret < 0:
                    break
                if self.pkt.stream_index == self.stream_index:
                    ret = self._feed()
                av_packet_unref(self.pkt)
                if ret < 0:
                    break
        if ret == AVERROR(EAGAIN):
            ret = AVERROR_EOF
        return ret

    cdef int _feed(self) noexcept nogil:
        """Send self.pkt to the codec, or during a replay drop it (or report
        FX_LOST_PLACE once the replay has passed the last packet fed)."""
        cdef AVPacket *pkt = self.pkt
        if self.replaying:
            self.read_rank = self.read_rank + 1 if pkt.pos == self.read_pos else 0
            self.read_pos = pkt.pos
            if (pkt.pos == self.fed_pos and self.read_rank == self.fed_rank
                    and pkt.pts == self.fed_pts):
                self.replaying = False  # that one was fed: the next is new
                return 0
            if (pkt.pos > self.fed_pos or pkt.pos < 0
                    or (pkt.pts != AV_NOPTS_VALUE and self.fed_timed_pts != AV_NOPTS_VALUE
                        and pkt.pts > self.fed_timed_pts)):
                return FX_LOST_PLACE
            return 0
        self.fed_rank = self.fed_rank + 1 if pkt.pos == self.fed_pos else 0
        self.fed_pos = pkt.pos
        self.fed_pts = pkt.pts
        if pkt.pts != AV_NOPTS_VALUE:
            self.fed_timed_pts = pkt.pts
        return avcodec_send_packet(self.codec, pkt)

    cdef object _planes(self):
        """self.frame as float32 (channels, nb_samples): a copy of planar float,
        else swresample's conversion (the one the CLI's f32le output applies)."""
        cdef int c, n = self.frame.nb_samples, ch = self.frame.ch_layout.nb_channels, ret
        cdef AVChannelLayout layout
        out = np.empty((ch, n), np.float32)
        cdef float[:, ::1] view = out
        cdef uint8_t *planes[64]
        if ch > 64:
            raise errors.FluxonFsDecodeError(f"{self.name}: {ch} audio channels (at most 64)")
        if n == 0:
            return out
        if self.frame.format == AV_SAMPLE_FMT_FLTP:
            for c in range(ch):
                memcpy(&view[c, 0], self.frame.extended_data[c], n * sizeof(float))
            return out
        if self.to_planar == NULL or self.to_planar_format != self.frame.format:
            swr_free(&self.to_planar)
            layout_of(&layout, &self.frame.ch_layout)
            ret = swr_alloc_set_opts2(&self.to_planar, &layout, AV_SAMPLE_FMT_FLTP,
                                      self.frame.sample_rate, &layout,
                                      <AVSampleFormat> self.frame.format,
                                      self.frame.sample_rate, 0, NULL)
            av_channel_layout_uninit(&layout)
            if ret >= 0:
                ret = swr_init(self.to_planar)
            if ret < 0:
                swr_free(&self.to_planar)
                err_check(ret, "swr_init", self.name)
            self.to_planar_format = self.frame.format
        for c in range(ch):
            planes[c] = <uint8_t *> &view[c, 0]
        with nogil:
            ret = swr_convert(self.to_planar, planes, n,
                              <const uint8_t **> self.frame.extended_data, n)
        err_check(ret, "swr_convert", self.name)
        return out

    cdef object _position(self, int64_t pts):
        """The sample position of a frame with this pts, or None when the
        stream's time base cannot say it to the sample."""
        if pts == AV_NOPTS_VALUE:
            return None
        ticks = (pts - self.first_pts) * self.tb_num * self.sample_rate
        return ticks // self.tb_den if ticks % self.tb_den == 0 else None

    cdef int _restart(self, object position) except -1:
        """Put the decoder before `position` (None: at the stream's start)."""
        cdef int ret
        cdef int64_t target
        self.carry = None
        self.next_position = -1
        self.draining = False
        self._forget_fed()
        if position is None:
            self.started += 1
            # From the first packet, as the CLI decodes it, with a new codec
            # context; a demuxer of our own reopens (its header's pages are
            # cached) rather than trust a seek to 0 in every demuxer.
            if self.shares_demuxer:
                self._seek_to_start()
            else:
                self._reopen_own()
            self._open_codec()
            self.next_position = 0
            self.exact_from = 0
            return 0
        self.sought += 1
        self.exact_from = position + self._preroll() if self.forgets else INT64_MAX
        if self.fmt == NULL:  # our own demuxer, dropped after a failed read
            self._reopen_own()
        target = self.first_pts + (position * self.tb_den) // (self.tb_num * self.sample_rate)
        with nogil:
            ret = av_seek_frame(self.fmt, self.stream_index, target, AVSEEK_FLAG_BACKWARD)
            avcodec_flush_buffers(self.codec)
        if ret < 0:
            self._raise(ret, "av_seek_frame")
        return 0

    cdef int64_t _preroll(self):
        """Samples decoded before the first one a seeking read wants."""
        return max(MIN_PREROLL_SAMPLES, 2 * self.codec_seek_preroll)

    def plan(self, int64_t start, bint exact=True, bint can_continue=True):
        """How a read from position ``start`` begins: ("continue", where the
        decoder stands), ("seek", the pre-roll's first position) or ("start", 0).
        An exact read continues only a decode whose samples from ``start`` on
        are a decode from the start's (not one an inexact read began by seeking)."""
        self._require_open()
        preroll = self._preroll()
        carry = self.carry
        ahead = (can_continue and 0 <= self.next_position
                 and (carry[0] if carry else self.next_position) <= start
                 and (not exact or self.exact_from <= start))
        can_seek = self.seeks_exactly and (self.forgets or not exact) and start - preroll > 0
        if ahead and (start - self.next_position < CONTINUE_WITHIN_SAMPLES or not can_seek):
            return "continue", self.next_position
        return ("seek", start - preroll) if can_seek else ("start", 0)

    def samples(self, int64_t start, int64_t stop, bint exact=True):
        """float32 (channels, stop - start) for positions [start, stop), and the
        span (first, end) of those positions the stream had samples for; the
        rest is zeros (before the stream's first sample or after its last).

        exact: the samples a decode from the stream's start gives, bit for bit;
        for a decoder that does not forget (AAC, Opus) that means decoding from
        the start unless the decoder stands before ``start`` already. False:
        seek wherever the container allows, and pre-roll."""
        self._require_open()
        out = np.zeros((self.channels, max(stop - start, 0)), np.float32)
        covered = [stop, start]
        if stop <= start:
            return out, (start, start)
        if self.shares_demuxer:
            self._take_turn()
        try:
            self._decode_into(out, start, stop, exact, covered)
        except BaseException:
            self._drop_demuxer()
            raise
        finally:
            self._end_turn()
        return out, (min(covered[0], stop), max(covered[1], covered[0]))

    cdef void _drop_demuxer(self):
        """After a failed read: its demuxer is not reused (the AVIO context keeps
        the failure), the next read opens one anew (the host's pipeline, or our
        own) and starts as a read with nothing to continue."""
        if self.shares_demuxer:
            if self.loan is not None:
                self.loan.close_host()
        elif self.owns_demuxer:
            avformat_close_input(&self.fmt)
            fx_avio_close(&self.pb)
        self.next_position = -1
        self.carry = None

    cdef int _reopen_own(self) except -1:
        """Our own demuxer, opened anew on the stream already chosen (the rate
        and channels stay those of the decoded frames)."""
        cdef int rate = self.sample_rate, channels = self.channels
        avformat_close_input(&self.fmt)
        fx_avio_close(&self.pb)
        self._open_container()
        self._choose_stream()
        self.sample_rate, self.channels = rate, channels
        return 0

    cdef _begin_anew(self, int64_t start, bint exact):
        """Start a read from ``start`` as one with no decode to continue would:
        a seek to its pre-roll, or a decode from the stream's start."""
        how, position = self.plan(start, exact, False)
        self._restart(position if how == "seek" else None)

    cdef _decode_into(self, out, int64_t start, int64_t stop, bint exact, list covered):
        carry = self.carry
        how, _ = self.plan(start, exact)
        if how == "continue" and self.shares_demuxer and self._displaced() and not self.draining:
            how = "continue" if self._resume() else "anew"
        if how != "continue":
            self._begin_anew(start, exact)
            carry = None
        if carry is not None:
            self._place(out, start, carry[0], carry[1], covered)
        position = self.next_position
        while position < stop:
            ret = self._next_frame()
            if ret == FX_LOST_PLACE:  # the replay did not find the last packet fed
                self.lost_place += 1
                self._begin_anew(start, exact)
                position = self.next_position
                continue
            if ret == AVERROR_EOF:
                break
            if ret < 0:
                self._raise(ret, "decoding audio")
            at = self._position(self.frame.best_effort_timestamp)
            if position < 0:  # the first frame after a seek: its pts places it
                if at is None:  # not to the sample: count from the start instead
                    self._restart(None)
                    position = 0
                    continue
                position = at
            elif at is not None and abs(at - position) > self.frame.nb_samples:
                position = at  # a gap (or overlap) in the stream: placed by its pts
            planes = self._planes()
            self._place(out, start, position, planes, covered)
            self.carry = (position, planes)
            position += planes.shape[1]
            self.next_position = position

    cdef _place(self, out, int64_t start, int64_t position, planes, list covered):
        """Copy the part of a frame (its first sample at position) that falls in out."""
        cdef int64_t lo = max(position, start), hi = min(position + planes.shape[1],
                                                         start + out.shape[1])
        if hi <= lo or planes.shape[0] != out.shape[0]:
            if hi > lo:
                raise errors.FluxonFsDecodeError(
                    f"{self.name}: the audio changes its channel count mid-stream "
                    f"({out.shape[0]} to {planes.shape[0]})")
            return
        out[:, lo - start:hi - start] = planes[:, lo - position:hi - position]
        covered[0] = min(covered[0], lo)
        covered[1] = max(covered[1], hi)


def resample(planes, int in_rate, int out_rate, int out_channels):
    """float32 (channels, n) at in_rate as float32 (out_channels, m) at
    out_rate with swresample's defaults (what the CLI's aresample and -ac use);
    the first output sample sits at the first input sample's time."""
    cdef int ret, c, in_channels = planes.shape[0], n = planes.shape[1], room, made = 0
    cdef AVChannelLayout in_layout, out_layout
    cdef SwrContext *swr = NULL
    cdef uint8_t *inp[64]
    cdef uint8_t *outp[64]
    if in_channels > 64 or out_channels > 64:
        raise ValueError("at most 64 audio channels")
    planes = np.ascontiguousarray(planes, np.float32)
    cdef float[:, ::1] src = planes
    room = int(n * <double> out_rate / in_rate) + 256
    out = np.zeros((out_channels, room), np.float32)
    cdef float[:, ::1] dst = out
    av_channel_layout_default(&in_layout, in_channels)
    av_channel_layout_default(&out_layout, out_channels)
    try:
        ret = swr_alloc_set_opts2(&swr, &out_layout, AV_SAMPLE_FMT_FLTP, out_rate,
                                  &in_layout, AV_SAMPLE_FMT_FLTP, in_rate, 0, NULL)
        if ret >= 0:
            ret = swr_init(swr)
        err_check(ret, "swr_init", "resample")
        if n == 0:
            return out[:, :0]
        for c in range(in_channels):
            inp[c] = <uint8_t *> &src[c, 0]
        for c in range(out_channels):
            outp[c] = <uint8_t *> &dst[c, 0]
        with nogil:
            ret = swr_convert(swr, outp, room, <const uint8_t **> inp, n)
            if ret >= 0:
                made = ret
                for c in range(out_channels):
                    outp[c] = <uint8_t *> &dst[c, made]
                ret = swr_convert(swr, outp, room - made, NULL, 0)  # flush the filter's tail
                if ret >= 0:
                    made += ret
        err_check(ret, "swr_convert", "resample")
        return out[:, :made]
    finally:
        swr_free(&swr)
        av_channel_layout_uninit(&in_layout)
        av_channel_layout_uninit(&out_layout)
