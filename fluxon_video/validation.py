"""Argument rules shared by every entry point (one definition each)."""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import numpy as np

from fluxon_video.errors import FluxonFsConfigError, FluxonFsFrameIndexError


def positive_int(name: str, value: Any) -> int:
    """value as an int if it is an integer (numpy's included, bool not) > 0."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise FluxonFsConfigError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def frame_indices(indices: Iterable[Any]) -> np.ndarray:
    """indices as a 1-D int64 array; non-integers raise TypeError, negatives
    FluxonFsFrameIndexError."""
    if isinstance(indices, (str, bytes)):
        raise TypeError("frame indices must be a sequence of ints, not a string")
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
        array = np.asarray(values, dtype=np.int64)
    if array.size and array.min() < 0:
        bad = int(array[array < 0][0])
        raise FluxonFsFrameIndexError(f"frame index {bad} is negative")
    return array
