"""What loading a long video's frame index from its blob costs (see --help or bench/README.md)."""

from __future__ import annotations

import dataclasses
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dataset import ffmpeg_make  # noqa: E402
from harness import BENCH, tool_parser  # noqa: E402


def make_video(path: Path, minutes: float, fps: int, size: str) -> Path:
    """A testsrc2 H.264 MP4 (x264 defaults: B-frames, GOP 250) with AAC audio (whose
    packets the index lists too), made once."""
    return ffmpeg_make(path, "-f", "lavfi", "-i",
                       f"testsrc2=size={size}:rate={fps}:duration={minutes * 60}",
                       "-f", "lavfi", "-i", f"sine=sample_rate=48000:duration={minutes * 60}",
                       "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p",
                       "-c:a", "aac", "-b:a", "64k")


def median_ms(fn, repeat: int) -> tuple[float, float]:
    """(median milliseconds of ``fn()``, minor page faults a call)."""
    runs, faults = [], resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(runs), (
        resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / repeat


def main() -> None:
    from fluxon_video.frame_index import BLOB_KIND, FrameIndex
    from fluxon_video.local import LocalVideoReader

    ap = tool_parser("index_load.py")
    ap.add_argument("--minutes", type=float, default=10.0, help="video length (default: 10)")
    ap.add_argument("--fps", type=int, default=30, help="(default: 30)")
    ap.add_argument("--size", default="320x180", help="(default: 320x180)")
    ap.add_argument("--repeat", type=int, default=50, help="loads timed (default: 50)")
    args = ap.parse_args()
    path = make_video(BENCH / ".data" / "index_load" /
                      f"testsrc2_{args.size}_{args.fps}fps_{args.minutes:g}min_aac.mp4",
                      args.minutes, args.fps, args.size)
    with LocalVideoReader(path) as reader:  # the product's scan (and open extents)
        index = reader.index
    blob = index.to_bytes()
    assert (FrameIndex.from_bytes(blob).frame_pts == index.frame_pts).all()
    fields = {f.name: getattr(index, f.name) for f in dataclasses.fields(index) if f.init}
    print(f"{path.name}: {index.pkt_pts.size} packets, {index.frame_count} frames, "
          f"{BLOB_KIND}, blob {len(blob) / 1024:.0f} KiB (open extents "
          f"{sum(len(d) for _, d in index.open_extents) / 1024:.0f} KiB); load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; median of {args.repeat}")
    for heap in ("heap as it is", "after 16 MB freed"):
        if heap != "heap as it is":  # as a reader's frame buffers do: glibc then keeps
            np.ones(16 << 20, np.uint8)  # freed memory (its mmap and trim thresholds grow)
        load, faults = median_ms(lambda: FrameIndex.from_bytes(blob), args.repeat)
        build, _ = median_ms(lambda: FrameIndex(**fields), args.repeat)
        print(f"  {heap}: from_bytes {load:.2f} ms ({faults:.0f} page faults a load; "
              f"the FrameIndex constructor {build:.2f} ms of it)")

if __name__ == "__main__":
    main()
