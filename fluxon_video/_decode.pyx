# cython: language_level=3, boundscheck=False, wraparound=False
"""VideoDecoder: frames at indices, straight into a caller-owned NHWC buffer.

Frame i is the i-th frame the decoder outputs when the first video stream is
read from the start (presentation order). The decoder chooses the path (the
indexed one when it holds a trusted FrameIndex, see _decode_paths), falls
back to the sequential reference on any disagreement, validates the request,
raises errors, and reports a DecodeStats record per call. Its pipeline (_pipeline)
lives as long as the decoder, so a later request ahead of where it stands
continues without seeking.

Life cycle: reset() drops the pipeline (the next decode reopens it);
close() releases everything for good, after which every call raises
FluxonFsClosedError. Both are safe to call twice.
"""
import os

import numpy as np

from libc.errno cimport EIO
from libc.stdint cimport int64_t, uint8_t
from libc.string cimport memset

from fluxon_video._avio cimport ByteSource
from fluxon_video._pagecache cimport fx_cursor
from fluxon_video._convert cimport (
    FX_SAMPLES_GRAY16, FX_SAMPLES_RGB24, FrameSink, fx_converter, fx_converter_free, fx_sink_init,
)
from fluxon_video._decode_paths cimport (
    FX_DAMAGED, FX_FALLBACK, IndexedPlan, Survey, decode_indexed, decode_sequential, make_plan,
    survey_damage,
)
from fluxon_video._pipeline cimport Pipeline
from fluxon_video._progress cimport DecodeProgress, now_ms
from fluxon_video.libav.avcodec cimport avcodec_version
from fluxon_video.libav.avformat cimport av_find_input_format, avformat_version
from fluxon_video.libav.avutil cimport AVERROR, avutil_version
from fluxon_video.libav.swscale cimport swscale_version

from fluxon_video import damage, errors
from fluxon_video.resize import (
    INTERPOLATIONS, RESIZE_MODES, check_interpolation, check_resize,
)
from fluxon_video.stats import DecodeStats
from fluxon_video.validation import (
    check_output_size, frame_indices, output_array, output_fits, positive_int,
    resolve_frame_indices,
)

# Damaged packets one call may find and learn (each costs a short one-threaded
# decode) before it reports the damage it has.
cdef int MAX_DAMAGE_LEARNT_PER_CALL = 16


cdef class VideoDecoder:
    """One decoder over a ByteSource; a context manager."""
    cdef ByteSource source
    cdef Pipeline pipe
    # One thread: damage surveys and on_damage="conceal"'s reference decode
    # (frame threads report an error packets late, and conceal differently).
    cdef Pipeline one_thread
    cdef fx_converter converter
    cdef readonly str name
    cdef readonly int num_threads
    cdef readonly bint closed
    cdef int pid
    cdef public object index   # FrameIndex or None
    cdef public str on_damage  # "error" or "conceal" (damage.py)
    # The video stream asked for (-1: _demux.choose_stream's rule); an index,
    # once set, names the stream it was scanned from.
    cdef readonly int stream_index
    # Called with the index when a decode taught it something (damage, the
    # survey): the reader stores it back in the KV for every other reader.
    cdef public object index_learned
    cdef object last_survey_damage  # (where, FFmpeg's message) of the last survey, or None

    def __cinit__(self, ByteSource source, num_threads=1, str name=None, on_damage="error",
                  stream_index=None):
        self.num_threads = positive_int("num_threads", num_threads)
        self.stream_index = -1 if stream_index is None else stream_index
        self.on_damage = damage.check_policy(on_damage)
        self.source = source
        self.name = name or source.name
        self.pipe = Pipeline(source, self.num_threads, self.name)
        self.pipe.explode = self.on_damage == "error"
        self.pid = os.getpid()
        memset(&self.converter, 0, sizeof(self.converter))

    def __dealloc__(self):
        if self.pid == os.getpid():
            fx_converter_free(&self.converter)

    @property
    def orient(self):
        """FX_ORIENT_* bits applied before conversion (0: the coded orientation)."""
        return self.converter.orient

    @orient.setter
    def orient(self, int bits):
        if bits < 0 or bits > 7:
            raise ValueError(f"orient must be 0..7, got {bits}")
        self.converter.orient = bits

    @property
    def scaling(self):
        """(resize, interpolation): how frames fill the output size, and the
        scaler (names of resize.RESIZE_MODES and resize.INTERPOLATIONS)."""
        return RESIZE_MODES[self.converter.resize], INTERPOLATIONS[self.converter.interp]

    @scaling.setter
    def scaling(self, value):
        resize, interpolation = check_resize(value[0]), check_interpolation(value[1])
        # The converter compares them with what its SwsContext was built for,
        # and rebuilds that on the next frame that needs another.
        self.converter.resize = RESIZE_MODES.index(resize)
        self.converter.interp = INTERPOLATIONS.index(interpolation)

    @property
    def is_open(self):
        """Whether a pipeline is open (False after reset, close or a failed open)."""
        return self.pipe.is_open()

    def _assert_open(self):
        if self.closed:
            raise errors.FluxonFsClosedError(f"{self.name}: the decoder is closed")

    def reset(self):
        """Forget where the decoder stands: the next decode reopens the container."""
        self._assert_open()
        self.pipe.release()
        if self.one_thread is not None:
            self.one_thread.release()

    def close(self):
        """Release every FFmpeg resource; later calls raise. Safe to call twice."""
        if self.closed:
            return
        self.closed = True
        if self.pid == os.getpid():  # a forked child leaves the parent's copy alone
            self.pipe.release()
            if self.one_thread is not None:
                self.one_thread.release()
            fx_converter_free(&self.converter)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def decode(self, indices, height, width, out=None, samples="rgb24"):
        """Frames at indices as uint8 (N, height, width, 3) RGB, and this call's DecodeStats.

        Negative indices count from the end (they need the frame index's
        count). ``out``, if given, is filled in place and returned. Uses
        self.index when it is trusted, else (and on any disagreement with it)
        the sequential path. Damage is handled as self.on_damage says (see
        damage.py). ``samples="gray16"``: the frames of a 9- to 16-bit gray
        video (depth maps) as coded, uint16 (N, height, width) at the video's
        size, nothing converted (no ``out``).
        """
        self._assert_open()
        height, width = check_output_size(height, width)
        if samples not in ("rgb24", "gray16"):
            raise ValueError(f"samples must be 'rgb24' or 'gray16', got {samples!r}")
        gray = samples == "gray16"
        if gray and out is not None:
            raise ValueError("decode(samples='gray16') allocates its output (no out)")
        index = self.index
        conceal = self.on_damage == "conceal"
        if conceal and index is not None:
            self.survey()
        requested = resolve_frame_indices(frame_indices(indices), self.frame_count(), self.name)
        # gray16 frames go through the same NHWC byte buffer, 2 bytes a pixel
        shape = (requested.shape[0], height, width, 2 if gray else 3)
        if out is None:
            output_fits(self.name, f"{shape[0]} frames of {height}x{width}",
                        shape[0] * height * width * shape[3])
            out = np.empty(shape, dtype=np.uint8)
        else:
            out = output_array(out, shape, self.name)
        self.converter.samples = FX_SAMPLES_GRAY16 if gray else FX_SAMPLES_RGB24
        frames = out.view("<u2")[..., 0] if gray else out
        if requested.shape[0] == 0:
            return frames, DecodeStats()
        # Decode each distinct frame once, into its first slot; copy duplicates after.
        targets, first_slot, inverse = np.unique(requested, return_index=True,
                                                 return_inverse=True)
        targets = np.ascontiguousarray(targets, dtype=np.int64)
        first_slot = np.ascontiguousarray(first_slot, dtype=np.int64)
        cache_before = self.source.stats()
        io_before = self.pipe.io_totals()
        cdef DecodeProgress p
        memset(&p, 0, sizeof(p))
        try:
            if conceal and index is not None and not damage.survey_agrees(index):
                path, fallback = self._decode_concealed(targets, first_slot, out, index, &p)
            elif conceal and index is None:
                path, fallback = "sequential", ""
                self._check(self._run(self._one_thread(), targets, first_slot, out, None, &p,
                                      False), targets, &p, 0)
            else:
                path, fallback = self._decode_strict(targets, first_slot, out, index, &p)
        except BaseException:
            self.pipe.release()  # a failed pipeline is not reusable
            if self.one_thread is not None:
                self.one_thread.release()
            raise
        duplicates = np.nonzero(first_slot[inverse] != np.arange(requested.shape[0]))[0]
        if duplicates.size:
            out[duplicates] = out[first_slot[inverse[duplicates]]]
        return frames, self._stats(&p, path, fallback, io_before, cache_before)

    def guest_pipeline(self, bint probe):
        """The main pipeline, open, for an audio decoder that shares its demuxer
        (_audio.pyx); probe: opened as the CLI opens, the first packets read."""
        self._assert_open()
        cdef Pipeline pipe = self.pipe
        cdef DecodeProgress p
        if probe and not pipe.probe_for_guest:
            pipe.probe_for_guest = True
            if pipe.is_open() and not pipe.probe_streams:
                pipe.release()
        index = self.index if self.index is not None and self.index.trusted else None
        self._prepare(pipe, index)
        memset(&p, 0, sizeof(p))
        pipe.open(&p)
        return pipe

    def frame_count(self):
        """Frames this decoder numbers (None without an index): the index's,
        or under on_damage="conceal" the one-threaded survey's."""
        index = self.index
        if index is None:
            return None
        if self.on_damage == "conceal" and index.decoded_pts is not None:
            return int(index.decoded_pts.shape[0])
        return index.frame_count

    cdef tuple _decode_strict(self, targets, first_slot, out, index, DecodeProgress *p):
        """Index numbering; a target that depends on damage raises. Damage met
        on the way is located, learnt, and the call tried again."""
        cdef int ret
        cdef int64_t sequential_from = 0
        cdef Pipeline pipe = self.pipe
        cdef const char *landing
        path, fallback = "sequential", ""
        for _ in range(MAX_DAMAGE_LEARNT_PER_CALL):
            if index is None or not index.trusted:
                break
            damage.check_targets(index, targets, self.name)
            path = "indexed"
            ret = self._run(pipe, targets, first_slot, out, index, p, True)
            if ret == FX_DAMAGED:
                landing = p.fallback_reason  # set only when a landing keyframe was denied
                if self._learn_cluster_damage(index, targets, p):
                    continue
                if landing != NULL:
                    # No damage there: the index names a keyframe the parser
                    # does not see (a damaged sample table), so it is wrong.
                    ret = FX_FALLBACK
                    p.fallback_reason = landing
                elif pipe is self.pipe:
                    # Frame threads, AV_EF_EXPLODE, a skipped frame the damaged
                    # stream did reference, or a decode carried on from the
                    # cluster before flagged what the survey does not: read
                    # these frames as it does.
                    pipe = self._one_thread()
                    continue
                else:
                    self._raise_unconfirmed()
            if ret == FX_FALLBACK:
                fallback = p.fallback_reason.decode()
                index.untrust(f"decode disagreed with the index: {fallback}")
                path = "sequential"
                p.frames_converted = 0
                sequential_from = p.frames_decoded
                break
            self._check(ret, targets, p, 0)
            return path, fallback
        else:
            damage.check_targets(index, targets, self.name)
        self.pipe.release()  # the sequential path starts from a fresh pipeline
        ret = self._run(self.pipe, targets, first_slot, out, None, p, True)
        if ret == FX_DAMAGED:
            self._raise_sequential_damage(index)
        self._check(ret, targets, p, sequential_from)
        return path, fallback

    cdef tuple _decode_concealed(self, targets, first_slot, out, index, DecodeProgress *p):
        """Survey numbering: frames that depend on no damage by seeking, the
        others by a one-threaded sequential decode (the reference itself)."""
        cdef int ret
        by_index, mapped = damage.concealed_plan(index, targets)
        if by_index.any():
            self._decode_strict(mapped, np.ascontiguousarray(first_slot[by_index]), out, index, p)
        rest = ~by_index
        if rest.any():
            ret = self._run(self._one_thread(), np.ascontiguousarray(targets[rest]),
                            np.ascontiguousarray(first_slot[rest]), out, None, p, False)
            self._check(ret, targets[rest], p, 0)
            self.one_thread.release()  # drained or far along: later reads start over
        return ("concealed", "")

    cdef int _check(self, int ret, targets, DecodeProgress *p, int64_t counted_from) except -1:
        if ret < 0:
            (self.one_thread if p.failed_in_one_thread else self.pipe).raise_error(ret, p)
        if p.targets_left:
            # Only the sequential path can run out of frames: it counted them.
            self._raise_out_of_range(int(targets[targets.shape[0] - p.targets_left]),
                                     p.frames_decoded - counted_from)
        return 0

    def _raise_out_of_range(self, int64_t frame, int64_t count):
        raise errors.FluxonFsFrameIndexError(
            f"{self.name}: frame index {frame} is out of range: the video has {count} frames")

    cdef Pipeline _one_thread(self):
        """The one-threaded pipeline of surveys and the tolerant reference."""
        if self.one_thread is None:
            self.one_thread = Pipeline(self.source, 1, self.name)
        return self.one_thread

    cdef bint _learn_cluster_damage(self, index, targets, DecodeProgress *p) except -1:
        """A strict indexed decode stopped at damage in cluster p.damage_cluster:
        find the packet with one thread, from the cluster's keyframe through
        the last packet fed, and add it to the index. False if no damage is
        found there (or from the start of the file)."""
        self.pipe.release()
        if self.one_thread is not None:
            self.one_thread.release()
        clusters = index.plan(targets)
        c = p.damage_cluster
        found = self._survey(index, False, int(clusters["seek_ts"][c]), p.damage_upto_dec, True)
        if not found:
            # The cluster may have continued a decode from an earlier one (no
            # seek), whose packets the damage can be among: look from the start.
            found = self._survey(index, True, 0, p.damage_upto_dec, True)
        p.decode_errors = p.corrupt_frames = 0
        p.fallback_reason = NULL
        return found

    def _raise_unconfirmed(self, why=None):
        """A strict decode stopped at damage that a one-threaded survey does not find."""
        cdef char line[512]
        self.pipe.last_error(line, sizeof(line))
        why = why or (f"decoding with {self.num_threads} threads met an error that a "
                      "one-threaded decode of the same packets does not")
        raise errors.FluxonFsDecodeError(
            f"{self.name}: {why} ({line.decode('utf-8', 'replace') or 'no message from FFmpeg'})")

    cdef int _raise_sequential_damage(self, index) except -1:
        """A strict sequential decode met damage with targets left: name it."""
        self.pipe.release()
        usable = index is not None and index.trusted
        self._survey(index if usable else None, True, 0, -1, True)
        if self.last_survey_damage is None:
            self._raise_unconfirmed()
        where, message = self.last_survey_damage
        raise errors.FluxonFsDamagedStreamError(
            f"{self.name}: the requested frames follow damaged data: {where}: {message} "
            "(without a frame index to seek with, every frame after it is numbered by the "
            "damage; on_damage='conceal' returns what a one-threaded decode shows)")

    def survey(self):
        """Under on_damage="conceal": decode the whole file once with one thread
        (if the index does not hold that survey yet), recording every output
        frame and every damaged packet in the index."""
        self._assert_open()
        index = self.index
        if index is None or index.decoded_pts is not None:
            return
        self._survey(index, True, 0, -1, False)

    cdef int _survey(self, index, bint from_start, int64_t seek_ts, int64_t upto_dec,
                     bint stop_at_damage) except -1:
        """Run survey_damage on the one-threaded pipeline; learn what it finds.
        Returns whether it found a damaged packet the index did not know."""
        cdef Survey s
        cdef DecodeProgress p
        cdef int ret
        cdef Pipeline pipe = self._one_thread()
        memset(&s, 0, sizeof(s))
        memset(&p, 0, sizeof(p))
        n_packets = index.pkt_pos.shape[0] if index is not None else 0
        # The index's lookups (one placeholder element each without an index).
        arrays = {name: np.ascontiguousarray(getattr(index, name) if index is not None
                                             else np.zeros(1), np.int64)
                  for name in ("pos_sorted", "pos_dec", "frame_pts", "frame_dec")}
        arrays["damaged"] = np.zeros(max(n_packets, 1), np.uint8)
        arrays["out_pts"] = np.zeros(2 * n_packets + 64, np.int64)
        cdef const int64_t[::1] pos_sorted = arrays["pos_sorted"]
        cdef const int64_t[::1] pos_dec = arrays["pos_dec"]
        cdef const int64_t[::1] frame_pts = arrays["frame_pts"]
        cdef const int64_t[::1] frame_dec = arrays["frame_dec"]
        cdef uint8_t[::1] damaged = arrays["damaged"]
        cdef int64_t[::1] out_pts = arrays["out_pts"]
        s.from_start = from_start
        s.seek_ts = seek_ts
        s.upto_dec = upto_dec
        s.stop_at_damage = stop_at_damage
        if index is not None:
            s.pos_sorted, s.pos_dec, s.n_packets = &pos_sorted[0], &pos_dec[0], n_packets
            s.frame_pts, s.frame_dec = &frame_pts[0], &frame_dec[0]
            s.n_frames = index.frame_count
            s.damaged = &damaged[0]
        s.out_pts = &out_pts[0]
        s.out_cap = out_pts.shape[0]
        pipe.release()
        self._prepare(pipe, index)
        pipe.open(&p)
        with nogil:
            pipe.clear_log()
            ret = survey_damage(pipe, &s, &p)
        try:
            self._raise_source_error(pipe, ret if ret < 0 else s.n_damaged, &p)
            if ret < 0:
                pipe.raise_error(ret, &p)
        finally:
            pipe.release()
        self.last_survey_damage = None
        if s.n_damaged:
            message = s.first_message.decode("utf-8", "replace").strip() or "no message"
            if index is not None and s.first_dec >= 0:
                where = damage.describe_packet(index, s.first_dec)
            else:
                where = f"the packet at byte {s.first_pos}"
            self.last_survey_damage = (where, message)
        if index is None:
            return 1 if s.n_damaged else 0
        if not stop_at_damage:
            if s.n_out > s.out_cap:
                raise errors.FluxonFsDecodeError(
                    f"{self.name}: the decoder output {s.n_out} frames for "
                    f"{n_packets} packets")
            index.decoded_pts = arrays["out_pts"][:s.n_out].copy()
        notes = {int(s.first_dec): self.last_survey_damage[1]} if s.first_dec >= 0 else {}
        learnt = damage.learn(index, arrays["damaged"][:n_packets], notes)
        if (learnt or not stop_at_damage) and self.index_learned is not None:
            self.index_learned(index)
        return 1 if learnt else 0

    cdef int _prepare(self, Pipeline pipe, index) except -1:
        """Set how pipe opens: for the indexed path (no probing, the recorded
        demuxer, inferred pts) with a trusted index, else as the CLI does."""
        if pipe.is_open() and pipe.genpts != (index is not None):
            pipe.release()  # opened for the other path
        if not pipe.is_open():
            pipe.wanted_stream = (self.index.stream_index if self.index is not None
                                  else self.stream_index)
            pipe.probe_streams = index is None or pipe.probe_for_guest
            pipe.input_format = NULL
            if index is not None:
                demuxer = index.format_name.split(",")[0].encode()
                pipe.input_format = av_find_input_format(demuxer)
            pipe.genpts = index is not None
        return 0

    cdef int _run(self, Pipeline pipe, targets, first_slot, out, index, DecodeProgress *p,
                  bint strict) except? -1:
        """Open pipe if needed, then run one path with the GIL released."""
        cdef const int64_t[::1] targets_view = targets
        cdef const int64_t[::1] slots_view = first_slot
        cdef uint8_t[:, :, :, ::1] out_view = out
        cdef int64_t ntargets = targets.shape[0]
        cdef int ret = 0
        cdef double t0
        cdef IndexedPlan plan
        cdef FrameSink sink
        self.source.pagecache()  # raises if the byte source is closed or not ours
        p.targets_left = ntargets
        p.strict = strict
        p.failed_in_one_thread = pipe is self.one_thread
        # The indexed path opens without probing the first packets (fewer bytes
        # and round trips) and reads packets with the pts the scan inferred;
        # the sequential reference opens and reads as the CLI does.
        if index is None and pipe.is_open() and not pipe.fresh:
            pipe.release()  # the sequential path starts from the first packet
        self._prepare(pipe, index)
        pipe.open(p)
        fx_sink_init(&sink, &self.converter, &out_view[0, 0, 0, 0], out.shape[1], out.shape[2],
                     out.shape[3])
        keep = None  # the arrays the plan points into, alive until the call returns
        if index is not None:
            if pipe.stream_index != index.stream_index:
                p.fallback_reason = "the decoder chose another stream than the index"
                return FX_FALLBACK
            # The one-threaded retry reads as a survey of each cluster does:
            # from its keyframe, every frame.
            retry = pipe is self.one_thread
            keep = make_plan(&plan, index, targets, first_slot, not retry, retry)
        with nogil:
            pipe.clear_log()
            t0 = now_ms()
            if index is None:
                ret = decode_sequential(pipe, &targets_view[0], &slots_view[0], ntargets,
                                        &sink, p)
            else:
                ret = decode_indexed(pipe, &plan, &sink, p)
            p.decode_ms += now_ms() - t0
        del keep
        self._raise_source_error(pipe, ret, p)
        return ret

    cdef int _raise_source_error(self, Pipeline pipe, int ret, DecodeProgress *p) except -1:
        """A byte source that failed under a decode is the answer, whatever the
        decoder made of the bytes it did not get."""
        cdef fx_cursor *cursor = pipe.cursor()
        if ret != 0 and cursor != NULL and cursor.error:
            pipe.raise_error(ret if ret < 0 else AVERROR(EIO), p)
        return 0

    cdef object _stats(self, DecodeProgress *p, str path, str fallback, tuple io_before,
                       dict cache_before):
        cache_after = self.source.stats()
        io_after = self.pipe.io_totals()
        return DecodeStats(
            path=path,
            fallback=fallback,
            decoder_seeks=p.seeks,
            container_open_ms=p.open_ms,
            decode_ms=p.decode_ms,
            range_reads=io_after[0] - io_before[0],
            seeks=io_after[1] - io_before[1],
            range_bytes=io_after[2] - io_before[2],
            page_hits=cache_after["page_hits"] - cache_before["page_hits"],
            page_misses=cache_after["page_misses"] - cache_before["page_misses"],
            first_frame_waits=(p.waits_at_first_frame if p.frames_converted
                               else cache_after["fetch_waits"]) - cache_before["fetch_waits"],
            bytes_fetched=cache_after["bytes_fetched"] - cache_before["bytes_fetched"],
            frames_decoded=p.frames_decoded,
            frames_converted=p.frames_converted,
            decode_errors=p.decode_errors,
        )


def decode_frames(ByteSource source, indices, height, width, num_threads=1, str name=None,
                  index=None, on_damage="error", stream_index=None):
    """Frames at indices from source, and the DecodeStats of the call.

    With a trusted FrameIndex the indexed path is used, else the sequential one.
    """
    with VideoDecoder(source, num_threads, name, on_damage, stream_index) as decoder:
        decoder.index = index
        return decoder.decode(indices, height, width)


def _version_text(unsigned v):
    return f"{v >> 16}.{(v >> 8) & 0xff}.{v & 0xff}"


def library_versions():
    """The libav* versions this extension runs against."""
    return {"libavutil": _version_text(avutil_version()),
            "libavcodec": _version_text(avcodec_version()),
            "libavformat": _version_text(avformat_version()),
            "libswscale": _version_text(swscale_version())}
