#!/usr/bin/env python3
"""Remote-store benchmark (issue 15): fluxon through FluxonFS vs peers the way their users
read remote videos, under one model of the remote store.

The store model, the same for every contender: each origin server waits L ms
(--latencies) before answering each request (the fluxon agent with
--inject-latency-ms before every stat and read; bench/range_server.py, an
aiohttp HTTP Range server over the dataset, before every GET and HEAD), and
every connection goes through the same TCP relay (bench/range_server.py),
which caps each connection at --bandwidth-mbps MB/s (token bucket) and counts
connections. Requests and bytes are the servers' own counters (the agent's
/metrics: fluxon_agent_requests_total, fluxon_agent_served_bytes_total).

Rows (a "row" is one pipeline, timed over the same items as every other row):
  pyav        fsspec HTTP file object (block 256 KiB, fsspec's default 5 MiB),
              and "download": one GET, then decode from memory
  torchcodec  VideoDecoder(fsspec file, seek_mode="exact") at both block sizes
  decord      VideoReader(fsspec file): decord calls read() once, the whole file
  fluxon      cold (Redis flushed, new process), warm-kv (new process, Redis
              warm, default settings), warm-kv+shared (the same with
              metadata_cache_shared: the stat the cold pass had authorised
              comes with the index in one KV round trip, no agent request),
              warm-reader (the cold process's pool again)

Workloads, at every latency (default 0, 2 and 10 ms):
  clips     a random 16-frame clip (stride 4, 224x224) of each of 24 videos,
            shuffled, a new open per item
  batched   K=8 clips of one video per item: fluxon read_many_numpy_with_stats
            vs the best peers of "clips" reading them one by one (one open)
  metadata  time until frame count, fps and duration are known: fluxon
            video_metadata cold and warm vs opening the file with each peer

A reference row, "fluxon local file" (fluxon's decoder on the local files, no
store), runs at the target latency (10 ms, or the highest): what decoding
alone costs. The metadata rows of PyAV and torchcodec (approximate) use the
smallest block size (opening reads least with it).

Rows are interleaved (the order rotates every round); figures are medians
over --rounds with their ranges; nothing fails on a timing. Frames are
checked as in bench/run.py: fluxon bit-exact against the ffmpeg CLI, peers
the right frame within tolerance, else the row is flagged and is never the
"best exact peer". Writes remote.md, remote.json and remote.png to --out.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import select
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

# Keep this module's top level light: every spawned child imports it again.
from cli import finish, header, parse_size  # noqa: E402
from fluxon_access import store, write_agent_config  # noqa: E402
from machine import machine, versions  # noqa: E402
from passes import failed_pass  # noqa: E402
from remote_summary import label  # noqa: E402

CLIP_LEN, STRIDE, SIZE = 16, 4, 224
EXPORT = "remote"
KiB, MiB = 1 << 10, 1 << 20
FAMILIES = ("pyav", "torchcodec", "decord")
DEFAULTS = {"latencies": "0,2,10", "rounds": "2", "videos": 24, "batched_items": 3}
QUICK = {"latencies": "10", "rounds": "1", "videos": 12, "batched_items": 2}
PASS_TIMEOUT_S = 900
FLUXON_CACHES = ("cold", "warm-kv", "warm-kv+shared")
# How long a shared stat lives in the shared rows: long enough to outlast the
# passes between the cold pass that writes it and the row that reads it (a
# static training set can afford minutes; the default TTL is 5 s).
SHARED_STAT_TTL_MS = 120_000


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python bench/remote.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="smoke run (~2-3 min): 10 ms only, 1 round, 12 videos, 2 batched "
                         "items; results to <data>/quick-results unless --out is given")
    ap.add_argument("--latencies", help="per-request latencies, ms, comma separated "
                                        "(default: 0,2,10; quick: 10)")
    ap.add_argument("--bandwidth-mbps", type=float, default=50.0,
                    help="per-connection cap in MB/s (10^6 bytes/s), server -> client, for "
                         "every contender (the relay); 0: no cap (default: 50)")
    ap.add_argument("--rounds", help="interleaved rounds per workload: one number for every "
                                     "latency, or one per latency, comma separated; figures are "
                                     "medians over rounds (default: 2; quick: 1)")
    ap.add_argument("--videos", type=int, help="videos in the clips and metadata workloads, "
                                               "one item each per round (default: 24, quick: 12)")
    ap.add_argument("--batched-items", type=int,
                    help="videos per round in the batched workload (default: 3, quick: 2)")
    ap.add_argument("--batched-clips", type=int, default=8, help="K, clips per batched item "
                                                                 "(default: 8)")
    ap.add_argument("--block-sizes", default="256K,default",
                    help="fsspec block sizes of the PyAV and torchcodec rows; 'default' is "
                         "fsspec's (5 MiB) (default: 256K,default)")
    ap.add_argument("--threads", type=int, default=1,
                    help="decoder threads for every contender (default: 1)")
    ap.add_argument("--piece-size", type=int, default=None,
                    help="FluxonFS piece size, bytes (default: the export default)")
    ap.add_argument("--seed", type=int, default=15, help="clip sampling seed (default: 15)")
    ap.add_argument("--data", type=Path, default=BENCH / ".data",
                    help="videos (made once) and scratch files (default: bench/.data)")
    ap.add_argument("--out", type=Path, default=None,
                    help="where remote.md/.json/.png go (default: bench/results)")
    ap.add_argument("--render", type=Path, metavar="JSON",
                    help="only redraw remote.md and remote.png from a remote.json into --out")
    args = finish(ap, ap.parse_args(argv), DEFAULTS, QUICK,
                  ("videos", "batched_items", "batched_clips", "threads"))
    try:
        args.latency_list = [float(x) for x in args.latencies.split(",") if x.strip()]
        args.block_list = [None if b.strip() == "default" else parse_size(b)
                           for b in args.block_sizes.split(",") if b.strip()]
    except ValueError as exc:
        ap.error(str(exc))
    if not args.latency_list or any(x < 0 for x in args.latency_list):
        ap.error("--latencies: one or more values >= 0")
    lats = args.latency_list
    args.target_latency = 10.0 if 10.0 in lats else max(lats)
    try:
        rounds = [int(x) for x in args.rounds.split(",")]
    except ValueError as exc:
        ap.error(f"--rounds: {exc}")
    if len(rounds) == 1:
        rounds *= len(lats)
    if len(rounds) != len(lats) or min(rounds) < 1:
        ap.error("--rounds: one number >= 1, or one per latency")
    args.rounds_for = dict(zip(lats, rounds))
    args.max_rounds = max(rounds)
    if args.bandwidth_mbps < 0:
        ap.error("--bandwidth-mbps must be >= 0")
    return args


# ---- dataset ----

def remote_specs() -> list[Any]:
    """24 videos of 4-7.5 s: 16 H.264 720p (8 MP4 faststart, 6 moov-at-end, 2 MKV),
    4 HEVC 720p, 4 H.264 1080p; 30 fps, GOP 60 (30 for half the moov-at-end ones)."""
    from dataset import HEVC, X264, VideoSpec

    secs = [4, 4.5, 5, 5.5, 6, 6.5, 7, 7.5]
    specs = [VideoSpec(f"h264_720p_faststart_{k:02d}.mp4", 1280, 720, secs[k], 60, X264,
                       faststart=True) for k in range(8)]
    specs += [VideoSpec(f"h264_720p_moovend_{k:02d}.mp4", 1280, 720, secs[k + 1],
                        30 if k % 2 else 60, X264) for k in range(6)]
    specs += [VideoSpec(f"h264_720p_{k:02d}.mkv", 1280, 720, secs[2 * k + 1], 60, X264)
              for k in range(2)]
    specs += [VideoSpec(f"hevc_720p_{k:02d}.mp4", 1280, 720, secs[2 * k], 60, HEVC,
                        faststart=True) for k in range(4)]
    specs += [VideoSpec(f"h264_1080p_faststart_{k:02d}.mp4", 1920, 1080, secs[k], 60, X264,
                        faststart=True) for k in range(4)]
    return specs


def balanced(specs: list[Any], n: int) -> list[Any]:
    """n specs spread over the kinds (every other one first, then the rest)."""
    order = specs[::2] + specs[1::2]
    return order[:n] if n <= len(specs) else order


def mixed(names: list[str], n: int) -> list[str]:
    """n names taking each kind (the name without its number) in turn: 720p H.264
    faststart, HEVC, 1080p, moov-at-end, MKV."""
    prefer = ["h264_720p_faststart", "hevc_720p", "h264_1080p_faststart", "h264_720p_moovend"]
    kinds: dict[str, list[str]] = {}
    for name in sorted(names, key=lambda x: next((i for i, p in enumerate(prefer)
                                                  if x.startswith(p)), len(prefer))):
        kinds.setdefault(name.rsplit("_", 1)[0], []).append(name)
    out: list[str] = []
    while len(out) < min(n, len(names)):
        for group in kinds.values():
            if group and len(out) < n:
                out.append(group.pop(0))
    return out


def scan_ranges(video: Any) -> list[tuple[int, int]]:
    """The (offset, length) ranges a cold fluxon open's scan reads: the whole file
    for the containers the library scans whole (indexing.WHOLE_FILE_SCANS), else
    the container bytes before the first video packet and after the last."""
    from fluxon_video.indexing import WHOLE_FILE_SCANS

    if video.name.lower().endswith(WHOLE_FILE_SCANS):
        return [(0, video.size)]
    head = min(p["pos"] for p in video.packets)
    tail = max(p["pos"] + p["size"] for p in video.packets)
    return [(o, n) for o, n in ((0, head), (tail, video.size - tail)) if n > 0]


def piece_model(video: Any, clips: list[list[int]], piece: int) -> dict[str, int]:
    """Bytes of the pieces holding the clips' GOP spans (``span_piece_bytes``), and of those
    plus the pieces a cold open's scan reads (``open_model_bytes``, see scan_ranges)."""
    def pieces(lo: int, hi: int) -> set[int]:
        return set(range(lo // piece, (hi - 1) // piece + 1)) if hi > lo else set()

    span: set[int] = set()
    for clip in clips:
        packets = [video.packets[i] for i in video.span_packets(clip)]
        span |= pieces(min(p["pos"] for p in packets),
                       max(p["pos"] + p["size"] for p in packets))
    opened = set(span)
    for offset, length in scan_ranges(video):
        opened |= pieces(offset, offset + length)

    def size(chosen: set[int]) -> int:
        return sum(min(piece, video.size - i * piece) for i in chosen)

    return {"span_piece_bytes": size(span), "open_model_bytes": size(opened)}


# ---- the servers ----

class RelayProcess:
    """bench/range_server.py in a subprocess; reads its one-line JSON greeting."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log = log
        with open(log, "ab") as err:
            self.proc = subprocess.Popen([sys.executable, str(BENCH / "range_server.py"), *args],
                                         stdout=subprocess.PIPE, stderr=err)
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline() if ready else b""
        if not line:
            self.stop()
            raise RuntimeError(f"range_server.py did not start: {log.read_text()[-2000:]}")
        info = json.loads(line)
        self.url, self.control = info["url"], info["control"]

    def set(self, **params: float) -> None:
        query = "&".join(f"{k}={v}" for k, v in params.items())
        urllib.request.urlopen(f"{self.control}/set?{query}", timeout=10).read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Store:
    """Redis, the agent (restarted per latency, same port) and the two relays."""

    def __init__(self, work: Path, video_dir: Path, bandwidth_mbps: float) -> None:
        from fluxon_video.testing import RedisServer, free_port

        self.work, self.video_dir = work, video_dir
        self.redis = RedisServer(work / "redis").start()
        self.config = write_agent_config(work / "agent.toml", EXPORT, video_dir.resolve())
        self.agent_port = free_port()
        self.agent: Any = None
        bw = ["--bandwidth-mbps", str(bandwidth_mbps)]
        self.range = RelayProcess(["--root", str(video_dir.resolve()), *bw],
                                  work / "range_server.log")
        self.agent_relay = RelayProcess(["--upstream", f"127.0.0.1:{self.agent_port}", *bw],
                                        work / "agent_relay.log")

    def set_latency(self, latency_ms: float) -> None:
        from fluxon_video.testing import AgentProcess

        if self.agent is not None:
            self.agent.stop()
        self.agent = AgentProcess(self.config, ["--inject-latency-ms", str(latency_ms)],
                                  port=self.agent_port).start()
        self.range.set(latency_ms=latency_ms)

    def urls(self) -> dict[str, str]:
        return {"range_url": self.range.url, "range_control": self.range.control,
                "range_metrics": self.range.control + "/metrics",
                "agent_url": self.agent_relay.url,
                "agent_metrics": f"http://127.0.0.1:{self.agent_port}/metrics",
                "agent_relay_control": self.agent_relay.control}

    def flush(self) -> None:
        client = self.redis.client()
        client.flushall()
        client.close()

    def stop(self) -> None:
        for server in (self.agent, self.agent_relay, self.range, self.redis):
            if server is not None:
                server.stop()


# ---- child processes ----

class PeerWorker:
    """A long-lived process for one peer library (remote_tasks.peer_worker)."""

    def __init__(self, ctx: Any, family: str, warm_path: str, threads: int) -> None:
        import remote_tasks

        self.family = family
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=remote_tasks.peer_worker,
                                args=(child, family, warm_path, threads), daemon=True)
        self.proc.start()
        child.close()
        hello = self.conn.recv() if self.conn.poll(300) else {"ready": False, "error": "timeout"}
        self.ready = hello.get("ready", False)
        self.error = hello.get("error", "")
        self.versions = hello.get("versions", {})

    def run(self, task: dict) -> dict:
        self.conn.send(task)
        if not self.conn.poll(PASS_TIMEOUT_S):
            self.stop()
            self.ready = False
            return {"row": task["row"], "fatal": f"no answer within {PASS_TIMEOUT_S} s"}
        return self.conn.recv()

    def stop(self) -> None:
        if self.proc.is_alive():
            try:
                self.conn.send(None)
            except OSError:
                pass
            self.proc.join(10)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join()


def run_fluxon(ctx: Any, task: dict) -> dict:
    """One fluxon pass in a new process."""
    import remote_tasks

    conn, child = ctx.Pipe()
    proc = ctx.Process(target=remote_tasks.fluxon_child, args=(child, task), daemon=True)
    proc.start()
    child.close()
    if conn.poll(PASS_TIMEOUT_S):
        try:
            out = conn.recv()
        except EOFError:
            out = {"fatal": f"the process exited with {proc.exitcode}"}
    else:
        proc.kill()
        out = {"fatal": f"no answer within {PASS_TIMEOUT_S} s"}
    proc.join(30)
    return out


class Bench:
    def __init__(self, args: argparse.Namespace, argv: list[str]) -> None:
        self.args, self.argv = args, argv
        self.video_dir = args.data / "remote-videos"
        self.work = args.data / "remote-work"
        self.t0 = time.perf_counter()
        self.versions: dict[str, str] = {}
        self.notes: list[str] = []
        self.skipped: dict[str, str] = {}
        self.passes: list[dict] = []  # every pass result, with its latency, workload, round
        self.videos: dict[str, Any] = {}
        self.plans: dict[str, list[list[dict]]] = {}
        self.workers: dict[str, PeerWorker] = {}
        self.store: Store | None = None
        self.load: list[tuple[str, list[float]]] = []
        self.target_latency = args.target_latency

    def say(self, text: str) -> None:
        print(f"[{time.perf_counter() - self.t0:6.0f} s] {text}", flush=True)

    # ---- dataset, plans, references ----

    def make_dataset(self) -> None:
        from dataset import prepare

        specs = balanced(remote_specs(), self.args.videos)
        self.say(f"dataset: {len(specs)} videos under {self.video_dir} (made once)")
        for spec in specs:
            video = prepare([spec], self.video_dir)[0]
            self.videos[video.name] = video

    def make_plans(self) -> None:
        import numpy as np
        from dataset import sample_clips

        names = list(self.videos)
        a = self.args
        batched = mixed(names, a.batched_items)
        for r in range(a.max_rounds):
            rng = np.random.default_rng([a.seed, r])
            order = [names[i] for i in rng.permutation(len(names))]
            self.plans.setdefault("clips", []).append(
                [{"video": n, "clips": sample_clips(self.videos[n].frames, 1, CLIP_LEN, STRIDE, rng)}
                 for n in order])
            self.plans.setdefault("batched", []).append(
                [{"video": n, "clips": sample_clips(self.videos[n].frames, a.batched_clips,
                                                    CLIP_LEN, STRIDE, rng)} for n in batched])
            self.plans.setdefault("metadata", []).append(
                [{"video": n} for n in (names[i] for i in rng.permutation(len(names)))])
        piece = self.piece_size()
        for workload in ("clips", "batched"):
            for plan in self.plans[workload]:
                for item in plan:
                    video = self.videos[item["video"]]
                    item["needed_bytes"] = (video.span_bytes(item["clips"])
                                            + video.container_bytes())
                    item.update(piece_model(video, item["clips"], piece))

    def piece_size(self) -> int:
        from fluxon_video.fs.config import FluxonFsExport

        return self.args.piece_size or FluxonFsExport.__dataclass_fields__["piece_size"].default

    def make_references(self) -> None:
        from frames import count_note, needed, references

        refs = self.work.parent / "remote-refs"
        refs.mkdir(parents=True, exist_ok=True)
        wanted: dict[str, set[int]] = {n: set() for n in self.videos}
        for workload in ("clips", "batched"):
            for plan in self.plans[workload]:
                for item in plan:
                    wanted[item["video"]].update(needed(item["clips"]))
        self.ref_paths: dict[str, Path] = {}
        todo = []
        for name, indices in wanted.items():
            video = self.videos[name]
            digest = hashlib.sha1(f"{video.spec.spec_hash()}{sorted(indices)}".encode()).hexdigest()
            path = refs / f"{name}-{SIZE}-{digest[:12]}.npz"
            self.ref_paths[name] = path
            if not path.exists() and indices:
                todo.append((name, sorted(indices), path))

        self.say(f"references: {len(todo)} to make with the ffmpeg CLI "
                 f"({len(wanted) - len(todo)} cached)")
        made = references({name: (self.videos[name].path, SIZE, SIZE, indices)
                           for name, indices, _ in todo}, workers=2)
        for name, indices, path in todo:
            self.notes += filter(None, [count_note(name, self.videos[name].frames, made[name])])
            made[name].save(path.with_suffix(".part.npz"))
            os.replace(path.with_suffix(".part.npz"), path)
        # Keep this run's reference of each video and the newest other one (a --quick
        # plan and a full plan can alternate without remaking them); drop older ones.
        for name, path in self.ref_paths.items():
            others = sorted((p for p in refs.glob(f"{name}-{SIZE}-*.npz") if p != path),
                            key=lambda p: p.stat().st_mtime, reverse=True)
            for stale in others[1:]:
                stale.unlink(missing_ok=True)

    def video_table(self) -> dict[str, dict]:
        """What every task gets about each video (URL, pts table, reference)."""
        assert self.store is not None
        out = {}
        for name, v in self.videos.items():
            pts = sorted(p["pts"] for p in v.packets)
            keys = sorted(p["pts"] for p in v.packets if p["key"])
            out[name] = {"name": name, "relpath": name, "url": f"{self.store.range.url}/{name}",
                         "path": str(v.path), "pts": pts, "keys": keys,
                         "ref": str(self.ref_paths[name]), "frames": v.frames,
                         "fps": v.spec.fps}
        return out

    # ---- processes ----

    def start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self.say("servers: redis-server, the agent, range_server.py + relays on loopback")
        self.store = Store(self.work, self.video_dir, self.args.bandwidth_mbps)
        ctx = mp.get_context("spawn")
        self.ctx = ctx
        warm = str(next(iter(self.videos.values())).path)
        for family in FAMILIES:
            self.say(f"starting the {family} worker")
            worker = PeerWorker(ctx, family, warm, self.args.threads)
            if worker.ready:
                self.workers[family] = worker
                self.versions.update(worker.versions)
            else:
                self.skipped[family] = worker.error
                self.notes.append(f"{family} skipped: {worker.error}")
                worker.stop()

    def stop(self) -> None:
        for worker in self.workers.values():
            worker.stop()
        if self.store is not None:
            self.store.stop()

    def fluxon_config(self) -> dict:
        assert self.store is not None
        return store(EXPORT, self.video_dir.resolve(), self.store.agent_relay.url,
                     self.store.redis.url, piece_size=self.piece_size())

    # ---- rows and passes ----

    def peer_rows(self, workload: str) -> list[dict]:
        blocks = self.args.block_list
        rows: list[dict] = []
        if workload == "clips":
            rows += [{"family": "pyav", "mode": "fsspec", "block_size": b} for b in blocks]
            rows.append({"family": "pyav", "mode": "download"})
            rows += [{"family": "torchcodec", "mode": "fsspec", "block_size": b,
                      "seek_mode": "exact"} for b in blocks]
            rows.append({"family": "decord", "mode": "fsspec", "block_size": None})
        elif workload == "metadata":  # the smallest block: opening reads least with it
            small = min(blocks, key=lambda b: b or 5 * MiB)
            rows.append({"family": "pyav", "mode": "fsspec", "block_size": small})
            rows.append({"family": "torchcodec", "mode": "fsspec", "block_size": small,
                         "seek_mode": "approximate"})
            rows.append({"family": "torchcodec", "mode": "fsspec", "block_size": None,
                         "seek_mode": "exact"})
            rows.append({"family": "decord", "mode": "fsspec", "block_size": None})
        return [r for r in rows if r["family"] in self.workers]

    def batched_peer_rows(self, latency: float) -> list[dict]:
        """The best exact peer row of "clips" at this latency, the fastest peer row if it is
        another (flagged) one, PyAV download (one GET serves all K clips), and PyAV download
        decoding the union of the K clips in one pass per cluster (context, not "one by one")."""
        summaries = [s for s in self.summaries() if s["latency_ms"] == latency
                     and s["workload"] == "clips" and s["row"]["family"] != "fluxon"
                     and s["clips_per_s"]]
        chosen: list[dict] = []
        exact = [s for s in summaries if s["ok"]]
        for pool in (exact, summaries):
            if pool:
                best = max(pool, key=lambda s: s["clips_per_s"])["row"]
                if best not in chosen:
                    chosen.append(best)
        download = {"family": "pyav", "mode": "download"}
        if "pyav" in self.workers:
            if download not in chosen:
                chosen.append(download)
            chosen.append({**download, "union": True})  # context: batching a peer can do
        return chosen

    def task(self, workload: str, items: list[dict], latency: float, r: int) -> dict:
        assert self.store is not None
        return {"workload": workload, "items": items, "videos": self.video_table(),
                "store": self.store.urls(), "threads": self.args.threads,
                "latency_ms": latency, "round": r}

    def record(self, result: dict, workload: str, latency: float, r: int) -> dict:
        result.update({"workload": workload, "latency_ms": latency, "round": r})
        self.passes.append(result)
        return result

    def run_peer(self, row: dict, workload: str, latency: float, r: int) -> None:
        task = {**self.task(workload, self.plans[workload][r], latency, r), "row": row}
        result = self.workers[row["family"]].run(task)
        self.record(result, workload, latency, r)
        self.say(f"  {workload} L={latency:g} ms round {r + 1}: {label(row)}: {brief(result)}")

    def run_fluxon(self, workload: str, latency: float, r: int) -> None:
        assert self.store is not None
        warm = str(next(iter(self.videos.values())).path)
        for cache in FLUXON_CACHES:
            if cache == "cold":
                self.store.flush()
            shared = cache == "warm-kv+shared"
            fx = self.fluxon_config()
            if shared:
                fx = {**fx, "metadata_cache_shared": True,
                      "metadata_cache_ttl_ms": SHARED_STAT_TTL_MS}
            task = {**self.task(workload, self.plans[workload][r], latency, r),
                    "fluxon": fx, "cache": cache, "warm_path": warm,
                    "warm_reader": cache == "cold" and workload == "clips",
                    "local_pass": (cache == "warm-kv" and workload == "clips"
                                   and latency == self.target_latency)}
            if shared:  # another process authorised the stats first (untimed)
                primed = run_fluxon(self.ctx, {**task, "prime_shared_stats": True})
                if "fatal" in primed:
                    raise RuntimeError(f"priming shared stats failed: {primed['fatal']}")
            out = run_fluxon(self.ctx, task)
            if "fatal" in out:
                self.record(failed_pass({"family": "fluxon", "cache": cache}, out["fatal"]),
                            workload, latency, r)
                self.say(f"  {workload} L={latency:g} ms round {r + 1}: fluxon {cache}: "
                         f"FAILED {out['fatal']}\n{out.get('traceback', '')}")
                continue
            self.versions.update(out.get("versions", {}))
            for result in out["passes"]:
                self.record(result, workload, latency, r)
                self.say(f"  {workload} L={latency:g} ms round {r + 1}: {label(result['row'])}: "
                         f"{brief(result)}")

    def run_workload(self, workload: str, latency: float) -> None:
        rows = (self.batched_peer_rows(latency) if workload == "batched"
                else self.peer_rows(workload))
        slots: list[dict | None] = [*rows, None]  # None: the FLUXON_CACHES passes
        for r in range(self.args.rounds_for[latency]):
            shift = r % len(slots)
            for slot in slots[shift:] + slots[:shift]:
                if slot is None:
                    self.run_fluxon(workload, latency, r)
                else:
                    self.run_peer(slot, workload, latency, r)

    def run(self) -> int:
        self.make_dataset()
        self.make_plans()
        self.make_references()
        self.load.append(("start", list(os.getloadavg())))
        try:
            self.start()
            for latency in self.args.latency_list:
                assert self.store is not None
                self.store.set_latency(latency)
                self.say(f"latency {latency:g} ms, bandwidth "
                         f"{self.args.bandwidth_mbps:g} MB/s per connection")
                for workload in ("clips", "batched", "metadata"):
                    self.run_workload(workload, latency)
                self.load.append((f"after {latency:g} ms", list(os.getloadavg())))
        finally:
            self.stop()
        results = self.results()
        import remote_report

        written = remote_report.write(results, self.args.out)
        self.say("wrote " + ", ".join(str(p) for p in written))
        return 0

    # ---- results ----

    def summaries(self) -> list[dict]:
        import remote_summary

        return remote_summary.summarise(self.passes, self.args.batched_clips)

    def results(self) -> dict:
        return {
            **header("remote.py", self.argv, time.perf_counter() - self.t0, self.args),
            "conditions": self.conditions(),
            "videos": [self.facts(v) for v in self.videos.values()],
            "plans": self.plans,
            "needed_bytes": self.needed_bytes(),
            "passes": self.passes,
            "skipped": self.skipped,
            "notes": self.notes,
        }

    @staticmethod
    def facts(video: Any) -> dict:
        return video.facts()

    def needed_bytes(self) -> dict[str, list[int]]:
        """Per clips round: each item's GOP span bytes + its video's container bytes."""
        out = {}
        for workload in ("clips", "batched"):
            out[workload] = [
                sum(self.videos[i["video"]].span_bytes(i["clips"])
                    + self.videos[i["video"]].container_bytes() for i in plan)
                for plan in self.plans[workload]]
        return out

    def conditions(self) -> dict:
        a = self.args
        return {
            "machine": {**machine(), "load_average": self.load},
            "versions": {**versions(), **self.versions},
            "store": {
                "latencies_ms": a.latency_list, "bandwidth_mbps_per_connection": a.bandwidth_mbps,
                "peers": "bench/range_server.py --root (aiohttp, HTTP/1.1, Range) on loopback",
                "fluxon": "the agent (python -m fluxon_video agent --inject-latency-ms L) on "
                          "loopback; Redis on loopback, no persistence",
                "relay": "bench/range_server.py relay in front of both servers: per-connection "
                         "token bucket (64 KiB burst) on server -> client bytes; counts "
                         "connections",
                "latency": "each origin sleeps L before answering each request (agent: "
                           "/v1/stat and /v1/read; range server: every GET and HEAD)",
                "piece_size": self.fluxon_config()["piece_size"] if self.store else None,
            },
            "workload": {"clip": f"{CLIP_LEN} frames, stride {STRIDE}, {SIZE}x{SIZE} RGB",
                         "rounds": {f"{k:g}": v for k, v in a.rounds_for.items()},
                         "threads": a.threads,
                         "batched_clips": a.batched_clips},
        }


def brief(result: dict) -> str:
    if result.get("fatal"):
        return f"FAILED {result['fatal']}"
    ms = result.get("item_ms") or []
    if not ms:
        return "no items: " + "; ".join(result.get("errors", []))[:200]
    server = result.get("server", {})
    check = result.get("check") or {}
    return (f"{len(ms)} items, p50 {statistics.median(ms):.0f} ms/item, "
            f"{server.get('requests', 0) / len(ms):.1f} req/item, "
            f"{server.get('bytes', 0) / len(ms) / MiB:.2f} MiB/item, "
            f"{server.get('connections_used', 0):.0f} conn"
            + (f", {check.get('verdict', '')[:60]}" if check else "")
            + (f", {result['error_count']} errors" if result.get("error_count") else ""))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        import remote_report

        written = remote_report.write(json.loads(args.render.read_text()), args.out)
        print("wrote " + ", ".join(str(p) for p in written))
        return 0
    bench = Bench(args, argv if argv is not None else sys.argv[1:])
    return bench.run()


if __name__ == "__main__":
    sys.exit(main())
