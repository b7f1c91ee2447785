"""Peak memory of read_many_numpy_with_stats, and of open readers, against the bytes they return."""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

from dataset import ffmpeg_make
from harness import tool_parser

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / ".data" / "memory"
# Fixed cost the targets allow on top of 1.5 x the output: read_many's is on
# the process's peak (libraries included), a reader's on what it adds (its
# decoder, page cache, index and conversion buffers).
ALLOWANCE_MIB = {"read_many": 300, "readers": 100}


def video_path(seconds: int) -> Path:
    return DATA / (f"h264_1080p_gop60_{seconds}s.mp4" if seconds != 12 else "h264_1080p_gop60.mp4")


def make_video(seconds: int) -> Path:
    return ffmpeg_make(video_path(seconds), "-f", "lavfi", "-i", "testsrc2=size=1920x1080:rate=30",
                       "-t", str(seconds), "-pix_fmt", "yuv420p", "-c:v", "libx264", "-preset",
                       "ultrafast", "-b:v", "5M", "-g", "60", "-movflags", "+faststart")


def child(video: Path, clips: int, frames: int, readers: int) -> dict:
    """read_many of ``clips`` clips (readers == 0), else ``readers`` readers held
    open at once, each reading ``clips`` clips in turn (one clip's frames kept)."""
    import numpy as np

    import fluxon_video as fv

    rng = np.random.default_rng(0)
    patcher = fv.FluxonFsPatcher(exports=[fv.FluxonFsExport("m", str(video.parent), allow=["me"])],
                                 identities={"me": "t"}, identity="me")
    with patcher, patcher.open_video_reader_pool() as pool:
        n = pool.video_metadata("m", video.name).num_frames
        starts = rng.integers(0, n - 2 * frames, size=clips * max(readers, 1))
        clip = [[int(s) + 2 * k for k in range(frames)] for s in starts]
        before = _rss_mib()
        if readers == 0:
            requests = [fv.FluxonFsVideoReadRequest("m", video.name, None, None, 2, tuple(c))
                        for c in clip]
            output = sum(r.frames.nbytes for r in pool.read_many_numpy_with_stats(requests))
        else:
            opened = [patcher.open_video_reader("m", video.name, num_threads=2)
                      for _ in range(readers)]
            kept = {}
            for j in range(clips):
                for i, reader in enumerate(opened):  # each reader's last clip stays
                    kept[i] = None
                    kept[i] = reader.get_frames_at(clip[i * clips + j]).data
            output = sum(k.nbytes for k in kept.values())
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        output /= 2**20
    return {"video": video.name, "readers": readers, "clips": clips, "frames": frames,
            "output_mib": round(output, 1), "rss_before_mib": round(before, 1),
            "peak_rss_mib": round(peak, 1),
            "growth_over_output": round((peak - before) / output, 3)}


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def main() -> None:
    parser = tool_parser("read_many_memory.py")
    parser.add_argument("--clips", type=int, default=10)
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--seconds", type=int, default=12, help="the video's length (default: 12)")
    parser.add_argument("--readers", type=int, default=0,
                        help="readers held open at once (default: 0, one read_many call)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(video_path(args.seconds), args.clips, args.frames, args.readers)))
        return
    make_video(args.seconds)
    out = subprocess.run([sys.executable, __file__, "--child", "--clips", str(args.clips),
                          "--frames", str(args.frames), "--seconds", str(args.seconds),
                          "--readers", str(args.readers)],
                         check=True, capture_output=True, text=True)
    result = json.loads(out.stdout)
    print(json.dumps(result))
    if args.readers:  # per reader: what opening and reading added, over what it keeps
        used = (result["peak_rss_mib"] - result["rss_before_mib"]) / args.readers
        output = result["output_mib"] / args.readers
        what, allowance = "peak growth per reader", ALLOWANCE_MIB["readers"]
    else:
        used, output = result["peak_rss_mib"], result["output_mib"]
        what, allowance = "peak RSS", ALLOWANCE_MIB["read_many"]
    limit = 1.5 * output + allowance
    print(f"{what} {used:.0f} MiB for {output:.1f} MiB of frames; target <= 1.5 x output + "
          f"{allowance} MiB = {limit:.0f} MiB: {'met' if used <= limit else 'missed'}")

if __name__ == "__main__":
    main()
