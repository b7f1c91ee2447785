# cython: language_level=3
"""The decode floor, for the benchmark: what libavcodec alone needs for a clip.

The same keyframe seeks and forward decoding as the indexed path, with every
frame decoded (no non-reference skipping) and nothing converted. No reader
that decodes exactly can be faster with the same threads.
"""
import numpy as np

from libc.string cimport memset

from fluxon_video._avio cimport ByteSource
from fluxon_video._convert cimport FrameSink, fx_sink_init
from fluxon_video._decode_paths cimport FX_FALLBACK, IndexedPlan, decode_indexed, make_plan
from fluxon_video._pipeline cimport Pipeline
from fluxon_video._progress cimport DecodeProgress, now_ms

from fluxon_video import errors
from fluxon_video._demux import scan_packets
from fluxon_video.validation import frame_indices, positive_int, resolve_frame_indices


def decode_floor(ByteSource source, indices, num_threads=1, str name=None, index=None):
    """{"decode_ms", "frames_decoded", "decoder_seeks"} for decoding the frames at indices;
    ``index``: the file's packet scan (``scan_packets``), made here when not given."""
    name = name or source.name
    if index is None:
        index = scan_packets(source, name)
    if not index.trusted:
        raise errors.FluxonFsDecodeError(f"{name}: the decode floor needs a trusted index "
                                         f"({index.reason})")
    targets = np.ascontiguousarray(
        np.unique(resolve_frame_indices(frame_indices(indices), index.frame_count, name)),
        dtype=np.int64)
    cdef DecodeProgress p
    cdef IndexedPlan plan
    cdef FrameSink sink
    cdef int ret = 0
    cdef double t0
    memset(&p, 0, sizeof(p))
    if targets.size == 0:
        return {"decode_ms": 0.0, "frames_decoded": 0, "decoder_seeks": 0}
    cdef Pipeline pipe = Pipeline(source, positive_int("num_threads", num_threads), name)
    pipe.genpts = True  # frames are identified by the pts the scan inferred
    try:
        pipe.open(&p)
        keep = make_plan(&plan, index, targets, np.zeros_like(targets), False)
        fx_sink_init(&sink, NULL, NULL, 0, 0, 0)  # decode only
        p.targets_left = targets.shape[0]
        with nogil:
            t0 = now_ms()
            ret = decode_indexed(pipe, &plan, &sink, &p)
            p.decode_ms = now_ms() - t0
        del keep
        if ret == FX_FALLBACK:
            raise errors.FluxonFsDecodeError(f"{name}: {p.fallback_reason.decode()}")
        if ret < 0:
            pipe.raise_error(ret, &p)
    finally:
        pipe.release()
    return {"decode_ms": p.decode_ms, "frames_decoded": p.frames_decoded,
            "decoder_seeks": p.seeks}
