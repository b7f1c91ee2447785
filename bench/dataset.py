"""The benchmark's test videos: ``testsrc2`` (it moves: neighbouring frames differ) made by
the ffmpeg CLI, probed with ffprobe, reused while a sidecar holds their spec's hash."""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import subprocess
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

X264 = ("-c:v", "libx264", "-preset", "veryfast", "-bf", "3", "-sc_threshold", "0")
HEVC = ("-c:v", "libx265", "-preset", "ultrafast", "-tag:v", "hvc1",
        "-x265-params", "keyint=60:min-keyint=60:bframes=3:log-level=error")


def vp9(bitrate: str) -> tuple[str, ...]:
    return ("-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-g", "60",
            "-b:v", bitrate)


@dataclass(frozen=True)
class VideoSpec:
    name: str            # file name in the export; also the label in tables
    width: int
    height: int
    seconds: float
    gop: int
    codec_args: tuple[str, ...]
    faststart: bool = False  # MP4 only: moov before mdat
    fps: int = 30
    role: str = "clips"      # "clips": every clip workload; "batched": the long video

    def encoder_args(self) -> list[str]:
        args = list(self.codec_args)
        if "libx264" in args:
            args += ["-g", str(self.gop), "-keyint_min", str(self.gop)]
        if self.faststart:
            args += ["-movflags", "+faststart"]
        return args

    def scaled(self, factor: float) -> VideoSpec:
        return replace(self, seconds=max(3.0, round(self.seconds * factor, 1)))

    def spec_hash(self) -> str:
        return hashlib.sha1(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]


DATASET = [
    VideoSpec("h264_720p_gop250_faststart.mp4", 1280, 720, 20, 250, X264, faststart=True),
    VideoSpec("h264_720p_gop30_moov_end.mp4", 1280, 720, 10, 30, X264),
    VideoSpec("hevc_480p_gop60.mp4", 854, 480, 10, 60, HEVC, faststart=True),
    VideoSpec("vp9_360p_gop60.webm", 640, 360, 10, 60, vp9("800k")),
    VideoSpec("av1_144p_gop60.mkv", 256, 144, 5, 60,
              ("-c:v", "libsvtav1", "-preset", "12", "-g", "60")),
    # MPEG-4 part 2 (DivX/Xvid era) with B-frames: AVI stores no pts for I/P-frames.
    VideoSpec("mpeg4_360p_gop60.avi", 640, 360, 10, 60,
              ("-c:v", "mpeg4", "-bf", "2", "-q:v", "3", "-g", "60")),
    VideoSpec("h264_720p_gop250_60s.mp4", 1280, 720, 60, 250, X264, faststart=True,
              role="batched"),
]


@dataclass
class Video:
    """A generated video and what ffprobe says about it."""

    spec: VideoSpec
    path: Path
    codec: str = ""
    size: int = 0
    frames: int = 0
    time_base: str = ""
    # Video packets in decode order: presentation index, pts, byte offset, size, keyframe.
    packets: list[dict] = field(default_factory=list, repr=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def layout(self) -> str:
        if self.path.suffix != ".mp4":
            return self.path.suffix.lstrip(".")
        return "mp4 faststart" if self.spec.faststart else "mp4 moov-at-end"

    def facts(self) -> dict:
        """The conditions recorded with every figure about this video."""
        return {"video": self.name, "codec": self.codec, "width": self.spec.width,
                "height": self.spec.height, "fps": self.spec.fps, "frames": self.frames,
                "gop": self.spec.gop, "layout": self.layout, "file_bytes": self.size,
                "container_bytes": self.container_bytes()}

    def container_bytes(self) -> int:
        """Bytes that are not video packets: the index (moov / Cues), headers, framing."""
        return self.size - sum(p["size"] for p in self.packets)

    def span_packets(self, indices: list[int]) -> set[int]:
        """Decode-order positions of the packets a decoder needs for frames ``indices``: from
        the last keyframe before the first target through the last packet shown by the last."""
        # by_presentation[p]: decode-order position of the p-th frame shown.
        by_presentation = sorted(range(len(self.packets)), key=lambda i: self.packets[i]["pts"])
        first, last = min(indices), max(indices)
        needed_until = max(by_presentation[first:last + 1])
        start = by_presentation[first]
        keyframes = [i for i, p in enumerate(self.packets) if p["key"]]
        k = bisect.bisect_right(keyframes, start) - 1
        return set(range(keyframes[max(k, 0)], needed_until + 1))

    def span_bytes(self, clips: list[list[int]]) -> int:
        """Packet bytes of the union of GOP spans the clips touch (no container bytes)."""
        touched: set[int] = set()
        for clip in clips:
            touched |= self.span_packets(clip)
        return sum(self.packets[i]["size"] for i in touched)


def ffmpeg_make(path: Path, *args: str) -> Path:
    """``path`` made by the ffmpeg CLI from ``args`` (inputs and options) unless it is
    there; written to a .part file first, so that a stopped run leaves nothing half made."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(path.stem + ".part" + path.suffix)
        # SVT_LOG=1: the AV1 encoder prints its banner unless told errors only.
        subprocess.run(["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y", *args,
                        str(part)], check=True, env={**os.environ, "SVT_LOG": "1"})
        os.replace(part, path)
    return path


def generate(spec: VideoSpec, out: Path) -> None:
    out.unlink(missing_ok=True)  # made again: its spec changed
    ffmpeg_make(out, "-f", "lavfi", "-i", f"testsrc2=size={spec.width}x{spec.height}:rate="
                f"{spec.fps}", "-t", str(spec.seconds), "-pix_fmt", "yuv420p", *spec.encoder_args())


def probe(spec: VideoSpec, path: Path) -> Video:
    # +genpts: AVI stores no pts for I/P-frames; the demuxer infers them (a
    # no-op where the container has them).
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-fflags", "+genpts", "-select_streams", "v:0",
         "-show_entries", "stream=codec_name,time_base:format=size:packet=pts,pos,size,flags",
         "-of", "json", str(path)], check=True, capture_output=True, text=True).stdout
    info = json.loads(out)
    packets = [{"pts": int(p["pts"]), "pos": int(p["pos"]), "size": int(p["size"]),
                "key": p["flags"].startswith("K")} for p in info["packets"]]
    stream = info["streams"][0]
    return Video(spec, path, codec=stream["codec_name"], size=int(info["format"]["size"]),
                 frames=len(packets), time_base=stream["time_base"], packets=packets)


def prepare(specs: list[VideoSpec], root: Path) -> list[Video]:
    """Make (or reuse) every video under ``root`` and probe it."""
    videos = []
    for spec in specs:
        path = root / spec.name
        sidecar = path.with_name(path.name + ".spec")
        if not path.exists() or not sidecar.exists() or sidecar.read_text() != spec.spec_hash():
            generate(spec, path)
            sidecar.write_text(spec.spec_hash())
        videos.append(probe(spec, path))
    return videos


def sample_clips(frames: int, count: int, length: int, stride: int,
                 rng: np.random.Generator) -> list[list[int]]:
    """``count`` clips of ``length`` frames ``stride`` apart, starting uniformly at random."""
    span = (length - 1) * stride + 1
    if span > frames:
        raise ValueError(f"a clip spans {span} frames, the video has {frames}")
    starts = rng.integers(0, frames - span + 1, size=count)
    return [[int(s) + k * stride for k in range(length)] for s in starts]


def small_specs(h264: int, hevc: int, vp9_count: int, seconds: Any) -> list[VideoSpec]:
    """640x360 GOP 60 videos (the DataLoader and multi-node scenarios): H.264 faststart and
    moov-at-end in turn, then HEVC, then VP9 WebM; ``seconds(k)`` long."""
    out = [VideoSpec(f"h264_360p_{('faststart', 'moovend')[k % 2]}_{k:02d}.mp4", 640, 360,
                     seconds(k), 60, X264, faststart=k % 2 == 0) for k in range(h264)]
    out += [VideoSpec(f"hevc_360p_{k:02d}.mp4", 640, 360, seconds(k), 60, HEVC, faststart=True)
            for k in range(hevc)]
    return out + [VideoSpec(f"vp9_360p_{k:02d}.webm", 640, 360, seconds(k), 60, vp9("600k"))
                  for k in range(vp9_count)]


def remote_specs() -> list[VideoSpec]:
    """24 videos of 4-7.5 s: 16 H.264 720p (8 MP4 faststart, 6 moov-at-end, 2 MKV),
    4 HEVC 720p, 4 H.264 1080p; 30 fps, GOP 60 (30 for half the moov-at-end ones)."""
    secs = [4, 4.5, 5, 5.5, 6, 6.5, 7, 7.5]
    specs = [VideoSpec(f"h264_720p_faststart_{k:02d}.mp4", 1280, 720, secs[k], 60, X264,
                       faststart=True) for k in range(8)]
    specs += [VideoSpec(f"h264_720p_moovend_{k:02d}.mp4", 1280, 720, secs[k + 1],
                        30 if k % 2 else 60, X264) for k in range(6)]
    specs += [VideoSpec(f"h264_720p_{k:02d}.mkv", 1280, 720, secs[2 * k + 1], 60, X264)
              for k in range(2)]
    specs += [VideoSpec(f"hevc_720p_{k:02d}.mp4", 1280, 720, secs[2 * k], 60, HEVC,
                        faststart=True) for k in range(4)]
    return specs + [VideoSpec(f"h264_1080p_faststart_{k:02d}.mp4", 1920, 1080, secs[k], 60,
                              X264, faststart=True) for k in range(4)]


def long_specs(n: int) -> list[VideoSpec]:
    """n 2-minute MP4s (the remote "long" workload), four kinds in turn: 720p H.264 at
    3 Mb/s (about 45 MB) GOP 250 faststart and GOP 120 moov-at-end, 1080p HEVC at 4 Mb/s
    GOP 60, and 1080p H.264 at 6 Mb/s GOP 250."""
    def rate(bits: str) -> tuple[str, ...]:
        return ("-b:v", bits, "-maxrate", bits, "-bufsize", f"{2 * int(bits[:-1])}M")

    kinds = [("h264_720p", 1280, 720, 250, X264 + rate("3M"), True),
             ("h264_720p", 1280, 720, 120, X264 + rate("3M"), False),
             ("hevc_1080p", 1920, 1080, 60, HEVC + rate("4M"), True),
             ("h264_1080p", 1920, 1080, 250, X264 + rate("6M"), True)]
    return [VideoSpec(f"{name}_long_{k:02d}.mp4", width, height, 120, gop, args,
                      faststart=faststart, role="long")
            for k, (name, width, height, gop, args, faststart)
            in ((k, kinds[k % len(kinds)]) for k in range(n))]


def long_order(names: list[str], per_video: int, rng: Any) -> list[str]:
    """Each long video ``per_video`` times, shuffled (each item one clip and a new open)."""
    order = [n for n in names for _ in range(per_video)]
    return [order[i] for i in rng.permutation(len(order))]


def prepare_all(specs: list[VideoSpec], root: Path, workers: int = 2) -> list[Video]:
    """``prepare`` of every spec, ``workers`` at a time, in the specs' order."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers) as pool:
        return [v for made in pool.map(lambda s: prepare([s], root), specs) for v in made]
