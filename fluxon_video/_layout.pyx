# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Frames as a model takes them: uint8 NHWC rows to float32 NCHW planes in
one pass, without the GIL.

The values come from a 256-entry table the caller builds with the division
it promises (``torch.arange(256, dtype=uint8) / 255.0`` for LeRobot's
``frames / 255``), so each output is bit-identical to that division; the
pick of an item's frames, the transpose and the conversion, three passes
and two temporaries in numpy and torch, become one read of the rows and one
write of the planes.
"""
from libc.stdint cimport int64_t, uint8_t


def frames_to_planes(const uint8_t[:, :, :, ::1] frames, const float[::1] table,
                     float[:, :, :, ::1] out, const int64_t[::1] rows=None):
    """out[k, c, y, x] = table[frames[rows[k], y, x, c]] (rows None: k itself);
    frames (N, H, W, C), out (len(rows), C, H, W)."""
    cdef Py_ssize_t n_frames = frames.shape[0], height = frames.shape[1]
    cdef Py_ssize_t width = frames.shape[2], channels = frames.shape[3]
    cdef Py_ssize_t count = n_frames if rows is None else rows.shape[0]
    if table.shape[0] != 256:
        raise ValueError(f"the table has {table.shape[0]} entries, not 256")
    if (out.shape[0], out.shape[1], out.shape[2], out.shape[3]) != (
            count, channels, height, width):
        raise ValueError(f"out is {tuple(out.shape)[:4]}, the frames need "
                         f"{(count, channels, height, width)}")
    cdef Py_ssize_t k, y, x, c, source, plane = height * width
    if rows is not None:
        for k in range(count):
            if not 0 <= rows[k] < n_frames:
                raise IndexError(f"rows[{k}] = {rows[k]} is not one of the {n_frames} frames")
    cdef const uint8_t *row
    cdef float *dst
    with nogil:
        for k in range(count):
            source = k if rows is None else rows[k]
            for y in range(height):
                row = &frames[source, y, 0, 0]
                dst = &out[k, 0, y, 0]
                for x in range(width):
                    for c in range(channels):
                        dst[c * plane + x] = table[row[x * channels + c]]
