"""The threads group: 1080p H.264 and HEVC (made once under <data>/threads), every
contender reading the same seeded clips (16 frames, 2 apart, 224x224) through one handle
per pass at 1, 2 and auto decoder threads; passes interleaved (every setting and
contender in turn, --repeat times), in this process as bench/threads.py ran them."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from cases import Case
from dataset import HEVC, X264, VideoSpec
from harness import Pass, error_text, failed_pass, header, machine, say, versions

H = W = 224
CLIP, STRIDE = 16, 2
VIDEOS = [VideoSpec("h264_1080p_gop60.mp4", 1920, 1080, 20, 60, X264, faststart=True),
          VideoSpec("hevc_1080p_gop60.mp4", 1920, 1080, 10, 60, HEVC, faststart=True)]


def threads_pass(row: dict, path: Path, clips: list[list[int]], ref: Any) -> dict:
    """One pass: the contender's handle on the file at ``row["threads"]`` (0: auto), every
    clip read in turn (an item each), frames checked. ``open_ms`` holds the open and the
    close: the pass is timed from open to close, as bench/threads.py timed it."""
    from contenders import open_handle
    from frames import CheckResult

    one = Pass(row, CheckResult(exact_required=row["contender"] == "fluxon"))
    t0 = time.perf_counter()
    try:
        handle = open_handle(row["contender"], path, H, W, row["threads"])
    except Exception as exc:  # noqa: BLE001 - a failing contender is a finding
        return failed_pass(row, error_text(exc))
    opened = time.perf_counter() - t0
    try:
        for clip in clips:
            frames = one.time(row["video"], lambda clip=clip: handle.read(clip))
            if frames is None:
                break
            assert one.check is not None
            one.check.add(frames, clip, ref)
    finally:
        t0 = time.perf_counter()
        handle.close()
        one.extra["open_ms"] = (opened + time.perf_counter() - t0) * 1e3
    return one.result({})


class ThreadsGroup:
    """The threads suite's cases over its videos."""

    def __init__(self, cases: list[Case], settings: dict[str, Any], data: Path) -> None:
        self.cases, self.s, self.data = cases, settings, data
        self.videos: list[Any] = []
        self.passes: list[dict] = []

    def run(self, argv: list[str]) -> dict:
        import numpy as np

        from dataset import prepare, sample_clips
        from frames import cli_reference, needed

        t_start = time.perf_counter()
        wanted = str(self.s["thread_videos"]).split(",")
        specs = [v for v in VIDEOS if v.name.split("_")[0] in wanted]
        settings = list(dict.fromkeys(c.threads for c in self.cases))
        for video in prepare(specs, self.data / "threads"):
            self.videos.append(video)
            clips = sample_clips(video.frames, self.s["clips"], CLIP, STRIDE,
                                 np.random.default_rng(self.s["seed"]))
            say(f"{video.name}: reference frames (the ffmpeg CLI)")
            ref = cli_reference(video.path, H, W, needed(clips))
            for rep in range(self.s["repeat"]):
                for threads in settings:
                    for case in (c for c in self.cases if c.threads == threads):
                        say(f"{video.name}: {case.label()} (pass {rep + 1})")
                        row = {"contender": case.family, "threads": threads,
                               "video": video.name}
                        self.passes.append({**threads_pass(row, video.path, clips, ref),
                                            "round": rep})
        return {**header("matrix.py", argv, time.perf_counter() - t_start,
                         SimpleNamespace(**self.s)),
                "conditions": {"machine": machine(), "versions": versions()},
                "videos": [v.facts() for v in self.videos], "passes": self.passes,
                "notes": [], "skipped": {}}
