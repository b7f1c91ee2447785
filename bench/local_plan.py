"""What the local benchmark reads: its videos, the clips of each, the items every child
reads per workload, and their reference frames."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from dataset import DATASET, Video, VideoSpec, prepare, sample_clips
from frames import count_note, needed, references

CLIP_LENGTH, CLIP_STRIDE = 16, 4
TRAIN_SIZE = 224
QUICK_SCALE = 0.25  # --quick: videos this much shorter

WORKLOADS = {
    "clips224": f"random {CLIP_LENGTH}-frame clips, stride {CLIP_STRIDE}, "
                f"{TRAIN_SIZE}x{TRAIN_SIZE}",
    "clips-native": f"random {CLIP_LENGTH}-frame clips, stride {CLIP_STRIDE}, native size",
    "sequential224": f"full sequential decode, {TRAIN_SIZE}x{TRAIN_SIZE}",
    "batched": f"clips of the long video, {TRAIN_SIZE}x{TRAIN_SIZE}: "
               "read_many_numpy_with_stats vs one by one",
}


class LocalPlan:
    """The videos (made once), the seeded clips of each, what a child reads per workload."""

    def __init__(self, args: argparse.Namespace, notes: list[str]) -> None:
        self.args, self.notes = args, notes
        self.specs = [s.scaled(QUICK_SCALE) for s in DATASET] if args.quick else list(DATASET)
        self.video_dir = args.data / ("quick-videos" if args.quick else "videos")
        self.work = args.data / "work"
        self.videos: dict[str, Video] = {}
        self.clips: dict[str, list[list[int]]] = {}

    def make_video(self, spec: VideoSpec) -> None:
        video = prepare([spec], self.video_dir)[0]
        self.videos[video.name] = video
        if spec.role == "clips":
            rng = np.random.default_rng([self.args.seed, len(self.clips)])
            self.clips[video.name] = sample_clips(video.frames, self.args.clips, CLIP_LENGTH,
                                                  CLIP_STRIDE, rng)
        else:
            rng = np.random.default_rng([self.args.seed, 1000])
            self.clips[video.name] = sample_clips(video.frames, self.args.batch_clips,
                                                  CLIP_LENGTH, CLIP_STRIDE, rng)

    def clip_videos(self) -> list[Video]:
        return [v for v in self.videos.values() if v.spec.role == "clips"]

    def long_video(self) -> Video:
        return next(v for v in self.videos.values() if v.spec.role == "batched")

    def items(self, workload: str) -> list[dict]:
        """What a child reads for ``workload``: videos, output size, clips, reference file."""
        if workload == "batched":
            videos = [self.long_video()]
        elif workload == "sweep":
            videos = self.clip_videos()[:2]
        else:
            videos = self.clip_videos()
        out = []
        for video in videos:
            native = workload == "clips-native"
            height, width = ((video.spec.height, video.spec.width) if native
                             else (TRAIN_SIZE, TRAIN_SIZE))
            clips = ([list(range(video.frames))] if workload == "sequential224"
                     else self.clips[video.name])
            out.append({"workload": "clips224" if workload == "sweep" else workload,
                        "video": video.name, "path": str(video.path), "relpath": video.name,
                        "height": height, "width": width, "native": native, "clips": clips,
                        "ref": str(self.ref_path(video, height, width))})
        return out

    def ref_path(self, video: Video, height: int, width: int) -> Path:
        return self.work / f"ref-{video.name}-{height}x{width}.npz"

    def make_references(self) -> None:
        wanted: dict[tuple[str, int, int], set[int]] = {}
        for workload in ("clips224", "clips-native", "sequential224", "batched"):
            for item in self.items(workload):
                key = (item["video"], item["height"], item["width"])
                wanted.setdefault(key, set()).update(needed(item["clips"]))
        refs = references({key: (self.videos[key[0]].path, key[1], key[2], indices)
                           for key, indices in wanted.items()})
        for (name, height, width), ref in refs.items():
            video = self.videos[name]
            self.notes += filter(None, [count_note(name, video.frames, ref)])
            ref.save(self.ref_path(video, height, width))

    def ideal_bytes(self) -> dict[str, dict[str, int]]:
        """Per clip video: bytes of the GOP spans the clips touch, and of the container."""
        return {v.name: {"gop_span_bytes": v.span_bytes(self.clips[v.name]),
                         "container_bytes": v.container_bytes()}
                for v in self.videos.values()}
