"""The DataLoader group (the loader suites; was bench/dataloader.py): 24 short videos
(made once under <data>/loader-videos), one clip plan, every contender reading exactly those
clips inside a real torch DataLoader with fresh workers every epoch, in two orders:
"loader-clips" (DataLoader shuffle, a random video per item) and "loader-batched"
(SameVideoBatchSampler's batches; peers open each video once per batch and read the union
of its clips in one call). fluxon reads through FluxonFS (the agent, or an S3 export behind
the latency relay) cold, cold with the sampler's lookahead, and warm; peers read the local
files. Frames are checked against the ffmpeg CLI in the first timed epoch of each case."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from cases import Case
from fluxon_video.torch import LoaderStats, SameVideoBatchSampler, StatsCollate, VideoClipDataset
from harness import error_text, grouped, header, machine, module_versions, say, versions

CLIP_LEN, STRIDE, SIZE = 16, 4, 224
EXPORT = "loader"


def row_name(case: Case) -> tuple[str, str]:
    """(contender and read order, cache text): how the DataLoader rows were named. A cold
    batched case without lookahead reads its batches one after another
    ("batched-no-lookahead"); the other fluxon batched cases plan ahead."""
    order = "per-clip" if case.workload == "loader-clips" else (
        "batched-no-lookahead" if case.fluxon and case.cache == "cold" else "batched")
    cache = ("cold" if case.cache.startswith("cold") else "warm KV") if case.fluxon \
        else "local file"
    return f"{case.family} {order}", cache


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
    """How busy the machine was during an epoch: with work that is not this benchmark's
    (busy CPU time minus this process, its reaped children, the epoch's workers, and the
    store's processes, ``pids``), and with the processes that stand in for other machines
    (``model_pids``: the relays and moto, a subset of ``pids``)."""

    def __init__(self, pids: list[int], model_pids: list[int]) -> None:
        self.pids, self.model_pids = pids, model_pids

    def sample(self) -> tuple[float, float, float]:
        import psutil

        from stores import cpu_s

        t = psutil.cpu_times()
        busy = sum(t) - sum(getattr(t, k, 0.0) for k in ("idle", "iowait", "steal", "guest",
                                                          "guest_nice"))
        # user, system, children's user and system; and the store's processes
        return busy, sum(os.times()[:4]) + cpu_s(self.pids), cpu_s(self.model_pids)

    @staticmethod
    def model_cores(before: tuple[float, float, float], after: tuple[float, float, float],
                    seconds: float) -> float:
        """Cores the stand-ins for other machines (relays, moto) kept busy."""
        return (after[2] - before[2]) / seconds

    @staticmethod
    def busy_share(before: tuple[float, float, float], after: tuple[float, float, float],
                   seconds: float) -> float:
        """The share of the machine's cores busy with anything between two samples (ours,
        the store's, other work's): 1.0 when no core was idle."""
        return (after[0] - before[0]) / (seconds * (os.cpu_count() or 1))

    @staticmethod
    def other_cores(before: tuple[float, float, float], after: tuple[float, float, float],
                    seconds: float) -> float:
        """Cores busy with work that is not the benchmark's between two samples."""
        return max(0.0, (after[0] - before[0]) - (after[1] - before[1])) / seconds


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
    cpu_s: float | None = None  # this process and its reaped workers, over the epoch
    machine_busy: float | None = None  # the share of the cores busy with anything
    model_cores: float | None = None  # cores busy with the stand-ins for other machines
    clips_per_s: float = field(init=False)

    def __post_init__(self) -> None:
        self.clips_per_s = self.items / self.seconds


def row_of(case: Case, epochs: list[Epoch]) -> dict[str, Any]:
    """A case over its timed epochs (medians; the counts and the frame check are the first
    epoch's)."""
    rates, first = [e.clips_per_s for e in epochs], epochs[0]

    def mid(k: str) -> float | None:
        values = [getattr(e, k) for e in epochs if getattr(e, k) is not None]
        return statistics.median(values) if values else None
    row, cache = row_name(case)
    return {"case": asdict(case), "row": row, "contender": case.family,
            "order": row.split(" ", 1)[1], "cache": cache, "items": first.items,
            "clips_per_s": statistics.median(rates), "clips_per_s_min": min(rates),
            "clips_per_s_max": max(rates), "epoch_s": mid("seconds"), "cpu_s": mid("cpu_s"),
            "machine_busy": mid("machine_busy"), "model_cores": mid("model_cores"),
            "first_batch_s": mid("first_batch_s"),
            "workers_up_s": mid("workers_up_s"), "errors": sum(e.errors for e in epochs),
            "other_cpu_cores": mid("other_cpu_cores"), "redone": sum(e.redone for e in epochs),
            "first_error": next((e.first_error for e in epochs if e.first_error), None),
            "fluxon_stats": first.fluxon_stats, "check": first.check,
            # each worker's CPU utilisation (cores), medians over the epochs
            "worker_cpu": [statistics.median(w) for w in zip(*[e.worker_cpu for e in epochs])]
            if all(e.worker_cpu for e in epochs) else [],
            "epochs": [asdict(e) for e in epochs]}


class LoaderGroup:
    """The loader suites' cases: their DataLoader rows, each with an untimed warm-up epoch,
    then ``repeat`` rounds of timed epochs (fluxon's cold ones first, after a Redis flush;
    then Redis topped up and every warm row, the order rotating by round)."""

    def __init__(self, cases: list[Case], settings: dict[str, Any], data: Path) -> None:
        self.cases, self.s, self.data = cases, settings, data
        self.video_dir = (data / "loader-videos").resolve()
        self.notes: list[str] = []
        self.skipped: dict[str, str] = {}
        self.orders: dict[str, list[tuple[str, int]]] = {}
        self.runs: dict[Case, list[Epoch]] = {}
        self.latency_ms = float(str(settings["latencies"]).split(",")[0])

    def prepare(self) -> None:
        """The videos (made once), the clip plan (per_video clips of each of items/per_video
        videos, videos in a seeded order, each once before any repeats), the references."""
        from dataset import prepare_all, sample_clips, small_specs
        from frames import Reference, reference_files

        s = self.s
        self.videos = prepare_all(small_specs(18, 3, 3, lambda k: 4 + k % 3), self.video_dir)
        rng, order = np.random.default_rng([s["seed"], 11]), []
        while len(order) < s["items"] // s["per_video"]:
            order += rng.permutation(len(self.videos)).tolist()
        self.plan = [[self.videos[v].name, clip] for v in order[:s["items"] // s["per_video"]]
                     for clip in sample_clips(self.videos[v].frames, s["per_video"], CLIP_LEN,
                                              STRIDE, rng)]
        by_name = {v.name: v for v in self.videos}
        paths = reference_files(((n, by_name[n], SIZE, SIZE, [c]) for n, c in self.plan),
                                self.data / "loader-refs", self.notes)
        self.refs = {n: Reference.load(p) for n, p in paths.items()}
        say(f"videos: {len(self.videos)} under {self.video_dir}; references made")

    def working_peers(self) -> set[str]:
        """The cases' peers that work here; each loaded and initialised untimed (a training
        process imports it once, and forked workers inherit it)."""
        peers = set()
        for peer in dict.fromkeys(c.family for c in self.cases if not c.fluxon):
            try:
                error = PeerClips(peer, self.video_dir, self.plan, 1, False)[0]["error"]
                if error:
                    raise RuntimeError(error)
                peers.add(peer)
            except Exception as exc:  # noqa: BLE001 - skip with a note
                self.skipped[peer] = f"{peer} does not work here: {error_text(exc, 160)}"
                say(f"note: {peer} skipped: {self.skipped[peer]}")
        return peers

    def loader(self, case: Case) -> DataLoader:
        s = self.s
        batched = case.workload == "loader-batched"
        common = {"num_workers": s["workers"], "worker_init_fn": note_worker_up,
                  "persistent_workers": False,
                  "multiprocessing_context": s["context"] if s["workers"] else None}
        if case.fluxon:
            dataset = self.fluxon_dataset(batched)
            collate = TimedCollate(StatsCollate(dataset))
        else:
            dataset = PeerClips(case.family, self.video_dir, self.plan, s["threads"], batched)
            collate = TimedCollate(default_collate)
        if batched:  # SameVideoBatchSampler reads only relpaths and clips_per_video
            # fluxon's dataset reads each worker's next batch ahead from the sampler's plan,
            # except in the plain cold case
            ahead = case.fluxon and case.cache != "cold"
            sampled = dataset if case.fluxon else self.fluxon_dataset(True)
            return DataLoader(dataset, batch_sampler=SameVideoBatchSampler(
                sampled, s["batch_size"], seed=s["seed"], lookahead=ahead), collate_fn=collate,
                **common)
        return DataLoader(dataset, batch_size=s["batch_size"], shuffle=True, collate_fn=collate,
                          generator=torch.Generator().manual_seed(s["seed"]), **common)

    def fluxon_dataset(self, batched: bool) -> PlannedClips:
        s = self.s
        per_video = s["per_video"] if batched else 1
        return PlannedClips(self.patcher, EXPORT, [c[0] for c in self.plan[::per_video]],
                            clip_len=CLIP_LEN, stride=STRIDE, height=SIZE, width=SIZE,
                            clips_per_video=per_video, num_threads=s["threads"],
                            seed=s["seed"], plan=self.plan)

    def epoch(self, case: Case, check: bool) -> Epoch:
        """One epoch with fresh workers: wall time, start-up, CPU, fluxon stats, frames."""
        from frames import CheckResult

        loader, stats = self.loader(case), LoaderStats()
        exact = case.fluxon
        result, by_codec, codec = CheckResult(exact), {}, {v.name: v.codec for v in self.videos}
        errors, items, first, ups, order = [], 0, None, {}, []
        busy: dict[int, tuple[float, float]] = {}  # pid -> (CPU s, life s) at its latest batch
        cpu0, t0, own0 = self.cpu.sample(), time.monotonic(), sum(os.times()[:4])
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
        cpu1 = self.cpu.sample()  # after the workers are reaped: their CPU is ours
        out = Epoch(items, seconds, first, max(ups.values(), default=None), len(errors),
                    errors[0] if errors else None, self.cpu.other_cores(cpu0, cpu1, seconds),
                    stats.total().as_dict() if exact else None,
                    worker_cpu=sorted(cpu / life for cpu, life in busy.values() if life > 0),
                    cpu_s=sum(os.times()[:4]) - own0,
                    machine_busy=self.cpu.busy_share(cpu0, cpu1, seconds),
                    model_cores=self.cpu.model_cores(cpu0, cpu1, seconds))
        if check:  # per codec too: a peer may fail on one codec
            out.check = {**result.as_dict(), "by_codec": {
                c: {"ok": r.ok, "verdict": r.verdict(), "worst_mean_abs_diff":
                    r.worst_mean_abs_diff} for c, r in sorted(by_codec.items())}}
            self.orders[" ".join(row_name(case))] = order
        return out

    def timed(self, case: Case, check: bool) -> None:
        """A timed epoch, redone (at most ``retries`` times) while other work on the machine
        used more than ``max_other_cpu`` cores during it; cold: Redis flushed before it."""
        say(f"  {case.key()} (run {len(self.runs.get(case, [])) + 1})")
        for attempt in range(self.s["retries"] + 1):
            if case.cache.startswith("cold"):
                self.redis.client().flushall()
            result = self.epoch(case, check)
            result.redone = attempt
            if result.other_cpu_cores <= self.s["max_other_cpu"]:
                break
            say(f"    other work used {result.other_cpu_cores:.2f} cores during the epoch"
                + ("; again" if attempt < self.s["retries"] else "; kept"))
        self.runs.setdefault(case, []).append(result)

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

    def start_store(self, work: Path) -> tuple[list[int], list[int]]:
        """Redis and the agent (reading the video folder, or moto's S3 behind the latency
        relay at 50 MB/s per connection); the pids of the servers, whose CPU is ours, and
        of those the ones that stand in for other machines (the relays and moto)."""
        from fluxon_video.testing import RedisServer

        from stores import RemoteStore, agent, store

        if self.s["store"] == "s3":
            remote = RemoteStore(work, EXPORT, self.video_dir, 50.0,
                                 s3=sorted({v.name for v in self.videos}))
            remote.set_latency(self.latency_ms)
            self.redis, self.server, self.fx = remote.redis, remote, remote.fx()
            return remote.pids(), remote.model_pids()
        self.redis = RedisServer(work).start()
        self.server = agent(work, EXPORT, self.video_dir, self.latency_ms)
        self.fx = store(EXPORT, self.video_dir, self.server.url, self.redis.url)
        return [self.redis.proc.pid, self.server.proc.pid], []

    def run(self, argv: list[str]) -> dict[str, Any]:
        from stores import make_patcher

        started = time.monotonic()
        self.prepare()
        work = self.data / "loader-work"
        work.mkdir(parents=True, exist_ok=True)
        peers = self.working_peers()
        cases = [c for c in self.cases if c.fluxon or c.family in peers]
        warm_ups = list(dict.fromkeys(replace_cache(c) for c in cases))
        cold = [c for c in cases if c.fluxon and c.cache.startswith("cold")]
        warm = [c for c in cases if c not in cold]
        servers, model = self.start_store(work)
        try:
            # One patcher for every fluxon dataset; never used in this process (each worker
            # builds its own client and readers on first use).
            self.patcher = make_patcher(self.fx)
            self.cpu = CpuMeter(servers, model)
            self.redis.client().flushall()
            for case in warm_ups:  # untimed: Redis warm for fluxon, page cache for peers
                say(f"  {case.key()} warm-up")
                result = self.epoch(case, check=False)
                if case.fluxon and case.workload == "loader-clips":
                    self.warmup_stats, self.topup_stats = result.fluxon_stats, self.top_up()
            if not hasattr(self, "topup_stats") and any(c.fluxon for c in cases):
                self.topup_stats = self.top_up()
            # Rounds: cold epochs and a top-up that makes Redis warm again, then every warm
            # row, the order rotating so that a busy moment does not hit one row.
            for r in range(self.s["repeat"]):
                for case in cold:
                    self.timed(case, r == 0)
                if cold:
                    self.top_up()
                for case in warm[r % len(warm):] + warm[:r % len(warm)] if warm else ():
                    self.timed(case, r == 0)
            self.patcher.close()
        finally:
            self.server.stop()
            self.redis.stop()
        return self.results(argv, time.monotonic() - started)

    def results(self, argv: list[str], seconds: float) -> dict[str, Any]:
        import multiprocessing

        s = self.s
        for order in ("per-clip", "batched"):
            orders = {tuple(o) for row, o in self.orders.items() if order in row}
            if len(orders) > 1:
                self.notes.append(f"{order}: the rows did not read the items in the same order")
        found = {**versions(), "torch": torch.__version__,
                 **module_versions("decord", "torchcodec", missing="not installed")}
        return {
            **header("matrix.py", argv, seconds, SimpleNamespace(**s)),
            "conditions": {
                "machine": machine(), "versions": found,
                "loader": {"workers": s["workers"], "batch_size": s["batch_size"],
                           "persistent_workers": False,
                           "start_method": s["context"] or multiprocessing.get_start_method(),
                           "decoder_threads": s["threads"], "items": s["items"],
                           "clip": f"{CLIP_LEN} frames, stride {STRIDE}, {SIZE}x{SIZE}",
                           "clips_per_video_batched": s["per_video"]},
                "export": {"root": str(self.video_dir), "agent_latency_ms": self.latency_ms,
                           "store": s["store"]}},
            "videos": [v.facts() for v in self.videos], "plan": self.plan,
            "warmup_fluxon_stats": getattr(self, "warmup_stats", None),
            "topup_fluxon_stats": getattr(self, "topup_stats", None),
            "rows": [row_of(case, epochs) for case, epochs in self.runs.items()],
            "skipped": self.skipped, "notes": self.notes}


def replace_cache(case: Case) -> Case:
    """The case whose warm-up epoch stands for ``case``'s (one per contender and order)."""
    return replace(case, cache="warm-kv") if case.fluxon else case
