# cython: language_level=3, boundscheck=False, wraparound=False
"""VideoDecoder: frames at indices, straight into a caller-owned NHWC buffer.

Frame i is the i-th frame the decoder outputs when the first video stream is
read from the start (presentation order). The decoder chooses the path (the
indexed one when it holds a trusted FrameIndex, see _paths), falls back to
the sequential reference on any disagreement, validates the request, raises
errors, and reports a DecodeStats record per call. Its pipeline (_pipeline)
lives as long as the decoder, so a later request ahead of where it stands
continues without seeking.

Life cycle: reset() drops the pipeline (the next decode reopens it);
close() releases everything for good, after which every call raises
FluxonFsClosedError. Both are safe to call twice.
"""
import os

import numpy as np

from libc.stdint cimport int64_t, uint8_t
from libc.string cimport memset

from fluxon_video._avio cimport ByteSource
from fluxon_video._convert cimport FrameSink, fx_converter, fx_converter_free, fx_sink_init
from fluxon_video._paths cimport (
    FX_FALLBACK, IndexedPlan, decode_indexed, decode_sequential, make_plan,
)
from fluxon_video._pipeline cimport Pipeline
from fluxon_video._progress cimport DecodeProgress, now_ms
from fluxon_video.libav.avcodec cimport avcodec_version
from fluxon_video.libav.avformat cimport av_find_input_format, avformat_version
from fluxon_video.libav.avutil cimport avutil_version
from fluxon_video.libav.swscale cimport swscale_version

from fluxon_video import errors
from fluxon_video.stats import DecodeStats
from fluxon_video.validation import (
    frame_indices, output_array, positive_int, resolve_frame_indices,
)


cdef class VideoDecoder:
    """One decoder over a ByteSource; a context manager."""
    cdef ByteSource source
    cdef Pipeline pipe
    cdef fx_converter converter
    cdef readonly str name
    cdef readonly int num_threads
    cdef readonly bint closed
    cdef int pid
    cdef public object index   # FrameIndex or None

    def __cinit__(self, ByteSource source, num_threads=1, str name=None):
        self.num_threads = positive_int("num_threads", num_threads)
        self.source = source
        self.name = name or source.name
        self.pipe = Pipeline(source, self.num_threads, self.name)
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

    def close(self):
        """Release every FFmpeg resource; later calls raise. Safe to call twice."""
        if self.closed:
            return
        self.closed = True
        if self.pid == os.getpid():  # a forked child leaves the parent's copy alone
            self.pipe.release()
            fx_converter_free(&self.converter)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def decode(self, indices, height, width, out=None):
        """Frames at indices as uint8 (N, height, width, 3) RGB, and this call's DecodeStats.

        Negative indices count from the end (they need the frame index's
        count). ``out``, if given, is filled in place and returned. Uses
        self.index when it is trusted, else (and on any disagreement with it)
        the sequential path.
        """
        self._assert_open()
        height = positive_int("height", height)
        width = positive_int("width", width)
        index = self.index
        requested = resolve_frame_indices(frame_indices(indices),
                                          index.frame_count if index is not None else None,
                                          self.name)
        shape = (requested.shape[0], height, width, 3)
        if out is None:
            out = np.empty(shape, dtype=np.uint8)
        else:
            out = output_array(out, shape, self.name)
        if requested.shape[0] == 0:
            return out, DecodeStats()
        # Decode each distinct frame once, into its first slot; copy duplicates after.
        targets, first_slot, inverse = np.unique(requested, return_index=True,
                                                 return_inverse=True)
        targets = np.ascontiguousarray(targets, dtype=np.int64)
        first_slot = np.ascontiguousarray(first_slot, dtype=np.int64)
        cache_before = self.source.stats()
        io_before = self.pipe.io_totals()
        cdef DecodeProgress p
        memset(&p, 0, sizeof(p))
        path, fallback = "sequential", ""
        cdef int64_t sequential_from = 0  # frames decoded before the sequential run began
        try:
            if index is not None and index.trusted:
                path = "indexed"
                ret = self._run(targets, first_slot, out, index, &p)
                if ret == FX_FALLBACK:
                    fallback = p.fallback_reason.decode()
                    index.untrust(f"decode disagreed with the index: {fallback}")
                    path = "sequential"
                    self.pipe.release()  # the sequential path starts from a fresh pipeline
                    p.frames_converted = 0
                    sequential_from = p.frames_decoded
                    ret = self._run(targets, first_slot, out, None, &p)
            else:
                if self.pipe.is_open() and not self.pipe.fresh:
                    self.pipe.release()
                ret = self._run(targets, first_slot, out, None, &p)
            if ret < 0:
                self.pipe.raise_error(ret, &p)
            if p.targets_left:
                # Only the sequential path can run out of frames: it counted them.
                self._raise_out_of_range(int(targets[targets.shape[0] - p.targets_left]),
                                         p.frames_decoded - sequential_from)
        except BaseException:
            self.pipe.release()  # a failed pipeline is not reusable
            raise
        duplicates = np.nonzero(first_slot[inverse] != np.arange(requested.shape[0]))[0]
        if duplicates.size:
            out[duplicates] = out[first_slot[inverse[duplicates]]]
        return out, self._stats(&p, path, fallback, io_before, cache_before)

    def _raise_out_of_range(self, int64_t frame, int64_t count):
        raise errors.FluxonFsFrameIndexError(
            f"{self.name}: frame index {frame} is out of range: the video has {count} frames")

    cdef int _run(self, targets, first_slot, out, index, DecodeProgress *p) except? -1:
        """Open if needed, then run one path with the GIL released."""
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
        # The indexed path opens without probing the first packets (fewer bytes
        # and round trips) and reads packets with the pts the scan inferred;
        # the sequential reference opens and reads as the CLI does.
        if self.pipe.is_open() and self.pipe.genpts != (index is not None):
            self.pipe.release()  # opened for the other path
        if not self.pipe.is_open():
            self.pipe.probe_streams = index is None
            self.pipe.input_format = NULL
            if index is not None:
                demuxer = index.format_name.split(",")[0].encode()
                self.pipe.input_format = av_find_input_format(demuxer)
            self.pipe.genpts = index is not None
        self.pipe.open(p)
        fx_sink_init(&sink, &self.converter, &out_view[0, 0, 0, 0], out.shape[1], out.shape[2])
        keep = None  # the arrays the plan points into, alive until the call returns
        if index is not None:
            if self.pipe.stream_index != index.stream_index:
                p.fallback_reason = "the decoder chose another stream than the index"
                return FX_FALLBACK
            keep = make_plan(&plan, index, targets, first_slot, True)
        with nogil:
            self.pipe.clear_log()
            t0 = now_ms()
            if index is None:
                ret = decode_sequential(self.pipe, &targets_view[0], &slots_view[0], ntargets,
                                        &sink, p)
            else:
                ret = decode_indexed(self.pipe, &plan, &sink, p)
            p.decode_ms += now_ms() - t0
        del keep
        return ret

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
                  index=None):
    """Frames at indices from source, and the DecodeStats of the call.

    With a trusted FrameIndex the indexed path is used, else the sequential one.
    """
    with VideoDecoder(source, num_threads, name) as decoder:
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
