#!/usr/bin/env python3
"""The multi-node benchmark: three node processes share one 3-master Redis Cluster and one
agent (see --help or bench/README.md)."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import numpy as np  # noqa: E402

from dataset import prepare, sample_clips, small_specs  # noqa: E402
from frames import reference_files  # noqa: E402
from harness import (Child, add_options, fill, finish, header, kinds_of, listing,  # noqa: E402
                     machine, machine_line, mib, module_versions, publish, scenario_parser,
                     table, versions)

CLIP_LEN, STRIDE, SIZE = 16, 4, 224
EXPORT = "multinode"
PHASES = [  # (epoch, nodes, KV at start, run together)
    (1, (1,), "cold", False), (1, (2,), "warm", False), (1, (3,), "warm", False),
    (2, (1, 2, 3), "warm", True)]


def node_epoch(fx: dict, plan: list[list[Any]], refs: dict[str, str], threads: int,
               start_at: float | None) -> dict[str, Any]:
    """One node (a spawned process, its own patcher) reads the plan's clips through a fresh
    pool, each clip's frames checked bit for bit; its stats after the backfill drained."""
    from frames import CheckResult, Reference
    from stores import make_patcher

    if start_at is not None:  # nodes that run together start together
        time.sleep(max(0.0, start_at - time.time()))
    late_s = max(0.0, time.time() - start_at) if start_at is not None else 0.0
    loaded = {name: Reference.load(Path(path)) for name, path in refs.items()}
    check = CheckResult(exact_required=True)
    with make_patcher(fx, redis_cluster=True) as patcher:
        pool = patcher.open_video_reader_pool()
        clip_ms, cpu0, started = [], time.process_time(), time.perf_counter()
        for relpath, indices in plan:
            t0 = time.perf_counter()
            frames = pool.read_frames_numpy(export_name=EXPORT, relpath=relpath, height=SIZE,
                                            width=SIZE, num_threads=threads, indices=indices)
            clip_ms.append((time.perf_counter() - t0) * 1e3)
            check.add(frames, indices, loaded[relpath])
        seconds, cpu_s = time.perf_counter() - started, time.process_time() - cpu0
        t0 = time.perf_counter()
        drained = patcher.client.backfill.wait_idle(timeout=60)
        backfill_wait_s = time.perf_counter() - t0
        stats = patcher.stats().as_dict()
        pool.close()
    return {"pid": os.getpid(), "seconds": seconds, "cpu_s": cpu_s, "clip_ms": clip_ms,
            "stats": stats, "backfill_drained": drained, "backfill_wait_s": backfill_wait_s,
            "late_s": late_s, "check": check.as_dict()}


def run_nodes(fx: dict, plan: list[list[Any]], refs: dict[str, str], nodes: list[int],
              threads: int, together: bool) -> dict[int, dict[str, Any]]:
    """Each node in a fresh spawned process; one after another, or all started together."""
    children = {n: Child() for n in nodes}
    try:
        start_at = time.time() + 5.0 if together else None  # time to spawn and import
        futures = {}
        for n in nodes:
            futures[n] = children[n].pool.submit(node_epoch, fx, plan, refs, threads, start_at)
            if not together:
                futures[n].result(timeout=600)
        return {n: future.result(timeout=600) for n, future in futures.items()}
    finally:
        for child in children.values():
            child.stop()


def agent_served_bytes(agent: Any) -> float:
    from stores import scrape, total

    return total(scrape(agent.url + "/metrics"), "fluxon_agent_served_bytes_total",
                 f"export={EXPORT}")


def cluster_contents(cluster: Any) -> dict[str, Any]:
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


COUNTS = ("kv_hits", "kv_misses", "kv_round_trips", "kv_errors", "kv_bytes", "index_scans",
          "index_from_kv", "backfills_queued", "backfills_dropped")


def summarize(epoch: int, node: int, cache: str, together: bool, result: dict[str, Any],
              clips: int) -> dict[str, Any]:
    s, check = result["stats"], result["check"]
    return {"epoch": epoch, "node": node, "cache": cache, "together": together,
            "clips": clips, "clips_per_s": clips / result["seconds"],
            **{k: result[k] for k in ("seconds", "cpu_s", "backfill_drained", "backfill_wait_s",
                                      "late_s")},
            "clip_ms_p50": statistics.median(result["clip_ms"]),
            "agent_bytes": s["remote_bytes"], "agent_reads": s["remote_reads"],
            **{k: s[k] for k in COUNTS},
            "frames_checked": check["frames"], "frames_wrong": check["frames"] - check["bit_exact"],
            "first_wrong": check["wrong"][:3], "pid": result["pid"], "stats": s}


def conditions(a: argparse.Namespace, videos: list[Any], video_dir: Path) -> dict[str, Any]:
    found = {**versions(), **{f"{k}-py": v for k, v in module_versions("redis").items()}}
    kinds = {k: len(vs) for k, vs in kinds_of(v.facts() for v in videos).items()}
    return {
        "machine": machine(),
        "versions": found,
        "dataset": {"root": str(video_dir), "videos": len(videos), "kinds": kinds,
                    "bytes": sum(v.size for v in videos),
                    "frames": [min(v.frames for v in videos), max(v.frames for v in videos)],
                    "gop": 60, "fps": 30},
        "workload": {"clips_per_epoch": a.clips, "clip": f"{CLIP_LEN} frames, stride {STRIDE}, "
                     f"{SIZE}x{SIZE}", "decoder_threads": a.threads, "seed": a.seed},
        "fluxonfs": {"piece_size": a.piece_size, "agent_latency_ms": a.agent_latency_ms},
    }


def one_run(fx: dict, cluster: Any, agent: Any, epochs: list[list[list[Any]]],
            refs: dict[str, str], threads: int) -> dict[str, Any]:
    """Every phase once, from a flushed cluster: rows per node, figures per epoch."""
    rows: list[dict[str, Any]] = []
    epoch_rows: list[dict[str, Any]] = []
    served_before = agent_served_bytes(agent)
    stored_before = 0
    for k, (epoch, nodes, cache, together) in enumerate(PHASES):
        plan = epochs[epoch - 1]
        print(f"  epoch {epoch}: node(s) {', '.join(map(str, nodes))} "
              f"({cache}, {'together' if together else 'alone'})", flush=True)
        results = run_nodes(fx, plan, refs, list(nodes), threads, together)
        for n in nodes:
            row = summarize(epoch, n, cache, together, results[n], len(plan))
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
        "node_table": table(
            ["epoch", "node", "KV at start", "ran", "clips/s", "clip ms p50", "CPU s",
             "agent MiB", "agent reads", "KV hits", "KV misses", "KV round trips", "KV errors",
             "index scan/KV", "frames"], map(_node_row, record["rows"])),
        "epoch_table": table(
            ["epoch", "agent MiB, nodes' sum", "agent MiB, agent's /metrics",
             "touched for the first time, MiB", "pieces in the cluster after it, MiB",
             "dataset MiB"],
            [[str(e["epoch"]), *(mib(e[k]) for k in ("agent_bytes_nodes", "agent_bytes_served",
                                                     "new_piece_bytes", "cluster_piece_bytes")),
              dataset] for e in record["epochs"]]),
        "differ": ("\nCounts that were not the same in every run (the table shows the first "
                   "run's): " + "; ".join(differ) + ".\n") if differ else ""}


def render(record: dict[str, Any]) -> str:
    c = record["conditions"]
    d, w, f = c["dataset"], c["workload"], c["fluxonfs"]
    return fill(
        "multinode", **_tables(record),
        command=record["command"], when=record["generated"],
        total_s=f"{record['duration_s']:.0f}", cores=c["machine"]["cores"],
        repeat=record["repeat"], videos=d["videos"],
        kinds=", ".join(f"{n} × {k}" for k, n in d["kinds"].items()), gop=d["gop"],
        fps=d["fps"], frames=f"{d['frames'][0]}–{d['frames'][1]}", dataset_mib=mib(d["bytes"]),
        clips=w["clips_per_epoch"], clip=w["clip"], seed=w["seed"], threads=w["decoder_threads"],
        piece_kib=f["piece_size"] // 1024, latency=f["agent_latency_ms"],
        per_node=", ".join(f"{n['keys']} keys / {mib(n['piece_bytes'])} MiB of pieces / "
                           f"{mib(n['used_memory_dataset'])} MiB used_memory_dataset"
                           for n in record["cluster_after"]["nodes"]),
        load=f"{record['load'][0]:.2f} / {record['load'][1]:.2f}",
        machine=machine_line(c["machine"]), versions=listing(c["versions"].items()))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = scenario_parser("multinode.py", None, "smoke run: 6 videos of 6 s, 12 clips per epoch, "
                         "1 run", "multinode.md and multinode.json", render=False)
    full, quick = add_options(ap, [
        ("--videos", int, 6, "videos in the dataset, >= 3"),
        ("--seconds", float, 30.0, 6.0, "length of each video, s"),
        ("--clips", int, 24, 12, "clips per epoch"),
        ("--threads", int, 1, "decoder threads per read"),
        ("--repeat", int, 3, 1, "runs of every phase, each from a flushed cluster; clips/s: "
                                "their median"),
        ("--piece-size", int, 262144, "KV piece size, bytes"),
        ("--agent-latency-ms", float, 0.0, "the agent waits this long per stat/read, a "
                                                "remote store"),
        ("--seed", int, 7, "clip seed")])
    a = finish(ap, ap.parse_args(argv), full, quick, ("repeat",))
    if a.videos < 3 or a.clips < a.videos:
        ap.error("need --videos >= 3 and --clips >= --videos")
    return a


def measure(a: argparse.Namespace, video_dir: Path, epochs: list[list[list[Any]]],
            refs: dict[str, str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every run (from a flushed cluster), and what the cluster holds after the last."""
    from fluxon_video.testing import RedisCluster

    from stores import agent, store

    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="fluxon-multinode-") as tmp:
        print("starting a 3-master Redis Cluster and the agent", flush=True)
        with RedisCluster(Path(tmp) / "cluster", masters=3) as cluster:
            server = agent(Path(tmp), EXPORT, video_dir.resolve(), a.agent_latency_ms)
            try:
                fx = store(EXPORT, video_dir.resolve(), server.url, tuple(cluster.urls),
                           piece_size=a.piece_size)
                for repetition in range(1, a.repeat + 1):
                    print(f"run {repetition} of {a.repeat}: the cluster flushed", flush=True)
                    cluster.flushall()
                    runs.append(one_run(fx, cluster, server, epochs, refs, a.threads))
                return runs, cluster_contents(cluster)
            finally:
                server.stop()


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    began = time.monotonic()
    load_start = os.getloadavg()[0]
    video_dir = a.data / "multinode-videos"
    print(f"dataset: {a.videos} videos of {a.seconds:g} s in {video_dir}", flush=True)
    videos = prepare(small_specs(a.videos - 2, 1, 1, lambda k: a.seconds), video_dir)
    epochs = []
    for epoch in (1, 2):  # the same number of clips of each video, shuffled; a new draw each
        rng = np.random.default_rng([a.seed, epoch])
        plan = [[v.name, clip] for v in videos for clip in sample_clips(
            v.frames, a.clips // len(videos), CLIP_LEN, STRIDE, rng)]
        epochs.append([plan[i] for i in rng.permutation(len(plan))])
    by_name, notes = {v.name: v for v in videos}, []
    refs = reference_files(((n, by_name[n], SIZE, SIZE, [c]) for plan in epochs for n, c in plan),
                           a.data / "multinode-refs", notes)
    runs, cluster_after = measure(a, video_dir, epochs, {n: str(p) for n, p in refs.items()})
    record = {
        **header("multinode.py", argv, time.monotonic() - began, a), "repeat": a.repeat,
        "conditions": conditions(a, videos, video_dir), "notes": notes,
        "epochs_plan": epochs, "rows": aggregate(runs), "epochs": runs[0]["epochs"],
        "runs": runs,
        "cluster_after": cluster_after, "load": [load_start, os.getloadavg()[0]],
    }
    publish(a, "multinode", render, record)
    return 1 if any(r["frames_wrong"] for run in runs for r in run["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
