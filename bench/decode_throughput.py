"""Full sequential decode throughput of one file: fluxon_video vs PyAV.

    python bench/decode_throughput.py FILE [--height H --width W] [--threads N] [--repeat R]

Prints frames per second (median of --repeat runs) for both, converting every
frame to RGB at the requested size (native size by default) and keeping them
all in memory, and the read callbacks / page misses of one fluxon decode.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time

import av

import fluxon_video as fv


def probe(path: str) -> tuple[int, int, int]:
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-count_packets",
                          "-show_entries", "stream=width,height,nb_read_packets", "-of", "csv=p=0",
                          path], check=True, capture_output=True, text=True).stdout
    width, height, count = (int(x) for x in out.strip().split(","))
    return width, height, count


def pyav_decode(path: str, height: int, width: int, threads: int) -> int:
    """Every frame as RGB, kept (like fluxon's batch), as a PyAV user would."""
    frames = []
    with av.open(path) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        stream.codec_context.thread_count = threads
        for frame in container.decode(stream):
            frames.append(frame.to_ndarray(format="rgb24", width=width, height=height,
                                           interpolation="BILINEAR"))
    return len(frames)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--height", type=int)
    ap.add_argument("--width", type=int)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    native_w, native_h, count = probe(args.file)
    height, width = args.height or native_h, args.width or native_w
    indices = list(range(count))
    runs: dict[str, list[float]] = {"fluxon_video": [], "pyav": []}
    stats = {}
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        frames, stats = fv.decode_local_frames(args.file, indices, height, width, args.threads)
        runs["fluxon_video"].append(time.perf_counter() - t0)
        del frames
        t0 = time.perf_counter()
        assert pyav_decode(args.file, height, width, args.threads) == count
        runs["pyav"].append(time.perf_counter() - t0)
    print(f"{args.file}: {native_w}x{native_h}, {count} frames -> {width}x{height} rgb24, "
          f"{args.threads} decoder threads, median of {args.repeat}")
    for name, times in runs.items():
        median = statistics.median(times)
        print(f"  {name:>12}: {count / median:7.1f} frames/s ({median * 1e3:.0f} ms)")
    print(f"  fluxon_video one decode: {stats['read_calls']} read callbacks, "
          f"{stats['page_hits']} page hits, "
          f"{stats['page_misses']} page misses, {stats['bytes_fetched']} bytes fetched, "
          f"{stats['seek_calls']} seeks")


if __name__ == "__main__":
    main()
