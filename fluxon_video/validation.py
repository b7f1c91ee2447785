"""Argument rules shared by every entry point (one definition each)."""

from __future__ import annotations

import math
import numbers
import operator
import os
from collections.abc import Iterable
from typing import Any, Literal, Union

import numpy as np

from fluxon_video.errors import FluxonFsConfigError, FluxonFsFrameIndexError


def positive_int(name: str, value: Any) -> int:
    """value as an int if it is an integer (numpy's included, bool not) > 0."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise FluxonFsConfigError(f"{name} must be a positive int, got {value!r}")
    return int(value)


# FFmpeg's largest image (av_image_check_size): (w + 128) * (h + 128) < INT_MAX / 8.
MAX_IMAGE_AREA = (2**31 - 1) // 8


def check_output_size(height: Any, width: Any) -> tuple[int, int]:
    """(height, width) of an output frame: positive ints FFmpeg can make an image of."""
    height, width = positive_int("height", height), positive_int("width", width)
    if (height + 128) * (width + 128) >= MAX_IMAGE_AREA:
        raise FluxonFsConfigError(
            f"output size {height}x{width} is larger than FFmpeg's largest image "
            f"((height + 128) x (width + 128) under {MAX_IMAGE_AREA:,} pixels)")
    return height, width


# A num_threads= argument: a positive int, or "auto" (see thread_count).
Threads = Union[int, Literal["auto"]]
# FFmpeg's own cap on the threads it picks for thread_count 0 ("auto").
MAX_AUTO_THREADS = 16


def thread_count(value: Any) -> int:
    """A ``num_threads=`` argument: a positive int, or "auto" for one thread per core
    this process may run on (its CPU affinity; at most MAX_AUTO_THREADS), what FFmpeg's
    ``thread_count = 0`` picks. 0 and negatives are refused (the contract's rule)."""
    if not isinstance(value, str):
        return positive_int("num_threads", value)
    if value != "auto":
        raise FluxonFsConfigError(f'num_threads must be a positive int or "auto", got {value!r}')
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return max(1, min(cores or os.cpu_count() or 1, MAX_AUTO_THREADS))


def stream_choice(value: Any) -> int | None:
    """A ``stream_index=`` argument: None (the default rule's stream) or an int >= 0."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 0:
        raise FluxonFsConfigError(f"stream_index must be None or an int >= 0, got {value!r}")
    return int(value)


def time_tolerance(value: Any) -> float:
    """A ``tolerance_s=`` argument (reads by time): a finite number of seconds >= 0.
    The one check of it: the time rule (metadata.indices_at_times) and what
    stores one for later (a read request, the dataset) call this."""
    if (isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real)
            or not 0 <= value < math.inf):
        raise FluxonFsConfigError(
            f"tolerance_s must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def physical_memory_bytes() -> int:
    """This machine's memory (0 where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def output_fits(name: str, what: str, nbytes: int) -> None:
    """Refuse, before anything is allocated for it, an output larger than this
    machine's memory: a huge fps, time span or index list would otherwise get a
    process killed by the kernel, not an exception."""
    limit = physical_memory_bytes()
    if limit and nbytes > limit:
        raise FluxonFsConfigError(
            f"{name}: {what} would take {nbytes / 2**30:,.1f} GiB, more than this machine's "
            f"{limit / 2**30:,.1f} GiB of memory")


def frame_indices(indices: Iterable[Any]) -> np.ndarray:
    """indices as a 1-D int64 array (negatives kept); non-integers raise TypeError."""
    if isinstance(indices, (str, bytes)):
        raise TypeError("frame indices must be a sequence of ints, not a string")
    if isinstance(indices, (int, np.integer)) and not isinstance(indices, bool):
        raise TypeError(f"frame indices must be a sequence of ints, got the int {indices}: "
                        f"read [{indices}] (or reader[{indices}] for one frame)")
    if isinstance(indices, np.ndarray) and indices.dtype.kind in "iu":
        array = indices.astype(np.int64, copy=False).reshape(-1)
    else:
        values = []
        for position, value in enumerate(indices):
            if isinstance(value, (bool, np.bool_)):
                raise TypeError(f"frame index at position {position} is a bool, not an int")
            try:
                values.append(operator.index(value))
            except TypeError:
                raise TypeError(f"frame index at position {position} is {type(value).__name__}, "
                                "not an int") from None
        try:
            array = np.asarray(values, dtype=np.int64)
        except OverflowError:
            big = next(v for v in values if not -2**63 <= v < 2**63)
            raise FluxonFsFrameIndexError(f"frame index {big} is out of range") from None
    return array


def times_in_seconds(times: Any) -> tuple[float, ...]:
    """Times (frames by time) as a tuple of floats, a float32's value kept
    exactly; a string or a non-number raises TypeError. Whether each names a
    frame is the time rule's to say (metadata.indices_at_times)."""
    if isinstance(times, (str, bytes)) or np.ndim(times) == 0:
        raise TypeError(f"times must be a sequence of seconds, got {type(times).__name__}")
    try:
        array = np.asarray(times)
        if array.dtype.kind not in "iuf":
            raise TypeError
        return tuple(float(t) for t in array.astype(np.float64).reshape(-1))
    except (TypeError, ValueError):
        raise TypeError(f"times must be a sequence of seconds (numbers), got {times!r}") from None


def resolve_frame_indices(array: np.ndarray, num_frames: int | None, name: str) -> np.ndarray:
    """Negative indices counted from the end (Python's rule); out of range raises.

    num_frames None (unknown): negatives raise, the rest pass unchecked.
    """
    if not array.size:
        return array
    if num_frames is None:
        if array.min() < 0:
            bad = int(array[array < 0][0])
            raise FluxonFsFrameIndexError(
                f"{name}: frame index {bad} is negative, and the frame count is unknown "
                "(no frame index)")
        return array
    outside = (array < -num_frames) | (array >= num_frames)
    if outside.any():
        bad = int(array[outside][0])
        raise FluxonFsFrameIndexError(
            f"{name}: frame index {bad} is out of range: the video has {num_frames} frames")
    return np.where(array < 0, array + num_frames, array)


def output_array(out: Any, shape: tuple[int, ...], name: str) -> np.ndarray:
    """out if it can take frames of this shape in place, else ValueError."""
    if not isinstance(out, np.ndarray):
        raise ValueError(f"{name}: out must be a numpy array, got {type(out).__name__}")
    if out.dtype != np.uint8 or out.shape != shape:
        raise ValueError(f"{name}: out must be uint8 with shape {shape}, got {out.dtype} "
                         f"{out.shape}")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(f"{name}: out must be a writeable C-contiguous array")
    return out
