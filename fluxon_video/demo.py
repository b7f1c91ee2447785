"""`make demo`: generate clips, read random 16-frame windows, cold then warm."""

from __future__ import annotations

import os
import random
import subprocess
import time
from pathlib import Path

from fluxon_video.native import require_native
from fluxon_video.sources import LocalFileRangeSource

DEMO_VIDEOS = {
    "h264_720p.mp4": ["-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30", "-t", "10",
                      "-c:v", "libx264", "-preset", "veryfast", "-g", "250", "-pix_fmt", "yuv420p",
                      "-movflags", "+faststart"],
    "vp9_360p.webm": ["-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30", "-t", "10",
                      "-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8",
                      "-pix_fmt", "yuv420p"],
}


def ensure_demo_videos(data_dir: str | os.PathLike[str]) -> list[Path]:
    root = Path(data_dir)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, args in DEMO_VIDEOS.items():
        path = root / name
        if not path.exists():
            print(f"generating {path} with the ffmpeg CLI ...", flush=True)
            tmp = path.with_name(path.stem + ".part" + path.suffix)
            subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", *args, str(tmp)],
                           check=True)
            tmp.replace(path)
        paths.append(path)
    return paths


def run_demo(data_dir: str, clips: int = 4) -> int:
    avio, decode = require_native("the demo")
    rng = random.Random(0)
    for path in ensure_demo_videos(data_dir):
        with LocalFileRangeSource(path) as src, avio.ByteSource(src, src.size) as byte_source:
            windows = [[start + 4 * k for k in range(16)]
                       for start in (rng.randrange(0, 200) for _ in range(clips))]
            for label in ("cold", "warm"):
                t0 = time.perf_counter()
                fetched = decoded = 0
                for indices in windows:
                    frames, stats = decode.decode_frames(byte_source, indices, 224, 224, 2)
                    fetched += stats["bytes_fetched"]
                    decoded += stats["frames_decoded"]
                ms = (time.perf_counter() - t0) * 1e3
                print(f"{path.name:>16} {label}: {clips} clips {frames.shape} in {ms:7.1f} ms, "
                      f"{decoded} frames decoded, {fetched / 1e6:.2f} MB fetched from the source")
    return 0
