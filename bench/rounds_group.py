"""The round group: the remote dataset (short videos, and the 2-minute ones of "long"),
one store model (``stores.RemoteStore``: the agent and the HTTP Range server, or moto's
S3 behind the latency proxy, every connection through the shaping relay), and the
selected cases of a remote suite run as interleaved rounds: per latency and workload,
every row reads the round's items, the row order rotating each round. Peers run in
long-lived workers (one per library); every fluxon pass is a new process."""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from cases import BEST_CLIPS_PEER, CACHES, Case
from suites import latencies
from harness import Child, MiB, failed_pass, grouped, header, machine, once, say, versions

EXPORT = "remote"
CLIP_LEN, STRIDE, SIZE = 16, 4, 224
WORKLOAD_ORDER = ("clips", "batched", "metadata", "long")


class RoundsGroup:
    """The selected cases of a remote suite, every latency's workloads in interleaved
    rounds; ``run`` returns the passes (bench/tally.py makes them records)."""

    def __init__(self, cases: list[Case], settings: dict[str, Any], data: Path) -> None:
        self.cases, self.s = cases, settings
        self.work, self.video_dir = data / "remote-work", data / "remote-videos"
        self.data = data
        self.s3, self.store = settings["store"] == "s3", None
        self.videos: dict[str, Any] = {}
        self.plans: dict[str, list[list[dict]]] = {}
        self.refs: dict[str, Path] = {}
        self.versions: dict[str, str] = {}
        self.skipped: dict[str, str] = {}
        self.workers: dict[str, Child] = {}
        # every pass (with its latency, workload, round), the long videos, notes, load
        self.passes, self.long, self.notes, self.load = [], [], [], []
        self.latencies = [x for x in latencies(settings)
                          if any(c.latency_ms == x for c in cases)]
        rounds = [int(x) for x in str(settings["rounds"]).split(",")]
        rounds *= 1 if len(rounds) > 1 else len(latencies(settings))
        self.rounds_for = dict(zip(latencies(settings), rounds))
        self.max_rounds = max(self.rounds_for.values())
        self.workloads = [w for w in WORKLOAD_ORDER if any(c.workload == w for c in cases)]
        # A batched best-clips-peer row is one of the clip rows' families.
        self.families = sorted({c.family for c in cases if not c.fluxon} - {BEST_CLIPS_PEER})

    # ---- what is read ----

    def make_dataset(self) -> None:
        from dataset import long_specs, prepare, remote_specs

        specs = remote_specs()
        specs = (specs[::2] + specs[1::2])[:self.s["videos"]]  # spread over the kinds
        longs = long_specs(self.s["long_videos"] if "long" in self.workloads else 0)
        say(f"dataset: {len(specs)} videos and {len(longs)} long ones under "
            f"{self.video_dir} (made once)")
        self.videos = {v.name: v for v in prepare(specs + longs, self.video_dir)}
        self.long = [s.name for s in longs]

    def make_plans(self) -> None:
        """The items of every workload per round, seeded; what decoding them needs."""
        import numpy as np

        from dataset import long_order, sample_clips

        s, names = self.s, [n for n in self.videos if n not in self.long]

        def items(order: list[str], count: int = 1) -> list[dict]:
            return [{"video": n, "clips": sample_clips(self.videos[n].frames, count, CLIP_LEN,
                                                       STRIDE, rng)} for n in order]
        for r in range(self.max_rounds):
            rng = np.random.default_rng([s["seed"], r])
            plans = {"clips": items([names[i] for i in rng.permutation(len(names))]),
                     "batched": items(mixed(names, s["batched_items"]), s["batched_clips"]),
                     "metadata": [{"video": names[i]} for i in rng.permutation(len(names))]}
            if self.long:
                plans["long"] = items(long_order(self.long, s["long_items"], rng))
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
             for i in self.clip_items()), self.data / "remote-refs", self.notes)

    def clip_items(self) -> list[dict]:
        """Every item that reads clips, of every workload and round (not metadata's)."""
        return [i for w, ps in self.plans.items() if w != "metadata" for p in ps for i in p]

    def piece_size(self) -> int:
        return int(self.s["piece_size"])

    def video_table(self) -> dict[str, dict]:
        """What every task gets about each video (URL, pts table, reference)."""
        return {name: {"name": name, "relpath": name, "url": f"{self.store.range.url}/{name}",
                       "path": str(v.path), "pts": sorted(p["pts"] for p in v.packets),
                       "keys": sorted(p["pts"] for p in v.packets if p["key"]),
                       "ref": str(self.refs.get(name)), "frames": v.frames, "fps": v.spec.fps}
                for name, v in self.videos.items()}

    # ---- processes ----

    def start(self) -> None:
        from peer_passes import peer_hello
        from stores import RemoteStore

        self.work.mkdir(parents=True, exist_ok=True)
        say("servers: " + ("moto S3 (uploading the videos), range_server.py --proxy + relay, "
                           "redis-server, the agent + relay" if self.s3 else
                           "redis-server, the agent, range_server.py + relays") + " on loopback")
        self.store = RemoteStore(self.work, EXPORT, self.video_dir, self.s["bandwidth_mbps"],
                                 list(self.videos) if self.s3 else None)
        warm = str(next(iter(self.videos.values())).path)
        for family in self.families:
            say(f"starting the {family} worker")
            worker = Child()
            hello = worker.call(peer_hello, family, warm, self.s["threads"], timeout=300)
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

    def selected(self, workload: str, latency: float) -> list[Case]:
        return [c for c in self.cases if c.workload == workload and c.latency_ms == latency]

    def peer_rows(self, workload: str, latency: float) -> list[dict]:
        rows = []
        for case in self.selected(workload, latency):
            if case.family == BEST_CLIPS_PEER:
                rows += self.best_clips_rows(latency)
            elif not case.fluxon:
                rows.append(case.peer_row())
        unique = {json.dumps(r, sort_keys=True): r for r in rows}.values()
        return [r for r in unique if r["family"] in self.workers]

    def best_clips_rows(self, latency: float) -> list[dict]:
        """The best exact peer row of "clips" at this latency, and the fastest peer row if it
        is another (flagged) one: the batched workload's "one by one" peers."""
        from goals import BEST_PEER, Pick, pick
        from tally import rounds_records

        so_far = {"conditions": self.conditions(), "passes": self.passes}
        records = [r for r in rounds_records(so_far)
                   if r.case.workload == "clips" and not r.case.fluxon]
        chosen = [pick(records, Pick("clips", BEST_PEER), latency, "clips_per_s"),
                  max((r for r in records if r.case.latency_ms == latency and r.items_per_s),
                      key=lambda r: r.items_per_s or 0, default=None)]
        return [r.case.peer_row() for r in chosen if r is not None]

    def task(self, workload: str, r: int, **more: Any) -> dict:
        return {"workload": workload, "items": self.plans[workload][r],
                "videos": self.video_table(), "store": self.store.urls(),
                "store_pids": self.store.pids(),
                "threads": self.s["threads"], "s3": self.store.peer_access(), **more}

    def record(self, result: dict, workload: str, latency: float, r: int) -> None:
        from tally import rounds_case

        result.update({"workload": workload, "latency_ms": latency, "round": r})
        self.passes.append(result)
        case = rounds_case(result["row"], workload, latency, "s3" if self.s3 else "agent", 0)
        say(f"  {workload} L={latency:g} ms round {r + 1}: {case.label()}: {brief(result)}")

    def run_fluxon(self, workload: str, latency: float, r: int) -> None:
        from fluxon_passes import SHARED_STAT_TTL_MS, fluxon_pass

        warm = str(next(iter(self.videos.values())).path)
        mine = self.selected(workload, latency)
        wanted = {c.cache for c in mine if c.via_store}
        local = any(c.fluxon and c.store == "local" for c in mine)
        # The local-file reference runs right after the warm-kv pass (else the last, or alone).
        caches = [c for c in CACHES if c in wanted and c != "warm-reader"]
        local_after = "warm-kv" if "warm-kv" in caches else (caches or [None])[-1]
        for cache in caches or [None] * local:
            if cache is not None and cache.startswith("cold"):
                self.store.flush()
            fx = self.fluxon_config()
            if cache == "warm-kv+shared":
                fx.update(metadata_cache_shared=True, metadata_cache_ttl_ms=SHARED_STAT_TTL_MS)
            task = self.task(workload, r, fluxon=fx, cache=cache, warm_path=warm,
                             warm_reader=cache == "cold" and "warm-reader" in wanted)
            if cache == "warm-kv+shared":  # another process authorised the stats first
                primed = once(fluxon_pass, {**task, "prime_shared_stats": True})
                if "fatal" in primed:
                    raise RuntimeError(f"priming shared stats failed: {primed['fatal']}")
            runs = [(cache, task)] if cache is not None else []
            if local and cache == local_after:
                runs.append(("local file", {**task, "local_only": True}))
            for row_cache, one_task in runs:
                out = once(fluxon_pass, one_task)
                self.versions.update(out.get("versions", {}))
                for result in ([failed_pass({"family": "fluxon", "cache": row_cache},
                                            out["fatal"])]
                               if "fatal" in out else out["passes"]):
                    self.record(result, workload, latency, r)

    def run_workload(self, workload: str, latency: float) -> None:
        from peer_passes import peer_pass
        from stores import cpu_s

        fluxon = any(c.fluxon for c in self.selected(workload, latency))
        slots: list[dict | None] = [*self.peer_rows(workload, latency), *[None] * fluxon]
        for r in range(self.rounds_for[latency]):
            shift = r % len(slots)
            for slot in slots[shift:] + slots[:shift]:
                if slot is None:  # None: fluxon's passes
                    self.run_fluxon(workload, latency, r)
                else:
                    before = cpu_s(self.store.pids())
                    result = self.workers[slot["family"]].call(
                        peer_pass, self.task(workload, r, row=slot))
                    result["servers_cpu_s"] = cpu_s(self.store.pids()) - before
                    self.record(result if "row" in result else {**failed_pass(
                        slot, result["fatal"])}, workload, latency, r)

    def run(self, argv: list[str]) -> dict:
        """Every latency and workload; the results in bench/remote.py's shape (bench/tally.py
        reads it)."""
        t0 = time.perf_counter()
        self.make_dataset()
        self.make_plans()
        self.make_references()
        self.load.append(("start", list(os.getloadavg())))
        try:
            self.start()
            for latency in self.latencies:
                self.store.set_latency(latency)
                say(f"latency {latency:g} ms, bandwidth {self.s['bandwidth_mbps']:g} MB/s "
                    "per connection")
                for workload in self.workloads:
                    if self.selected(workload, latency):
                        self.run_workload(workload, latency)
                self.load.append((f"after {latency:g} ms", list(os.getloadavg())))
        finally:
            self.stop()
        return self.results(time.perf_counter() - t0, argv)

    def conditions(self) -> dict:
        """The store model and the workload's settings (what bench/tally.py reads)."""
        s = self.s
        return {"store": {"origin": s["store"], "latencies_ms": self.latencies,
                          "bandwidth_mbps_per_connection": s["bandwidth_mbps"],
                          "piece_size": self.piece_size()},
                "workload": {"clip": f"{CLIP_LEN} frames, stride {STRIDE}, {SIZE}x{SIZE} RGB",
                             "rounds": {f"{k:g}": v for k, v in self.rounds_for.items()},
                             "threads": s["threads"], "batched_clips": s["batched_clips"],
                             "long_videos": s["long_videos"], "long_items": s["long_items"],
                             "block_sizes": s["block_sizes"]}}

    def results(self, seconds: float, argv: list[str]) -> dict:
        return {**header("matrix.py", argv, seconds, SimpleNamespace(**self.s)), "conditions": {
            "machine": {**machine(), "load_average": self.load},
            "versions": {**versions(), **self.versions}, **self.conditions()},
            "videos": [v.facts() for v in self.videos.values()], "plans": self.plans,
            "needed_bytes": {w: [sum(i["needed_bytes"] for i in plan) for plan in plans]
                             for w, plans in self.plans.items() if w != "metadata"},
            "passes": self.passes, "skipped": self.skipped, "notes": self.notes}


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
    """One pass in one line, for the progress log."""
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
