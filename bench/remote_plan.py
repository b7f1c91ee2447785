"""What the remote benchmark reads: its videos, the items of every round, their
reference frames, and the bytes decoding them needs."""

from __future__ import annotations

import argparse
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

CLIP_LEN, STRIDE, SIZE = 16, 4, 224


def remote_specs() -> list[Any]:
    """24 videos of 4-7.5 s: 16 H.264 720p (8 MP4 faststart, 6 moov-at-end, 2 MKV),
    4 HEVC 720p, 4 H.264 1080p; 30 fps, GOP 60 (30 for half the moov-at-end ones)."""
    from dataset import HEVC, X264, VideoSpec

    secs = [4, 4.5, 5, 5.5, 6, 6.5, 7, 7.5]
    specs = [VideoSpec(f"h264_720p_faststart_{k:02d}.mp4", 1280, 720, secs[k], 60, X264,
                       faststart=True) for k in range(8)]
    specs += [VideoSpec(f"h264_720p_moovend_{k:02d}.mp4", 1280, 720, secs[k + 1],
                        30 if k % 2 else 60, X264) for k in range(6)]
    specs += [VideoSpec(f"h264_720p_{k:02d}.mkv", 1280, 720, secs[2 * k + 1], 60, X264)
              for k in range(2)]
    specs += [VideoSpec(f"hevc_720p_{k:02d}.mp4", 1280, 720, secs[2 * k], 60, HEVC,
                        faststart=True) for k in range(4)]
    specs += [VideoSpec(f"h264_1080p_faststart_{k:02d}.mp4", 1920, 1080, secs[k], 60, X264,
                        faststart=True) for k in range(4)]
    return specs


def long_specs(n: int) -> list[Any]:
    """n long videos (the "long" workload): 2-minute 720p H.264 MP4 at 3 Mb/s, about 45 MB
    each, GOP 250 faststart and GOP 120 moov-at-end in turn; made once and cached."""
    from dataset import X264, VideoSpec

    rate = ("-b:v", "3M", "-maxrate", "3M", "-bufsize", "6M")
    return [VideoSpec(f"h264_720p_long_{k:02d}.mp4", 1280, 720, 120, (250, 120)[k % 2],
                      X264 + rate, faststart=k % 2 == 0, role="long") for k in range(n)]


def long_order(names: list[str], per_video: int, rng: Any) -> list[str]:
    """The long workload's items: each long video ``per_video`` times, shuffled (each item
    one random clip and a new open, as in "clips")."""
    order = [n for n in names for _ in range(per_video)]
    return [order[i] for i in rng.permutation(len(order))]


def balanced(specs: list[Any], n: int) -> list[Any]:
    """n specs spread over the kinds (every other one first, then the rest)."""
    order = specs[::2] + specs[1::2]
    return order[:n] if n <= len(specs) else order


def mixed(names: list[str], n: int) -> list[str]:
    """n names taking each kind (the name without its number) in turn: 720p H.264
    faststart, HEVC, 1080p, moov-at-end, MKV."""
    prefer = ["h264_720p_faststart", "hevc_720p", "h264_1080p_faststart", "h264_720p_moovend"]
    kinds: dict[str, list[str]] = {}
    for name in sorted(names, key=lambda x: next((i for i, p in enumerate(prefer)
                                                  if x.startswith(p)), len(prefer))):
        kinds.setdefault(name.rsplit("_", 1)[0], []).append(name)
    out: list[str] = []
    while len(out) < min(n, len(names)):
        for group in kinds.values():
            if group and len(out) < n:
                out.append(group.pop(0))
    return out


def scan_ranges(video: Any) -> list[tuple[int, int]]:
    """The (offset, length) ranges a cold fluxon open's scan reads: the whole file
    for the containers the library scans whole (indexing.WHOLE_FILE_SCANS), else
    the container bytes before the first video packet and after the last."""
    from fluxon_video.indexing import WHOLE_FILE_SCANS

    if video.name.lower().endswith(WHOLE_FILE_SCANS):
        return [(0, video.size)]
    head = min(p["pos"] for p in video.packets)
    tail = max(p["pos"] + p["size"] for p in video.packets)
    return [(o, n) for o, n in ((0, head), (tail, video.size - tail)) if n > 0]


def piece_model(video: Any, clips: list[list[int]], piece: int) -> dict[str, int]:
    """Bytes of the pieces holding the clips' GOP spans (``span_piece_bytes``), and of those
    plus the pieces a cold open's scan reads (``open_model_bytes``, see scan_ranges)."""
    def pieces(lo: int, hi: int) -> set[int]:
        return set(range(lo // piece, (hi - 1) // piece + 1)) if hi > lo else set()

    span: set[int] = set()
    for clip in clips:
        packets = [video.packets[i] for i in video.span_packets(clip)]
        span |= pieces(min(p["pos"] for p in packets),
                       max(p["pos"] + p["size"] for p in packets))
    opened = set(span)
    for offset, length in scan_ranges(video):
        opened |= pieces(offset, offset + length)

    def size(chosen: set[int]) -> int:
        return sum(min(piece, video.size - i * piece) for i in chosen)

    return {"span_piece_bytes": size(span), "open_model_bytes": size(opened)}


class Plan:
    """The videos (made once), the items of every workload per round, the references."""

    def __init__(self, args: argparse.Namespace, say: Callable[[str], None],
                 notes: list[str]) -> None:
        self.args, self.say, self.notes = args, say, notes
        self.video_dir = args.data / "remote-videos"
        self.videos: dict[str, Any] = {}
        self.long: list[str] = []  # the long videos' names (the "long" workload only)
        self.plans: dict[str, list[list[dict]]] = {}
        self.ref_paths: dict[str, Path] = {}

    def make(self) -> None:
        self.make_dataset()
        self.make_plans()
        self.make_references()

    def make_dataset(self) -> None:
        from dataset import prepare

        specs = balanced(remote_specs(), self.args.videos)
        longs = long_specs(getattr(self.args, "long_videos", 0))
        self.say(f"dataset: {len(specs)} videos and {len(longs)} long ones under "
                 f"{self.video_dir} (made once)")
        for spec in specs + longs:
            video = prepare([spec], self.video_dir)[0]
            self.videos[video.name] = video
        self.long = [s.name for s in longs]

    def make_plans(self) -> None:
        import numpy as np
        from dataset import sample_clips

        names = [n for n in self.videos if n not in self.long]
        a = self.args
        batched = mixed(names, a.batched_items)
        for r in range(a.max_rounds):
            rng = np.random.default_rng([a.seed, r])
            order = [names[i] for i in rng.permutation(len(names))]
            self.plans.setdefault("clips", []).append(
                [{"video": n, "clips": sample_clips(self.videos[n].frames, 1, CLIP_LEN, STRIDE, rng)}
                 for n in order])
            self.plans.setdefault("batched", []).append(
                [{"video": n, "clips": sample_clips(self.videos[n].frames, a.batched_clips,
                                                    CLIP_LEN, STRIDE, rng)} for n in batched])
            self.plans.setdefault("metadata", []).append(
                [{"video": n} for n in (names[i] for i in rng.permutation(len(names)))])
            if self.long:
                self.plans.setdefault("long", []).append(
                    [{"video": n, "clips": sample_clips(self.videos[n].frames, 1, CLIP_LEN,
                                                        STRIDE, rng)}
                     for n in long_order(self.long, a.long_items, rng)])
        piece = self.piece_size()
        for workload in self.clip_workloads():
            for plan in self.plans[workload]:
                for item in plan:
                    video = self.videos[item["video"]]
                    item["needed_bytes"] = (video.span_bytes(item["clips"])
                                            + video.container_bytes())
                    item.update(piece_model(video, item["clips"], piece))

    def clip_workloads(self) -> list[str]:
        """The workloads whose items have clips (every one but "metadata")."""
        return [w for w in self.plans if w != "metadata"]

    def piece_size(self) -> int:
        from fluxon_video.fs.config import FluxonFsExport

        return self.args.piece_size or FluxonFsExport.__dataclass_fields__["piece_size"].default

    def make_references(self) -> None:
        from frames import count_note, needed, references

        refs = self.args.data / "remote-refs"
        refs.mkdir(parents=True, exist_ok=True)
        wanted: dict[str, set[int]] = {n: set() for n in self.videos}
        for workload in self.clip_workloads():
            for plan in self.plans[workload]:
                for item in plan:
                    wanted[item["video"]].update(needed(item["clips"]))
        todo = []
        for name, indices in wanted.items():
            video = self.videos[name]
            digest = hashlib.sha1(f"{video.spec.spec_hash()}{sorted(indices)}".encode()).hexdigest()
            path = refs / f"{name}-{SIZE}-{digest[:12]}.npz"
            self.ref_paths[name] = path
            if not path.exists() and indices:
                todo.append((name, sorted(indices), path))

        self.say(f"references: {len(todo)} to make with the ffmpeg CLI "
                 f"({len(wanted) - len(todo)} cached)")
        made = references({name: (self.videos[name].path, SIZE, SIZE, indices)
                           for name, indices, _ in todo}, workers=2)
        for name, indices, path in todo:
            self.notes += filter(None, [count_note(name, self.videos[name].frames, made[name])])
            made[name].save(path.with_suffix(".part.npz"))
            os.replace(path.with_suffix(".part.npz"), path)
        # Keep this run's reference of each video and the newest other one (a --quick
        # plan and a full plan can alternate without remaking them); drop older ones.
        for name, path in self.ref_paths.items():
            others = sorted((p for p in refs.glob(f"{name}-{SIZE}-*.npz") if p != path),
                            key=lambda p: p.stat().st_mtime, reverse=True)
            for stale in others[1:]:
                stale.unlink(missing_ok=True)

    def video_table(self, range_url: str) -> dict[str, dict]:
        """What every task gets about each video (URL, pts table, reference)."""
        out = {}
        for name, v in self.videos.items():
            pts = sorted(p["pts"] for p in v.packets)
            keys = sorted(p["pts"] for p in v.packets if p["key"])
            out[name] = {"name": name, "relpath": name, "url": f"{range_url}/{name}",
                         "path": str(v.path), "pts": pts, "keys": keys,
                         "ref": str(self.ref_paths[name]), "frames": v.frames,
                         "fps": v.spec.fps}
        return out

    def needed_bytes(self) -> dict[str, list[int]]:
        """Per clips round: each item's GOP span bytes + its video's container bytes."""
        out = {}
        for workload in self.clip_workloads():
            out[workload] = [
                sum(self.videos[i["video"]].span_bytes(i["clips"])
                    + self.videos[i["video"]].container_bytes() for i in plan)
                for plan in self.plans[workload]]
        return out
