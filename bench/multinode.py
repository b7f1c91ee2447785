#!/usr/bin/env python3
"""Multi-node benchmark: three "nodes" (separate processes, separate patchers) share one
3-master Redis Cluster and one agent.

    python bench/multinode.py                       # ~1 min on 2 cores, results to bench/results/
    python bench/multinode.py --quick               # ~20 s smoke run, results to bench/.data/
    python bench/multinode.py --agent-latency-ms 2  # the agent waits 2 ms per stat/read

Makes (once, cached under --data) --videos testsrc2 videos of --seconds at
640x360, 30 fps, GOP 60 (H.264 half faststart and half moov-at-end, one
HEVC, one VP9 WebM), starts a real 3-master Redis Cluster
(``fluxon_video.testing.RedisCluster``: ``redis-server --cluster-enabled
yes`` x3 + ``redis-cli --cluster create``) and the real agent (``python -m
fluxon_video agent``) on loopback, and draws per epoch --clips random
16-frame clips, stride 4, 224x224, the same number of each video, in a
shuffled order (epoch 2 is a new draw, as a training epoch is). Every node
reads exactly the epoch's clips, one ``pool.read_frames_numpy`` per clip, in
a fresh spawned process with its own patcher (pickled as config, as a
DataLoader worker gets it). One run, from a flushed cluster:

  epoch 1  node 1 reads the epoch alone (cold), then node 2, then node 3
           (each alone: warm KV, 0 bytes from the agent)
  epoch 2  the three nodes read the new draw at the same time (they start
           together); pieces epoch 1 touched are warm, new ones come from
           the agent, possibly to more than one node

--repeat runs (default 3); clips/s is the median. Reported per node per
epoch: bytes and reads from the agent, KV hits, misses, round trips (one per
range read: its pieces in one pipelined read per cluster node; one per
frame-index load) and errors, frame indexes scanned / taken from the KV,
clips/s (clips / wall time of the node's reads, process start-up excluded;
backfills drained after the clock stops), CPU seconds, and whether every
frame equals the ffmpeg CLI's (bilinear, rgb24) bit for bit. Per epoch: the
agent's own count of bytes served (its /metrics) and the bytes of the pieces
the epoch added to the cluster (touched for the first time, once). Writes
multinode.md and multinode.json to --out.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import numpy as np  # noqa: E402

import fluxon_video as fv  # noqa: E402
from dataset import HEVC, X264, Video, VideoSpec, prepare, sample_clips, vp9  # noqa: E402
from fluxon_video.testing import AgentProcess, RedisCluster  # noqa: E402
from scenario import finish, scenario_parser, write_outputs  # noqa: E402
from fluxon_access import make_patcher, store, write_agent_config  # noqa: E402
from frames import digest  # noqa: E402
from frames import references as make_references  # noqa: E402
from machine import machine, versions  # noqa: E402
from tables import fill, listing, machine_line, mib, table  # noqa: E402

CLIP_LEN, STRIDE, SIZE = 16, 4, 224
EXPORT = "multinode"
NODES = 3
VP9 = vp9("600k")


def specs(count: int, seconds: float) -> list[VideoSpec]:
    """count videos at 640x360, GOP 60: H.264 (faststart / moov-at-end) plus one HEVC, one VP9."""
    out = []
    for k in range(count):
        if k == count - 1:
            out.append(VideoSpec(f"vp9_360p_{k:02d}.webm", 640, 360, seconds, 60, VP9))
        elif k == count - 2:
            out.append(VideoSpec(f"hevc_360p_{k:02d}.mp4", 640, 360, seconds, 60, HEVC,
                                 faststart=True))
        else:
            layout = "faststart" if k % 2 == 0 else "moovend"
            out.append(VideoSpec(f"h264_360p_{layout}_{k:02d}.mp4", 640, 360, seconds, 60, X264,
                                 faststart=k % 2 == 0))
    return out


def draw_epoch(videos: list[Video], clips: int, seed: int, epoch: int) -> list[list[Any]]:
    """clips // len(videos) random clips of each video, in a shuffled order:
    [[relpath, [indices...]], ...]."""
    rng = np.random.default_rng([seed, epoch])
    plan = [[video.name, clip] for video in videos
            for clip in sample_clips(video.frames, clips // len(videos), CLIP_LEN, STRIDE, rng)]
    return [plan[i] for i in rng.permutation(len(plan))]


# ---- one node (runs in its own spawned process) ----

def node_epoch(patcher: fv.FluxonFsPatcher, plan: list[list[Any]], threads: int,
               start_at: float | None) -> dict[str, Any]:
    """Read the plan's clips through a fresh pool; digests of every frame and the stats back."""
    if start_at is not None:  # nodes that run together start together
        time.sleep(max(0.0, start_at - time.time()))
    late_s = max(0.0, time.time() - start_at) if start_at is not None else 0.0
    with patcher:
        pool = patcher.open_video_reader_pool()
        digests, clip_ms = [], []
        cpu0 = time.process_time()
        started = time.perf_counter()
        for relpath, indices in plan:
            t0 = time.perf_counter()
            frames = pool.read_frames_numpy(export_name=EXPORT, relpath=relpath, height=SIZE,
                                            width=SIZE, num_threads=threads, indices=indices)
            clip_ms.append((time.perf_counter() - t0) * 1e3)
            digests.append([digest(frame).hex() for frame in frames])
        seconds = time.perf_counter() - started
        cpu_s = time.process_time() - cpu0
        t0 = time.perf_counter()
        drained = patcher.client.backfill.wait_idle(timeout=60)
        backfill_wait_s = time.perf_counter() - t0
        stats = patcher.stats().as_dict()
        pool.close()
    return {"pid": os.getpid(), "seconds": seconds, "cpu_s": cpu_s, "clip_ms": clip_ms, "digests": digests,
            "stats": stats, "backfill_drained": drained, "backfill_wait_s": backfill_wait_s,
            "late_s": late_s}


# ---- the run ----

def agent_served_bytes(agent: AgentProcess) -> float:
    with urllib.request.urlopen(agent.url + "/metrics", timeout=5) as response:
        text = response.read().decode()
    prefix = f'fluxon_agent_served_bytes_total{{export="{EXPORT}"}}'
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.split()[-1])
    return 0.0


def cluster_contents(cluster: RedisCluster) -> dict[str, Any]:
    """Piece keys and bytes, frame-index blobs and memory, per master."""
    nodes = []
    for i in range(len(cluster.nodes)):
        client = cluster.node_client(i, socket_timeout=5)
        try:
            pieces = list(client.scan_iter("fluxonfs:piece:*", count=1000))
            pipe = client.pipeline(transaction=False)
            for key in pieces:
                pipe.hget(key, "len")
            piece_bytes = sum(int(n) for n in pipe.execute())
            blobs = len(list(client.scan_iter("fluxonfs:frameindex*", count=1000)))
            memory = client.info("memory")
            nodes.append({"keys": int(client.dbsize()), "pieces": len(pieces),
                          "piece_bytes": piece_bytes, "index_blobs": blobs,
                          "used_memory_dataset": int(memory.get("used_memory_dataset", 0))})
        finally:
            client.close()
    return {"nodes": nodes, "piece_bytes": sum(n["piece_bytes"] for n in nodes),
            "pieces": sum(n["pieces"] for n in nodes)}


def run_nodes(patcher: fv.FluxonFsPatcher, plan: list[list[Any]], nodes: list[int],
              threads: int, together: bool) -> dict[int, dict[str, Any]]:
    """Each node in a fresh spawned process; one after another, or all started together."""
    spawn = multiprocessing.get_context("spawn")
    executors = {n: ProcessPoolExecutor(max_workers=1, mp_context=spawn) for n in nodes}
    try:
        if together:
            start_at = time.time() + 5.0  # time for every process to spawn and import
            futures = {n: executors[n].submit(node_epoch, patcher, plan, threads, start_at)
                       for n in nodes}
            return {n: future.result(timeout=600) for n, future in futures.items()}
        return {n: executors[n].submit(node_epoch, patcher, plan, threads, None).result(timeout=600)
                for n in nodes}
    finally:
        for executor in executors.values():
            executor.shutdown()


def check(result: dict[str, Any], plan: list[list[Any]],
          refs: dict[str, dict[int, str]]) -> dict[str, Any]:
    wrong = [(relpath, i) for (relpath, indices), got in zip(plan, result["digests"])
             for i, d in zip(indices, got) if refs[relpath][i] != d]
    return {"frames": sum(len(indices) for _, indices in plan), "wrong": len(wrong),
            "first_wrong": wrong[:3]}


def summarize(epoch: int, node: int, cache: str, together: bool, result: dict[str, Any],
              frames_check: dict[str, Any], clips: int) -> dict[str, Any]:
    s = result["stats"]
    return {"epoch": epoch, "node": node, "cache": cache, "together": together,
            "clips": clips, "seconds": result["seconds"],
            "clips_per_s": clips / result["seconds"], "cpu_s": result["cpu_s"],
            "clip_ms_p50": statistics.median(result["clip_ms"]),
            "agent_bytes": s["remote_bytes"], "agent_reads": s["remote_reads"],
            "kv_hits": s["kv_hits"], "kv_misses": s["kv_misses"],
            "kv_round_trips": s["kv_round_trips"], "kv_errors": s["kv_errors"],
            "kv_bytes": s["kv_bytes"], "index_scans": s["index_scans"],
            "index_from_kv": s["index_from_kv"], "backfills_queued": s["backfills_queued"],
            "backfills_dropped": s["backfills_dropped"],
            "backfill_drained": result["backfill_drained"],
            "backfill_wait_s": result["backfill_wait_s"], "late_s": result["late_s"],
            "frames_checked": frames_check["frames"], "frames_wrong": frames_check["wrong"],
            "first_wrong": frames_check["first_wrong"], "pid": result["pid"], "stats": s}


def conditions(a: argparse.Namespace, videos: list[Video], video_dir: Path) -> dict[str, Any]:
    found = versions()
    try:
        import redis

        found["redis-py"] = redis.__version__
    except ImportError:
        pass
    kinds: dict[str, int] = {}
    for video in videos:
        kind = f"{video.codec} {video.spec.width}x{video.spec.height} {video.layout}"
        kinds[kind] = kinds.get(kind, 0) + 1
    return {
        "machine": machine(),
        "versions": found,
        "dataset": {"root": str(video_dir), "videos": len(videos), "kinds": kinds,
                    "bytes": sum(v.size for v in videos),
                    "frames": [min(v.frames for v in videos), max(v.frames for v in videos)],
                    "gop": 60, "fps": 30},
        "workload": {"clips_per_epoch": a.clips, "clip": f"{CLIP_LEN} frames, stride {STRIDE}, "
                     f"{SIZE}x{SIZE}", "decoder_threads": a.threads, "seed": a.seed,
                     "reads": "one pool.read_frames_numpy per clip, a fresh spawned process "
                              "and patcher per node per epoch"},
        "fluxonfs": {"piece_size": a.piece_size, "kv_miss_policy": "RemoteRead",
                     "async_backfill": True,
                     "kv": "Redis Cluster, 3 masters, no replicas, loopback, no persistence "
                           "(fluxon_video.testing.RedisCluster)",
                     "agent": "python -m fluxon_video agent on loopback, HTTP/1.1",
                     "agent_latency_ms": a.agent_latency_ms},
    }


PHASES = [  # (epoch, nodes, KV at start, run together)
    (1, (1,), "cold", False), (1, (2,), "warm", False), (1, (3,), "warm", False),
    (2, (1, 2, 3), "warm", True)]


def one_run(patcher: fv.FluxonFsPatcher, cluster: RedisCluster, agent: AgentProcess,
            epochs: list[list[list[Any]]], refs: dict[str, dict[int, str]],
            threads: int) -> dict[str, Any]:
    """Every phase once, from a flushed cluster: rows per node, figures per epoch."""
    rows: list[dict[str, Any]] = []
    epoch_rows: list[dict[str, Any]] = []
    served_before = agent_served_bytes(agent)
    stored_before = 0
    for k, (epoch, nodes, cache, together) in enumerate(PHASES):
        plan = epochs[epoch - 1]
        print(f"  epoch {epoch}: node(s) {', '.join(map(str, nodes))} "
              f"({cache}, {'together' if together else 'alone'})", flush=True)
        results = run_nodes(patcher, plan, list(nodes), threads, together)
        for n in nodes:
            row = summarize(epoch, n, cache, together, results[n],
                            check(results[n], plan, refs), len(plan))
            rows.append(row)
            print(f"    node {n}: {row['clips_per_s']:.2f} clips/s, agent "
                  f"{mib(row['agent_bytes'])} MiB, KV {row['kv_hits']}/{row['kv_misses']} "
                  f"hit/miss, {row['kv_round_trips']} round trips, frames "
                  f"{'bit-exact' if not row['frames_wrong'] else 'WRONG'}", flush=True)
        if k == len(PHASES) - 1 or PHASES[k + 1][0] != epoch:
            served = agent_served_bytes(agent)
            stored = cluster_contents(cluster)["piece_bytes"]
            epoch_rows.append({
                "epoch": epoch,
                "agent_bytes_nodes": sum(r["agent_bytes"] for r in rows if r["epoch"] == epoch),
                "agent_bytes_served": served - served_before,
                "cluster_piece_bytes": stored, "new_piece_bytes": stored - stored_before})
            served_before, stored_before = served, stored
    return {"rows": rows, "epochs": epoch_rows}


def aggregate(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (epoch, node): the first run's counts, medians of the timings over runs."""
    out = []
    for i, first in enumerate(runs[0]["rows"]):
        same = [run["rows"][i] for run in runs]
        row = {k: v for k, v in first.items() if k != "stats"}
        for key in ("clips_per_s", "clip_ms_p50", "cpu_s", "seconds"):
            row[key] = statistics.median(r[key] for r in same)
        row["clips_per_s_range"] = [min(r["clips_per_s"] for r in same),
                                    max(r["clips_per_s"] for r in same)]
        row["frames_wrong"] = sum(r["frames_wrong"] for r in same)
        row["frames_checked"] = sum(r["frames_checked"] for r in same)
        row["counts_differ_between_runs"] = sorted(
            key for key in ("agent_bytes", "kv_hits", "kv_misses", "kv_errors")
            if len({r[key] for r in same}) > 1)
        out.append(row)
    return out


# ---- report ----

def _node_row(r: dict[str, Any]) -> list[str]:
    frames = ("bit-exact" if r["frames_wrong"] == 0
              else f"WRONG: {r['frames_wrong']} of {r['frames_checked']}")
    low, high = r["clips_per_s_range"]
    return [str(r["epoch"]), str(r["node"]), r["cache"], "together" if r["together"] else "alone",
            f"{r['clips_per_s']:.2f} ({low:.2f}–{high:.2f})", f"{r['clip_ms_p50']:.1f}",
            f"{r['cpu_s']:.2f}", mib(r["agent_bytes"]),
            *(str(r[k]) for k in ("agent_reads", "kv_hits", "kv_misses", "kv_round_trips",
                                  "kv_errors")),
            f"{r['index_scans']}/{r['index_from_kv']}", frames]


def _tables(record: dict[str, Any]) -> dict[str, str]:
    dataset = mib(record["conditions"]["dataset"]["bytes"])
    differ = sorted({f"epoch {r['epoch']} node {r['node']}: "
                     + ", ".join(r["counts_differ_between_runs"])
                     for r in record["rows"] if r["counts_differ_between_runs"]})
    return {
        "node_table": "\n".join(table(
            ["epoch", "node", "KV at start", "ran", "clips/s", "clip ms p50", "CPU s",
             "agent MiB", "agent reads", "KV hits", "KV misses", "KV round trips", "KV errors",
             "index scan/KV", "frames"], map(_node_row, record["rows"]))),
        "epoch_table": "\n".join(table(
            ["epoch", "agent MiB, nodes' sum", "agent MiB, agent's /metrics",
             "touched for the first time, MiB", "pieces in the cluster after it, MiB",
             "dataset MiB"],
            [[str(e["epoch"]), *(mib(e[k]) for k in ("agent_bytes_nodes", "agent_bytes_served",
                                                     "new_piece_bytes", "cluster_piece_bytes")),
              dataset] for e in record["epochs"]])),
        "differ": ("\nCounts that were not the same in every run (the table shows the first "
                   "run's): " + "; ".join(differ) + ".\n") if differ else ""}


def render(record: dict[str, Any]) -> str:
    c = record["conditions"]
    d, w, f = c["dataset"], c["workload"], c["fluxonfs"]
    return fill(
        "multinode", **_tables(record),
        command="python bench/multinode.py" + "".join(f" {a}" for a in record["argv"]),
        when=record["when"], total_s=f"{record['total_s']:.0f}", cores=c["machine"]["cores"],
        repeat=record["repeat"], videos=d["videos"],
        kinds=", ".join(f"{n} × {k}" for k, n in d["kinds"].items()), gop=d["gop"],
        fps=d["fps"], frames=f"{d['frames'][0]}–{d['frames'][1]}", dataset_mib=mib(d["bytes"]),
        clips=w["clips_per_epoch"], clip=w["clip"], seed=w["seed"], threads=w["decoder_threads"],
        reads=w["reads"], piece_kib=f["piece_size"] // 1024, miss_policy=f["kv_miss_policy"],
        kv=f["kv"], agent=f["agent"], latency=f["agent_latency_ms"],
        per_node=", ".join(f"{n['keys']} keys / {mib(n['piece_bytes'])} MiB of pieces / "
                           f"{mib(n['used_memory_dataset'])} MiB used_memory_dataset"
                           for n in record["cluster_after"]["nodes"]),
        load=f"{record['load'][0]:.2f} / {record['load'][1]:.2f}",
        machine=machine_line(c["machine"]), versions=listing(c["versions"].items()))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = scenario_parser(
        "multinode.py", "Three nodes (processes) sharing a 3-master Redis Cluster and one agent: "
        "agent bytes, KV hits/misses/round trips and clips/s per node per epoch.",
        "smoke run: 6 videos of 6 s, 12 clips per epoch, 1 run", "multinode.md and multinode.json",
        render=False)
    add = parser.add_argument
    add("--videos", type=int, default=6, help="videos in the dataset, >= 3 (default: 6)")
    add("--seconds", type=float, help="length of each video, s (default: 30; quick: 6)")
    add("--clips", type=int, help="clips per epoch (default: 24; quick: 12)")
    add("--threads", type=int, default=1, help="decoder threads per read (default: 1)")
    add("--repeat", type=int, help="runs of every phase, each from a flushed cluster; "
                                   "clips/s: their median (default: 3; quick: 1)")
    add("--piece-size", type=int, default=262144, help="KV piece size, bytes (default: 262144)")
    add("--agent-latency-ms", type=float, default=0.0,
        help="the agent waits this long per stat/read, a remote store (default: 0)")
    add("--seed", type=int, default=7, help="clip seed (default: 7)")
    a = finish(parser, parser.parse_args(argv), {"seconds": 30.0, "clips": 24, "repeat": 3},
               {"seconds": 6.0, "clips": 12, "repeat": 1}, ("repeat",))
    if a.videos < 3 or a.clips < a.videos:
        parser.error("need --videos >= 3 and --clips >= --videos")
    return a


def references(video_dir: Path, epochs: list[list[list[Any]]]) -> dict[str, dict[int, str]]:
    """{video: {frame index: digest hex}} of every frame the epochs read, from the ffmpeg CLI."""
    wanted: dict[str, set[int]] = {}
    for plan in epochs:
        for relpath, indices in plan:
            wanted.setdefault(relpath, set()).update(indices)
    made = make_references({name: (video_dir / name, SIZE, SIZE, indices)
                            for name, indices in wanted.items()})
    return {name: {int(i): d.hex() for i, d in zip(ref.indices, ref.digests)}
            for name, ref in made.items()}


def measure(a: argparse.Namespace, video_dir: Path, epochs: list[list[list[Any]]],
            refs: dict[str, dict[int, str]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every run (from a flushed cluster), and what the cluster holds after the last."""
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="fluxon-multinode-") as tmp:
        work = Path(tmp)
        config = write_agent_config(work / "agent.toml", EXPORT, video_dir.resolve())
        agent_args = (["--inject-latency-ms", f"{a.agent_latency_ms:g}"]
                      if a.agent_latency_ms else [])
        print("starting a 3-master Redis Cluster and the agent", flush=True)
        with RedisCluster(work / "cluster", masters=3) as cluster, \
                AgentProcess(config, agent_args) as agent:
            patcher = make_patcher(store(EXPORT, video_dir.resolve(), agent.url,
                                         tuple(cluster.urls), piece_size=a.piece_size),
                                   redis_cluster=True)
            for repetition in range(1, a.repeat + 1):
                print(f"run {repetition} of {a.repeat}: the cluster flushed", flush=True)
                cluster.flushall()
                runs.append(one_run(patcher, cluster, agent, epochs, refs, a.threads))
            return runs, cluster_contents(cluster)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    began = time.monotonic()
    load_start = os.getloadavg()[0]
    video_dir = a.data / "multinode-videos"
    print(f"dataset: {a.videos} videos of {a.seconds:g} s in {video_dir}", flush=True)
    videos = prepare(specs(a.videos, a.seconds), video_dir)
    epochs = [draw_epoch(videos, a.clips, a.seed, e) for e in (1, 2)]
    runs, cluster_after = measure(a, video_dir, epochs, references(video_dir, epochs))
    record = {
        "benchmark": "multinode", "argv": list(argv if argv is not None else sys.argv[1:]),
        "when": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        "total_s": time.monotonic() - began, "repeat": a.repeat,
        "conditions": conditions(a, videos, video_dir),
        "epochs_plan": epochs, "rows": aggregate(runs), "epochs": runs[0]["epochs"],
        "runs": runs,
        "cluster_after": cluster_after, "load": [load_start, os.getloadavg()[0]],
    }
    write_outputs(a.out, "multinode", json.dumps(record, indent=1) + "\n", render(record))
    print(f"wrote {a.out / 'multinode.md'} and {a.out / 'multinode.json'}")
    return 1 if any(r["frames_wrong"] for run in runs for r in run["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
