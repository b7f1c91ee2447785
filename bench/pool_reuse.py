"""How often a reader pool reuses a reader over a shuffled epoch, by max_readers.

    python bench/pool_reuse.py [--videos 12] [--clips-per-video 8] [--seed 0]

A data loader draws (video, clip) samples in shuffled order; each sample is
a pool.read_frames_numpy call. The pool reuses an idle reader when the same
video (same size, threads, identity) comes back before it was evicted. This
prints, for several max_readers, the reuse rate (leases served by a cached
reader), readers opened and evicted, and the epoch's wall time, next to the
same epoch sorted by video (the best case). In-process export, embedded KV,
one worker; small H.264 clips so it runs in seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from dataset import X264, VideoSpec, prepare, sample_clips  # noqa: E402

import fluxon_video as fv  # noqa: E402


def epoch(root: Path, names: list[str], samples: list[tuple[int, list[int]]],
          max_readers: int) -> dict[str, float]:
    export = fv.FluxonFsExport("data", str(root), allow=["loader"])
    with fv.FluxonFsPatcher(exports=[export], identities={"loader": "token"},
                            identity="loader") as patcher:
        with patcher.open_video_reader_pool(max_readers=max_readers) as pool:
            t0 = time.perf_counter()
            for video, clip in samples:
                pool.read_frames_numpy(export_name="data", relpath=names[video], height=112,
                                       width=112, num_threads=1, indices=clip)
            seconds = time.perf_counter() - t0
            c = pool.counters()
    return {"max_readers": max_readers, "reuse_rate": c.reuse_rate(),
            "opened": c.readers_opened, "evicted": c.readers_evicted,
            "ms_per_sample": seconds * 1e3 / len(samples)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--videos", type=int, default=12)
    ap.add_argument("--clips-per-video", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", type=Path, default=ROOT / "bench" / ".data" / "reuse-videos")
    args = ap.parse_args()
    specs = [VideoSpec(f"clip_{i:02d}.mp4", 320, 180, 4, 30, X264, faststart=True)
             for i in range(args.videos)]
    videos = prepare(specs, args.data)
    rng = np.random.default_rng(args.seed)
    samples = [(v, clip) for v, video in enumerate(videos)
               for clip in sample_clips(video.frames, args.clips_per_video, 16, 4, rng)]
    shuffled = [samples[i] for i in rng.permutation(len(samples))]
    names = [spec.name for spec in specs]
    print(f"{len(samples)} samples: {args.videos} videos x {args.clips_per_video} clips "
          f"(16 frames, stride 4, 112x112), seed {args.seed}")
    print(f"{'order':>8} {'max_readers':>11} {'reuse':>6} {'opened':>6} {'evicted':>7} {'ms/sample':>9}")
    for order, plan in (("shuffled", shuffled), ("sorted", samples)):
        for max_readers in (2, 4, 8, 16):
            r = epoch(args.data, names, plan, max_readers)
            print(f"{order:>8} {max_readers:>11} {r['reuse_rate']:6.1%} {r['opened']:6d} "
                  f"{r['evicted']:7d} {r['ms_per_sample']:9.1f}")


if __name__ == "__main__":
    main()
