"""One pass of the remote benchmark: a row reading a list of items, and what it found."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from frames import CheckResult, Reference

T = TypeVar("T")
KEPT = 5  # failures kept by name; the rest are counted


def error_text(exc: BaseException, limit: int = 200) -> str:
    """An exception in one line: its type and the first line of its message."""
    text = str(exc).splitlines()[0][:limit] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"


def metadata_error(video: dict, frames: int, fps: float, duration: float) -> str:
    """'' when frame count, fps and duration are right (fps within 1%, duration within 2 frames)."""
    want_frames, want_fps = video["frames"], video["fps"]
    if frames != want_frames:
        return f"{video['name']}: {frames} frames, the ffmpeg CLI decodes {want_frames}"
    if abs(fps - want_fps) > 0.01 * want_fps:
        return f"{video['name']}: {fps:.3f} fps, expected {want_fps}"
    if abs(duration - want_frames / want_fps) > 2 / want_fps:
        return f"{video['name']}: duration {duration:.3f} s, expected {want_frames / want_fps:.3f}"
    return ""


@dataclass
class Pass:
    """Every item's time and video, the frame check (None: metadata only), the failures."""

    row: dict
    check: CheckResult | None
    extra: dict = field(default_factory=dict)
    item_ms: list[float] = field(default_factory=list)
    item_videos: list[str] = field(default_factory=list)
    flagged: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    metadata_wrong: list[str] = field(default_factory=list)

    def time(self, video: str, read: Callable[[], T]) -> T | None:
        """``read()``, timed as one item; None when it raised (the video is flagged)."""
        try:
            t0 = time.perf_counter()
            out = read()
        except Exception as exc:  # noqa: BLE001 - a failing read is a finding, not a crash
            self.errors.append(f"{video}: {error_text(exc)}")
            self.flagged.append(video)
            return None
        self.item_ms.append((time.perf_counter() - t0) * 1e3)
        self.item_videos.append(video)
        return out

    def check_item(self, video: str, clips: Sequence[Sequence[int]],
                   outs: Sequence[np.ndarray], ref: Reference) -> None:
        """Check one item's clips into the pass's check; flag the video if they fail."""
        assert self.check is not None
        item = CheckResult(exact_required=self.check.exact_required)
        for clip, frames in zip(clips, outs):
            item.add(frames, clip, ref)
        self.check.absorb(item, prefix=f"{video}: ")
        if not item.ok:
            self.flagged.append(video)

    def check_metadata(self, video: dict, frames: int, fps: float, duration: float) -> None:
        wrong = metadata_error(video, frames, fps, duration)
        if wrong:
            self.metadata_wrong.append(wrong)

    def result(self, server: dict) -> dict[str, Any]:
        out = {"row": self.row, "item_ms": self.item_ms, "item_videos": self.item_videos,
               "flagged_videos": sorted(set(self.flagged)), "server": server,
               "check": self.check.as_dict() if self.check is not None else None,
               "errors": self.errors[:KEPT], "error_count": len(self.errors),
               "extra": self.extra}
        if self.check is None:
            out.update(metadata_wrong=self.metadata_wrong[:KEPT],
                       metadata_wrong_count=len(self.metadata_wrong))
        return out


def failed_pass(row: dict, fatal: str) -> dict[str, Any]:
    """A pass whose process died before it answered."""
    return {**Pass(row, None, errors=[fatal]).result({}), "fatal": fatal}
