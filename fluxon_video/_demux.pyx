# cython: language_level=3
"""Container side: open a format context over our AVIO, pick the video stream,
and scan packets (demux only) to build the frame index.

The scan never decodes. For MP4/MOV, whose sample table FFmpeg has already
parsed when the container opens, payload reads are zero-filled so no media
byte is fetched; the packets it yields are checked one by one against the
demuxer's index entries, and any disagreement repeats the scan on real bytes.
Elsewhere it reads the payloads, and for MPEG-4 part 2 keeps the few bytes of
each packet that say whether the packet is one frame (see mpeg4.py).
"""
from libc.errno cimport ENOMEM
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.stdio cimport SEEK_SET
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy, strncmp

import numpy as np

from fluxon_video._avio cimport (
    ByteSource, fx_avio_close, fx_avio_cursor, fx_avio_limit_readahead, fx_avio_open,
    fx_avio_zero_fill, fx_source_prefetch,
)
from fluxon_video._pagecache cimport fx_pagecache
from fluxon_video._errors cimport FX_ERROR_OUT_OF_MEMORY, err_check
from fluxon_video.libav.avcodec cimport (
    AVCodecID, AVDISCARD_ALL, AVDISCARD_DEFAULT, AV_CODEC_ID_MPEG4, AV_CODEC_ID_VP8, AV_CODEC_ID_VP9,
    AV_CODEC_PROP_REORDER, AVCodecDescriptor, AVCodecParameters,
    AVPacket, AV_PKT_DATA_DISPLAYMATRIX, AV_PKT_FLAG_DISCARD, AV_PKT_FLAG_CORRUPT, AV_PKT_FLAG_KEY,
    av_packet_alloc, av_packet_free, av_packet_unref, avcodec_descriptor_get, avcodec_get_name,
)
from fluxon_video.libav.avformat cimport (
    AVFMT_FLAG_CUSTOM_IO, AVFMT_FLAG_GENPTS, AVFormatContext, AVINDEX_KEYFRAME, AVIOContext, AVIndexEntry, AVStream,
    AV_DISPOSITION_ATTACHED_PIC, av_find_best_stream, av_read_frame, avformat_alloc_context, avformat_close_input,
    avformat_find_stream_info, avformat_index_get_entries_count, avformat_index_get_entry,
    av_stream_get_side_data, avformat_open_input, avio_seek,
)
from fluxon_video.libav.avutil cimport (
    AV_CHANNEL_ORDER_UNSPEC, AV_NOPTS_VALUE, AVChannelLayout, AVERROR, AVERROR_EOF,
    AVERROR_INVALIDDATA,
    AVERROR_STREAM_NOT_FOUND, AVMEDIA_TYPE_AUDIO,
    AVMEDIA_TYPE_SUBTITLE, AVMEDIA_TYPE_VIDEO, AVPixFmtDescriptor, AVRational,
    av_channel_layout_describe, av_color_range_name, av_color_space_name, av_pix_fmt_desc_get,
)

from fluxon_video import errors
from fluxon_video.frame_index import FrameIndex
from fluxon_video.mpeg4 import packing_problem

# What the MPEG-4 part 2 check keeps of a packet: everything before its first
# VOP (the stream headers, up to MPEG4_HEAD_MAX bytes) and the VOP header's
# first bytes (coding type, time increment, vop_coded).
cdef int64_t MPEG4_VOP_HEADER_BYTES = 16
cdef int64_t MPEG4_HEAD_MAX = 1024


cdef bint is_picture_stream(AVStream *st) noexcept nogil:
    """A video stream that holds moving pictures (not cover art)."""
    return (st.codecpar.codec_type == AVMEDIA_TYPE_VIDEO
            and not (st.disposition & AV_DISPOSITION_ATTACHED_PIC))


cdef int choose_stream(AVFormatContext *fmt, int wanted) noexcept nogil:
    """The video stream to read: ``wanted`` when it is one (else -1), or with
    wanted < 0 the one av_find_best_stream picks (what torchcodec and decord
    read), unless that is cover art: then the first stream that is not."""
    cdef int i, best
    if wanted >= 0:
        return wanted if (wanted < <int> fmt.nb_streams
                          and is_picture_stream(fmt.streams[wanted])) else -1
    best = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, NULL, 0)
    if best >= 0 and is_picture_stream(fmt.streams[best]):
        return best
    for i in range(<int> fmt.nb_streams):
        if is_picture_stream(fmt.streams[i]):
            return i
    return -1


cdef void only_stream(AVFormatContext *fmt, int index) noexcept nogil:
    """Discard every stream but ``index``: the demuxer drops their packets (an
    MP4 demuxer skips them without reading their bytes)."""
    cdef int i
    for i in range(<int> fmt.nb_streams):
        fmt.streams[i].discard = AVDISCARD_DEFAULT if i == index else AVDISCARD_ALL


cdef int fx_avformat_open(AVIOContext *pb, AVFormatContext **fmt,
                          const AVInputFormat *input_format) noexcept nogil:
    """*fmt: a new format context over pb, opened (NULL after a failure).
    pb reads directly (every seek reaches the page cache, see fx_avio_open),
    but Ogg and NUT checksum what they read through pb's buffer, which direct
    reads bypass: they fail at once (a CRC mismatch, then the end of the
    data), so a failed open is tried again with the buffer, which pb then
    keeps. A demuxer that opens directly is unchanged."""
    cdef int ret
    while True:
        fmt[0] = avformat_alloc_context()
        if fmt[0] == NULL:
            return FX_ERROR_OUT_OF_MEMORY
        fmt[0].pb = pb
        fmt[0].flags |= AVFMT_FLAG_CUSTOM_IO
        ret = avformat_open_input(fmt, "", input_format, NULL)
        if (ret not in (AVERROR_INVALIDDATA, AVERROR_EOF) or not pb.direct
                or fx_avio_cursor(pb).error):
            return ret
        pb.direct = 0
        if avio_seek(pb, 0, SEEK_SET) < 0:
            return ret


cdef int fx_open_input(AVIOContext *pb, AVFormatContext **fmt, bint find_stream_info,
                       const AVInputFormat *input_format, int wanted_stream, int *stream_index,
                       const char **failed_call) noexcept nogil:
    """Open *fmt over pb and choose its video stream (see choose_stream).

    With input_format (the demuxer a frame index recorded) nothing is probed:
    the open reads only what that demuxer's header parsing asks for.

    Every other stream is discarded so the demuxer skips its packets.
    Returns 0 or an AVERROR; *fmt is NULL after a failed open, and stays
    open (for describe_streams) when the stream is missing.
    """
    cdef int ret
    failed_call[0] = "avformat_open_input"
    ret = fx_avformat_open(pb, fmt, input_format)
    if ret < 0:
        return ret
    if find_stream_info:
        failed_call[0] = "avformat_find_stream_info"
        ret = avformat_find_stream_info(fmt[0], NULL)
        if ret < 0:
            return ret
    failed_call[0] = "finding a video stream"
    stream_index[0] = choose_stream(fmt[0], wanted_stream)
    if stream_index[0] < 0:
        return AVERROR_STREAM_NOT_FOUND
    only_stream(fmt[0], stream_index[0])
    failed_call[0] = NULL
    return 0


cdef str describe_streams(AVFormatContext *fmt):
    """"0: video h264, 1: audio aac, ..." for an error message."""
    cdef AVStream *st
    parts = []
    for i in range(<int> fmt.nb_streams):
        st = fmt.streams[i]
        kind = {AVMEDIA_TYPE_VIDEO: "video", AVMEDIA_TYPE_AUDIO: "audio",
                AVMEDIA_TYPE_SUBTITLE: "subtitle"}.get(st.codecpar.codec_type, "data")
        if kind == "video" and not is_picture_stream(st):
            kind = "cover art"
        parts.append(f"{i}: {kind} {avcodec_get_name(st.codecpar.codec_id).decode()}")
    return ", ".join(parts) or "none"


cdef int raise_missing_stream(AVFormatContext *fmt, int wanted, str name) except -1:
    """The error for an open that found no stream to read (fmt may be NULL)."""
    streams = describe_streams(fmt) if fmt != NULL else "unknown"
    if wanted >= 0:
        raise errors.FluxonFsNoVideoStreamError(
            f"{name}: stream_index={wanted} is not a video stream of this file "
            f"(its streams: {streams})")
    raise errors.FluxonFsNoVideoStreamError(f"{name}: no video stream (its streams: {streams})")


cdef struct PacketLog:
    int64_t n
    int64_t cap
    int64_t *pts
    int64_t *dts
    int64_t *pos
    int64_t *size
    int64_t *duration
    uint8_t *flags
    # VP8/VP9 (AV_CODEC_ID_*, else 0): packets are checked for frames the
    # decoder does not output (see shown_frames).
    int shown_codec
    # MPEG-4 part 2 outside MP4/MOV only: per packet, how many VOPs it holds
    # and where its head (see MPEG4_HEAD_MAX) ends in `head`, which holds the
    # heads one after another.
    bint zero_filled  # payloads were read as zeros (MP4/MOV: the sample table's word)
    bint mpeg4
    int32_t *vops
    int64_t *head_end
    uint8_t *head
    int64_t head_used
    int64_t head_cap


cdef void *_grow(void *block, size_t size, bint *failed) noexcept nogil:
    """realloc that keeps the old block (and says so) when it fails."""
    cdef void *bigger
    if failed[0]:
        return block
    bigger = realloc(block, size)
    if bigger == NULL:
        failed[0] = True
        return block
    return bigger


cdef int log_append(PacketLog *log, AVPacket *pkt) noexcept nogil:
    cdef int64_t cap
    cdef int shown
    cdef bint failed = False
    if log.n == log.cap:
        cap = log.cap * 2 if log.cap else 4096
        log.pts = <int64_t *> _grow(log.pts, cap * sizeof(int64_t), &failed)
        log.dts = <int64_t *> _grow(log.dts, cap * sizeof(int64_t), &failed)
        log.pos = <int64_t *> _grow(log.pos, cap * sizeof(int64_t), &failed)
        log.size = <int64_t *> _grow(log.size, cap * sizeof(int64_t), &failed)
        log.duration = <int64_t *> _grow(log.duration, cap * sizeof(int64_t), &failed)
        log.flags = <uint8_t *> _grow(log.flags, cap * sizeof(uint8_t), &failed)
        if log.mpeg4:
            log.vops = <int32_t *> _grow(log.vops, cap * sizeof(int32_t), &failed)
            log.head_end = <int64_t *> _grow(log.head_end, cap * sizeof(int64_t), &failed)
        if failed:
            return FX_ERROR_OUT_OF_MEMORY
        log.cap = cap
    if log.mpeg4 and log_mpeg4_head(log, pkt) < 0:
        return FX_ERROR_OUT_OF_MEMORY
    log.pts[log.n] = pkt.pts
    log.dts[log.n] = pkt.dts
    log.pos[log.n] = pkt.pos
    log.size[log.n] = pkt.size
    log.duration[log.n] = pkt.duration
    shown = shown_frames(log.shown_codec, pkt.data, pkt.size) if log.shown_codec else 1
    log.flags[log.n] = ((1 if pkt.flags & AV_PKT_FLAG_KEY else 0)
                        | (2 if pkt.flags & AV_PKT_FLAG_DISCARD else 0)
                        | (4 if pkt.flags & AV_PKT_FLAG_CORRUPT else 0)
                        | (8 if shown == 0 else 0)
                        | (16 if shown > 1 else 0))
    log.n += 1
    return 0


cdef inline int _bit(const uint8_t *data, int k) noexcept nogil:
    return (data[k >> 3] >> (7 - (k & 7))) & 1


cdef int vp9_frame_shown(const uint8_t *data, int64_t size) noexcept nogil:
    """Whether one VP9 frame is output: show_existing_frame or show_frame in
    its uncompressed header (1 if the header cannot be read: the decoder then
    rejects the packet, which a decode reports as damage)."""
    cdef int k = 4, profile
    if size < 1 or (data[0] >> 6) != 2:  # frame_marker
        return 1
    profile = _bit(data, 2) | (_bit(data, 3) << 1)
    if profile == 3:
        k += 1  # reserved_zero
    if _bit(data, k):  # show_existing_frame: an earlier frame is output again
        return 1
    return _bit(data, k + 2)  # after frame_type: show_frame


cdef int shown_frames(int codec, const uint8_t *data, int64_t size) noexcept nogil:
    """How many frames the decoder outputs for one VP8 or VP9 packet.

    VP8 invisible frames (alternate reference frames) are packets of their
    own whose frame tag has show_frame clear; VP9 packs hidden frames with a
    shown one into a superframe (an index of frame sizes at its end), and a
    packet may also be one hidden frame.
    """
    cdef int64_t last, frames, mag, index_size, off, i, j, frame_size
    cdef int shown = 0
    if data == NULL or size < 1:
        return 1
    if codec == AV_CODEC_ID_VP8:
        return (data[0] >> 4) & 1 if size >= 3 else 1
    last = data[size - 1]
    if (last & 0xE0) == 0xC0:
        frames = (last & 7) + 1
        mag = ((last >> 3) & 3) + 1
        index_size = 2 + mag * frames
        if size >= index_size and data[size - index_size] == last:
            off = 0
            for i in range(frames):
                frame_size = 0
                for j in range(mag):
                    frame_size |= (<int64_t> data[size - index_size + 1 + i * mag + j]) << (8 * j)
                if frame_size <= 0 or off + frame_size > size - index_size:
                    return 1  # a broken index: let the decoder judge
                shown += vp9_frame_shown(data + off, frame_size)
                off += frame_size
            return shown
    return vp9_frame_shown(data, size)


cdef int count_vops(const uint8_t *data, int64_t size, int64_t *first) noexcept nogil:
    """How many VOP start codes (00 00 01 B6) data holds; *first: where the
    first one begins, or -1. Start codes are byte-aligned and never emulated."""
    cdef int64_t i = 0
    cdef int count = 0
    first[0] = -1
    while i + 3 < size:
        if data[i + 2] > 1:
            i += 3  # no start code begins at i, i + 1 or i + 2
        elif data[i + 2] == 0:
            i += 1
        elif data[i] or data[i + 1]:
            i += 3
        else:
            if data[i + 3] == 0xB6:
                if count == 0:
                    first[0] = i
                count += 1
            i += 3
    return count


cdef int log_mpeg4_head(PacketLog *log, AVPacket *pkt) noexcept nogil:
    """Record the packet's VOP count and head (see PacketLog)."""
    cdef int64_t first, length = 0, cap
    cdef bint failed = False
    log.vops[log.n] = count_vops(pkt.data, pkt.size, &first)
    if first >= 0:
        length = min(first + 4 + MPEG4_VOP_HEADER_BYTES, <int64_t> pkt.size, MPEG4_HEAD_MAX)
    if log.head_used + length > log.head_cap:
        cap = max(2 * log.head_cap, log.head_used + length, <int64_t> 65536)
        log.head = <uint8_t *> _grow(log.head, cap, &failed)
        if failed:
            return FX_ERROR_OUT_OF_MEMORY
        log.head_cap = cap
    if length:
        memcpy(log.head + log.head_used, pkt.data, length)
    log.head_used += length
    log.head_end[log.n] = log.head_used
    return 0


cdef void log_free(PacketLog *log) noexcept nogil:
    free(log.pts)
    free(log.dts)
    free(log.pos)
    free(log.size)
    free(log.duration)
    free(log.flags)
    free(log.vops)
    free(log.head_end)
    free(log.head)
    log_init(log)


cdef void log_init(PacketLog *log) noexcept nogil:
    """An empty log that owns nothing."""
    log.pts = log.dts = log.pos = log.size = log.duration = log.head_end = NULL
    log.flags = log.head = NULL
    log.vops = NULL
    log.n = log.cap = log.head_used = log.head_cap = 0
    log.mpeg4 = log.zero_filled = False
    log.shown_codec = 0


cdef bint is_mov(AVFormatContext *fmt) noexcept nogil:
    return strncmp(fmt.iformat.name, "mov,", 4) == 0


cdef int scan(AVIOContext *pb, fx_pagecache *pc, bint zero_fill, PacketLog *log,
              PacketLog *audio_log, AVFormatContext **fmt, int *stream_index,
              const char **failed_call) noexcept nogil:
    # *stream_index: the stream asked for (-1: choose_stream's rule), then the one read
    cdef int ret, audio_index = -1
    cdef AVCodecID codec_id
    cdef AVPacket *pkt
    # Stream info (what the codec says: size as decoded, pix_fmt, colours) comes
    # from the first packets, on real bytes; the scan after it may zero-fill.
    # No readahead meanwhile (a limit of one byte): the header and those
    # packets are all it reads, so a cold MP4 open fetches no page only
    # readahead wanted.
    fx_avio_limit_readahead(pb, 1)
    ret = fx_open_input(pb, fmt, True, NULL, stream_index[0], stream_index, failed_call)
    fx_avio_limit_readahead(pb, 0)
    if ret < 0:
        return ret
    codec_id = fmt[0].streams[stream_index[0]].codecpar.codec_id
    log.shown_codec = codec_id if codec_id in (AV_CODEC_ID_VP8, AV_CODEC_ID_VP9) else 0
    # A sample table says nothing of VP8/VP9 hidden frames: read their payloads.
    zero_fill = zero_fill and is_mov(fmt[0]) and not log.shown_codec
    log.zero_filled = zero_fill
    if not zero_fill:
        # This scan reads every packet, so the whole file: ask for all of it
        # now (as much as the cache holds), fetched in large parallel batches
        # instead of a readahead window at a time.
        fx_source_prefetch(pc, fx_avio_cursor(pb).pos, pc.file_size - fx_avio_cursor(pb).pos)
        if not is_mov(fmt[0]):
            # No sample table lists the audio packets: log them as they go by
            # (the bytes are read anyway), so audio reads know where theirs are.
            audio_index = av_find_best_stream(fmt[0], AVMEDIA_TYPE_AUDIO, -1, stream_index[0],
                                              NULL, 0)
            if audio_index >= 0:
                fmt[0].streams[audio_index].discard = AVDISCARD_DEFAULT
    # Packets without a pts (AVI's I and P frames) get the one the demuxer
    # can infer; the indexed path reads packets the same way.
    fmt[0].flags |= AVFMT_FLAG_GENPTS
    fx_avio_zero_fill(pb, zero_fill)
    # Outside MP4/MOV the payloads are read anyway: look at MPEG-4 part 2's.
    log.mpeg4 = (fmt[0].streams[stream_index[0]].codecpar.codec_id == AV_CODEC_ID_MPEG4
                 and not is_mov(fmt[0]))
    failed_call[0] = "av_packet_alloc"
    pkt = av_packet_alloc()
    if pkt == NULL:
        return FX_ERROR_OUT_OF_MEMORY
    while True:
        failed_call[0] = "av_read_frame"
        ret = av_read_frame(fmt[0], pkt)
        if ret < 0:
            break
        if pkt.stream_index == stream_index[0]:
            failed_call[0] = "growing the packet log"
            ret = log_append(log, pkt)
        elif pkt.stream_index == audio_index:
            failed_call[0] = "growing the audio packet log"
            ret = log_append(audio_log, pkt)
        av_packet_unref(pkt)
        if ret < 0:
            break
    av_packet_free(&pkt)
    fx_avio_zero_fill(pb, False)
    # Like the ffmpeg CLI, a demux error ends the stream; running out of
    # memory (ours or FFmpeg's) and a failed byte source do not.
    if ret == AVERROR_EOF or (ret < 0 and ret != AVERROR(ENOMEM) and ret != FX_ERROR_OUT_OF_MEMORY
                              and not fx_avio_cursor(pb).error):
        ret = 0
    if ret == 0:
        failed_call[0] = NULL
    return ret


cdef bint take_sample_table(AVStream *st, PacketLog *log) noexcept nogil:
    """Whether the zero-filled scan returned exactly the demuxer's samples.

    If so, keyframes are taken from the sample table (sync samples): with
    zeroed payloads a parser cannot recognise them, and on real bytes the
    decoder's landing check confirms each one.
    """
    cdef int i, n = avformat_index_get_entries_count(st)
    cdef const AVIndexEntry *e
    if n != log.n:
        return False
    for i in range(n):
        e = avformat_index_get_entry(st, i)
        if e.pos != log.pos[i] or e.size != log.size[i]:
            return False
    for i in range(n):
        e = avformat_index_get_entry(st, i)
        log.flags[i] = (log.flags[i] & ~1) | (1 if e.flags & AVINDEX_KEYFRAME else 0)
    return True


cdef str _name(const char *text):
    return text.decode() if text != NULL else ""


cdef str mpeg4_problem(PacketLog *log, AVCodecParameters *par, key):
    """The MPEG-4 part 2 check (mpeg4.packing_problem) on what the scan kept."""
    cdef int64_t i, start = 0
    heads = []
    for i in range(log.n):
        heads.append((<char *> log.head)[start:log.head_end[i]] if log.head_end[i] > start else b"")
        start = log.head_end[i]
    vops = [log.vops[i] for i in range(log.n)]
    extradata = ((<char *> par.extradata)[:par.extradata_size] if par.extradata != NULL
                 else b"")
    tag = (<uint32_t> par.codec_tag).to_bytes(4, "little").decode("latin-1")
    return packing_problem(extradata, tag, vops, heads, key)


cdef dict stream_header(AVFormatContext *fmt, AVStream *st, int64_t file_size):
    """What the container header says of the stream (no decode): sizes, colours, timing."""
    cdef AVCodecParameters *par = st.codecpar
    cdef const AVPixFmtDescriptor *desc = av_pix_fmt_desc_get(par.format)
    cdef size_t matrix_size = 0
    cdef const int32_t *matrix = <const int32_t *> av_stream_get_side_data(
        st, AV_PKT_DATA_DISPLAYMATRIX, &matrix_size)
    cdef AVRational sar = par.sample_aspect_ratio
    cdef const AVCodecDescriptor *codec = avcodec_descriptor_get(par.codec_id)
    if sar.num <= 0 or sar.den <= 0:
        sar = st.sample_aspect_ratio
    sar_pair = (int(sar.num), int(sar.den)) if sar.num > 0 and sar.den > 0 else (1, 1)
    return {
        "time_base": (st.time_base.num, st.time_base.den),
        "avg_frame_rate": (st.avg_frame_rate.num, st.avg_frame_rate.den),
        "width": par.width,
        "height": par.height,
        "sample_aspect_ratio": sar_pair,
        "pix_fmt": _name(desc.name) if desc != NULL else "",
        "bit_depth": desc.comp[0].depth if desc != NULL else par.bits_per_raw_sample,
        "color_range": _name(av_color_range_name(par.color_range)),
        "color_space": _name(av_color_space_name(par.color_space)),
        "bit_rate": par.bit_rate if par.bit_rate > 0 else max(fmt.bit_rate, 0),
        "display_matrix": ([matrix[i] for i in range(9)] if matrix != NULL
                           and matrix_size >= 9 * sizeof(int32_t) else None),
        "file_size": file_size,
        # The codec may store frames out of presentation order (B-frames):
        # then only true pts say the order, which AVI does not store.
        "reorders": codec == NULL or (codec.props & AV_CODEC_PROP_REORDER) != 0,
    }


cdef object audio_packets(AVFormatContext *fmt, int audio_index, PacketLog *scanned):
    """(pts, pos, size) int64 arrays of the audio stream's packets, in decode
    order: MP4/MOV's from the sample table the open parsed (no byte of media
    read), elsewhere the ones the scan logged; a packet the demuxer gave no
    pts has its predecessor's (the table stays sorted for lookups)."""
    cdef AVStream *st
    cdef const AVIndexEntry *e
    cdef int64_t i, n
    if audio_index < 0:
        return np.empty((3, 0), np.int64)
    if not is_mov(fmt):
        n = scanned.n
        if n == 0:
            return np.empty((3, 0), np.int64)
        out = np.stack([np.asarray(<int64_t[:n]> scanned.pts), np.asarray(<int64_t[:n]> scanned.pos),
                        np.asarray(<int64_t[:n]> scanned.size)])
        known = out[0] != AV_NOPTS_VALUE
        out[0] = out[0][np.maximum.accumulate(np.where(known, np.arange(n), 0))]
        return out[:, np.argmax(known):] if known.any() else np.empty((3, 0), np.int64)
    st = fmt.streams[audio_index]
    n = avformat_index_get_entries_count(st)
    out = np.empty((3, n), np.int64)
    cdef int64_t[:, ::1] view = out
    # Samples the edit list cuts (AVINDEX_DISCARD_FRAME) stay: the demuxer
    # still returns them and the decoder needs them (AAC's priming packet).
    for i in range(n):
        e = avformat_index_get_entry(st, i)
        view[0, i], view[1, i], view[2, i] = e.timestamp, e.pos, e.size
    return out


cdef object audio_header(AVFormatContext *fmt, int video_index):
    """The audio stream av_find_best_stream pairs with the video (as ffmpeg's
    -map 0:a:0 of a typical file), as its header says it, or None."""
    cdef int index = av_find_best_stream(fmt, AVMEDIA_TYPE_AUDIO, -1, video_index, NULL, 0)
    return describe_audio(fmt, index) if index >= 0 else None


cdef dict describe_audio(AVFormatContext *fmt, int index, const AVChannelLayout *decoder=NULL):
    """Audio stream ``index`` as its header says it (FluxonFsAudioMetadata's fields);
    a layout the header leaves unnamed is the decoder's (``decoder``, once open), or
    "unknown", as ffprobe says."""
    cdef AVStream *st = fmt.streams[index]
    cdef const AVChannelLayout *named = &st.codecpar.ch_layout
    cdef char layout[128]
    if named.order == AV_CHANNEL_ORDER_UNSPEC and decoder != NULL:
        named = decoder
    layout[0] = 0
    if named.order != AV_CHANNEL_ORDER_UNSPEC:
        av_channel_layout_describe(named, layout, sizeof(layout))
    tb = st.time_base.num / st.time_base.den if st.time_base.den else 0.0
    return {
        "stream_index": index,
        "time_base": (st.time_base.num, st.time_base.den),
        "codec": avcodec_get_name(st.codecpar.codec_id).decode(),
        "sample_rate": st.codecpar.sample_rate,
        "channels": st.codecpar.ch_layout.nb_channels,
        "layout": layout.decode("utf-8", "replace") or "unknown",
        "start_s": st.start_time * tb if st.start_time != AV_NOPTS_VALUE else None,
        "duration_s": st.duration * tb if st.duration != AV_NOPTS_VALUE and st.duration > 0
                      else None,
    }


def scan_packets(ByteSource source, str name=None, int stream_index=-1):
    """Scan a video stream's packets (stream_index, or -1 for choose_stream's
    rule); returns a FrameIndex."""
    name = name or source.name
    cdef AVIOContext *pb = NULL
    cdef AVFormatContext *fmt = NULL
    cdef PacketLog log, audio_log
    cdef int ret = 0, attempt, wanted = stream_index
    cdef bint zero_fill, retry = False
    cdef const char *failed_call = NULL
    cdef AVStream *st
    log_init(&log)
    log_init(&audio_log)
    try:
        for attempt in range(2):
            zero_fill = attempt == 0
            pb = fx_avio_open(source)
            stream_index = wanted
            with nogil:
                ret = scan(pb, source.core.pc, zero_fill, &log, &audio_log, &fmt,
                           &stream_index, &failed_call)
                retry = (ret == 0 and log.zero_filled
                         and not take_sample_table(fmt.streams[stream_index], &log))
            if not retry:
                break
            avformat_close_input(&fmt)
            fx_avio_close(&pb)
            log_free(&log)
            log_free(&audio_log)
        if fx_avio_cursor(pb).error:
            raise source.fetch_error(fx_avio_cursor(pb))
        if ret == AVERROR_STREAM_NOT_FOUND:
            raise_missing_stream(fmt, wanted, name)
        if ret < 0:
            err_check(ret, (failed_call or b"scan").decode(), name)
        st = fmt.streams[stream_index]
        count = log.n
        pts = np.asarray(<int64_t[:count]> log.pts).copy() if count else np.empty(0, np.int64)
        dts = np.asarray(<int64_t[:count]> log.dts).copy() if count else np.empty(0, np.int64)
        pos = np.asarray(<int64_t[:count]> log.pos).copy() if count else np.empty(0, np.int64)
        size = np.asarray(<int64_t[:count]> log.size).copy() if count else np.empty(0, np.int64)
        duration = (np.asarray(<int64_t[:count]> log.duration).copy() if count
                    else np.empty(0, np.int64))
        flags = np.asarray(<uint8_t[:count]> log.flags).copy() if count else np.empty(0, np.uint8)
        key = (flags & 1) != 0
        cut = (flags & 4) != 0
        problem = mpeg4_problem(&log, st.codecpar, key) if log.mpeg4 else ""
        audio = audio_header(fmt, stream_index)
        return FrameIndex(fmt.iformat.name.decode(), avcodec_get_name(st.codecpar.codec_id).decode(),
                          stream_index, pts, pos, size, key, (flags & 2) != 0,
                          trusted=not problem, reason=problem, pkt_dts=dts,
                          pkt_duration=duration, pkt_cut=cut,
                          # Damaged before any decode: what the demuxer returns
                          # for them depends on where it started reading.
                          pkt_damaged=cut, damage_notes={
                              int(d): "the demuxer cut it short (its size runs past the data)"
                              for d in np.flatnonzero(cut)},
                          pkt_hidden=(flags & 8) != 0, pkt_several=(flags & 16) != 0,
                          header={**stream_header(fmt, st, source.size), "audio": audio},
                          audio_packets=audio_packets(
                              fmt, audio["stream_index"] if audio is not None else -1,
                              &audio_log))
    finally:
        avformat_close_input(&fmt)
        fx_avio_close(&pb)
        log_free(&log)
        log_free(&audio_log)
