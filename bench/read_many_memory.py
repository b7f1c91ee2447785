"""Peak memory of read_many_numpy_with_stats against the bytes it returns."""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

from harness import tool_parser

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / ".data" / "memory"
VIDEO = DATA / "h264_1080p_gop60.mp4"


def make_video() -> None:
    if VIDEO.exists():
        return
    DATA.mkdir(parents=True, exist_ok=True)
    part = VIDEO.with_suffix(".part.mp4")
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i",
                    "testsrc2=size=1920x1080:rate=30", "-t", "12", "-pix_fmt", "yuv420p",
                    "-c:v", "libx264", "-preset", "ultrafast", "-g", "60", "-movflags", "+faststart",
                    str(part)], check=True)
    part.replace(VIDEO)


def child(clips: int, frames: int) -> dict:
    import numpy as np

    import fluxon_video as fv

    rng = np.random.default_rng(0)
    patcher = fv.FluxonFsPatcher(exports=[fv.FluxonFsExport("m", str(DATA), allow=["me"])],
                                 identities={"me": "t"}, identity="me")
    with patcher, patcher.open_video_reader_pool() as pool:
        n = pool.video_metadata("m", VIDEO.name).num_frames
        starts = rng.integers(0, n - 2 * frames, size=clips)
        requests = [fv.FluxonFsVideoReadRequest("m", VIDEO.name, None, None, 2,
                                                tuple(int(s) + 2 * k for k in range(frames)))
                    for s in starts]
        before = _rss_mib()
        results = pool.read_many_numpy_with_stats(requests)
        output = sum(r.frames.nbytes for r in results) / 2**20
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"clips": clips, "frames": frames, "output_mib": round(output, 1),
            "rss_before_mib": round(before, 1), "peak_rss_mib": round(peak, 1),
            "growth_over_output": round((peak - before) / output, 3)}


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def main() -> None:
    parser = tool_parser("read_many_memory.py")
    parser.add_argument("--clips", type=int, default=10)
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.clips, args.frames)))
        return
    make_video()
    out = subprocess.run([sys.executable, __file__, "--child", "--clips", str(args.clips),
                          "--frames", str(args.frames)], check=True, capture_output=True, text=True)
    result = json.loads(out.stdout)
    limit = 1.5 * result["output_mib"] + 300
    print(json.dumps(result))
    print(f"peak {result['peak_rss_mib']} MiB for {result['output_mib']} MiB of frames; "
          f"target <= 1.5 x output + 300 MB = {limit:.0f} MiB: "
          f"{'met' if result['peak_rss_mib'] <= limit else 'missed'}")


if __name__ == "__main__":
    main()
