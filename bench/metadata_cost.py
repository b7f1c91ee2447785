"""What ``video_metadata`` costs, cold and warm (see --help or bench/README.md)."""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dataset import DATASET, prepare  # noqa: E402
from harness import BENCH, table, tool_parser  # noqa: E402
from stores import agent, make_patcher, store  # noqa: E402

FILES = ["h264_720p_gop250_faststart.mp4", "h264_720p_gop30_moov_end.mp4",
         "vp9_360p_gop60.webm", "av1_144p_gop60.mkv"]


def pyav_open_ms(path: Path) -> float:
    import av

    t0 = time.perf_counter()
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        _ = (stream.frames, stream.average_rate, stream.duration)
    return (time.perf_counter() - t0) * 1e3


def main() -> None:
    from fluxon_video.testing import RedisServer

    ap = tool_parser("metadata_cost.py")
    ap.add_argument("--agent-latency-ms", type=float, default=0.0, help="(default: 0)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per case (default: 5)")
    ap.add_argument("--data", type=Path, default=BENCH / ".data" / "videos",
                    help="the videos (default: bench/.data/videos)")
    args = ap.parse_args()
    videos = {v.name: v for v in prepare([s for s in DATASET if s.name in FILES], args.data)}
    work = Path(tempfile.mkdtemp(prefix="fluxon-meta-"))
    redis, server = RedisServer(work).start(), agent(work, "data", args.data,
                                                     args.agent_latency_ms)
    rows = []
    try:
        for name in FILES:
            peer = statistics.median(pyav_open_ms(videos[name].path) for _ in range(args.repeat))
            for case in ("cold", "warm"):
                runs = []
                for _ in range(args.repeat):
                    if case == "cold":
                        redis.client().flushall()
                    with make_patcher(store("data", args.data, server.url, redis.url)) as p:
                        runs.append(p.video_metadata_with_stats("data", name)[1])
                s = runs[-1]
                rows.append([name, f"{videos[name].size / 2**20:.2f}", case,
                             f"{statistics.median(r.total_ms for r in runs):.1f}",
                             str(1 + s.remote_reads), f"{s.remote_bytes / 1024:.0f}",
                             str(1 + s.kv_hits + s.kv_misses), s.index_source, f"{peer:.1f}"])
    finally:
        server.stop()
        redis.stop()
    print(f"agent latency {args.agent_latency_ms} ms, median of {args.repeat}")
    print(table(["file", "size MiB", "case", "ms", "agent requests", "agent KiB", "KV reads",
                 "index from", "PyAV open ms"], rows))


if __name__ == "__main__":
    main()
