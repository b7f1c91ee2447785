"""Frames with their times, and the layouts and types a training loop takes them in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fluxon_video.errors import FluxonFsConfigError

LAYOUTS = ("NHWC", "NCHW")


@dataclass(frozen=True)
class FrameBatch:
    """Frames and when each is shown: ``data`` uint8 ``(N, H, W, 3)`` RGB,
    ``pts_s`` and ``duration_s`` float64 ``(N,)`` seconds on the reader's
    timeline (``timestamps_s()``); ``indices`` the frame indices read."""

    data: np.ndarray
    pts_s: np.ndarray
    duration_s: np.ndarray
    indices: np.ndarray

    def __len__(self) -> int:
        return int(self.data.shape[0])

    def to_torch(self, layout: str = "NHWC") -> Any:
        """``data`` as a torch uint8 tensor sharing its memory (NCHW: a permuted view)."""
        return as_torch(self.data, layout)

    def span_s(self) -> tuple[float, float]:
        """The time these frames cover: from the earliest one's pts to the end of
        the latest one's display (the span of a clip's audio)."""
        return covered_span(self.pts_s, self.duration_s)


def covered_span(pts_s: np.ndarray, duration_s: np.ndarray) -> tuple[float, float]:
    """(earliest pts, latest pts + duration) of frames; (0, 0) for none."""
    if pts_s.size == 0:
        return 0.0, 0.0
    return float(pts_s.min()), float((pts_s + duration_s).max())


def frame_durations(times: np.ndarray, end_s: float) -> np.ndarray:
    """How long each frame is shown: until the next one, the last until end_s."""
    return np.diff(np.append(times, end_s)) if times.size else times.copy()


def as_torch(frames: np.ndarray, layout: str = "NHWC") -> Any:
    """A zero-copy torch tensor of NHWC frames, in ``layout`` (NCHW is a view)."""
    if layout not in LAYOUTS:
        raise FluxonFsConfigError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    import torch

    tensor = torch.from_numpy(frames)
    return tensor.permute(0, 3, 1, 2) if layout == "NCHW" else tensor
