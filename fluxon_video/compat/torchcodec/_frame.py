"""torchcodec's frame and sample containers: ``Frame``, ``FrameBatch``, ``AudioSamples``.

The same fields, checks, iteration, indexing and repr as torchcodec 0.13 to
0.17's (``torchcodec._frame``): code that builds or unpacks them runs unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from torch import Tensor


def _frame_repr(self: Any) -> str:
    """The fields, with the data's shape instead of its values."""
    lines = [f"{type(self).__name__}:"]
    for field in dataclasses.fields(self):
        value = getattr(self, field.name)
        name = "data (shape)" if field.name == "data" else field.name
        lines.append(f"  {name}: {value.shape if field.name == 'data' else value}")
    return "\n".join(lines) + "\n"


def _fields(self: Any) -> Iterator[Any]:
    for field in dataclasses.fields(self):
        yield getattr(self, field.name)


@dataclass
class Frame(Iterable):
    """One video frame: ``data`` (C, H, W) or (H, W, C) uint8, its pts and
    duration in seconds (floats). Unpacks as ``data, pts, duration = frame``."""

    data: Tensor
    pts_seconds: float
    duration_seconds: float

    def __post_init__(self) -> None:
        if self.data.ndim != 3:
            raise ValueError(f"data must be 3-dimensional, got {self.data.shape = }")
        self.pts_seconds = float(self.pts_seconds)
        self.duration_seconds = float(self.duration_seconds)

    __iter__ = _fields
    __repr__ = _frame_repr


@dataclass
class FrameBatch(Iterable):
    """Frames: ``data`` uint8 (N, C, H, W) or (N, H, W, C) (a sampler's clips:
    5-D), ``pts_seconds`` and ``duration_seconds`` float64 tensors of the
    leading dimensions. Indexing gives a FrameBatch; iterating, one per row."""

    data: Tensor
    pts_seconds: Tensor
    duration_seconds: Tensor

    def __post_init__(self) -> None:
        if self.data.ndim < 3:
            raise ValueError(f"data must be at least 3-dimensional, got {self.data.shape = }")
        leading = self.data.shape[:-3]
        if not leading == self.pts_seconds.shape == self.duration_seconds.shape:
            raise ValueError(
                "Tried to create a FrameBatch but the leading dimensions of the inputs do not "
                f"match. Got {self.data.shape = } so we expected the shape of pts_seconds and "
                f"duration_seconds to be {leading = }, but got {self.pts_seconds.shape = } "
                f"and {self.duration_seconds.shape = }.")

    def __iter__(self) -> Iterator[FrameBatch]:
        for data, pts, duration in zip(self.data, self.pts_seconds, self.duration_seconds):
            yield FrameBatch(data=data, pts_seconds=pts, duration_seconds=duration)

    def __getitem__(self, key: Any) -> FrameBatch:
        return FrameBatch(data=self.data[key], pts_seconds=self.pts_seconds[key],
                          duration_seconds=self.duration_seconds[key])

    def __len__(self) -> int:
        return len(self.data)

    __repr__ = _frame_repr


@dataclass
class AudioSamples(Iterable):
    """Audio: ``data`` float32 (num_channels, num_samples) in [-1, 1], the pts
    of its first sample and its duration in seconds, its sample rate."""

    data: Tensor
    pts_seconds: float
    duration_seconds: float
    sample_rate: int

    def __post_init__(self) -> None:
        if self.data.ndim != 2:
            raise ValueError(f"data must be 2-dimensional, got {self.data.shape = }")
        self.pts_seconds = float(self.pts_seconds)
        self.sample_rate = int(self.sample_rate)

    __iter__ = _fields
    __repr__ = _frame_repr
