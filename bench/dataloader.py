#!/usr/bin/env python3
"""The DataLoader-shaped benchmark: fluxon_video.torch vs decord and torchcodec in a real
DataLoader (see --help or bench/README.md)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset, default_collate  # noqa: E402

from fluxon_video.torch import (LoaderStats, SameVideoBatchSampler, StatsCollate,  # noqa: E402
                                VideoClipDataset)
from harness import (DASH, add_options, error_text, fill, finish, grouped, header,  # noqa: E402
                     kinds_of, listing, machine, machine_line, mib, module_versions, num,
                     scenario_parser, table, versions, write_outputs)

CLIP_LEN, STRIDE, SIZE = 16, 4, 224
EXPORT = "loader"


# ---- what the workers run ----

class PlannedClips(VideoClipDataset):
    """VideoClipDataset whose item i is the plan's clip i (instead of a seeded draw)."""

    def __init__(self, *args: Any, plan: list[list[Any]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.plan = plan

    def clip_with_times(self, i: int) -> tuple[str, list[int], None]:
        relpath, indices = self.plan[i]
        return relpath, list(indices), None


class PeerClips(Dataset):
    """A peer on the local files: a new reader per item, or (share_open) one per video per
    batch reading the sorted union of its clips, split back. A failing read does not stop
    the epoch: the item carries zero frames and the error, and the row is flagged."""

    def __init__(self, peer: str, root: Path, plan: list[list[Any]], threads: int,
                 share_open: bool) -> None:
        self.peer, self.root, self.plan = peer, root, plan
        self.threads, self.share_open = threads, share_open

    def __len__(self) -> int:
        return len(self.plan)

    def items(self, items: Sequence[int]) -> list[dict[str, Any]]:
        from contenders import open_handle

        groups = grouped(items, lambda i: self.plan[i][0] if self.share_open else i)
        out: dict[int, dict[str, Any]] = {}
        for members in groups.values():
            relpath = self.plan[members[0]][0]
            union = sorted({f for i in members for f in self.plan[i][1]})
            error = ""
            try:
                handle = open_handle(self.peer, self.root / relpath, SIZE, SIZE, self.threads)
                frames = torch.from_numpy(handle.read(union))
                if tuple(frames.shape) != (len(union), SIZE, SIZE, 3):
                    raise ValueError(f"frames of shape {tuple(frames.shape)}")
            except Exception as exc:  # noqa: BLE001 - a failing peer is a finding
                error = f"{relpath}: {error_text(exc, 160)}"
                frames = torch.zeros((len(union), SIZE, SIZE, 3), dtype=torch.uint8)
            at = {f: k for k, f in enumerate(union)}
            for i in members:
                indices = self.plan[i][1]
                out[i] = {"frames": frames[[at[f] for f in indices]], "relpath": relpath,
                          "indices": torch.as_tensor(indices, dtype=torch.int64), "error": error}
        return [out[i] for i in items]

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.items([int(i)])[0]

    def __getitems__(self, items: Sequence[int]) -> list[dict[str, Any]]:
        return self.items([int(i) for i in items])


_WORKER_UP: float | None = None


def note_worker_up(worker_id: int) -> None:
    global _WORKER_UP
    _WORKER_UP = time.monotonic()


class TimedCollate:
    """The inner collate, plus when this worker came up (time.monotonic, system-wide), and
    its CPU time and the clock when it made this batch (its CPU utilisation)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        return {**self.inner(items), "worker": {"pid": os.getpid(), "up": _WORKER_UP,
                                                "cpu_s": time.process_time(),
                                                "at": time.monotonic()}}


class CpuMeter:
    """How busy the machine was with work that is not this benchmark's during an epoch:
    busy CPU time minus this process, its reaped children (the epoch's workers) and the
    agent and redis-server."""

    def __init__(self, pids: list[int]) -> None:
        import psutil

        self.psutil, self.servers = psutil, [psutil.Process(pid) for pid in pids]

    def sample(self) -> tuple[float, float]:
        t = self.psutil.cpu_times()
        busy = sum(t) - sum(getattr(t, k, 0.0) for k in ("idle", "iowait", "steal", "guest",
                                                          "guest_nice"))
        ours = sum(os.times()[:4])  # user, system, children's user and system
        for proc in self.servers:
            try:
                ours += sum(proc.cpu_times()[:2])
            except self.psutil.Error:
                pass
        return busy, ours

    def other_cores(self, before: tuple[float, float], seconds: float) -> float:
        busy, ours = self.sample()
        return max(0.0, (busy - before[0]) - (ours - before[1])) / seconds


# ---- the parent ----

@dataclass
class Epoch:
    """One epoch with fresh workers: wall time, start-up, failures, other load, checks."""

    items: int
    seconds: float
    first_batch_s: float | None
    workers_up_s: float | None
    errors: int
    first_error: str | None
    other_cpu_cores: float
    fluxon_stats: dict | None = None
    # each worker's CPU time over its life up to its last batch ÷ that span, in
    # cores (1.0: a core kept busy), sorted
    worker_cpu: list[float] = field(default_factory=list)
    check: dict | None = None
    redone: int = 0  # epochs thrown away first: other work loaded the machine
    clips_per_s: float = field(init=False)

    def __post_init__(self) -> None:
        self.clips_per_s = self.items / self.seconds


def row_of(row: str, cache: str, epochs: list[Epoch]) -> dict[str, Any]:
    """A contender, read order and cache state over its timed epochs (medians; the counts
    and the frame check are the first epoch's)."""
    rates, first = [e.clips_per_s for e in epochs], epochs[0]

    def mid(k: str) -> float | None:
        values = [getattr(e, k) for e in epochs if getattr(e, k) is not None]
        return statistics.median(values) if values else None
    return {"row": row, "contender": row.split(" ")[0], "order": row.split(" ", 1)[1],
            "cache": cache, "items": first.items, "clips_per_s": statistics.median(rates),
            "clips_per_s_min": min(rates), "clips_per_s_max": max(rates),
            "epoch_s": mid("seconds"), "first_batch_s": mid("first_batch_s"),
            "workers_up_s": mid("workers_up_s"), "errors": sum(e.errors for e in epochs),
            "other_cpu_cores": mid("other_cpu_cores"), "redone": sum(e.redone for e in epochs),
            "first_error": next((e.first_error for e in epochs if e.first_error), None),
            "fluxon_stats": first.fluxon_stats, "check": first.check,
            # each worker's CPU utilisation (cores), medians over the epochs
            "worker_cpu": [statistics.median(w) for w in zip(*[e.worker_cpu for e in epochs])]
            if all(e.worker_cpu for e in epochs) else [],
            "epochs": [asdict(e) for e in epochs]}


class LoaderBench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.video_dir = (args.data / "loader-videos").resolve()
        self.notes: list[str] = []
        self.skipped: dict[str, str] = {}
        self.orders: dict[str, list[tuple[str, int]]] = {}
        self.runs: dict[str, list[Epoch]] = {}

    def prepare(self) -> None:
        """The videos (made once), the clip plan (per_video clips of each of items/per_video
        videos, videos in a seeded order, each once before any repeats), the references."""
        from dataset import prepare_all, sample_clips, small_specs
        from frames import Reference, reference_files

        a = self.args
        self.videos = prepare_all(small_specs(18, 3, 3, lambda k: 4 + k % 3), self.video_dir)
        rng, order = np.random.default_rng([a.seed, 11]), []
        while len(order) < a.items // a.per_video:
            order += rng.permutation(len(self.videos)).tolist()
        self.plan = [[self.videos[v].name, clip] for v in order[:a.items // a.per_video]
                     for clip in sample_clips(self.videos[v].frames, a.per_video, CLIP_LEN,
                                              STRIDE, rng)]
        by_name = {v.name: v for v in self.videos}
        paths = reference_files(((n, by_name[n], SIZE, SIZE, [c]) for n, c in self.plan),
                                a.data / "loader-refs", self.notes)
        self.refs = {n: Reference.load(p) for n, p in paths.items()}
        print(f"videos: {len(self.videos)} under {self.video_dir}; references made", flush=True)

    def check_peers(self) -> list[str]:
        """The peers that work here; each loaded and initialised untimed (a training process
        imports it once, and forked workers inherit it)."""
        peers = []
        for peer in ("decord", "torchcodec"):
            try:
                error = PeerClips(peer, self.video_dir, self.plan, 1, False)[0]["error"]
                if error:
                    raise RuntimeError(error)
                peers.append(peer)
            except Exception as exc:  # noqa: BLE001 - skip with a note
                self.skipped[peer] = f"{peer} does not work here: {error_text(exc, 160)}"
                print(f"note: {peer} skipped: {self.skipped[peer]}", flush=True)
        return peers

    def loader(self, row: str) -> DataLoader:
        a = self.args
        contender, order = row.split(" ", 1)
        batched = order.startswith("batched")
        common = {"num_workers": a.workers, "worker_init_fn": note_worker_up,
                  "persistent_workers": False,
                  "multiprocessing_context": a.context if a.workers else None}
        if contender == "fluxon":
            dataset = self.fluxon_dataset(batched)
            collate = TimedCollate(StatsCollate(dataset))
        else:
            dataset = PeerClips(contender, self.video_dir, self.plan, a.threads, batched)
            collate = TimedCollate(default_collate)
        if batched:  # SameVideoBatchSampler reads only relpaths and clips_per_video
            # fluxon's dataset reads each worker's next batch ahead from the sampler's
            # plan ("batched"), or not ("batched-no-lookahead", a cold row)
            ahead = contender == "fluxon" and order == "batched"
            sampled = dataset if contender == "fluxon" else self.fluxon_dataset(True)
            return DataLoader(dataset, batch_sampler=SameVideoBatchSampler(
                sampled, a.batch_size, seed=a.seed, lookahead=ahead), collate_fn=collate,
                **common)
        return DataLoader(dataset, batch_size=a.batch_size, shuffle=True, collate_fn=collate,
                          generator=torch.Generator().manual_seed(a.seed), **common)

    def fluxon_dataset(self, batched: bool) -> PlannedClips:
        a = self.args
        per_video = a.per_video if batched else 1
        return PlannedClips(self.patcher, EXPORT, [c[0] for c in self.plan[::per_video]],
                            clip_len=CLIP_LEN, stride=STRIDE, height=SIZE, width=SIZE,
                            clips_per_video=per_video, num_threads=a.threads, seed=a.seed,
                            plan=self.plan)

    def epoch(self, row: str, check: bool) -> Epoch:
        """One epoch with fresh workers: wall time, start-up, fluxon stats, frame check."""
        from frames import CheckResult

        loader, stats = self.loader(row), LoaderStats()
        exact = row.startswith("fluxon")
        result, by_codec, codec = CheckResult(exact), {}, {v.name: v.codec for v in self.videos}
        errors, items, first, ups, order = [], 0, None, {}, []
        busy: dict[int, tuple[float, float]] = {}  # pid -> (CPU s, life s) at its latest batch
        cpu0, t0 = self.cpu.sample(), time.monotonic()
        for batch in loader:
            first = first if first is not None else time.monotonic() - t0
            items += len(batch["relpath"])
            stats.update(batch)
            worker = batch["worker"]
            if worker["up"] is not None:
                ups[worker["pid"]] = worker["up"] - t0
                busy[worker["pid"]] = (worker["cpu_s"], worker["at"] - worker["up"])
            errors += [e for e in batch.get("error", []) if e]
            for frames, relpath, indices in zip(batch["frames"], batch["relpath"],
                                                batch["indices"]) if check else ():
                order.append((relpath, int(indices[0])))
                for one in (result, by_codec.setdefault(codec[relpath], CheckResult(exact))):
                    one.add(frames.numpy(), indices.tolist(), self.refs[relpath])
        seconds = time.monotonic() - t0
        del loader
        out = Epoch(items, seconds, first, max(ups.values(), default=None), len(errors),
                    errors[0] if errors else None, self.cpu.other_cores(cpu0, seconds),
                    stats.total().as_dict() if exact else None,
                    worker_cpu=sorted(cpu / life for cpu, life in busy.values() if life > 0))
        if check:  # per codec too: a peer may fail on one codec
            out.check = {**result.as_dict(), "by_codec": {
                c: {"ok": r.ok, "verdict": r.verdict(), "worst_mean_abs_diff":
                    r.worst_mean_abs_diff} for c, r in sorted(by_codec.items())}}
            self.orders[row] = order
        return out

    def timed(self, row: str, cache: str, check: bool) -> None:
        """A timed epoch, redone (at most --retries times) while other work on the machine
        used more than --max-other-cpu cores during it; cold: Redis flushed before it."""
        print(f"  {row} {cache} (run {len(self.runs.get(f'{row}|{cache}', [])) + 1})",
              flush=True)
        for attempt in range(self.args.retries + 1):
            if cache == "cold":
                self.redis.client().flushall()
            result = self.epoch(row, check)
            result.redone = attempt
            if result.other_cpu_cores <= self.args.max_other_cpu:
                break
            print(f"    other work used {result.other_cpu_cores:.2f} cores during the epoch"
                  + ("; again" if attempt < self.args.retries else "; kept"), flush=True)
        self.runs.setdefault(f"{row}|{cache}", []).append(result)

    def top_up(self) -> dict[str, Any]:
        """Read every planned clip in this process and wait for the backfill: pieces the
        warm-up workers queued but did not write before they exited go to Redis now."""
        import fluxon_video as fv

        from stores import make_patcher

        with make_patcher(self.fx) as patcher, patcher.open_video_reader_pool() as pool:
            for relpath, clips in grouped(self.plan, lambda x: x[0], lambda x: x[1]).items():
                pool.read_many_numpy_with_stats(
                    [fv.FluxonFsVideoReadRequest(EXPORT, relpath, SIZE, SIZE, 1, tuple(c))
                     for c in clips])
            stats = pool.stats().as_dict()
            if not patcher.client.backfill.wait_idle(timeout=120):
                self.notes.append("top-up: the backfill did not finish within 120 s")
        return stats

    def run(self) -> dict[str, Any]:
        from fluxon_video.testing import RedisServer

        from stores import agent, make_patcher, store

        a, started = self.args, time.monotonic()
        self.prepare()
        work = a.data / "loader-work"
        work.mkdir(parents=True, exist_ok=True)
        peers = self.check_peers()
        rows = [f"{c} {o}" for o in ("per-clip", "batched") for c in ("fluxon", *peers)]
        if a.store == "s3":  # moto behind the latency relay (50 MB/s per connection)
            from stores import RemoteStore

            remote = RemoteStore(work, EXPORT, self.video_dir, 50.0,
                                 s3=sorted({v.name for v in self.videos}))
            remote.set_latency(a.agent_latency_ms)
            self.redis, server, self.fx = remote.redis, remote, remote.fx()
            servers = [remote.redis, remote.agent, remote.agent_relay, remote.range, remote.s3]
        else:
            self.redis = RedisServer(work).start()
            server = agent(work, EXPORT, self.video_dir, a.agent_latency_ms)
            self.fx = store(EXPORT, self.video_dir, server.url, self.redis.url)
            servers = [self.redis, server]
        try:
            # One patcher for every fluxon dataset; never used in this process (each worker
            # builds its own client and readers on first use).
            self.patcher = make_patcher(self.fx)
            self.cpu = CpuMeter([p.proc.pid for p in servers])
            self.redis.client().flushall()
            for row in rows:  # untimed: Redis warm for fluxon, page cache and imports for peers
                print(f"  {row} warm-up", flush=True)
                warm = self.epoch(row, check=False)
                if row == "fluxon per-clip":
                    self.warmup_stats, self.topup_stats = warm.fluxon_stats, self.top_up()
            # Rounds: cold epochs and a top-up that makes Redis warm again, then every row
            # warm, the row order rotating so that a busy moment does not hit one row.
            for r in range(a.repeat):
                for row in ("fluxon per-clip", "fluxon batched-no-lookahead",
                            "fluxon batched") if a.cold else ():
                    self.timed(row, "cold", r == 0)
                if a.cold:
                    self.top_up()
                for row in rows[r % len(rows):] + rows[:r % len(rows)]:
                    self.timed(row, "warm KV" if row.startswith("fluxon") else "local file",
                               r == 0)
            self.patcher.close()
        finally:
            server.stop()
            self.redis.stop()
        return self.results(time.monotonic() - started)

    def results(self, seconds: float) -> dict[str, Any]:
        import multiprocessing

        a = self.args
        for group in ("per-clip", "batched"):
            orders = {tuple(o) for row, o in self.orders.items() if row.endswith(group)}
            if len(orders) > 1:
                self.notes.append(f"{group}: the rows did not read the items in the same order")
        found = {**versions(), "torch": torch.__version__,
                 **module_versions("decord", "torchcodec", missing="not installed")}
        return {
            **header("dataloader.py", None, seconds, a),
            "conditions": {
                "machine": machine(), "versions": found,
                "loader": {"workers": a.workers, "batch_size": a.batch_size,
                           "persistent_workers": False,
                           "start_method": a.context or multiprocessing.get_start_method(),
                           "decoder_threads": a.threads, "items": a.items,
                           "clip": f"{CLIP_LEN} frames, stride {STRIDE}, {SIZE}x{SIZE}",
                           "clips_per_video_batched": a.per_video},
                "export": {"root": str(self.video_dir), "agent_latency_ms": a.agent_latency_ms,
                           "store": a.store}},
            "videos": [v.facts() for v in self.videos], "plan": self.plan,
            "warmup_fluxon_stats": getattr(self, "warmup_stats", None),
            "topup_fluxon_stats": getattr(self, "topup_stats", None),
            "rows": [row_of(*k.split("|"), epochs) for k, epochs in self.runs.items()],
            "skipped": self.skipped, "notes": self.notes}


# ---- dataloader.md ----

def frames_cell(r: dict[str, Any]) -> str:
    """The frame verdict; for a flagged row, per codec (the full verdicts are in the JSON)."""
    def short(check: dict[str, Any]) -> str:
        if check["verdict"].startswith("OFF"):
            return f"OFF (right frames, mad up to {check['worst_mean_abs_diff']:.1f} > 3)"
        if check["verdict"].startswith("WRONG"):
            return f"WRONG ({check['verdict'].split(': ', 1)[1]})"
        return check["verdict"]
    if r["errors"]:
        return f"⚠ {r['errors']} failed reads: {r['first_error']}"
    if r["check"] and not r["check"]["ok"]:
        return "⚠ " + " · ".join(f"{c} {short(v)}" for c, v in r["check"]["by_codec"].items())
    return r["check"]["verdict"] if r["check"] else DASH


def row_cells(r: dict[str, Any]) -> list[str]:
    s = r["fluxon_stats"]
    fluxon = ([str(s["reads"]), f"{s['kv_hits']}/{s['kv_misses']}", mib(s["remote_bytes"]),
               f"{s['index_scans']}/{s['index_from_kv']}"] if s else [DASH] * 4)
    return [r["contender"], r["order"], r["cache"],
            f"{r['clips_per_s']:.1f} ({r['clips_per_s_min']:.1f}–{r['clips_per_s_max']:.1f})",
            num(r["epoch_s"]), num(r["workers_up_s"]), num(r["first_batch_s"]),
            f"{r['other_cpu_cores']:.2f}" + (f" ({r['redone']} redone)" if r["redone"] else ""),
            " ".join(f"{c:.2f}" for c in r.get("worker_cpu", [])) or DASH,
            *fluxon, frames_cell(r)]


def summary(results: dict[str, Any]) -> str:
    """fluxon warm KV against each peer, per order (> 1: fluxon faster)."""
    rows = {(r["contender"], r["order"], r["cache"]): r for r in results["rows"]}
    out = []
    for order in ("per-clip", "batched"):
        flux = rows.get(("fluxon", order, "warm KV"))
        parts = [f"{flux['clips_per_s'] / r['clips_per_s']:.2f}× {c}" + (
            "" if r["check"]["ok"] and not r["errors"] else " (⚠ frames)")
            for (c, o, _), r in rows.items() if flux and c != "fluxon" and o == order]
        if parts:
            out.append(f"- {order}: fluxon warm KV {flux['clips_per_s']:.1f} clips/s = "
                       + ", ".join(parts))
    return "\n".join(["fluxon warm KV ÷ peer, clips/s (> 1: fluxon faster; ⚠: the peer's "
                      "frames did not pass the check, see the frames column):", "", *out,
                      "", ""]) if out else ""


def markdown(results: dict[str, Any]) -> str:
    c, s = results["conditions"], results["settings"]
    loader, export, videos = c["loader"], c["export"], results["videos"]
    topup, warmup = results.get("topup_fluxon_stats"), results.get("warmup_fluxon_stats")
    tail = [f"- warm-up: the per-clip warm-up epoch's workers missed {warmup['kv_misses']} "
            f"pieces and queued {warmup['backfills_queued']} backfills; the top-up pass "
            f"afterwards (every planned clip read in this process) missed {topup['kv_misses']} "
            "pieces (> 0: backfills still queued when a warm-up worker exited were lost)"
            ] if topup and warmup else []
    tail += [f"- {peer} skipped: {why}" for peer, why in results["skipped"].items()]
    tail += [f"- note: {n}" for n in results["notes"]]
    frames = [v["frames"] for v in videos]
    return fill(
        "dataloader", command=results["command"], generated=results["generated"],
        duration=f"{results['duration_s']:.0f}", summary=summary(results),
        table=table(["contender", "reads", "cache", "clips/s (min–max)", "epoch s",
                     "workers up s", "first batch s", "other CPU", "worker CPU",
                     "fluxon reads",
                     "KV hit/miss", "agent MiB", "index scan/KV", "frames"],
                    map(row_cells, results["rows"])),
        **{**s, **loader}, videos=len(videos), cores=c["machine"]["cores"],
        groups=loader["items"] // loader["clips_per_video_batched"],
        kinds=", ".join(f"{len(vs)} × {k}" for k, vs in kinds_of(videos).items()),
        frames=f"{min(frames)}–{max(frames)}",
        dataset_mib=f"{sum(v['file_bytes'] for v in videos) / 2**20:.1f}",
        latency=f"{export['agent_latency_ms']:g}",
        machine=machine_line(c["machine"]), versions=listing(c["versions"].items()),
        tail="".join("\n" + line for line in tail))


def parse_args() -> argparse.Namespace:
    ap = scenario_parser("dataloader.py", None, "a smoke run: 32 items, 1 epoch per row",
                         "dataloader.md and dataloader.json")
    full, quick = add_options(ap, [
        ("--items", int, 96, 32, "clips per epoch"),
        ("--repeat", int, 3, 1, "timed epochs per row; figures are medians"),
        ("--workers", int, 2, "DataLoader workers"),
        ("--batch-size", int, 8, "clips per batch"),
        ("--per-video", int, 4, "clips per video in the batched rows"),
        ("--threads", int, 1, "decoder threads per read, every contender"),
        ("--context", ("fork", "spawn", "forkserver"), None,
         "worker start method (default: the platform's)"),
        ("--max-other-cpu", float, 0.25, "redo a timed epoch during which other work on "
                                               "the machine used more than this many cores"),
        ("--retries", int, 3, "at most this many redos per timed epoch"),
        ("--seed", int, 7, "clip plan and shuffle seed"),
        ("--agent-latency-ms", float, 0.0, "latency the agent adds to every stat and read "
                                            "(with --store s3: every S3 request)"),
        ("--store", ("agent", "s3"), "agent", "agent: the agent reads the video folder; s3: "
                                              "it reads moto's S3 server through the latency "
                                              "relay")])
    ap.add_argument("--no-cold", dest="cold", action="store_false",
                    help="skip the cold (Redis flushed) fluxon epochs")
    args = finish(ap, ap.parse_args(), full, quick,
                  ("items", "repeat", "workers", "batch_size", "per_video", "threads"))
    if args.retries < 0:
        ap.error("--retries must be at least 0")
    if args.batch_size % args.per_video or args.items % args.batch_size:
        ap.error("--batch-size must be a multiple of --per-video, --items of --batch-size")
    return args


def main() -> int:
    args = parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    results = (json.loads(args.render.read_text()) if args.render
               else LoaderBench(args).run())
    text = markdown(results)
    written = write_outputs(args.out, "dataloader", None if args.render else results, text)
    print(f"\n{text}\nwrote " + ", ".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
