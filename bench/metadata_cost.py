"""What ``video_metadata`` costs, cold (nothing in Redis) and warm (index in Redis).

    python bench/metadata_cost.py [--agent-latency-ms 0] [--repeat 5]

Uses the bench dataset (made once under bench/.data), a private redis-server
and the real agent on loopback (fluxon_video.testing). Cold: Redis flushed, a
new patcher, so the frame index is built by a demux-only scan of bytes
fetched from the agent and stored. Warm: a new patcher (nothing cached in
the process), index blob in Redis. Prints, per file, the median time, the
agent requests (one stat plus remote reads), the bytes the agent sent and the
KV reads, next to PyAV opening the local file and reading its frame count.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from dataset import DATASET, prepare  # noqa: E402
from fluxon_access import make_patcher, store, write_agent_config  # noqa: E402

import fluxon_video as fv  # noqa: E402
from fluxon_video.testing import AgentProcess, RedisServer  # noqa: E402

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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent-latency-ms", type=float, default=0.0)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data", type=Path, default=ROOT / "bench" / ".data" / "videos")
    args = parser.parse_args()
    videos = {v.path.name: v for v in prepare([s for s in DATASET if s.name in FILES], args.data)}
    work = Path(tempfile.mkdtemp(prefix="fluxon-meta-"))
    config = write_agent_config(work / "agent.toml", "data", args.data)
    with RedisServer(work) as redis_server, AgentProcess(
            config, ["--inject-latency-ms", str(args.agent_latency_ms)]) as agent:
        def patcher() -> fv.FluxonFsPatcher:
            return make_patcher(store("data", args.data, agent.url, redis_server.url))

        print(f"agent latency {args.agent_latency_ms} ms, median of {args.repeat}")
        print("| file | size MiB | case | ms | agent requests | agent KiB | KV reads | "
              "index from | PyAV open ms |")
        print("|---|---|---|---|---|---|---|---|---|")
        for name in FILES:
            video = videos[name]
            peer = statistics.median(pyav_open_ms(video.path) for _ in range(args.repeat))
            for case in ("cold", "warm"):
                runs = []
                for _ in range(args.repeat):
                    if case == "cold":
                        redis_server.client().flushall()
                    with patcher() as p:
                        meta, stats = p.video_metadata_with_stats("data", name)
                    runs.append(stats)
                ms = statistics.median(s.total_ms for s in runs)
                s = runs[-1]
                print(f"| {name} | {video.path.stat().st_size / 2**20:.2f} | {case} | {ms:.1f} | "
                      f"{1 + s.remote_reads} | {s.remote_bytes / 1024:.0f} | "
                      f"{1 + s.kv_hits + s.kv_misses} | {s.index_source} | {peer:.1f} |")
            assert meta.num_frames > 0


if __name__ == "__main__":
    main()
