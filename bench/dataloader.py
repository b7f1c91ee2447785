#!/usr/bin/env python3
"""DataLoader-shaped benchmark: fluxon_video.torch vs decord and torchcodec in a real DataLoader.

    python bench/dataloader.py                 # ~2-3 min on 2 cores, results to bench/results/
    python bench/dataloader.py --quick         # ~1 min smoke run, results to bench/.data/
    python bench/dataloader.py --agent-latency-ms 2

Makes (once, cached under --data) 24 short testsrc2 videos at 640x360, 4-6 s
each (18 H.264 GOP 60, half faststart and half moov-at-end, 3 HEVC, 3 VP9
WebM), starts a private redis-server and the real agent on loopback, and
draws one clip plan: --items random 16-frame clips, stride 4, at 224x224,
--clips-per-video (4) of each of --items/4 videos. Every contender reads
exactly these clips, inside a torch.utils.data.DataLoader with --workers (2)
non-persistent worker processes (fresh ones every epoch) and batch size 8:

  per-clip order (a random video per item; DataLoader shuffle=True with the
  same seeded generator for every row, so every row reads the same order):
    fluxon       VideoClipDataset (items forced to the plan's clips)
    decord       VideoReader(path, width=224, height=224) per item, get_batch
    torchcodec   VideoDecoder(path, seek_mode="exact", Resize((224, 224)))
                 per item, get_frames_at
  batched order (8 = 2 videos x 4 clips per batch; the batches of
  SameVideoBatchSampler, the same list for every row):
    fluxon       VideoClipDataset(clips_per_video=4) + SameVideoBatchSampler:
                 one read_many_numpy_with_stats call per batch
    decord / torchcodec: __getitems__ opens each video of the batch once and
                 reads the union of its 4 clips' frames in one call

fluxon rows read through FluxonFS with Redis warm (an untimed warm-up epoch
first, then a top-up pass in this process for pieces whose background
backfill was still queued when the warm-up workers exited); with --cold
(default on) fluxon is also timed after FLUSHALL (cold: agent bytes, index
scans). Peers read the local files (page cache warm after their own untimed
warm-up epoch). clips/s = items / (iter(loader) .. last batch), worker
start-up included; "first batch" and "workers up" are reported apart.
fluxon's frames must equal the ffmpeg CLI's (bilinear, rgb24) bit for bit;
peers must show the right frame within bench/frames.py's tolerance. Writes
dataloader.md and dataloader.json to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader, default_collate  # noqa: E402

import fluxon_video as fv  # noqa: E402
from scenario import finish, header, scenario_parser, write_outputs  # noqa: E402
from dataset import HEVC, X264, Video, VideoSpec, prepare, sample_clips, vp9  # noqa: E402
from fluxon_access import make_patcher, store, write_agent_config  # noqa: E402
from fluxon_video.testing import AgentProcess, RedisServer  # noqa: E402
from fluxon_video.torch import LoaderStats, SameVideoBatchSampler, StatsCollate  # noqa: E402
from frames import CheckResult, Reference, count_note, needed, references  # noqa: E402
from loader_datasets import (CpuMeter, PeerClips, PlannedClips,  # noqa: E402
                             TimedCollate, note_worker_up)
from loader_records import Epoch, LoaderRow  # noqa: E402
from loader_report import markdown  # noqa: E402
from machine import machine, versions  # noqa: E402

CLIP_LEN, STRIDE, SIZE = 16, 4, 224
EXPORT = "loader"
VP9 = vp9("600k")


def loader_specs() -> list[VideoSpec]:
    """24 videos, 640x360, 4-6 s: 18 H.264 (half faststart), 3 HEVC, 3 VP9."""
    specs = []
    for k in range(18):
        layout = "faststart" if k % 2 == 0 else "moovend"
        specs.append(VideoSpec(f"h264_360p_{layout}_{k:02d}.mp4", 640, 360, 4 + k % 3, 60, X264,
                               faststart=k % 2 == 0))
    for k in range(3):
        specs.append(VideoSpec(f"hevc_360p_{k:02d}.mp4", 640, 360, 4 + k % 3, 60, HEVC,
                               faststart=True))
    for k in range(3):
        specs.append(VideoSpec(f"vp9_360p_{k:02d}.webm", 640, 360, 4 + k % 3, 60, VP9))
    return specs


# ---- the clip plan ----

def make_plan(videos: list[Video], items: int, per_video: int, seed: int) -> list[list[Any]]:
    """items // per_video groups of per_video clips of one video (videos in a seeded random
    order, each once before any repeats): [[relpath, [indices...]], ...], group after group."""
    rng = np.random.default_rng([seed, 11])
    groups = items // per_video
    order: list[int] = []
    while len(order) < groups:
        order += rng.permutation(len(videos)).tolist()
    return [[videos[v].name, clip] for v in order[:groups]
            for clip in sample_clips(videos[v].frames, per_video, CLIP_LEN, STRIDE, rng)]


# ---- the benchmark ----

class LoaderBench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.video_dir = (args.data / "loader-videos").resolve()
        self.videos: list[Video] = []
        self.plan: list[list[Any]] = []
        self.refs: dict[str, Reference] = {}
        self.rows: dict[str, dict[str, Any]] = {}
        self.notes: list[str] = []
        self.skipped: dict[str, str] = {}
        self.redis: RedisServer | None = None
        self.agent: AgentProcess | None = None
        self.orders: dict[str, list[tuple[str, int]]] = {}

    # ---- setup ----

    def make_videos(self) -> None:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as ex:
            self.videos = [v[0] for v in ex.map(lambda s: prepare([s], self.video_dir),
                                                loader_specs())]
        print(f"videos: {len(self.videos)} under {self.video_dir} "
              f"({time.perf_counter() - t0:.1f} s)", flush=True)

    def make_references(self) -> None:
        t0 = time.perf_counter()
        wanted: dict[str, list[list[int]]] = {}
        for relpath, indices in self.plan:
            wanted.setdefault(relpath, []).append(indices)
        by_name = {v.name: v for v in self.videos}
        self.refs = references({name: (by_name[name].path, SIZE, SIZE, needed(clips))
                                for name, clips in wanted.items()})
        self.notes += filter(None, (count_note(name, by_name[name].frames, ref)
                                    for name, ref in self.refs.items()))
        print(f"references: {len(self.refs)} videos ({time.perf_counter() - t0:.1f} s)",
              flush=True)

    def patcher(self) -> fv.FluxonFsPatcher:
        assert self.agent is not None and self.redis is not None
        return make_patcher(store(EXPORT, self.video_dir, self.agent.url, self.redis.url))

    def check_peers(self) -> list[str]:
        peers = []
        for peer, module in (("decord", "decord"), ("torchcodec", "torchcodec.decoders")):
            try:
                __import__(module)
                # Load and initialise the library here, untimed: a training process
                # imports it once, and forked workers inherit it.
                error = PeerClips(peer, self.video_dir, self.plan, 1, False)[0]["error"]
                if error:
                    raise RuntimeError(error)
                peers.append(peer)
            except Exception as exc:  # noqa: BLE001 - skip with a note
                why = f"{module} does not work here: {type(exc).__name__}: {str(exc)[:160]}"
                self.skipped[peer] = why
                print(f"note: {peer} skipped: {why}", flush=True)
        return peers

    # ---- loaders ----

    def loader(self, row: str) -> DataLoader:
        a = self.args
        contender, order = row.split(" ", 1)
        batched = order == "batched"
        common = {"num_workers": a.workers, "worker_init_fn": note_worker_up,
                  "persistent_workers": False,
                  "multiprocessing_context": a.context if a.workers else None}
        if contender == "fluxon":
            dataset = self.fluxon_dataset(batched)
            collate = TimedCollate(StatsCollate(dataset))
        else:
            dataset = PeerClips(contender, self.video_dir, self.plan, a.threads,
                                share_open=batched)
            collate = TimedCollate(default_collate)
        if batched:
            return DataLoader(dataset, batch_sampler=self.batches(), collate_fn=collate, **common)
        return DataLoader(dataset, batch_size=a.batch_size, shuffle=True,
                          generator=torch.Generator().manual_seed(a.seed), collate_fn=collate,
                          **common)

    def fluxon_dataset(self, batched: bool) -> PlannedClips:
        a = self.args
        per_video = a.per_video if batched else 1
        return PlannedClips(self.fluxon_patcher, EXPORT,
                            [c[0] for c in self.plan[::per_video]], clip_len=CLIP_LEN,
                            stride=STRIDE, height=SIZE, width=SIZE, clips_per_video=per_video,
                            num_threads=a.threads, seed=a.seed, plan=self.plan)

    def batches(self) -> SameVideoBatchSampler:
        """The batched rows' batches: SameVideoBatchSampler over the plan's groups (the
        same batches for every row: the sampler only reads relpaths and clips_per_video)."""
        return SameVideoBatchSampler(self.fluxon_dataset(batched=True), self.args.batch_size,
                                     seed=self.args.seed)

    def epoch(self, row: str, check: bool) -> Epoch:
        """One epoch with fresh workers: wall time, start-up, fluxon stats, frame check."""
        loader = self.loader(row)
        stats = LoaderStats()
        kept: list[dict[str, Any]] = []
        errors: list[str] = []
        items, first, ups = 0, None, {}
        cpu0 = self.cpu.sample()
        t0 = time.monotonic()
        for batch in loader:
            if first is None:
                first = time.monotonic() - t0
            items += len(batch["relpath"])
            stats.update(batch)
            worker = batch["worker"]
            if worker["up"] is not None:
                ups[worker["pid"]] = worker["up"] - t0
            errors += [e for e in batch.get("error", []) if e]
            if check:
                kept.append({k: batch[k] for k in ("frames", "relpath", "indices")})
        seconds = time.monotonic() - t0
        del loader
        out = Epoch(items, seconds, first, max(ups.values(), default=None), len(errors),
                    errors[0] if errors else None, self.cpu.other_cores(cpu0, seconds))
        if row.startswith("fluxon"):
            out.fluxon_stats = stats.total().as_dict()
        if check:
            out.check = self.check(row, kept)
            self.orders[row] = [(r, int(ix[0])) for b in kept
                                for r, ix in zip(b["relpath"], b["indices"])]
        return out

    def check(self, row: str, batches: list[dict[str, Any]]) -> dict[str, Any]:
        """The frame check over every item, and per codec (a peer may fail on one codec)."""
        exact = row.startswith("fluxon")
        codec = {v.name: v.codec for v in self.videos}
        result = CheckResult(exact_required=exact)
        by_codec: dict[str, CheckResult] = {}
        for batch in batches:
            for frames, relpath, indices in zip(batch["frames"], batch["relpath"],
                                                batch["indices"]):
                for check in (result, by_codec.setdefault(codec[relpath],
                                                          CheckResult(exact_required=exact))):
                    check.add(frames.numpy(), indices.tolist(), self.refs[relpath])
        return {**result.as_dict(),
                "by_codec": {c: {"ok": r.ok, "verdict": r.verdict(),
                                 "worst_mean_abs_diff": r.worst_mean_abs_diff}
                             for c, r in sorted(by_codec.items())}}

    def top_up(self) -> dict[str, Any]:
        """Read every planned clip in this process and wait for the backfill: pieces the
        warm-up workers queued but did not write before they exited go to Redis now."""
        with self.patcher() as patcher, patcher.open_video_reader_pool() as pool:
            groups: dict[str, list[list[int]]] = {}
            for relpath, indices in self.plan:
                groups.setdefault(relpath, []).append(indices)
            for relpath, clips in groups.items():
                pool.read_many_numpy_with_stats(
                    [fv.FluxonFsVideoReadRequest(EXPORT, relpath, SIZE, SIZE, 1, tuple(c))
                     for c in clips])
            stats = pool.stats().as_dict()
            if not patcher.client.backfill.wait_idle(timeout=120):
                self.notes.append("top-up: the backfill did not finish within 120 s")
        return stats

    # ---- run ----

    def run(self) -> dict[str, Any]:
        a = self.args
        started = time.monotonic()
        self.make_videos()
        self.plan = make_plan(self.videos, a.items, a.per_video, a.seed)
        self.make_references()
        work = Path(tempfile.mkdtemp(prefix="fluxon-loader-", dir=a.data))
        config = write_agent_config(work / "agent.toml", EXPORT, self.video_dir)
        peers = self.check_peers()
        per_clip = ["fluxon per-clip", *(f"{p} per-clip" for p in peers)]
        batched = ["fluxon batched", *(f"{p} batched" for p in peers)]
        rows = per_clip + batched
        with RedisServer(work) as redis_server, AgentProcess(
                config, ["--inject-latency-ms", str(a.agent_latency_ms)]) as agent:
            self.redis, self.agent = redis_server, agent
            # One patcher for every fluxon dataset; never used in this process (each worker
            # builds its own client and readers on first use).
            self.fluxon_patcher = self.patcher()
            self.cpu = CpuMeter([redis_server.proc.pid, agent.proc.pid])
            runs: dict[str, list[Epoch]] = {}
            redis_server.client().flushall()
            for row in rows:  # untimed: Redis warm for fluxon, page cache and imports for peers
                self.progress(f"{row} warm-up", 0)
                warm = self.epoch(row, check=False)
                if row == "fluxon per-clip":
                    self.warmup_stats = warm.fluxon_stats
                    self.topup_stats = self.top_up()
            # Rounds: cold epochs (Redis flushed before each), a top-up that makes Redis
            # warm again, then every row warm; the row order rotates from round to round,
            # so that a busy moment of the machine does not always hit the same row.
            for r in range(a.repeat):
                if a.cold:
                    for row in ("fluxon per-clip", "fluxon batched"):
                        self.progress(f"{row} cold", r)
                        runs.setdefault(f"{row}|cold", []).append(
                            self.timed(row, r == 0, before=redis_server.client().flushall))
                    self.top_up()
                for row in rows[r % len(rows):] + rows[:r % len(rows)]:
                    cache = "warm KV" if row.startswith("fluxon") else "local file"
                    self.progress(f"{row} {cache}", r)
                    runs.setdefault(f"{row}|{cache}", []).append(self.timed(row, r == 0))
            self.fluxon_patcher.close()
        self.summarise(runs)
        return self.results(time.monotonic() - started)

    def timed(self, row: str, check: bool, before: Any = None) -> Epoch:
        """A timed epoch, redone (at most --retries times) while other work on the machine
        used more than --max-other-cpu cores during it."""
        for attempt in range(self.args.retries + 1):
            if before is not None:
                before()
            result = self.epoch(row, check)
            result.redone = attempt
            if result.other_cpu_cores <= self.args.max_other_cpu:
                break
            print(f"    other work used {result.other_cpu_cores:.2f} cores during the epoch"
                  + ("; again" if attempt < self.args.retries else "; kept"), flush=True)
        return result

    def progress(self, what: str, r: int) -> None:
        print(f"  {what} (run {r + 1})", flush=True)

    def summarise(self, runs: dict[str, list[Epoch]]) -> None:
        for key, epochs in runs.items():
            self.rows[key] = asdict(LoaderRow.of(*key.split("|"), epochs))
        for group in ("per-clip", "batched"):
            orders = {row: o for row, o in self.orders.items() if row.endswith(group)}
            if len({tuple(o) for o in orders.values()}) > 1:
                self.notes.append(f"{group}: the rows did not read the items in the same order")

    # ---- results ----

    def results(self, seconds: float) -> dict[str, Any]:
        a = self.args
        return {
            **header("dataloader.py", None, seconds, a),
            "conditions": conditions(a, self.video_dir),
            "videos": [v.facts() for v in self.videos],
            "plan": self.plan,
            "warmup_fluxon_stats": getattr(self, "warmup_stats", None),
            "topup_fluxon_stats": getattr(self, "topup_stats", None),
            "rows": list(self.rows.values()),
            "skipped": self.skipped,
            "notes": self.notes,
        }


def conditions(a: argparse.Namespace, video_dir: Path) -> dict[str, Any]:
    found = {**versions(), "torch": torch.__version__}
    for name in ("decord", "torchcodec"):
        try:
            found[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001
            found[name] = "not installed"
    import multiprocessing

    return {
        "machine": machine(),
        "versions": found,
        "loader": {"workers": a.workers, "batch_size": a.batch_size,
                   "persistent_workers": False,
                   "start_method": a.context or multiprocessing.get_start_method(),
                   "decoder_threads": a.threads, "clip": f"{CLIP_LEN} frames, stride {STRIDE}, "
                   f"{SIZE}x{SIZE}", "items": a.items, "clips_per_video_batched": a.per_video},
        "export": {"where": "agent process on loopback (127.0.0.1), HTTP/1.1",
                   "root": str(video_dir), "agent_latency_ms": a.agent_latency_ms,
                   "kv": "redis-server on loopback, no persistence"},
    }


def parse_args() -> argparse.Namespace:
    ap = scenario_parser("dataloader.py", __doc__, "a smoke run: 32 items, 1 epoch per row",
                         "dataloader.md and dataloader.json")
    ap.add_argument("--items", type=int, help="clips per epoch (default: 96, quick: 32)")
    ap.add_argument("--repeat", type=int,
                    help="timed epochs per row; figures are medians (default: 3, quick: 1)")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers (default: 2)")
    ap.add_argument("--batch-size", type=int, default=8, help="(default: 8)")
    ap.add_argument("--per-video", type=int, default=4,
                    help="clips per video in the batched rows (default: 4)")
    ap.add_argument("--threads", type=int, default=1,
                    help="decoder threads per read, every contender (default: 1)")
    ap.add_argument("--context", choices=["fork", "spawn", "forkserver"],
                    help="worker start method (default: the platform's)")
    ap.add_argument("--no-cold", dest="cold", action="store_false",
                    help="skip the cold (Redis flushed) fluxon epochs")
    ap.add_argument("--max-other-cpu", type=float, default=0.25,
                    help="redo a timed epoch during which other work on the machine used more "
                         "than this many cores (default: 0.25)")
    ap.add_argument("--retries", type=int, default=3,
                    help="at most this many redos per timed epoch (default: 3)")
    ap.add_argument("--seed", type=int, default=7, help="clip plan and shuffle seed (default: 7)")
    ap.add_argument("--agent-latency-ms", type=float, default=0.0,
                    help="latency the agent adds to every stat and read (default: 0)")
    args = finish(ap, ap.parse_args(), {"items": 96, "repeat": 3}, {"items": 32, "repeat": 1},
                  ("items", "repeat", "workers", "batch_size", "per_video", "threads"))
    if args.retries < 0:
        ap.error("--retries must be at least 0")
    if args.batch_size % args.per_video or args.items % args.batch_size:
        ap.error("--batch-size must be a multiple of --per-video, --items of --batch-size")
    return args


def main() -> int:
    args = parse_args()
    if args.render:
        results = json.loads(args.render.read_text())
        write_outputs(args.out, "dataloader", None, markdown(results))
        print(markdown(results))
        return 0
    args.data.mkdir(parents=True, exist_ok=True)
    results = LoaderBench(args).run()
    write_outputs(args.out, "dataloader", json.dumps(results, indent=1), markdown(results))
    print()
    print(markdown(results))
    print(f"wrote {args.out / 'dataloader.md'}, {args.out / 'dataloader.json'} "
          f"({results['duration_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
