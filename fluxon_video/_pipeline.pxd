from libc.stdint cimport int64_t, uint64_t

from fluxon_video._avio cimport ByteSource
from fluxon_video._pagecache cimport fx_cursor
from fluxon_video._progress cimport DecodeProgress
from fluxon_video.libav.avcodec cimport AVCodecContext, AVPacket
from fluxon_video.libav.avformat cimport AVFormatContext, AVInputFormat, AVIOContext
from fluxon_video.libav.avutil cimport AVFrame


cdef extern from "_avlog.h" nogil:
    # Where FFmpeg's error lines for one pipeline's contexts go (see _avlog.h).
    ctypedef struct fx_avlog_buf:
        pass


cdef class Pipeline:
    cdef ByteSource source
    cdef readonly str name
    cdef readonly int num_threads
    cdef int pid
    cdef AVIOContext *pb
    cdef AVFormatContext *fmt
    cdef AVCodecContext *codec
    cdef AVPacket *pkt
    cdef AVFrame *frame
    cdef fx_avlog_buf *log     # the contexts' opaque; freed in release()
    # The decoder's buffers carry stamps where decoding must write (_framecheck.h):
    # a frame output with some left is a picture the decoder did not finish.
    cdef bint framecheck
    cdef uint64_t concealments_seen  # the log's concealment count at the last frame out
    cdef readonly int stream_index
    cdef public int wanted_stream  # asked for at open (-1: _demux.choose_stream's rule)
    cdef readonly str codec_name
    # Read counters of AVIO contexts already released (stats are per-call deltas).
    cdef int64_t retired_read_calls, retired_seek_calls, retired_bytes_read
    # Where the decoder stands:
    # Read the first packets at open to fill in stream parameters, as the ffmpeg
    # CLI does (the sequential reference). With a trusted frame index the
    # indexed path can skip that: the codec opens from the container's codec
    # parameters, and every output frame is still checked against the index.
    cdef public bint probe_streams
    # An audio decoder shares this pipeline's demuxer (_audio.pyx) and needs
    # the probe outside MP4/MOV: every later open probes too.
    cdef bint probe_for_guest
    # Counts opens: an audio decoder that shares the demuxer tells a reopened
    # pipeline from the one its last turn left.
    cdef uint64_t opens
    # The demuxer a trusted frame index recorded: the open skips format
    # probing, so it reads no byte the demuxer's header parsing does not ask
    # for (a warm open's header bytes come with the index). NULL: probe.
    cdef const AVInputFormat *input_format
    # Fill in missing packet pts as the index scan does (AVI's I and P frames
    # have none): set for decodes that identify frames by pts against the
    # index. The sequential reference reads packets as the ffmpeg CLI does.
    cdef public bint genpts
    # A slice the decoder could not parse fails the packet (AV_EF_EXPLODE)
    # instead of being concealed: frame threads conceal without flagging the
    # frame, so a strict decode would not see the damage otherwise.
    cdef public bint explode
    cdef bint fresh             # opened, nothing read yet
    cdef bint positioned        # fed packets since the last seek and not drained
    # Another reader of the demuxer (an audio decoder's turn) moved it since
    # the last packet read: going on needs the demuxer put back first. Every
    # read of ours seeks or puts it back first, which clears it: still set at
    # the next turn, it tells the audio decoder that nothing moved it since.
    cdef bint displaced
    # The keyframe at or before every packet fed since the last seek: its
    # decode position and the timestamp that seeks to it (-1: none).
    cdef int64_t run_key_dec
    cdef int64_t run_seek_ts
    cdef bint packet_pending    # pkt holds a packet the decoder refused with EAGAIN
    cdef int64_t last_skipped_dec  # decode position of the last packet fed with skip_frame=NONREF
    cdef int64_t last_pkt_dec   # decode position of the last packet fed
    cdef int64_t last_out_idx   # presentation index of the last frame output

    cdef int open(self, DecodeProgress *p) except -1
    cdef int _open_nogil(self, DecodeProgress *p) noexcept nogil
    cdef void release(self) noexcept nogil
    cdef bint is_open(self) noexcept nogil
    cdef fx_cursor *cursor(self) noexcept nogil
    cdef void limit_readahead(self, int64_t end) noexcept nogil
    cdef void skip_nonref(self, bint skip) noexcept nogil
    cdef void clear_log(self) noexcept nogil
    cdef void last_error(self, char *out, size_t size) noexcept nogil
    cdef int raise_error(self, int ret, DecodeProgress *p) except -1
    cdef tuple io_totals(self)
    cdef int next_packet(self, bint *draining, DecodeProgress *p) noexcept nogil
    cdef int send(self, bint draining, int *consecutive_errors, DecodeProgress *p) noexcept nogil
    cdef int receive(self, int *consecutive_errors, DecodeProgress *p) noexcept nogil
    cdef int seek(self, int64_t timestamp, DecodeProgress *p) noexcept nogil


cdef class DemuxerLoan:
    # A Pipeline's demuxer lent to an audio decoder (_audio.pyx) for one turn.
    cdef Pipeline pipe
    cdef AVFormatContext *fmt   # the pipeline's, while lent
    cdef AVIOContext *pb
    cdef readonly bint was_fresh       # the pipeline had read nothing when the turn began
    cdef readonly bint was_displaced   # ... nor read since the last turn (nor sought)
    cdef readonly uint64_t opens_left  # the pipeline's opens when the turn ended (0: none)

    @staticmethod
    cdef DemuxerLoan lend(Pipeline pipe, int guest_stream)
    cdef bint give_back(self) noexcept
    cdef bint host_moved(self, uint64_t opens_left_before) noexcept
    cdef int host_stream(self) noexcept
    cdef void close_host(self) noexcept
