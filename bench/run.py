#!/usr/bin/env python3
"""The local benchmark: peers on local files vs fluxon_video through FluxonFS (its
--help and bench/README.md say what it measures and how)."""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from harness import (DASH, Pass, Target, add_options, best, error_text,  # noqa: E402
                     failed_pass, fill, finish, grouped, header, listing, machine, median, mib,
                     once, parse_size, peak_rss_mib, reset_peak_rss, scenario_parser, stat,
                     summarise, table, times, versions, write_outputs)

CLIP_LENGTH, CLIP_STRIDE, TRAIN_SIZE = 16, 4, 224
QUICK_SCALE = 0.25  # --quick: videos this much shorter
EXPORT = "bench"
WORKLOADS = {
    "clips224": f"random {CLIP_LENGTH}-frame clips, stride {CLIP_STRIDE}, "
                f"{TRAIN_SIZE}x{TRAIN_SIZE}",
    "clips-native": f"random {CLIP_LENGTH}-frame clips, stride {CLIP_STRIDE}, native size",
    "sequential224": f"full sequential decode, {TRAIN_SIZE}x{TRAIN_SIZE}",
    "batched": f"clips of the long video, {TRAIN_SIZE}x{TRAIN_SIZE}: "
               "read_many_numpy_with_stats vs one by one",
}
CACHE_ORDER = ("local", "cold", "warm-kv", "warm-reader")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from fluxon_video.fs.config import FluxonFsExport

    piece = FluxonFsExport.__dataclass_fields__["piece_size"].default
    ap = scenario_parser("run.py", None, "a ~1 minute smoke run: shorter videos, 2 clips, "
                         "1 repeat", "latest.json, latest.md and the charts")
    full, quick = add_options(ap, [
        ("--repeat", int, 3, 1, "timed runs of every measurement; figures are medians"),
        ("--clips", int, 6, 2, "random clips per video and workload"),
        ("--batch-clips", int, 8, 4, "clips of the 60 s video in the batched workload"),
        ("--seed", int, 5, "clip sampling seed"),
        ("--threads", int, 1, "decoder threads for every contender (as the targets are "
                                 "stated)"),
        ("--piece-size", int, piece, "FluxonFS piece size for the main runs, bytes (the "
                                            "export default)"),
        ("--sweep-piece-sizes", str, "256K,1M,4M", "256K,1M",
         "piece sizes of the sweep, comma separated, K/M suffixes; empty: none"),
        ("--agent-latency-ms", float, 0.0, "latency the agent adds to every stat and read, "
                                                "to model a remote store"),
        ("--sweep-latency-ms", float, 2.0, "agent latency during the piece-size sweep, where "
                                                "round trips are what larger pieces save")])
    args = finish(ap, ap.parse_args(argv), full, quick,
                  ("repeat", "clips", "batch_clips", "threads"))
    try:
        args.sweep = [parse_size(s) for s in args.sweep_piece_sizes.split(",") if s.strip()]
    except ValueError as exc:
        ap.error(f"--sweep-piece-sizes: {exc}")
    return args


# ---- what the children do (each in a process of its own) ----

def timed_repeats(task: dict, item: dict, row: dict, open_handle: Callable[[int], Any],
                  exact: bool, after: Callable[[], None] = lambda: None) -> list[dict]:
    """``repeat`` passes over one item's clips, each through a handle opened (and timed) for
    it; frames checked on the first; the peak RSS over all of them."""
    from frames import CheckResult, Reference

    ref = Reference.load(Path(item["ref"]))
    info = {k: item[k] for k in ("height", "width")}
    info.update(clips=len(item["clips"]), frames_per_clip=len(item["clips"][0]))
    passes: list[dict] = []
    reset_peak_rss()
    for r in range(task["repeat"]):
        one = Pass(row, CheckResult(exact_required=exact) if r == 0 else None, extra=dict(info))
        try:
            t0 = time.perf_counter()
            handle = open_handle(r)
            one.extra["open_ms"] = (time.perf_counter() - t0) * 1e3
            try:
                for clip in item["clips"]:
                    t0 = time.perf_counter()
                    frames = handle.read(clip)
                    one.item_ms.append((time.perf_counter() - t0) * 1e3)
                    one.add_stats(item["video"], handle.stats)
                    if one.check is not None:
                        one.check.add(frames, clip, ref)
            finally:
                handle.close()
            after()
            passes.append(one.result({}))
        except Exception as exc:  # noqa: BLE001 - a failing contender is a finding
            passes.append({**failed_pass(row, error_text(exc)[:100]), "extra": info})
            break
    for p in passes:
        p["extra"]["peak_rss_mib"] = peak_rss_mib()
    return passes


def row_of(task: dict, item: dict, contender: str, cache: str) -> dict:
    return {"contender": contender, "cache": cache, "workload": item["workload"],
            "video": item["video"], "sweep": task.get("sweep", False),
            "piece_size": task.get("fluxon", {}).get("piece_size")}


def local_task(task: dict) -> list[dict]:
    """A peer (or fluxon's decoder) on the local files."""
    from contenders import index_ms, open_handle

    contender, threads = task["contender"], task["threads"]

    def opener(item: dict) -> Callable[[int], Any]:
        return lambda r: open_handle(contender, Path(item["path"]), item["height"],
                                     item["width"], threads, native=item["native"])

    opener(task["items"][0])(0).close()  # load and initialise the library, untimed
    out = []
    for item in task["items"]:
        scan = index_ms(contender, Path(item["path"]))
        passes = timed_repeats(task, item, row_of(task, item, contender, "local"),
                               opener(item), contender.startswith("fluxon"))
        out += [{**p, "extra": {**p["extra"], "index_ms": scan}} for p in passes]
    return out


def fluxon_task(task: dict) -> list[dict]:
    """fluxon through FluxonFS: "cold" (the file's KV pieces evicted and a new patcher each
    pass, then warm-reader passes through the last pool) or "warm-kv" (Redis warm from an
    earlier process, a new patcher each pass)."""
    from contenders import FluxonPoolHandle
    from stores import evict, make_patcher, settle

    fx, out = task["fluxon"], []
    for item in task["items"]:
        held: dict[str, Any] = {}

        def pool(r: int, fresh: bool = True, relpath: str = item["relpath"]) -> Any:
            if fresh:
                close(held)
                if task["cache"] == "cold":
                    evict(fx, relpath)
                held["patcher"] = make_patcher(fx)
                held["pool"] = held["patcher"].open_video_reader_pool()
            return FluxonPoolHandle(held["pool"], fx["export"], relpath, item["height"],
                                    item["width"], task["threads"])

        def after() -> None:
            settle(held["patcher"]) if task["cache"] == "cold" else close(held)
        out += timed_repeats(task, item, row_of(task, item, "fluxon", task["cache"]), pool,
                             True, after)
        if task["cache"] == "cold" and task.get("warm_reader", True) and held:
            out += timed_repeats(task, item, row_of(task, item, "fluxon", "warm-reader"),
                                 lambda r: pool(r, fresh=False), True, after)
        close(held)
    return out


def close(held: dict) -> None:
    if held.get("pool") is not None:
        held.pop("pool").close()
        held.pop("patcher").close()


def batched_task(task: dict) -> list[dict]:
    """Every clip of the long video in one read_many_numpy_with_stats call, warm KV, a new
    pool each pass (one item: the call)."""
    from fluxon_video import FluxonFsVideoReadRequest

    from frames import CheckResult, Reference
    from stores import make_patcher

    fx, item = task["fluxon"], task["items"][0]
    row = row_of(task, item, "fluxon read_many", "warm-kv")
    ref = Reference.load(Path(item["ref"]))
    requests = [FluxonFsVideoReadRequest(fx["export"], item["relpath"], item["height"],
                                         item["width"], task["threads"], tuple(clip))
                for clip in item["clips"]]
    out = []
    reset_peak_rss()
    for r in range(task["repeat"]):
        one = Pass(row, CheckResult(exact_required=True) if r == 0 else None,
                   extra={"clips": len(requests), "frames_per_clip": len(item["clips"][0])})
        with make_patcher(fx) as patcher, patcher.open_video_reader_pool() as pool:
            results = one.time(item["video"], lambda: pool.read_many_numpy_with_stats(requests))
        if results:
            one.add_stats(item["video"], {**results[0].stats.as_dict(),  # shared by the group
                                          "group_size": results[0].group_size})
            one.check_item(item["video"], item["clips"], [x.frames for x in results], ref) \
                if one.check else None
        out.append(one.result({}))
    for p in out:
        p["extra"]["peak_rss_mib"] = peak_rss_mib()
    return out


def floor_task(task: dict) -> list[dict]:
    """The decode floor of every clip (median of repeats)."""
    from contenders import decode_floor_ms

    return [{"floor": True, "workload": item["workload"], "video": item["video"],
             "floor_ms": [statistics.median(decode_floor_ms(Path(item["path"]), clip,
                                                            task["threads"])
                                            for _ in range(task["repeat"]))
                          for clip in item["clips"]]} for item in task["items"]]


def child_versions(contender: str | None) -> dict[str, str]:
    from contenders import PEERS, peer_versions
    from harness import fluxon_versions

    if contender in PEERS:
        return peer_versions(contender)
    return {k.removeprefix("fluxon's "): v for k, v in fluxon_versions().items()
            if k.startswith("fluxon's")}


def child(kind: str, task: dict) -> dict:
    work = {"local": local_task, "fluxon": fluxon_task, "batched": batched_task,
            "floor": floor_task}[kind]
    return {"passes": work(task), "versions": child_versions(task.get("contender"))}


# ---- the parent: dataset, servers, the plan of children ----

class Bench:
    def __init__(self, args: argparse.Namespace, argv: list[str]) -> None:
        from dataset import DATASET

        self.args, self.argv = args, argv
        self.specs = [s.scaled(QUICK_SCALE) for s in DATASET] if args.quick else list(DATASET)
        self.video_dir = args.data / ("quick-videos" if args.quick else "videos")
        self.work, self.redis = args.data / "work", None
        self.videos: dict[str, Any] = {}
        self.clips: dict[str, list[list[int]]] = {}
        self.refs: dict[tuple, Path] = {}
        self.passes, self.floors, self.servers, self.notes = [], [], [], []
        self.versions: dict[str, str] = {}
        self.skipped: dict[str, str] = {}

    def steps(self) -> list[tuple[str, Callable[[], None]]]:
        from contenders import PEERS

        local = (*PEERS, "fluxon-local")
        steps = [("dataset", self.make_videos), ("references", self.make_references),
                 ("servers", self.start_servers), ("which peers import", self.check_peers)]
        for w in ("clips224", "clips-native", "sequential224"):
            steps += [(f"{w} {c}", lambda w=w, c=c: self.local(w, c)) for c in local]
            steps += [(f"{w} fluxon cold + warm reader", lambda w=w: self.fluxon(w, "cold")),
                      (f"{w} fluxon warm KV", lambda w=w: self.fluxon(w, "warm-kv"))]
        steps.append(("decode floor", lambda: self.child(
            "floor", {"items": self.items("clips224") + self.items("clips-native")})))
        steps += [(f"batched {c}", lambda c=c: self.local("batched", c)) for c in PEERS]
        steps += [("batched fluxon cold (primes Redis)",
                   lambda: self.fluxon("batched", "cold", warm_reader=False)),
                  ("batched fluxon one by one, warm KV", lambda: self.fluxon("batched", "warm-kv")),
                  ("batched fluxon read_many, warm KV", lambda: self.child(
                      "batched", {"items": self.items("batched"), "fluxon": self.fx()}))]
        if self.args.sweep:
            steps.append(("sweep agent", lambda: self.start_agent(self.args.sweep_latency_ms)))
        for size in self.args.sweep:
            steps += [(f"sweep {size >> 10} KiB {c}", lambda p=size, c=c: self.fluxon(
                "sweep", c, warm_reader=False, piece_size=p)) for c in ("cold", "warm-kv")]
        return steps

    def run(self) -> int:
        from tqdm import tqdm

        started = time.perf_counter()
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)
        steps = self.steps()
        try:
            with tqdm(total=len(steps), unit="step", dynamic_ncols=True) as bar:
                for label, step in steps:
                    bar.set_description(label)
                    step()
                    bar.update()
        finally:
            for server in reversed(self.servers):
                server.stop()
        written = write(self.results(time.perf_counter() - started), self.args.out)
        print(f"bench: {time.perf_counter() - started:.0f} s; wrote "
              + ", ".join(str(p) for p in written))
        return 0

    def make_videos(self) -> None:
        import numpy as np

        from dataset import prepare, sample_clips

        for video in prepare(self.specs, self.video_dir):
            self.videos[video.name] = video
            count = self.args.clips if video.spec.role == "clips" else self.args.batch_clips
            key = len(self.clips) if video.spec.role == "clips" else 1000
            self.clips[video.name] = sample_clips(video.frames, count, CLIP_LENGTH, CLIP_STRIDE,
                                                  np.random.default_rng([self.args.seed, key]))

    def items(self, workload: str) -> list[dict]:
        """What a child reads for ``workload``: videos, output size, clips, reference file."""
        clip_videos = [v for v in self.videos.values() if v.spec.role == "clips"]
        videos = {"batched": [v for v in self.videos.values() if v.spec.role == "batched"],
                  "sweep": clip_videos[:2]}.get(workload, clip_videos)
        out = []
        for v in videos:
            native = workload == "clips-native"
            h, w = (v.spec.height, v.spec.width) if native else (TRAIN_SIZE, TRAIN_SIZE)
            out.append({"workload": "clips224" if workload == "sweep" else workload,
                        "video": v.name, "path": str(v.path), "relpath": v.name, "height": h,
                        "width": w, "native": native, "ref": str(self.refs.get((v.name, h, w))),
                        "clips": ([list(range(v.frames))] if workload == "sequential224"
                                  else self.clips[v.name])})
        return out

    def make_references(self) -> None:
        from frames import reference_files

        items = [i for w in ("clips224", "clips-native", "sequential224", "batched")
                 for i in self.items(w)]
        self.refs = reference_files(
            [((i["video"], i["height"], i["width"]), self.videos[i["video"]], i["height"],
              i["width"], i["clips"]) for i in items], self.args.data / "refs", self.notes)

    def start_servers(self) -> None:
        from fluxon_video.testing import RedisServer

        self.redis = RedisServer(self.work).start()
        self.servers.append(self.redis)
        self.start_agent(self.args.agent_latency_ms)

    def start_agent(self, latency_ms: float) -> None:
        from stores import agent

        self.servers.append(agent(self.work, EXPORT, self.video_dir.resolve(), latency_ms))

    def check_peers(self) -> None:
        from contenders import PEERS, unavailable

        for contender in (*PEERS, "fluxon-local"):
            why = once(unavailable, contender, timeout=300)
            if why:
                self.skipped[contender] = why["fatal"] if isinstance(why, dict) else why

    def fx(self, piece_size: int | None = None) -> dict:
        from stores import store

        sweep = piece_size is not None
        return store(EXPORT, self.video_dir.resolve(), self.servers[-1 if sweep else 1].url,
                     self.redis.url, piece_size=piece_size or self.args.piece_size,
                     agent_latency_ms=(self.args.sweep_latency_ms if sweep
                                       else self.args.agent_latency_ms))

    def child(self, kind: str, task: dict) -> None:
        """Run one task in a new process and keep its passes (or why it failed)."""
        task = {"threads": self.args.threads, "repeat": self.args.repeat, **task}
        out = once(child, kind, task, timeout=3600)
        if "fatal" in out:
            contender = task.get("contender") or ("fluxon read_many" if kind == "batched"
                                                  else "fluxon")
            cache = "local" if kind == "local" else task.get("cache", "warm-kv")
            self.passes += [{**failed_pass(row_of(task, item, contender, cache), out["fatal"]),
                             "extra": {"clips": len(item["clips"])}} for item in task["items"]]
            return
        self.versions.update(out["versions"])
        for p in out["passes"]:
            (self.floors if p.get("floor") else self.passes).append(p)

    def local(self, workload: str, contender: str) -> None:
        if contender not in self.skipped:
            self.child("local", {"contender": contender, "items": self.items(workload)})

    def fluxon(self, workload: str, cache: str, warm_reader: bool = True,
               piece_size: int | None = None) -> None:
        self.child("fluxon", {"items": self.items(workload), "cache": cache,
                              "warm_reader": warm_reader, "sweep": workload == "sweep",
                              "fluxon": self.fx(piece_size)})

    def results(self, seconds: float) -> dict:
        from harness import run as run_cmd

        return {
            **header("run.py", self.argv, seconds, self.args),
            "workloads": WORKLOADS,
            "conditions": {"machine": machine(), "versions": {**versions(), **self.versions},
                           "export": {
                               "root": str(self.video_dir),
                               "filesystem": run_cmd("stat", "-f", "-c", "%T",
                                                     str(self.video_dir)),
                               "agent_latency_ms": self.args.agent_latency_ms,
                               "sweep_agent_latency_ms": self.args.sweep_latency_ms,
                               "piece_size": self.args.piece_size}},
            "videos": [v.facts() for v in self.videos.values()],
            "clips": self.clips,
            "ideal_bytes": {v.name: {"gop_span_bytes": v.span_bytes(self.clips[v.name]),
                                     "container_bytes": v.container_bytes()}
                            for v in self.videos.values()},
            "passes": self.passes, "floors": self.floors,
            "skipped": self.skipped, "notes": self.notes,
        }


# ---- the report ----

def summaries(results: dict) -> list[dict]:
    """One summary per row (contender, cache, workload, video, sweep, piece size)."""
    from contenders import PEERS

    groups = grouped(results["passes"], lambda p: json.dumps(p["row"], sort_keys=True))
    order = (*PEERS, "fluxon-local", "fluxon", "fluxon read_many")
    out = []
    for group in groups.values():
        row = group[0]["row"]
        s = summarise(group, group[0]["extra"]["clips"] if row["workload"] == "batched" else 1)
        s.update(row, info=group[0]["extra"])
        if s["verdict"].startswith(("WRONG (", "OFF (")):  # one contender's one check
            s["verdict"] = s["verdict"].split(" ", 1)[0] + ": " + s["verdict"].split(": ", 1)[1]
        floor = next((f["floor_ms"] for f in results["floors"] if f["workload"] == row["workload"]
                      and f["video"] == row["video"]), None)
        s["floor_ms"] = median(floor or [])
        s["frames_per_s"] = s["clips_per_s"] and s["clips_per_s"] * s["info"]["frames_per_clip"]
        s["label"] = (f"fluxon {row['cache']}" if row["contender"] == "fluxon"
                      else row["contender"])
        s["rank"] = (order.index(row["contender"]) if row["contender"] in order else 99,
                     CACHE_ORDER.index(row["cache"]))
        out.append(s)
    videos = [v["video"] for v in results["videos"]]
    return sorted(out, key=lambda s: (videos.index(s["video"]), s["rank"]))


def select(rows: list[dict], workload: str, sweep: bool = False, **match: Any) -> list[dict]:
    return [s for s in rows if s["workload"] == workload and s["sweep"] == sweep
            and all(s[k] == v for k, v in match.items())]


def fmt(value: float | None, digits: int = 1) -> str:
    if value is None:
        return DASH
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.{digits}f}"


def cells(s: dict, *columns: str) -> list[str]:
    """A row's cells by column name (fluxon's counts only for fluxon through FluxonFS)."""
    via_fs = s["contender"] in ("fluxon", "fluxon read_many")
    per_floor = s["item_ms_p50"] / s["floor_ms"] if s["item_ms_p50"] and s["floor_ms"] else None
    opened = ((stat(s, "open_ms") or 0) + stat(s, "container_open_ms")
              if s["contender"] != "fluxon-local" and stat(s, "container_open_ms") is not None
              else s["open_ms"])
    paths = sorted((s["per_pass"] or [{}])[0].get("path", {}))
    fallbacks = sorted((s["per_pass"] or [{}])[0].get("fallback", {}))
    text = {
        "video": lambda: s["video"], "contender": lambda: ("" if s["ok"] else "⚠ ") + s["label"],
        "clips/s": lambda: fmt(s["clips_per_s"], 2), "clip ms": lambda: fmt(s["item_ms_p50"]),
        "open ms": lambda: fmt(opened) + (f" (+{fmt(s['info']['index_ms'])} scan)"
                                          if s["info"].get("index_ms") else ""),
        "floor ms": lambda: fmt(s["floor_ms"]), "clip/floor": lambda: times(per_floor, "n/a"),
        "range reads": lambda: fmt(stat(s, "range_reads"), 0),
        "range MiB": lambda: mib(stat(s, "range_bytes")),
        "KV hit/miss": lambda: f"{fmt(stat(s, 'kv_hits'), 0)}/{fmt(stat(s, 'kv_misses'), 0)}",
        "remote MiB": lambda: mib(stat(s, "remote_bytes")),
        "peak RSS MiB": lambda: fmt(s["info"].get("peak_rss_mib"), 0),
        "frames/s": lambda: fmt(s["frames_per_s"]),
        "ms": lambda: fmt(s["pass_ms"]), "ms for all": lambda: fmt(s["pass_ms"]),
        "how": lambda: "one call" if s["contender"] == "fluxon read_many" else "one by one",
        "clips": lambda: str(s["info"]["clips"]),
        "frames decoded": lambda: fmt(stat(s, "frames_decoded"), 0),
        "frames": lambda: s["verdict"][:108] + (" · " + "+".join(paths) if paths else "")
        + (" (fallback: " + "; ".join(fallbacks) + ")" if fallbacks else ""),
    }
    counted = ("range reads", "range MiB", "KV hit/miss", "remote MiB", "frames decoded")
    return [DASH if c in counted and not via_fs else text[c]() for c in columns]


CLIP_HEADER = ["video", "contender", "clips/s", "clip ms", "open ms", "floor ms", "clip/floor",
               "range reads", "range MiB", "KV hit/miss", "remote MiB", "peak RSS MiB",
               "frames"]
SEQUENTIAL_HEADER = ["video", "contender", "frames/s", "ms", "range MiB", "remote MiB",
                     "peak RSS MiB", "frames"]
BATCHED_HEADER = ["video", "contender", "how", "clips", "ms for all", "clips/s",
                  "frames decoded", "remote MiB", "peak RSS MiB", "frames"]


def find(rows: list[dict], workload: str, video: str, contender: str,
         cache: str) -> dict | None:
    return next(iter(select(rows, workload, video=video, contender=contender, cache=cache)),
                None)


def best_peer(rows: list[dict], workload: str, video: str, key: str = "clips_per_s",
              lowest: bool = False) -> tuple[dict | None, str]:
    """The fastest peer whose frames passed the check, and its cell."""
    from contenders import PEERS

    top = best((s for s in select(rows, workload, video=video) if s["contender"] in PEERS),
               key, lowest)
    return top, (f"{top['contender']} {fmt(top[key], 1 if lowest else 2)} "
                 f"{'ms' if lowest else 'clips/s'}" if top else DASH)


def rate(s: dict | None, key: str = "clips_per_s") -> float | None:
    """A row's figure, or None when it is missing or its frames were flagged."""
    return s[key] if s and s["ok"] else None


def ratio(a: float | None, b: float | None) -> str:
    return times(a / b if a and b else None, "n/a")


def targets(results: dict, rows: list[dict]) -> list[Target]:
    """(a) warm-KV clips/s and (c) clip time ÷ decode floor on the first clip video, (b)
    read_many against the best peer one by one, per clip video (e) fluxon's decoder on the
    local file against the best exact peer and (d) cold remote bytes against the needed."""
    clip_videos = [v["video"] for v in results["videos"] if select(rows, "clips224",
                                                                    video=v["video"])]
    long = next((s["video"] for s in select(rows, "batched")), None)
    out = []
    for video in clip_videos[:1]:
        warm = find(rows, "clips224", video, "fluxon", "warm-kv")
        top, other = best_peer(rows, "clips224", video)
        out += [Target(target="(a) clips/s, warm KV vs best peer on local files",
                       condition=f"{video}, {WORKLOADS['clips224']}",
                       fluxon=f"{fmt(rate(warm), 2)} clips/s", other=other,
                       ratio=ratio(rate(warm), top and top["clips_per_s"]),
                       status="fluxon ÷ peer; > 1 is fluxon faster"),
                Target(target="(c) per-clip time ÷ decode floor",
                       condition=f"{video}, clips224, fluxon warm KV",
                       fluxon=f"{fmt(warm['item_ms_p50'])} ms/clip" if warm else DASH,
                       other=f"floor {fmt(warm['floor_ms'])} ms" if warm and warm["floor_ms"]
                       else "floor n/a", ratio=cells(warm, "clip/floor")[0] if warm else "n/a",
                       status="1: decode-bound; < 1: skipped non-reference frames or a decoder "
                              "kept from the previous clip beat the floor")]
    if long:
        many = find(rows, "batched", long, "fluxon read_many", "warm-kv")
        top, other = best_peer(rows, "batched", long, "pass_ms", lowest=True)
        out.append(Target(target="(b) N clips of one video: read_many vs best peer one by one",
                          condition=f"{long}, {many['info']['clips'] if many else '?'} clips, "
                                    "224x224, warm KV",
                          fluxon=f"{fmt(rate(many, 'pass_ms'))} ms", other=other,
                          ratio=ratio(top and top["pass_ms"], rate(many, "pass_ms")),
                          status="peer time ÷ fluxon time; > 1 is fluxon faster"))
    for video in clip_videos:
        local = find(rows, "clips224", video, "fluxon-local", "local")
        top, other = best_peer(rows, "clips224", video)
        out.append(Target(target="(e) local file, 1 thread: fluxon ÷ best exact peer (goal ≥ "
                                 "1.5×; clip ÷ floor ≤ 0.8×)", condition=f"{video}, clips224",
                          fluxon=(f"{fmt(rate(local), 2)} clips/s; clip/floor "
                                  f"{cells(local, 'clip/floor')[0]}" if rate(local) else DASH),
                          other=other, ratio=ratio(rate(local), top and top["clips_per_s"]),
                          status="fluxon ÷ peer; > 1 is fluxon faster"))
    piece = results["conditions"]["export"]["piece_size"] >> 10
    for video in clip_videos:
        cold = find(rows, "clips224", video, "fluxon", "cold")
        need = sum(results["ideal_bytes"][video].values())
        remote = stat(cold, "remote_bytes") if cold else None
        out.append(Target(target="(d) cold remote bytes ÷ (GOP spans touched + container)",
                          condition=f"{video}, clips224, piece {piece} KiB",
                          fluxon=f"{mib(remote)} MiB", other=f"needed {mib(need)} MiB",
                          ratio=times(remote / need if remote is not None and need else None,
                                      "n/a"), status="1 would fetch only what decoding needs"))
    return out


def sweep_rows(results: dict, rows: list[dict]) -> list[dict]:
    out = []
    for size in sorted({s["piece_size"] for s in rows if s["sweep"]}):
        for video in results["videos"]:
            by = {s["cache"]: s for s in select(rows, "clips224", True, piece_size=size,
                                                 video=video["video"])}
            if not by:
                continue
            cold, warm = by.get("cold"), by.get("warm-kv")
            out.append({"piece_size": size, "video": video["video"],
                        "cold_remote_bytes": cold and stat(cold, "remote_bytes"),
                        "cold_remote_reads": cold and stat(cold, "remote_reads"),
                        "cold_ms": cold and cold["pass_ms"], "warm_ms": warm and warm["pass_ms"],
                        "warm_kv_hits": warm and stat(warm, "kv_hits"),
                        "needed_bytes": sum(results["ideal_bytes"][video["video"]].values()),
                        "verdict": " / ".join(sorted({s["verdict"] for s in by.values()}))})
    return out


def markdown(results: dict, rows: list[dict]) -> str:
    c, s, w = results["conditions"], results["settings"], results["workloads"]
    m, export = c["machine"], c["export"]
    skipped = "; ".join(f"**{k}** ({v})" for k, v in results["skipped"].items())
    sweep = "\n".join(["", "## Piece-size sweep", "", f"{w['clips224']}; agent latency "
                       f"{export['sweep_agent_latency_ms']} ms. Cold: the file evicted from "
                       "Redis, a new process; warm KV: a new process after it.", "",
                       table(["piece KiB", "video", "cold remote MiB", "cold remote reads",
                              "cold ms", "warm KV ms", "KV hits (warm)", "needed MiB", "frames"],
                             [[str(p["piece_size"] >> 10), p["video"],
                               mib(p["cold_remote_bytes"]), fmt(p["cold_remote_reads"], 0),
                               fmt(p["cold_ms"]), fmt(p["warm_ms"]), fmt(p["warm_kv_hits"], 0),
                               mib(p["needed_bytes"]), p["verdict"]] for p in results["sweep"]]),
                       ""]) if results["sweep"] else ""

    def rows_of(workload: str, header: list[str]) -> str:
        return table(header, [cells(r, *header) for r in select(rows, workload)])
    return fill(
        "latest", generated=results["generated"], command=results["command"],
        duration=f"{results['duration_s']:.0f}",
        machine=f"{m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; {m['os']}; "
                f"git {m['git']}",
        filesystem=export["filesystem"], latency=export["agent_latency_ms"],
        piece=export["piece_size"] >> 10,
        repeat=s["repeat"], clips=s["clips"], seed=s["seed"], threads=s["threads"],
        versions=listing(c["versions"].items()),
        skipped=f"Skipped: {skipped}.\n\n" if skipped else "",
        notes="".join(f"Note: {n}\n" for n in results["notes"]),
        targets_table=table(["target", "condition", "fluxon", "best peer / bound", "ratio",
                             "reading"], [[t["target"], t["condition"], t["fluxon"], t["other"],
                                           t["ratio"], t["status"]] for t in results["targets"]]),
        dataset_table=table(["video", "codec", "resolution", "fps", "frames", "GOP", "layout",
                             "MiB", "container KiB"],
                            [[v["video"], v["codec"], f"{v['width']}x{v['height']}", str(v["fps"]),
                              str(v["frames"]), str(v["gop"]), v["layout"], mib(v["file_bytes"]),
                              f"{v['container_bytes'] / 1024:.1f}"] for v in results["videos"]]),
        clips224_table=rows_of("clips224", CLIP_HEADER),
        native_table=rows_of("clips-native", CLIP_HEADER),
        sequential_table=rows_of("sequential224", SEQUENTIAL_HEADER),
        batched_table=rows_of("batched", BATCHED_HEADER),
        clips224_title=w["clips224"], native_title=w["clips-native"],
        sequential_title=w["sequential224"], batched_title=w["batched"], sweep=sweep)


def write(results: dict, out: Path) -> list[Path]:
    import charts
    from dataclasses import asdict

    rows = summaries(results)
    results["targets"] = [asdict(t) for t in targets(results, rows)]
    results["sweep"] = sweep_rows(results, rows)
    results["summaries"] = [{k: v for k, v in s.items() if k not in ("per_item", "row")}
                            for s in rows]
    return [*write_outputs(out, "latest", results, markdown(results, rows)),
            *charts.local(results, rows, out)]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        write(json.loads(args.render.read_text()), args.out)
        return 0
    return Bench(args, argv if argv is not None else sys.argv[1:]).run()


if __name__ == "__main__":
    sys.exit(main())
