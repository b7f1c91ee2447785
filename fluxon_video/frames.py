"""Frames with their times, and the layouts and types a training loop takes them in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fluxon_video.errors import FluxonFsConfigError
from fluxon_video.renamed import add_renamed_attributes

LAYOUTS = ("NHWC", "NCHW")
DEFAULT_LAYOUT = "NHWC"


@dataclass(frozen=True)
class Frame:
    """One frame and when it is shown: ``data`` uint8 ``(H, W, 3)`` RGB,
    ``pts_seconds`` and ``duration_seconds`` on the reader's timeline,
    ``index`` its frame index (torchcodec's Frame, with numpy data)."""

    data: np.ndarray
    pts_seconds: float
    duration_seconds: float
    index: int

    def __repr__(self) -> str:
        return (f"Frame(data={shape_of(self.data)}, index={self.index}, "
                f"pts_seconds={self.pts_seconds:.6g})")


@dataclass(frozen=True)
class FrameBatch:
    """Frames and when each is shown: ``data`` uint8 ``(N, H, W, 3)`` RGB,
    ``pts_seconds`` and ``duration_seconds`` float64 ``(N,)`` seconds on the
    reader's timeline (``timestamps_s()``); ``indices`` the frame indices read.
    (``pts_s`` and ``duration_s``: the old names, deprecated.)"""

    data: np.ndarray
    pts_seconds: np.ndarray
    duration_seconds: np.ndarray
    indices: np.ndarray

    def __len__(self) -> int:
        return int(self.data.shape[0])

    def __getitem__(self, key: int | slice) -> Frame | FrameBatch:
        """``batch[k]``: the k-th frame (negative from the end) as a Frame;
        ``batch[a:b]``: those frames as a FrameBatch."""
        if isinstance(key, slice):
            return FrameBatch(self.data[key], self.pts_seconds[key], self.duration_seconds[key],
                              self.indices[key])
        k = range(len(self))[key]  # an IndexError past either end, as a list's
        return Frame(self.data[k], float(self.pts_seconds[k]), float(self.duration_seconds[k]),
                     int(self.indices[k]))

    def to_torch(self, layout: str = "NHWC") -> Any:
        """``data`` as a torch uint8 tensor sharing its memory (NCHW: a permuted view)."""
        return as_torch(self.data, layout)

    def span_s(self) -> tuple[float, float]:
        """The time these frames cover: from the earliest one's pts to the end of
        the latest one's display (the span of a clip's audio)."""
        return covered_span(self.pts_seconds, self.duration_seconds)

    def __repr__(self) -> str:
        # Shapes and dtypes, not the arrays (a clip's repr was kilobytes of pixels).
        start, end = self.span_s()
        return (f"FrameBatch(data={shape_of(self.data)}, indices={list_of(self.indices)}, "
                f"span_s=({start:.6g}, {end:.6g}))")


add_renamed_attributes(FrameBatch, {"pts_s": "pts_seconds", "duration_s": "duration_seconds"})


def shape_of(array: Any) -> str:
    """An array as its dtype and shape, e.g. ``uint8(16, 224, 224, 3)``; anything else
    by its type's name and shape when it has one (a torch tensor)."""
    shape = getattr(array, "shape", None)
    if shape is None:
        return type(array).__name__
    dims = ", ".join(str(int(d)) for d in shape)
    dtype = str(getattr(array, "dtype", type(array).__name__)).removeprefix("torch.")
    return f"{dtype}({dims}{',' if len(shape) == 1 else ''})"


def list_of(values: Any, keep: int = 6) -> str:
    """A 1-D array's values, the middle elided when there are more than ``keep``."""
    items = [str(v) for v in np.asarray(values).ravel().tolist()]
    if len(items) > keep:
        items = [*items[:keep // 2], "...", *items[-(keep // 2):]]
    return "[" + ", ".join(items) + "]"


def covered_span(pts_s: np.ndarray, duration_s: np.ndarray) -> tuple[float, float]:
    """(earliest pts, latest pts + duration) of frames; (0, 0) for none."""
    if pts_s.size == 0:
        return 0.0, 0.0
    return float(pts_s.min()), float((pts_s + duration_s).max())


def frame_durations(times: np.ndarray, end_s: float) -> np.ndarray:
    """How long each frame is shown: until the next one, the last until end_s."""
    return np.diff(np.append(times, end_s)) if times.size else times.copy()


def check_layout(layout: object) -> str:
    if layout not in LAYOUTS:
        raise FluxonFsConfigError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    return str(layout)


def as_torch(frames: np.ndarray, layout: str = "NHWC") -> Any:
    """A zero-copy torch tensor of NHWC frames, in ``layout`` (NCHW is a view)."""
    check_layout(layout)
    import torch

    tensor = torch.from_numpy(frames)
    return tensor.permute(0, 3, 1, 2) if layout == "NCHW" else tensor
