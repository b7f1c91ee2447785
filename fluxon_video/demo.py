"""`make demo`: read clips through FluxonFS on the embedded defaults, cold then warm.

Generates a few videos with the ffmpeg CLI into an export root, then reads
random 16-frame clips (stride 4, 224x224) through a FluxonFsPatcher with an
in-process export and the in-process KV piece store. The cold pass reads
bytes from the export; the warm pass opens new readers and is served by the
KV piece cache.
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from pathlib import Path

from fluxon_video.fs.config import FluxonFsExport
from fluxon_video.fs.tokens import new_token
from fluxon_video.patcher import FluxonFsPatcher
from fluxon_video.stats import FluxonFsVideoReadStats

DEMO_VIDEOS = {
    "h264_720p_gop250.mp4": ["-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30", "-t", "10",
                             "-c:v", "libx264", "-preset", "veryfast", "-g", "250",
                             "-pix_fmt", "yuv420p", "-movflags", "+faststart"],
    "hevc_480p.mp4": ["-f", "lavfi", "-i", "testsrc2=size=854x480:rate=30", "-t", "10",
                      "-c:v", "libx265", "-preset", "ultrafast", "-x265-params", "log-level=error",
                      "-tag:v", "hvc1", "-pix_fmt", "yuv420p"],
    "vp9_360p.webm": ["-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30", "-t", "10",
                      "-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8",
                      "-pix_fmt", "yuv420p"],
}
# In-process: no agent checks the token, but a fresh one leaves no weak literal to copy.
DEMO_IDENTITY = ("demo", new_token())


def ensure_demo_videos(root: Path) -> list[str]:
    videos = root / "videos"
    videos.mkdir(parents=True, exist_ok=True)
    relpaths = []
    for name, args in DEMO_VIDEOS.items():
        path = videos / name
        if not path.exists():
            print(f"generating {path} with the ffmpeg CLI ...", flush=True)
            tmp = path.with_name(path.stem + ".part" + path.suffix)
            subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", *args, str(tmp)],
                           check=True)
            tmp.replace(path)
        relpaths.append(f"videos/{name}")
    return relpaths


def _clip_starts(rng: random.Random, clips: int) -> list[list[int]]:
    return [[start + 4 * k for k in range(16)] for start in (rng.randrange(0, 230) for _ in range(clips))]


def _row(label: str, relpath: str, s: FluxonFsVideoReadStats, size: int) -> str:
    return (f"{relpath.split('/')[-1]:>22} {label:>5} {s.total_ms:8.1f} {s.frames_decoded:6d} "
            f"{s.decoder_seeks:5d} {s.index_source:>5} {s.range_reads:6d} "
            f"{s.page_hits:4d}/{s.page_misses:<4d} {s.kv_hits:4d}/{s.kv_misses:<4d} "
            f"{s.remote_reads:6d} {s.remote_bytes / 1e6:8.2f} {size / 1e6:7.2f}")


def run_demo(data_dir: str | os.PathLike[str], clips: int = 4) -> int:
    root = Path(data_dir).resolve()
    relpaths = ensure_demo_videos(root)
    export = FluxonFsExport("demo", str(root), allow=[DEMO_IDENTITY[0]])
    rng = random.Random(0)
    plans = {relpath: _clip_starts(rng, clips) for relpath in relpaths}
    print(f"\nexport 'demo' = {root} (in-process), KV = embedded in-process LRU; "
          f"{clips} clips of 16 frames, stride 4, 224x224 per video\n")
    print(f"{'video':>22} {'pass':>5} {'ms':>8} {'frames':>6} {'seeks':>5} {'index':>5} "
          f"{'reads':>6} {'page h/m':>9} {'KV h/m':>9} {'remote':>6} {'remoteMB':>8} {'fileMB':>7}")
    with FluxonFsPatcher(exports=[export], identities=dict([DEMO_IDENTITY]),
                         identity=DEMO_IDENTITY[0]) as patcher:
        for label in ("cold", "warm"):
            for relpath in relpaths:
                total = FluxonFsVideoReadStats()
                t0 = time.perf_counter()
                with patcher.open_video_reader("demo", relpath, 224, 224, 2) as reader:
                    for indices in plans[relpath]:
                        frames = reader.read_frames_numpy(indices)
                        assert frames.shape == (16, 224, 224, 3)
                        total = total + reader.last_stats
                total = FluxonFsVideoReadStats(**{**total.as_dict(),
                                                  "total_ms": (time.perf_counter() - t0) * 1e3})
                print(_row(label, relpath, total, reader.version.size))
            patcher.client.backfill.wait_idle()
    print("\ncold: the frame index is built by a demux-only scan and stored in the KV; clip bytes"
          "\n      come from the export and are backfilled into the KV piece cache;"
          "\nwarm: new readers take the index from the KV and every piece from the KV cache."
          "\nframes = frames the decoder output (keyframe seeks; non-reference frames skipped).")
    return 0
