"""Lookahead's memory over a long epoch: peak RSS of a 10,000-item epoch read with and
without the dataset reading ahead.

    python bench/lookahead_memory.py                  # ~4 min on 2 cores
    python bench/lookahead_memory.py --items 2000     # shorter

Makes (once, under <data>/lookahead-memory) 8 H.264 videos at 320x240, 20 s each,
starts a redis-server and the real agent on loopback (--latency-ms per request), and
reads one epoch of --items random clips (8 frames, stride 2, at 112x112) through
VideoClipDataset in this process's children: batches of 8 from a SeededBatchSampler,
the dataset told its order (``plan_batches``) or not. Redis is flushed before each run
(cold). Each run reports clips/s, its peak RSS (ru_maxrss), its RSS every 10% of the
epoch, the lookahead counters (pages fetched ahead, used, wasted) and the bytes from
the agent. Writes lookahead_memory.md and .json to --out.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from dataset import ffmpeg_make  # noqa: E402

EXPORT = "memory"
VIDEOS = 8


def make_videos(folder: Path) -> list[str]:
    names = []
    for k in range(VIDEOS):
        name = f"v{k}.mp4"
        ffmpeg_make(folder / name, "-f", "lavfi", "-i",
                    f"testsrc2=size=320x240:rate=30,hue=h={k * 40}", "-t", "20",
                    "-pix_fmt", "yuv420p", "-c:v", "libx264", "-preset", "veryfast", "-g", "30",
                    "-bf", "2", "-movflags", "+faststart")
        names.append(name)
    return names


def child(fx: dict, names: list[str], items: int, ahead: bool) -> dict[str, Any]:
    """One epoch in this process (a child of the bench): its figures."""
    import psutil

    from fluxon_video.batch_plan import SeededBatchSampler
    from fluxon_video.torch import VideoClipDataset
    from stores import make_patcher

    with make_patcher(fx) as patcher:
        ds = VideoClipDataset(patcher, EXPORT, names, clip_len=8, stride=2, height=112,
                              width=112, clips_per_video=items // len(names), seed=1)
        sampler = SeededBatchSampler(len(ds), 8, seed=2)
        if ahead:
            ds.plan_batches(sampler)
        me, rss, clips = psutil.Process(), [], 0
        batches = list(sampler)
        step = max(1, len(batches) // 10)
        t0 = time.perf_counter()
        for k, batch in enumerate(batches):
            clips += len(ds.__getitems__(batch))
            if (k + 1) % step == 0:
                rss.append(me.memory_info().rss / 2**20)
        seconds = time.perf_counter() - t0
        stats = ds.pool.stats()
        ds.pool.close()
    return {"clips": clips, "seconds": seconds, "clips_per_s": clips / seconds,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "rss_mib_every_tenth": rss, "ahead_pages": stats.ahead_pages,
            "ahead_hits": stats.ahead_hits, "ahead_wasted": stats.ahead_wasted,
            "remote_mib": stats.remote_bytes / 2**20}


def render(results: dict[str, Any]) -> str:
    from harness import machine_line

    rows = ["| lookahead | clips | clips/s | peak RSS MiB | RSS MiB at 10%, 50%, 100% | "
            "pages ahead / used / wasted | MiB from the agent |", "|---|---|---|---|---|---|---|"]
    for name, r in results["runs"].items():
        tenth = r["rss_mib_every_tenth"]
        picks = [tenth[0], tenth[len(tenth) // 2 - 1], tenth[-1]] if tenth else []
        rows.append(f"| {name} | {r['clips']} | {r['clips_per_s']:.1f} | {r['peak_rss_mib']:.0f} "
                    f"| {', '.join(f'{x:.0f}' for x in picks)} | {r['ahead_pages']} / "
                    f"{r['ahead_hits']} / {r['ahead_wasted']} | {r['remote_mib']:.1f} |")
    return "\n".join([
        "# Lookahead's memory over a long epoch (bench/lookahead_memory.py)", "",
        f"`{results['command']}`, {results['generated']}, {results['duration_s']} s", "",
        f"Machine: {machine_line(results['machine'])}", "",
        f"{VIDEOS} H.264 videos at 320x240 (20 s, GOP 30), one epoch of random 8-frame clips "
        f"(stride 2, 112x112) in batches of 8 from a SeededBatchSampler, read by "
        f"VideoClipDataset through the real agent ({results['latency_ms']:g} ms per "
        "request) with Redis flushed first; each run a process of its own.", "", *rows, ""])


def main() -> None:
    from harness import header, machine, write_outputs

    ap = argparse.ArgumentParser(prog="python bench/lookahead_memory.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=10_000, help="clips in the epoch (10000)")
    ap.add_argument("--latency-ms", type=float, default=10.0,
                    help="latency the agent adds to each request (10)")
    ap.add_argument("--data", type=Path, default=BENCH / ".data", help="scratch (bench/.data)")
    ap.add_argument("--out", type=Path, default=BENCH / "results",
                    help="where lookahead_memory.md and .json go (bench/results)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        spec = json.loads(args.child)
        print(json.dumps(child(spec["fx"], spec["names"], spec["items"], spec["ahead"])))
        return
    if args.items <= 0 or args.items % VIDEOS:  # as many clips of each video
        ap.error(f"--items must be a positive multiple of {VIDEOS}")
    from fluxon_video.testing import RedisServer

    from stores import agent, store

    t0 = time.perf_counter()
    folder = args.data / "lookahead-memory"
    names = make_videos(folder)
    work = folder / "work"
    work.mkdir(parents=True, exist_ok=True)
    redis = RedisServer(work).start()
    server = agent(work, EXPORT, folder, args.latency_ms)
    runs = {}
    try:
        fx = store(EXPORT, folder, server.url, redis.url)
        for name, ahead in (("off", False), ("on", True)):
            redis.client().flushall()
            print(f"lookahead {name}: {args.items} clips", flush=True)
            spec = json.dumps({"fx": fx, "names": names, "items": args.items, "ahead": ahead})
            proc = subprocess.run([sys.executable, __file__, "--child", spec], check=True,
                                  capture_output=True, text=True)
            runs[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        server.stop()
        redis.stop()
    results = {**header("lookahead_memory.py", None, time.perf_counter() - t0, args),
               "machine": machine(), "latency_ms": args.latency_ms, "runs": runs}
    text = render(results)
    write_outputs(args.out, "lookahead_memory", results, text)
    print(text)


if __name__ == "__main__":
    main()
