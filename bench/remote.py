#!/usr/bin/env python3
"""The remote-store benchmark: fluxon through FluxonFS vs peers the way their users read
remote videos, under one model of the store (see --help or bench/README.md)."""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

# Keep this module's top level light: every spawned child imports it again.
from harness import (Child, MiB, Pass, add_options, failed_pass, finish,  # noqa: E402
                     grouped, header, machine, once, parse_size, say, scenario_parser, versions)

EXPORT = "remote"
CLIP_LEN, STRIDE, SIZE = 16, 4, 224
FAMILIES = ("pyav", "torchcodec", "decord", "spdl")
# "cold+lookahead": cold, each item read with the next one's requests as
# read_many's ``ahead`` (its reader opened and its pages fetched meanwhile).
FLUXON_CACHES = ("cold", "cold+lookahead", "warm-kv", "warm-kv+shared")
# How long a shared stat lives in the shared rows: long enough to outlast the
# passes between the cold pass that writes it and the row that reads it (a
# static training set can afford minutes; the default TTL is 5 s).
SHARED_STAT_TTL_MS = 120_000
ITEM_STATS = ("open_ms", "index_ms", "kv_round_trips", "kv_hits", "kv_misses", "remote_reads",
              "remote_bytes", "frames_decoded", "decoder_seeks", "stat_requests",
              "open_round_trips", "first_frame_waits")
METADATA_STATS = ("kv_round_trips", "kv_hits", "kv_misses", "remote_reads", "remote_bytes",
                  "index_ms", "stat_requests", "open_round_trips")


OPTIONS = [
    ("--long-videos", int, 0, "2-minute videos of the 'long' workload: 720p H.264 GOP 250 "
                              "and 120, 1080p HEVC GOP 60, 1080p H.264 GOP 250 in turn (s3: 2)"),
    ("--long-items", int, 0, "items (random clips, a new open each) per long video per "
                                "round (s3: 4)"),
    ("--latencies", str, "0,2,10", "10", "per-request latencies, ms, comma separated"),
    ("--bandwidth-mbps", float, 50.0, "per-connection cap in MB/s (10^6 bytes/s), server "
                                            "-> client, for every contender (the relay); 0: none"),
    ("--rounds", str, "2", "1", "interleaved rounds per workload: one number for every latency, "
                                "or one per latency, comma separated; figures are medians"),
    ("--videos", int, 24, 12, "videos in the clips and metadata workloads, one item each per "
                              "round"),
    ("--batched-items", int, 3, 2, "videos per round in the batched workload"),
    ("--batched-clips", int, 8, "K, clips per batched item"),
    ("--block-sizes", str, "256K,default",
     "fsspec block sizes of the PyAV and torchcodec rows; 'default' is fsspec's (5 MiB); with "
     "--store s3 the s3fs block and obstore buffer sizes (s3: 256K,4M)"),
    ("--threads", int, 1, "decoder threads for every contender"),
    ("--piece-size", int, None, "FluxonFS piece size, bytes (default: the export's)"),
    ("--seed", int, 15, "clip sampling seed")]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = scenario_parser("remote.py", None, "smoke run (~2-3 min): 10 ms only, 1 round, "
                         "12 videos, 2 batched items", "remote.md/.json/.png")
    ap.add_argument("--store", choices=("dir", "s3"), default="dir",
                    help="the origin: 'dir', the agent's directory export and the HTTP Range "
                         "server; 's3', moto's S3 server behind a delaying, counting proxy "
                         "(see above; different defaults: L = 10 ms, 16 videos, 2 long "
                         "videos x 4 items, blocks 256K,4M; quick: 6 videos, 1 long x 2)")
    full, quick = add_options(ap, OPTIONS)
    args = ap.parse_args(argv)
    s3 = args.store == "s3"
    if s3:  # --store s3: fewer short videos, the long ones, one latency
        full.update(latencies="10", videos=16, block_sizes="256K,4M", long_videos=2,
                    long_items=4)
        quick = {**full, "rounds": "1", "videos": 6, "long_videos": 1, "long_items": 2}
    args = finish(ap, args, full, quick, ("videos", "batched_items", "batched_clips", "threads"))
    if s3 and (args.long_videos < 0 or args.long_items < (1 if args.long_videos else 0)):
        ap.error("--long-videos >= 0 and --long-items >= 1")
    try:
        args.latency_list = lats = [float(x) for x in args.latencies.split(",") if x.strip()]
        args.block_list = [None if b.strip() == "default" else parse_size(b)
                           for b in args.block_sizes.split(",") if b.strip()]
        rounds = [int(x) for x in args.rounds.split(",")]
        rounds *= 1 if "," in args.rounds else len(lats)
    except ValueError as exc:
        ap.error(str(exc))
    if not lats or any(x < 0 for x in lats):
        ap.error("--latencies: one or more values >= 0")
    if len(rounds) != len(lats) or min(rounds) < 1:
        ap.error("--rounds: one number >= 1, or one per latency")
    if args.bandwidth_mbps < 0:
        ap.error("--bandwidth-mbps must be >= 0")
    if s3 and None in args.block_list:
        ap.error("--store s3: name every block size (s3fs's default is 50 MiB; obstore needs one)")
    args.target_latency = 10.0 if 10.0 in lats else max(lats)
    args.rounds_for, args.max_rounds = dict(zip(lats, rounds)), max(rounds)
    return args


# ---- the children: long-lived peer workers, a new process per fluxon pass ----

@functools.cache
def reference(path: str) -> Any:
    """The reference frames of a video, loaded once per process."""
    from frames import Reference

    return Reference.load(Path(path))


def peer_hello(family: str, path: str, threads: int) -> dict:
    """Load the library and its codecs, untimed (torchcodec's first use takes seconds), and
    say which versions this worker runs. A worker lives for the whole run, like a DataLoader
    worker with persistent_workers=True: the filesystem objects and codecs stay loaded."""
    import aiohttp
    import fsspec
    import fsspec.implementations.http  # noqa: F401

    from contenders import open_handle, peer_versions

    handle = open_handle(family, Path(path), SIZE, SIZE, threads)
    handle.read([0])
    handle.close()
    from harness import module_versions

    found = {"fsspec": fsspec.__version__, "aiohttp": aiohttp.__version__,
             **module_versions("s3fs", "obstore")}  # the S3 scenario's, where installed
    return {**found, **peer_versions(family, ("libavcodec", "libavformat", "libswscale"))}


def peer_pass(task: dict) -> dict:
    """A row's items: each opened anew (PyAV gets the dataset's frame -> pts table, untimed:
    "PyAV users keep their timestamps in the manifest"), read clip by clip (or, for the
    union row, in one pass per cluster), checked; timed from open to frames, close included."""
    from contenders import KeyframeIndex, PeerSource, open_handle, peer_metadata
    from frames import CheckResult
    from stores import Counters

    row, videos = task["row"], task["videos"]
    source, counters = PeerSource(row, task.get("s3")), Counters(task["store"], "peer")
    metadata = task["workload"] == "metadata"
    one = Pass(row, None if metadata else CheckResult(exact_required=False),
               extra={"fallbacks": 0})

    def clips(f: Any, video: dict, item: dict) -> list:
        handle = open_handle(row["family"], f, SIZE, SIZE, task["threads"],
                             seek_mode=row.get("seek_mode", "exact"),
                             index=KeyframeIndex(video["pts"], video["keys"]))
        outs = (handle.read_union(item["clips"]) if row.get("union")
                else [handle.read(c) for c in item["clips"]])
        handle.close()
        one.extra["fallbacks"] += getattr(handle, "fallbacks", 0)
        return outs

    before = counters.start()
    for item in task["items"]:
        video = videos[item["video"]]
        use = (lambda f: peer_metadata(row, f)) if metadata else \
            (lambda f, video=video, item=item: clips(f, video, item))
        got = one.time(item["video"], lambda: source.read(video, use))
        if got is not None and metadata:
            one.check_metadata(video, *got)
        elif got is not None:
            one.check_item(item["video"], item["clips"], got, reference(video["ref"]))
    return one.result(counters.since(before))


def fluxon_items(task: dict, pool: Any, patcher: Any, row: dict) -> Pass:
    """One fluxon pass over the task's items (a batched item in one read_many call; metadata:
    video_metadata), its read stats kept per item."""
    from fluxon_video import FluxonFsVideoReadRequest

    from frames import CheckResult

    export, threads, workload = task["fluxon"]["export"], task["threads"], task["workload"]
    one = Pass(row, None if workload == "metadata" else CheckResult(exact_required=True))

    def requests_of(item: dict) -> list:
        relpath = task["videos"][item["video"]]["relpath"]
        return [FluxonFsVideoReadRequest(export, relpath, SIZE, SIZE, threads, tuple(c))
                for c in item["clips"]]

    ahead = row["cache"] == "cold+lookahead" and workload != "metadata"
    coming = [requests_of(i) for i in task["items"][1:]] + [[]] if ahead else []
    for position, item in enumerate(task["items"]):
        video = task["videos"][item["video"]]
        if workload == "metadata":
            got = one.time(item["video"], lambda: patcher.video_metadata_with_stats(
                export, video["relpath"]))
            if got is not None:
                meta, s = got
                one.add_stats(item["video"], {**{k: getattr(s, k) for k in METADATA_STATS},
                                              "index_source": s.index_source})
                one.check_metadata(video, meta.num_frames, meta.average_fps, meta.duration_seconds)
            continue
        requests = requests_of(item)
        results = one.time(item["video"], lambda: (
            pool.read_many_numpy_with_stats(requests, ahead=coming[position]) if ahead else
            pool.read_many_numpy_with_stats(requests) if workload == "batched" else
            [pool.read_frames_numpy_with_stats(export_name=export, relpath=r.relpath,
                                               height=SIZE, width=SIZE, num_threads=threads,
                                               indices=r.indices) for r in requests]))
        if results is None:
            continue
        # A batched item is one decode for the group: its stats are the first result's.
        stats = results[:1] if workload == "batched" else results
        s = stats[0].stats
        one.add_stats(item["video"], {"path": s.path + (f" ({s.fallback})" if s.fallback else ""),
                                      **{k: sum(getattr(r.stats, k) for r in stats)
                                         for k in ITEM_STATS}})
        one.check_item(item["video"], item["clips"], [r.frames for r in results],
                       reference(video["ref"]))
    return one


def local_items(task: dict) -> dict:
    """fluxon's decoder on the local files, no store: what decoding alone costs (reference).
    A new open per item; each file's index built once, untimed (as in bench/run.py)."""
    from contenders import FluxonLocalHandle
    from frames import CheckResult

    videos = task["videos"]
    for item in task["items"]:
        FluxonLocalHandle.prepare(Path(videos[item["video"]]["path"]))
    one = Pass({"family": "fluxon", "cache": "local file"}, CheckResult(exact_required=True))

    def read(path: Path, clips: list[list[int]]) -> tuple[list, int]:
        handle = FluxonLocalHandle(path, SIZE, SIZE, task["threads"])
        outs = [handle.read(clip) for clip in clips]
        handle.close()
        return outs, handle.stats["frames_decoded"]  # one clip per item

    for item in task["items"]:
        video = videos[item["video"]]
        got = one.time(item["video"], lambda: read(Path(video["path"]), item["clips"]))
        if got is not None:
            one.add_stats(item["video"], {**{k: 0 for k in ITEM_STATS}, "frames_decoded": got[1]})
            one.check_item(item["video"], item["clips"], got[0], reference(video["ref"]))
    return one.result({})


def fluxon_pass(task: dict) -> dict:
    """One new process: a cold or warm-kv pass (cold clips: then warm-reader, the same pool
    again); or, to prime the shared stats, only what another process of the same identity
    leaves behind (metadata_cache_shared); or (local_only) fluxon's decoder on the local
    files, in a process of its own as the warm pass has, so neither row inherits the
    other's warmed-up process."""
    import fluxon_video as fv

    from harness import fluxon_versions
    from stores import Counters, make_patcher, settle

    fv.decode_local_frames(task["warm_path"], [0], SIZE, SIZE, task["threads"])  # untimed
    if task.get("local_only"):
        return {"passes": [local_items(task)], "versions": fluxon_versions()}
    counters, patcher = Counters(task["store"], "fluxon"), make_patcher(task["fluxon"])
    if task.get("prime_shared_stats"):
        with patcher:
            for item in task["items"]:
                patcher.file_version(task["fluxon"]["export"],
                                     task["videos"][item["video"]]["relpath"])
        return {"passes": []}
    out, pool = [], patcher.open_video_reader_pool()
    try:
        for cache in [task["cache"]] + ["warm-reader"] * bool(task.get("warm_reader")):
            before = counters.start()
            one = fluxon_items(task, pool, patcher, {"family": "fluxon", "cache": cache})
            out.append(one.result(counters.since(before)))
            settle(patcher)
    finally:
        pool.close()
        patcher.close()
    return {"passes": out, "versions": fluxon_versions()}


# ---- the parent ----

class Bench:
    def __init__(self, args: argparse.Namespace, argv: list[str]) -> None:
        self.args, self.argv = args, argv
        self.work, self.video_dir = args.data / "remote-work", args.data / "remote-videos"
        self.s3, self.store = args.store == "s3", None
        self.videos: dict[str, Any] = {}
        self.plans: dict[str, list[list[dict]]] = {}
        self.refs: dict[str, Path] = {}
        self.versions: dict[str, str] = {}
        self.skipped: dict[str, str] = {}
        self.workers: dict[str, Child] = {}
        # every pass (with its latency, workload, round), the long videos, notes, load
        self.passes, self.long, self.notes, self.load = [], [], [], []
        self.families = ("pyav", "torchcodec") if self.s3 else FAMILIES
        self.workloads = (("clips", "long") if self.s3 else ("clips", "batched", "metadata")
                          + (("long",) if args.long_videos else ()))

    # ---- what is read ----

    def make_dataset(self) -> None:
        from dataset import long_specs, prepare, remote_specs

        specs = remote_specs()
        specs = (specs[::2] + specs[1::2])[:self.args.videos]  # spread over the kinds
        longs = long_specs(self.args.long_videos)
        say(f"dataset: {len(specs)} videos and {len(longs)} long ones under "
            f"{self.video_dir} (made once)")
        self.videos = {v.name: v for v in prepare(specs + longs, self.video_dir)}
        self.long = [s.name for s in longs]

    def make_plans(self) -> None:
        """The items of every workload per round, seeded; what decoding them needs."""
        import numpy as np

        from dataset import long_order, sample_clips

        a, names = self.args, [n for n in self.videos if n not in self.long]

        def items(order: list[str], count: int = 1) -> list[dict]:
            return [{"video": n, "clips": sample_clips(self.videos[n].frames, count, CLIP_LEN,
                                                       STRIDE, rng)} for n in order]
        for r in range(a.max_rounds):
            rng = np.random.default_rng([a.seed, r])
            plans = {"clips": items([names[i] for i in rng.permutation(len(names))]),
                     "batched": items(mixed(names, a.batched_items), a.batched_clips),
                     "metadata": [{"video": names[i]} for i in rng.permutation(len(names))]}
            if self.long:
                plans["long"] = items(long_order(self.long, a.long_items, rng))
            for workload, plan in plans.items():
                self.plans.setdefault(workload, []).append(plan)
        piece = self.piece_size()
        for item in self.clip_items():
            video = self.videos[item["video"]]
            item["needed_bytes"] = video.span_bytes(item["clips"]) + video.container_bytes()
            item.update(piece_model(video, item["clips"], piece))

    def make_references(self) -> None:
        from frames import reference_files

        say("references: made with the ffmpeg CLI where not cached")
        self.refs = reference_files(
            ((i["video"], self.videos[i["video"]], SIZE, SIZE, i["clips"])
             for i in self.clip_items()), self.args.data / "remote-refs", self.notes)

    def clip_items(self) -> list[dict]:
        """Every item that reads clips, of every workload and round (not metadata's)."""
        return [i for w, ps in self.plans.items() if w != "metadata" for p in ps for i in p]

    def piece_size(self) -> int:
        from fluxon_video.fs.config import FluxonFsExport

        return self.args.piece_size or FluxonFsExport.__dataclass_fields__["piece_size"].default

    def video_table(self) -> dict[str, dict]:
        """What every task gets about each video (URL, pts table, reference)."""
        return {name: {"name": name, "relpath": name, "url": f"{self.store.range.url}/{name}",
                       "path": str(v.path), "pts": sorted(p["pts"] for p in v.packets),
                       "keys": sorted(p["pts"] for p in v.packets if p["key"]),
                       "ref": str(self.refs.get(name)), "frames": v.frames, "fps": v.spec.fps}
                for name, v in self.videos.items()}

    # ---- processes ----

    def start(self) -> None:
        from stores import RemoteStore

        self.work.mkdir(parents=True, exist_ok=True)
        say("servers: " + ("moto S3 (uploading the videos), range_server.py --proxy + relay, "
                           "redis-server, the agent + relay" if self.s3 else
                           "redis-server, the agent, range_server.py + relays") + " on loopback")
        self.store = RemoteStore(self.work, EXPORT, self.video_dir, self.args.bandwidth_mbps,
                                 list(self.videos) if self.s3 else None)
        warm = str(next(iter(self.videos.values())).path)
        for family in self.families:
            say(f"starting the {family} worker")
            worker = Child()
            hello = worker.call(peer_hello, family, warm, self.args.threads, timeout=300)
            if "fatal" in hello:
                self.skipped[family] = hello["fatal"]
                self.notes.append(f"{family} skipped: {hello['fatal']}")
                worker.stop(kill=True)
            else:
                self.workers[family] = worker
                self.versions.update(hello)

    def stop(self) -> None:
        for worker in self.workers.values():
            worker.stop()
        if self.store is not None:
            self.store.stop()

    def fluxon_config(self) -> dict:
        return self.store.fx(piece_size=self.piece_size())

    # ---- rows and passes ----

    def peer_rows(self, workload: str, latency: float) -> list[dict]:
        blocks = self.args.block_list
        if workload == "batched":
            rows = self.batched_peer_rows(latency)
        elif self.s3:
            rows = s3_peer_rows(blocks)
        elif workload in ("clips", "long"):
            rows = [*({"family": "pyav", "mode": "fsspec", "block_size": b} for b in blocks),
                    {"family": "pyav", "mode": "download"},
                    *({"family": "torchcodec", "mode": "fsspec", "block_size": b,
                       "seek_mode": "exact"} for b in blocks),
                    {"family": "decord", "mode": "fsspec", "block_size": None},
                    # SPDL reads a path or bytes, no file object: its users download the file.
                    {"family": "spdl", "mode": "download"}]
        else:  # metadata: the smallest block, opening reads least with it
            small = min(blocks, key=lambda b: b or 5 * MiB)
            rows = [{"family": "pyav", "mode": "fsspec", "block_size": small},
                    {"family": "torchcodec", "mode": "fsspec", "block_size": small,
                     "seek_mode": "approximate"},
                    {"family": "torchcodec", "mode": "fsspec", "block_size": None,
                     "seek_mode": "exact"},
                    {"family": "decord", "mode": "fsspec", "block_size": None}]
        return [r for r in rows if r["family"] in self.workers]

    def batched_peer_rows(self, latency: float) -> list[dict]:
        """The best exact peer row of "clips" at this latency, the fastest peer row if it is
        another (flagged) one, PyAV download (one GET serves all K clips), and PyAV download
        decoding the union of the K clips in one pass per cluster (context, not "one by one")."""
        from harness import best
        from remote_report import summaries

        clips = [s for s in summaries(self.passes, self.args.batched_clips)
                 if s["latency_ms"] == latency and s["workload"] == "clips"
                 and s["row"]["family"] != "fluxon"]
        download = {"family": "pyav", "mode": "download"}
        chosen = [s["row"] for s in (best(clips), best(clips, exact=False)) if s]
        if "pyav" in self.workers:
            chosen += [download, {**download, "union": True}]
        return list({json.dumps(r, sort_keys=True): r for r in chosen}.values())

    def task(self, workload: str, latency: float, r: int, **more: Any) -> dict:
        return {"workload": workload, "items": self.plans[workload][r],
                "videos": self.video_table(), "store": self.store.urls(),
                "threads": self.args.threads, "s3": self.store.peer_access(), **more}

    def record(self, result: dict, workload: str, latency: float, r: int) -> None:
        from remote_report import label

        result.update({"workload": workload, "latency_ms": latency, "round": r})
        self.passes.append(result)
        say(f"  {workload} L={latency:g} ms round {r + 1}: {label(result['row'])}: "
            f"{brief(result)}")

    def run_fluxon(self, workload: str, latency: float, r: int) -> None:
        warm = str(next(iter(self.videos.values())).path)
        for cache in FLUXON_CACHES:
            if cache.startswith("cold"):
                self.store.flush()
            fx = self.fluxon_config()
            if cache == "warm-kv+shared":
                fx.update(metadata_cache_shared=True, metadata_cache_ttl_ms=SHARED_STAT_TTL_MS)
            task = self.task(workload, latency, r, fluxon=fx, cache=cache, warm_path=warm,
                             warm_reader=cache == "cold" and workload in ("clips", "long"))
            if cache == "warm-kv+shared":  # another process authorised the stats first
                primed = once(fluxon_pass, {**task, "prime_shared_stats": True})
                if "fatal" in primed:
                    raise RuntimeError(f"priming shared stats failed: {primed['fatal']}")
            runs = [(cache, task)]
            if (cache == "warm-kv" and workload in ("clips", "long")
                    and latency == self.args.target_latency):
                runs.append(("local file", {**task, "local_only": True}))
            for row_cache, one_task in runs:
                out = once(fluxon_pass, one_task)
                self.versions.update(out.get("versions", {}))
                for result in ([failed_pass({"family": "fluxon", "cache": row_cache},
                                            out["fatal"])]
                               if "fatal" in out else out["passes"]):
                    self.record(result, workload, latency, r)

    def run_workload(self, workload: str, latency: float) -> None:
        slots: list[dict | None] = [*self.peer_rows(workload, latency), None]  # None: fluxon
        for r in range(self.args.rounds_for[latency]):
            shift = r % len(slots)
            for slot in slots[shift:] + slots[:shift]:
                if slot is None:
                    self.run_fluxon(workload, latency, r)
                else:
                    result = self.workers[slot["family"]].call(
                        peer_pass, self.task(workload, latency, r, row=slot))
                    self.record(result if "row" in result else {**failed_pass(
                        slot, result["fatal"])}, workload, latency, r)

    def run(self) -> int:
        t0 = time.perf_counter()
        self.make_dataset()
        self.make_plans()
        self.make_references()
        self.load.append(("start", list(os.getloadavg())))
        try:
            self.start()
            for latency in self.args.latency_list:
                self.store.set_latency(latency)
                say(f"latency {latency:g} ms, bandwidth {self.args.bandwidth_mbps:g} MB/s "
                    "per connection")
                for workload in self.workloads:
                    self.run_workload(workload, latency)
                self.load.append((f"after {latency:g} ms", list(os.getloadavg())))
        finally:
            self.stop()
        import remote_report

        written = remote_report.write(self.results(time.perf_counter() - t0), self.args.out)
        say("wrote " + ", ".join(str(p) for p in written))
        return 0

    def results(self, seconds: float) -> dict:
        a = self.args
        return {**header("remote.py", self.argv, seconds, a), "conditions": {
            "machine": {**machine(), "load_average": self.load},
            "versions": {**versions(), **self.versions},
            "store": {"origin": a.store, "latencies_ms": a.latency_list,
                      "bandwidth_mbps_per_connection": a.bandwidth_mbps,
                      "piece_size": self.fluxon_config()["piece_size"] if self.store else None},
            "workload": {"clip": f"{CLIP_LEN} frames, stride {STRIDE}, {SIZE}x{SIZE} RGB",
                         "rounds": {f"{k:g}": v for k, v in a.rounds_for.items()},
                         "threads": a.threads, "batched_clips": a.batched_clips,
                         "long_videos": a.long_videos, "long_items": a.long_items,
                         "block_sizes": a.block_sizes}},
            "videos": [v.facts() for v in self.videos.values()], "plans": self.plans,
            "needed_bytes": {w: [sum(i["needed_bytes"] for i in plan) for plan in plans]
                             for w, plans in self.plans.items() if w != "metadata"},
            "passes": self.passes, "skipped": self.skipped, "notes": self.notes}


def s3_peer_rows(blocks: list[int]) -> list[dict]:
    """PyAV and torchcodec (exact) over s3fs and obstore at each block size; PyAV download."""
    rows = [{"family": fam, "mode": mode, "block_size": b,
             **({"seek_mode": "exact"} if fam == "torchcodec" else {})}
            for fam in ("pyav", "torchcodec") for mode in ("s3fs", "obstore") for b in blocks]
    return rows + [{"family": "pyav", "mode": "download"}]


def mixed(names: list[str], n: int) -> list[str]:
    """n names taking each kind (the name without its number) in turn: 720p H.264
    faststart, HEVC, 1080p, moov-at-end, MKV."""
    prefer = ["h264_720p_faststart", "hevc_720p", "h264_1080p_faststart", "h264_720p_moovend"]
    kinds = grouped(sorted(names, key=lambda x: next((i for i, p in enumerate(prefer)
                                                     if x.startswith(p)), len(prefer))),
                    lambda name: name.rsplit("_", 1)[0])
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
    return Bench(args, argv if argv is not None else sys.argv[1:]).run()


if __name__ == "__main__":
    sys.exit(main())
