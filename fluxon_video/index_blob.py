"""The byte layout of a frame index blob (FrameIndex.to_bytes): cheap to load.

A reader loads the index of every video it opens from the KV, so the layout
is made for loading: no archive to parse, little to inflate.

    prefix: b"FXIX", format version, CRC-32 of all that follows, length of
            the JSON head (uint32 each, little-endian)
    the JSON head, then each column's bytes, then each open extent's bytes,
    every part starting on a multiple of 8 bytes (columns are read in place)

The head holds the index's scalars and dicts (``meta``); per column its name,
dtype in memory, dtype stored, shape, coding, first values and deflated
length; per open extent its offset, length and deflated length.

An int64 column is stored in the narrowest signed dtype that holds its values
("raw") or, when that is narrower, the differences between consecutive values
along the last axis, the first values in the head ("delta": timestamps and
byte positions grow by small steps from wherever they start). Differences
wrap in int64 the way their cumulative sum unwraps, so any value
(AV_NOPTS_VALUE too) comes back exactly. Other dtypes are stored as they are.

A part is deflated (zlib) only where that shrinks it ``MIN_DEFLATE_RATIO``-fold
(steps that barely change, the flags): inflating costs some 3 ns per byte out,
more than fetching (~0.8 ns from a local Redis) and checking (~0.4 ns) the
bytes it would save. Packet sizes and positions and the container's header
(an MP4 moov, most of a long video's blob) only shrink 2-3 fold, and stay as
they are: deflating them too makes a 10-minute video's blob 344 KiB instead
of 884 but its load 5 ms instead of 2 (bench/index_load.py). The reader takes
either, so the ratio is the writer's choice, not part of the format.

``unpack`` checks the magic, the version, the CRC and every length: a damaged
or foreign blob raises (ValueError, zlib.error ...), never gives other columns.
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

import numpy as np

MAGIC = b"FXIX"
PREFIX = struct.Struct("<4sIII")
ALIGN = 8
NARROW = [np.dtype(t) for t in ("<i1", "<i2", "<i4", "<i8")]
MIN_DEFLATE_RATIO = 8
# The writer deflates every part to see: the parts worth it shrink as much at
# level 1, higher levels only slow it (a long video's moov: 7 ms, 30 at 6).
ZLIB_LEVEL = 1
# Deflate shrinks at most 1032-fold: a longer length claimed is damage (and
# would have the inflate allocate it up front).
MAX_DEFLATE_RATIO = 1032


def _padded(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _narrowest(values: np.ndarray) -> np.dtype:
    if values.size == 0:
        return NARROW[0]
    low, high = int(values.min()), int(values.max())
    return next(t for t in NARROW if np.iinfo(t).min <= low and high <= np.iinfo(t).max)


def _encode(values: np.ndarray) -> tuple[str, np.ndarray, list[int] | None]:
    """(coding, the array to store, the first values of a delta) for one column."""
    if values.dtype != np.int64 or values.shape[-1] == 0:
        return "raw", values.astype(_narrowest(values) if values.dtype == np.int64
                                    else values.dtype.newbyteorder("<")), None
    first = values[..., :1]
    delta = np.diff(values, prepend=first)  # starts at 0; wraps as cumsum unwraps
    raw_type, delta_type = _narrowest(values), _narrowest(delta)
    if delta_type.itemsize < raw_type.itemsize:
        return "delta", delta.astype(delta_type), first.ravel().tolist()
    return "raw", values.astype(raw_type), None


def _decode(stored: np.ndarray, coding: str, dtype: np.dtype,
            first: list[int] | None) -> np.ndarray:
    if coding == "delta":
        values = np.cumsum(stored, axis=-1, dtype=dtype)
        values += np.asarray(first, dtype).reshape(stored.shape[:-1] + (1,))
        return values
    if coding == "raw":
        return stored.astype(dtype)  # a copy: writable, native byte order
    raise ValueError(f"unknown coding {coding!r}")


def _deflated(data: bytes) -> tuple[bytes, int | None]:
    """(the part as stored, its deflated length or None: stored as it is)."""
    deflated = zlib.compress(data, ZLIB_LEVEL)
    if len(deflated) * MIN_DEFLATE_RATIO <= len(data):
        return deflated, len(deflated)
    return data, None


def pack(version: int, meta: dict[str, Any], columns: dict[str, np.ndarray],
         extents: list[tuple[int, bytes]]) -> bytes:
    """The blob of ``meta`` (JSON-able), ``columns`` (arrays) and ``extents``."""
    specs, places, parts = [], [], []
    for name, values in columns.items():
        coding, stored, first = _encode(np.ascontiguousarray(values))
        part, deflated = _deflated(stored.tobytes())
        specs.append([name, values.dtype.str, stored.dtype.str, stored.shape, coding, first,
                      deflated])
        parts.append(part)
    for off, data in extents:
        part, deflated = _deflated(data)
        places.append([off, len(data), deflated])
        parts.append(part)
    head = json.dumps({"meta": meta, "columns": specs, "extents": places}).encode()
    head = head.ljust(_padded(PREFIX.size + len(head)) - PREFIX.size)  # parts start aligned
    rest = b"".join([head, *(part.ljust(_padded(len(part)), b"\0") for part in parts)])
    return PREFIX.pack(MAGIC, version, zlib.crc32(rest), len(head)) + rest


def unpack(blob: bytes, version: int) -> tuple[dict[str, Any], dict[str, np.ndarray],
                                                list[tuple[int, bytes]]]:
    """(meta, columns, extents) from a blob of format ``version``; raises on any other."""
    magic, blob_version, crc, head_length = PREFIX.unpack_from(blob)
    view = memoryview(blob)
    if magic != MAGIC or blob_version != version:
        raise ValueError("not a frame index blob of this format version")
    if zlib.crc32(view[PREFIX.size:]) != crc:
        raise ValueError("the blob is damaged")
    at = PREFIX.size + head_length
    head = json.loads(bytes(view[PREFIX.size:at]))

    def take(length: int, deflated: int | None) -> memoryview | bytes:
        """The next part: ``length`` bytes, stored as they are or deflated."""
        nonlocal at
        stored = length if deflated is None else deflated
        if stored < 0 or at + stored > len(blob):
            raise ValueError("a part out of the blob")
        part, at = view[at:at + stored], at + _padded(stored)
        if deflated is None:
            return part
        if length > MAX_DEFLATE_RATIO * deflated:
            raise ValueError("inflated length out of reach")
        data = zlib.decompress(part, bufsize=max(length, 1))  # sized once, no regrowth
        if len(data) != length:
            raise ValueError("inflated length differs")
        return data

    columns = {}
    for name, dtype, stored_dtype, shape, coding, first, deflated in head["columns"]:
        stored_dtype = np.dtype(stored_dtype)
        data = take(int(np.prod(shape)) * stored_dtype.itemsize, deflated)
        stored = np.frombuffer(data, stored_dtype).reshape(shape)
        columns[name] = _decode(stored, coding, np.dtype(dtype), first)
    extents = [(int(off), bytes(take(length, deflated)))
               for off, length, deflated in head["extents"]]
    if at != len(blob):
        raise ValueError("the blob's length is not its parts'")
    return head["meta"], columns, extents
